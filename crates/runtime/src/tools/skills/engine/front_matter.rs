//! A `SKILL.md`: reading it (bounded, text only) and its YAML front matter.

use std::{
    ffi::OsStr,
    fs::File,
    io::{self, Read},
};

use serde::Deserialize;

use crate::limits::{
    SKILL_DESCRIPTION_MAX_CHARS, SKILL_FILE_MAX_BYTES, SKILL_FRONT_MATTER_MAX_EVENTS,
    SKILL_NAME_MAX_CHARS,
};

use crate::primitives::text::UTF8_BOM;

use super::ProblemKind;

/// Characters of a YAML parser message kept in a problem's reason.
const YAML_MESSAGE_MAX_CHARS: usize = 300;

/// The fields of a `SKILL.md` front matter this server uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrontMatter {
    /// `name`, trimmed: a skill name of the Agent Skills format
    /// ([`FrontMatterError::NameInvalid`] says which), 1 to [`SKILL_NAME_MAX_CHARS`] characters.
    pub(crate) name: String,
    /// `description`, its whitespace runs collapsed to single spaces, cut to
    /// [`SKILL_DESCRIPTION_MAX_CHARS`] characters (ending in `…` when cut).
    pub(crate) description: String,
}

/// Why a `SKILL.md`'s front matter cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrontMatterError {
    /// The file does not start with a `---` line.
    #[error(
        "SKILL.md does not start with YAML front matter (a `---` line, `name` and `description`, a `---` line)"
    )]
    Missing,
    /// No `---` line closes the front matter.
    #[error("the front matter opened by `---` on line 1 is not closed by a `---` line")]
    Unterminated,
    /// The YAML is malformed, not a mapping, or a field has the wrong type; the parser's
    /// message, with line numbers of the file.
    #[error("the front matter is not valid: {0}")]
    Yaml(String),
    /// The YAML exceeds the parser's budget ([`SKILL_FRONT_MATTER_MAX_EVENTS`]), as an alias
    /// bomb does; `line` is the file's line where the parser stopped, when it says.
    #[error(
        "the front matter is too complex to read: with its aliases expanded it goes past the \
         YAML parser's limit of {SKILL_FRONT_MATTER_MAX_EVENTS} events, as an alias bomb does{}",
        .line.map_or_else(String::new, |l| format!(" (stopped at line {l})"))
    )]
    TooComplex {
        /// The 1-based line of the file where the parser stopped, when known.
        line: Option<u64>,
    },
    /// `name` is missing, null or blank.
    #[error("the front matter has no `name`")]
    NoName,
    /// `name` is longer than [`SKILL_NAME_MAX_CHARS`] characters.
    #[error("`name` has {0} characters; at most {SKILL_NAME_MAX_CHARS} are allowed")]
    NameTooLong(usize),
    /// `name` is not a skill name of the Agent Skills format: it may hold only lowercase
    /// letters and digits (any script, as the format's reference validator allows) and hyphens,
    /// with no hyphen at either end and no two in a row — so never a path separator, `..`,
    /// whitespace or a control character. `shown` is the name quoted, control characters
    /// escaped.
    #[error(
        "`name` {shown} is not a skill name: use only lowercase letters, digits and hyphens, with no hyphen at either end or two in a row (the Agent Skills format)"
    )]
    NameInvalid {
        /// The name as Rust quotes a string (`"../a b"`, `"a\tb"`).
        shown: String,
    },
    /// `name` differs from the name of the skill's directory (the Agent Skills format
    /// requires them to be equal). Found by [`check_directory`], not by the parser.
    #[error(
        "`name` {name:?} must match its directory's name {dir:?} (the Agent Skills format): rename one of them"
    )]
    NameNotDirectory {
        /// The front matter's name.
        name: String,
        /// The directory's name as found (lossy when it is not UTF-8).
        dir: String,
    },
    /// `description` is missing, null or blank.
    #[error("the front matter has no `description`")]
    NoDescription,
}

/// The two keys read; every other key is parsed (within the budget) and ignored.
#[derive(Deserialize)]
struct RawFrontMatter {
    name: Option<String>,
    description: Option<String>,
}

/// Parses the front matter at the start of `text` (a `SKILL.md` without its BOM): a first line
/// `---`, YAML, a line `---` (trailing spaces and `\r` allowed on both). YAML scalars of other
/// types (`name: 123`) are taken as their text; a sequence or mapping is an error.
///
/// The YAML parser (serde-saphyr) is bounded: at most [`SKILL_FRONT_MATTER_MAX_EVENTS`] parser
/// events, aliases included and replayed aliases counted, so an alias bomb fails fast.
///
/// # Errors
/// Every [`FrontMatterError`], as documented on its variants.
pub(crate) fn parse_front_matter(text: &str) -> Result<FrontMatter, FrontMatterError> {
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(FrontMatterError::Missing);
    }
    let mut end = None;
    let mut at = first.len();
    for line in lines {
        if line.trim_end() == "---" {
            end = Some(at);
            break;
        }
        at += line.len();
    }
    let end = end.ok_or(FrontMatterError::Unterminated)?;
    // The opening line becomes an empty one, so the parser's line numbers are the file's.
    let yaml = format!("\n{}", &text[first.len()..end]);
    // A budget breach may reach us wrapped in an alias error; the report says it plainly.
    let breached = std::rc::Rc::new(std::cell::Cell::new(false));
    let seen = breached.clone();
    let options =
        yaml_options().with_budget_report(move |r: serde_saphyr::budget::BudgetReport| {
            seen.set(r.breached.is_some());
        });
    let raw: RawFrontMatter = serde_saphyr::from_str_with_options(&yaml, options).map_err(|e| {
        if breached.get() || over_budget(&e) {
            FrontMatterError::TooComplex {
                line: e.location().map(|l| l.line()),
            }
        } else {
            FrontMatterError::Yaml(cut_chars(
                &e.to_string().replace('\n', " "),
                YAML_MESSAGE_MAX_CHARS,
            ))
        }
    })?;
    let name = raw.name.as_deref().map(str::trim).unwrap_or("");
    if name.is_empty() {
        return Err(FrontMatterError::NoName);
    }
    let chars = name.chars().count();
    if chars > SKILL_NAME_MAX_CHARS {
        return Err(FrontMatterError::NameTooLong(chars));
    }
    if !is_skill_name(name) {
        return Err(FrontMatterError::NameInvalid {
            shown: format!("{name:?}"),
        });
    }
    let description = raw
        .description
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if description.is_empty() {
        return Err(FrontMatterError::NoDescription);
    }
    Ok(FrontMatter {
        name: name.to_owned(),
        description: cut_chars(&description, SKILL_DESCRIPTION_MAX_CHARS),
    })
}

/// Whether `name` is a skill name of the Agent Skills format
/// (<https://agentskills.io/specification>): not empty, only hyphens and characters that are
/// alphanumeric and not uppercase, no hyphen first or last, no two hyphens in a row. (The
/// length is checked apart, with its own message.)
fn is_skill_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c == '-' || (c.is_alphanumeric() && !c.is_uppercase()))
}

/// Checks that a skill's `name` (valid by [`parse_front_matter`]) is the name of its
/// directory: `found`, the entry of the skill root it was found at, or, for a symlinked bundle,
/// `target`, the directory the link leads to. Either is enough, so a link may carry another
/// name than its target.
///
/// # Errors
/// [`FrontMatterError::NameNotDirectory`] when neither is `name`, naming `found`.
pub(crate) fn check_directory(
    name: &str,
    found: &OsStr,
    target: Option<&OsStr>,
) -> Result<(), FrontMatterError> {
    if found == name || target.is_some_and(|t| t == name) {
        return Ok(());
    }
    Err(FrontMatterError::NameNotDirectory {
        name: name.to_owned(),
        dir: found.to_string_lossy().into_owned(),
    })
}

/// The parser's options: its defaults (duplicate keys are an error) with every count bounded
/// by [`SKILL_FRONT_MATTER_MAX_EVENTS`], and plain one-line messages.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = SKILL_FRONT_MATTER_MAX_EVENTS;
    budget.max_nodes = SKILL_FRONT_MATTER_MAX_EVENTS;
    budget.max_aliases = SKILL_FRONT_MATTER_MAX_EVENTS;
    budget.max_anchors = SKILL_FRONT_MATTER_MAX_EVENTS;
    budget.max_total_scalar_bytes = SKILL_FILE_MAX_BYTES;
    budget.max_documents = 1;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.with_snippet = false;
    options.alias_limits.max_total_replayed_events = SKILL_FRONT_MATTER_MAX_EVENTS;
    options
}

/// Whether the parser stopped at one of its alias-replay limits or its budget (when the
/// error says so itself) rather than at a syntax error.
fn over_budget(e: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error as E;
    matches!(
        e.without_snippet(),
        E::Budget { .. }
            | E::AliasReplayLimitExceeded { .. }
            | E::AliasReplayStackDepthExceeded { .. }
            | E::AliasReplayCounterOverflow { .. }
            | E::AliasExpansionLimitExceeded { .. }
    )
}

/// `s` cut to at most `max` characters, the last of them `…` when cut.
fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some(_) => {
            let keep: String = s.chars().take(max.saturating_sub(1)).collect();
            format!("{keep}…")
        }
    }
}

// === Reading SKILL.md ===

/// The text of a `SKILL.md`, as far as it was read.
#[derive(Debug, Clone)]
pub(crate) struct EntryText {
    /// The text read (at most [`super::Bounds::file_bytes`] bytes, without a UTF-8 BOM, ending on a
    /// whole character).
    pub(crate) text: String,
    /// The file's size in bytes.
    pub(crate) size: u64,
    /// The file is larger than what was read.
    pub(crate) truncated: bool,
}

/// Reads at most `max` bytes of the open `SKILL.md`.
///
/// # Errors
/// A [`ProblemKind`] and reason: `unreadable` (not a regular file, a read error), `binary` (a
/// NUL byte in what was read), `not_utf8` (with the byte offset of the first bad sequence; a
/// character cut by `max` itself is not one).
pub(crate) fn read_entry(file: File, max: usize) -> Result<EntryText, (ProblemKind, String)> {
    let unreadable = |e: io::Error| (ProblemKind::Unreadable, format!("cannot be read: {e}"));
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err((
            ProblemKind::Unreadable,
            "SKILL.md is not a regular file".to_owned(),
        ));
    }
    let size = meta.len();
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(max).min(max) + 1);
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let truncated = bytes.len() > max;
    bytes.truncate(max);
    if let Some(at) = memchr::memchr(0, &bytes) {
        return Err((
            ProblemKind::Binary,
            format!("SKILL.md is binary (a NUL byte at offset {at}), not a text file"),
        ));
    }
    let bom = if bytes.starts_with(UTF8_BOM) {
        UTF8_BOM.len()
    } else {
        0
    };
    bytes.drain(..bom);
    let text = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            let err = e.utf8_error();
            // A character cut by the read bound is not an encoding error.
            if truncated && err.error_len().is_none() {
                let mut bytes = e.into_bytes();
                bytes.truncate(err.valid_up_to());
                String::from_utf8(bytes).unwrap_or_default()
            } else {
                return Err((
                    ProblemKind::NotUtf8,
                    format!(
                        "SKILL.md is not UTF-8 (an invalid byte sequence at offset {})",
                        err.valid_up_to() + bom
                    ),
                ));
            }
        }
    };
    Ok(EntryText {
        text,
        size,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fm(text: &str) -> Result<FrontMatter, FrontMatterError> {
        parse_front_matter(text)
    }

    #[test]
    fn valid_front_matter_gives_name_and_description_and_ignores_other_keys() {
        let got = fm(
            "---\nname: pdf-tools\ndescription: >\n  Fill and\n  merge PDFs.\n\
                      license: MIT\nmetadata: {version: 2, tags: [a, b]}\n---\n# PDF tools\n",
        )
        .unwrap();
        assert_eq!(
            got,
            FrontMatter {
                name: "pdf-tools".into(),
                description: "Fill and merge PDFs.".into()
            }
        );
        // CRLF line breaks and trailing spaces on the fences.
        let got = fm("--- \r\nname: a\r\ndescription: b\r\n---\r\nbody").unwrap();
        assert_eq!((got.name.as_str(), got.description.as_str()), ("a", "b"));
    }

    #[test]
    fn missing_and_unterminated_front_matter_are_named() {
        assert_eq!(fm("# Title\nname: a\n"), Err(FrontMatterError::Missing));
        assert_eq!(fm(""), Err(FrontMatterError::Missing));
        assert_eq!(fm("----\nname: a\n----\n"), Err(FrontMatterError::Missing));
        assert_eq!(
            fm("---\nname: a\ndescription: b\n"),
            Err(FrontMatterError::Unterminated)
        );
    }

    #[test]
    fn a_name_that_is_not_a_string_or_missing_is_an_error() {
        let e = fm("---\nname: [a, b]\ndescription: x\n---\n").unwrap_err();
        let FrontMatterError::Yaml(m) = &e else {
            panic!("{e:?}")
        };
        // Line numbers are the file's: `name` is on line 2.
        assert!(m.contains("line 2"), "{m}");
        assert!(matches!(
            fm("---\nname: {a: 1}\ndescription: x\n---\n"),
            Err(FrontMatterError::Yaml(_))
        ));
        assert_eq!(
            fm("---\nname: ~\ndescription: x\n---\n"),
            Err(FrontMatterError::NoName)
        );
        assert_eq!(
            fm("---\ndescription: x\n---\n"),
            Err(FrontMatterError::NoName)
        );
        assert_eq!(
            fm("---\nname: a\n---\n"),
            Err(FrontMatterError::NoDescription)
        );
        assert_eq!(
            fm(&format!(
                "---\nname: {}\ndescription: x\n---\n",
                "n".repeat(65)
            )),
            Err(FrontMatterError::NameTooLong(65))
        );
        assert!(
            fm("---\nname: \"a\\nb\"\ndescription: x\n---\n").is_err_and(|e| e
                .to_string()
                .contains("lowercase letters, digits and hyphens"))
        );
        // Malformed YAML and a YAML scalar instead of a mapping.
        assert!(matches!(
            fm("---\nname: a\n  bad: : x\n---\n"),
            Err(FrontMatterError::Yaml(_))
        ));
        assert!(matches!(
            fm("---\njust text\n---\n"),
            Err(FrontMatterError::Yaml(_))
        ));
        assert!(matches!(
            fm("---\nname: a\nname: b\ndescription: x\n---\n"),
            Err(FrontMatterError::Yaml(_))
        ));
    }

    #[test]
    fn an_alias_bomb_is_a_clear_error_not_a_hang() {
        let mut y = String::from("---\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            y.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        y.push_str("name: bomb\ndescription: boom\n---\n");
        let e = fm(&y).unwrap_err();
        assert!(matches!(e, FrontMatterError::TooComplex { .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.contains("too complex"), "{m}");
        // A plain sentence for people: where it stopped, no parser internals.
        // `a3`, on line 5 of the file, is where the expansion passes the limit.
        assert!(m.ends_with("(stopped at line 5)"), "{m}");
        for internal in ["{", "}", "Events", "budget breached", "defined at", "…"] {
            assert!(!m.contains(internal), "{internal:?} in {m}");
        }
        assert!(m.chars().count() < 300, "{m}");
    }

    #[test]
    fn a_name_must_be_lowercase_letters_digits_and_single_inner_hyphens() {
        let with = |name: &str| fm(&format!("---\nname: {name}\ndescription: x\n---\n"));
        for ok in ["pdf-tools", "1password", "a", "v2-api-9", "données-ç"] {
            assert_eq!(with(ok).map(|f| f.name), Ok(ok.to_owned()), "{ok}");
        }
        for bad in [
            "\"../../etc/passwd\"",
            "a/b",
            "..",
            "\"has space\"",
            "\"tab\\there\"",
            "Upper",
            "snake_case",
            "dotted.name",
            "-lead",
            "trail-",
            "a--b",
            "\"nul\\0\"",
        ] {
            let e = with(bad).expect_err(bad);
            let m = e.to_string();
            assert!(
                m.contains("lowercase letters, digits and hyphens"),
                "{bad}: {m}"
            );
            assert!(!m.contains('\t') && !m.contains('\0'), "{bad}: {m}");
        }
    }

    #[test]
    fn a_name_must_be_its_directorys_or_its_link_targets() {
        let os = OsStr::new;
        assert_eq!(check_directory("pdf", os("pdf"), None), Ok(()));
        assert_eq!(check_directory("pdf", os("alias"), Some(os("pdf"))), Ok(()));
        assert_eq!(check_directory("pdf", os("pdf"), Some(os("other"))), Ok(()));
        let e = check_directory("other-name", os("mismatch"), Some(os("target"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`name` \"other-name\" must match its directory's name \"mismatch\" (the Agent \
             Skills format): rename one of them"
        );
    }

    #[test]
    fn a_long_description_is_cut_to_the_format_bound() {
        let long = "word ".repeat(400);
        let got = fm(&format!("---\nname: a\ndescription: {long}\n---\n")).unwrap();
        assert_eq!(got.description.chars().count(), SKILL_DESCRIPTION_MAX_CHARS);
        assert!(got.description.ends_with('…'));
    }

    fn file_with(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        std::io::Seek::rewind(&mut f).unwrap();
        f
    }

    #[test]
    fn reading_an_entry_names_binary_and_non_utf8_files_and_bounds_the_text() {
        let e = read_entry(file_with(b"---\nname: a\0\n"), 100).unwrap_err();
        assert_eq!(e.0, ProblemKind::Binary);
        let e = read_entry(file_with(b"---\nname: caf\xe9\n---\n"), 100).unwrap_err();
        assert_eq!(e.0, ProblemKind::NotUtf8);
        assert!(e.1.contains("offset 13"), "{}", e.1);
        // A character cut by the bound is not an encoding error; the BOM is not text.
        let r = read_entry(file_with("\u{feff}ab\u{e9}".as_bytes()), 6).unwrap();
        assert_eq!((r.text.as_str(), r.size, r.truncated), ("ab", 7, true));
        let r = read_entry(file_with(b"abc"), 3).unwrap();
        assert_eq!((r.text.as_str(), r.truncated), ("abc", false));
    }
}
