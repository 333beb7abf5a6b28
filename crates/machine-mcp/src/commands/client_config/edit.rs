//! Editing a client's config file: only our entry changes.
//!
//! JSON: the top-level object and the server map are read as ordered maps of raw values, so every
//! other member keeps its key order and its exact text (numbers, escapes, nested formatting); the
//! file is re-indented with the indentation its first indented line used (two spaces when none).
//! TOML: `toml_edit` keeps every other table, comment and format. A file that does not parse, or
//! whose server map is not a map, is refused and left untouched.
//!
//! An entry of that name that is not ours (its command is not a machine-mcp binary, nor
//! `mcp-remote` of one of our MCP URLs, nor its url one of ours) is replaced only with `--force`.
//! A file that starts with a UTF-8 byte-order mark is refused naming it: Node's `JSON.parse`,
//! which Electron clients read their files with, refuses one too.
//!
//! A changed file gets a backup `FILE.bak-UNIXSECONDS` of its old bytes first (same permissions
//! and owner, never overwriting one), then the new text goes to a temporary file in the same
//! directory, which gets the old file's owner and group (so root editing a user's file leaves it
//! the user's) and permissions, is synced and renamed over it. When the owner cannot be kept,
//! nothing is replaced. A symlink is followed: its target is edited, the link stays. Nothing is
//! written when our entry is already equal.

use std::{
    fs::{self, OpenOptions, Permissions},
    io::{ErrorKind, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result, anyhow, bail};
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Value, value::RawValue};
use toml_edit::{Array, Document, InlineTable, Item, Table};

use super::Entry;

/// How many `FILE.bak-SECS-N` names are tried when `FILE.bak-SECS` exists already.
const BACKUP_NAME_ATTEMPTS: u32 = 100;

/// Indentation of a JSON file written from nothing.
const DEFAULT_JSON_INDENT: &str = "  ";

/// What happened to our entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// There was none; it was added.
    Added,
    /// There was a different one; it was replaced.
    Replaced,
    /// It was there already, equal; nothing was written.
    Unchanged,
}

impl Outcome {
    /// The past participle shown to the user.
    pub(super) fn verb(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Replaced => "replaced",
            Self::Unchanged => "unchanged",
        }
    }
}

/// The result of one edit.
#[derive(Debug)]
pub(super) struct Edited {
    pub(super) outcome: Outcome,
    /// The file written (a symlink's target).
    pub(super) file: PathBuf,
    /// The backup of the old bytes; `None` when nothing was written or there was no file.
    pub(super) backup: Option<PathBuf>,
}

/// Our JSON entry, members in the order they are written.
pub(super) type JsonEntry = IndexMap<String, Value>;

/// A merge: the new text, or `None` when our entry is already there and equal.
type Merged = (Outcome, Option<String>);

/// How an edit may proceed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Options {
    /// Replace an entry of that name that is not ours (`--force`).
    pub(super) force: bool,
    /// The file was named with `--config-file` (so the errors do not suggest it).
    pub(super) config_file_given: bool,
}

/// Puts `entry` under `key`.`name` of the JSON file `path` (created when missing).
///
/// # Errors
/// The file is not UTF-8, starts with a byte-order mark, is not JSON (the message names the
/// line and column), not an object, or its `key` member is not an object; an entry `name` that
/// is not ours without `force`; the owner cannot be kept; and I/O errors. The file is untouched
/// in every case.
pub(super) fn json_file(
    path: &Path,
    key: &str,
    name: &str,
    entry: &JsonEntry,
    o: Options,
) -> Result<Edited> {
    apply(path, o, |text| merge_json(text, key, name, entry, o.force))
}

/// Puts `entry` as `[mcp_servers.NAME]` in the Codex TOML file `path` (created when missing).
///
/// # Errors
/// As [`json_file`], for TOML: not TOML (the message names the line and column), or its
/// `mcp_servers` is not a table.
pub(super) fn toml_file(path: &Path, name: &str, entry: &Entry, o: Options) -> Result<Edited> {
    apply(path, o, |text| merge_toml(text, name, entry, o.force))
}

/// A refusal to replace a server entry that is not ours (no `--force`).
#[derive(Debug)]
struct NotOurs {
    name: String,
    what: String,
}

impl std::fmt::Display for NotOurs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "\"{}\" is another server ({}), not a machine-mcp entry: choose another --name, or pass --force to replace it (the old file is kept as a backup)",
            self.name, self.what
        )
    }
}

impl std::error::Error for NotOurs {}

/// Whether the existing entry `v` (as JSON) is one this command writes: its command is a
/// machine-mcp binary, or `mcp-remote` of one of our MCP URLs, or its `url` is one of ours.
fn is_ours(v: &Value) -> bool {
    if let Some(url) = v["url"].as_str() {
        return is_our_url(url);
    }
    let Some(command) = v["command"].as_str() else {
        return false;
    };
    let file = Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if file.starts_with("machine-mcp") {
        return true;
    }
    let args: Vec<&str> = v["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    file.starts_with("npx") && args.contains(&"mcp-remote") && args.iter().any(|a| is_our_url(a))
}

/// Whether `url` is an MCP URL of a relay or `up`: `http(s)://HOST/b/BRIDGE/mcp`, or
/// `.../b/BRIDGE/s/SERVER/mcp` for a carried server.
fn is_our_url(url: &str) -> bool {
    let Ok(u) = url::Url::parse(url) else {
        return false;
    };
    if !matches!(u.scheme(), "http" | "https") {
        return false;
    }
    let segments: Vec<&str> = u
        .path_segments()
        .map(|s| s.filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    // A reverse proxy may mount the relay under a prefix: look at the tail.
    let tail = |n: usize| segments.len() >= n && segments[segments.len() - n] == "b";
    segments.last() == Some(&"mcp") && (tail(3) || (tail(5) && segments[segments.len() - 3] == "s"))
}

/// Describes the entry `v` for a refusal: its command or url.
fn entry_summary(v: &Value) -> String {
    if let Some(url) = v["url"].as_str() {
        format!("url {url}")
    } else if let Some(c) = v["command"].as_str() {
        format!("command `{c}`")
    } else {
        "no command".to_owned()
    }
}

/// `[mcp_servers.NAME]` with `entry`, as TOML text.
pub(super) fn toml_snippet(name: &str, entry: &Entry) -> String {
    let mut doc = Document::new();
    let mut servers = Table::new();
    servers.set_implicit(true);
    servers.insert(name, Item::Table(toml_table(entry)));
    doc.insert("mcp_servers", Item::Table(servers));
    doc.to_string()
}

/// The UTF-8 byte-order mark.
const BOM: &str = "\u{feff}";

/// Reads `path`, merges, and writes the result (backup first, then atomically).
fn apply(path: &Path, o: Options, merge: impl FnOnce(&str) -> Result<Merged>) -> Result<Edited> {
    let file = resolve(path)?;
    let shown = file.display();
    let old = match fs::read(&file) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {shown}")),
    };
    let text = match &old {
        Some(bytes) => std::str::from_utf8(bytes)
            .map_err(|e| anyhow!("{shown} is not UTF-8 text ({e}); the file was left untouched"))?,
        None => "",
    };
    if text.starts_with(BOM) {
        bail!(
            "{shown} starts with a UTF-8 byte-order mark (BOM), which clients reading it with JSON.parse refuse; save it without BOM (e.g. \"UTF-8\", not \"UTF-8 with BOM\"); the file was left untouched"
        );
    }
    let (outcome, new) = merge(text).map_err(|e| {
        if e.is::<NotOurs>() {
            anyhow!("cannot edit {shown}: {e}; the file was left untouched")
        } else if o.config_file_given {
            anyhow!("cannot edit {shown}: {e:#}; the file was left untouched (fix it first)")
        } else {
            anyhow!(
                "cannot edit {shown}: {e:#}; the file was left untouched (fix it, or pass --config-file to edit another file)"
            )
        }
    })?;
    let Some(new) = new else {
        return Ok(Edited {
            outcome,
            file,
            backup: None,
        });
    };
    let (backup, kept) = match &old {
        Some(bytes) => {
            use std::os::unix::fs::MetadataExt;
            let meta = fs::metadata(&file)
                .with_context(|| format!("cannot read the permissions of {shown}"))?;
            let kept = Kept {
                permissions: meta.permissions(),
                owner: (meta.uid(), meta.gid()),
            };
            (Some(backup(&file, bytes, &kept)?), Some(kept))
        }
        None => (None, None),
    };
    write_atomically(&file, new.as_bytes(), kept.as_ref())?;
    Ok(Edited {
        outcome: if old.is_none() {
            Outcome::Added
        } else {
            outcome
        },
        file,
        backup,
    })
}

/// What a replaced file keeps of the old one.
struct Kept {
    permissions: Permissions,
    /// Its uid and gid.
    owner: (u32, u32),
}

/// Gives `f` the owner `(uid, gid)` unless it has it already.
fn keep_owner(f: &fs::File, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata()?;
    if (m.uid(), m.gid()) == (uid, gid) {
        return Ok(());
    }
    std::os::unix::fs::fchown(f, Some(uid), Some(gid))
}

/// The file to edit: `path`, or a symlink's target (so the link survives the rename).
fn resolve(path: &Path) -> Result<PathBuf> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(path)
            .with_context(|| format!("cannot follow the symlink {}", path.display())),
        _ => Ok(path.to_path_buf()),
    }
}

/// [`backup`] of the existing `file`, whose permissions and owner the backup keeps (for other
/// commands that keep the old bytes of a file they replace: `service install --force`).
///
/// # Errors
/// `file` cannot be read for its metadata, or the backup cannot be written.
pub(crate) fn backup_of(file: &Path, bytes: &[u8]) -> Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(file)
        .with_context(|| format!("cannot read the permissions of {}", file.display()))?;
    let kept = Kept {
        permissions: meta.permissions(),
        owner: (meta.uid(), meta.gid()),
    };
    backup(file, bytes, &kept)
}

/// Writes `bytes` to a new `FILE.bak-UNIXSECONDS` (or `...-N` when taken) with the old
/// file's permissions and owner.
fn backup(file: &Path, bytes: &[u8], kept: &Kept) -> Result<PathBuf> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("{}.bak-{secs}", file.display());
    for n in 0..BACKUP_NAME_ATTEMPTS {
        let candidate = PathBuf::from(if n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        let mut f = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&candidate)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot write the backup {}", candidate.display()));
            }
        };
        f.write_all(bytes)
            .and_then(|()| keep_owner(&f, kept.owner))
            .and_then(|()| f.set_permissions(kept.permissions.clone()))
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write the backup {}", candidate.display()))?;
        return Ok(candidate);
    }
    bail!("cannot find a free backup name next to {}", file.display())
}

/// Replaces `file` with `bytes` atomically: a temporary file in the same directory, given the
/// old file's owner and permissions (`kept`), synced, renamed over it. A new file (and missing
/// parent directories) is created owner-only.
///
/// # Errors
/// The temporary file cannot be written, given the old owner (then `file` is not replaced),
/// or renamed.
fn write_atomically(file: &Path, bytes: &[u8], kept: Option<&Kept>) -> Result<()> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let context = || format!("cannot write {}", file.display());
    let mut tmp = tempfile::Builder::new()
        .prefix(".machine-mcp-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .with_context(context)?;
    tmp.write_all(bytes).with_context(context)?;
    if let Some(k) = kept {
        keep_owner(tmp.as_file(), k.owner).with_context(|| {
            format!(
                "cannot give the new {} the owner (uid {}, gid {}) of the old one, so it was not replaced (run as that user, or as root)",
                file.display(),
                k.owner.0,
                k.owner.1
            )
        })?;
        tmp.as_file()
            .set_permissions(k.permissions.clone())
            .with_context(context)?;
    }
    tmp.as_file().sync_all().with_context(context)?;
    tmp.persist(file)
        .map_err(|e| e.error)
        .with_context(context)?;
    // The rename is durable once the directory is synced; a failure here loses nothing.
    if let Ok(d) = fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A JSON value as written back: an untouched raw member, or one of ours.
#[derive(Serialize)]
#[serde(untagged)]
enum Node<'a> {
    Raw(&'a RawValue),
    Map(IndexMap<String, Node<'a>>),
    Entry(JsonEntry),
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// What kind of JSON value `raw` is, for an error.
fn json_kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'{') => "an object",
        _ => "a number",
    }
}

fn merge_json(text: &str, key: &str, name: &str, entry: &JsonEntry, force: bool) -> Result<Merged> {
    let mut top: IndexMap<String, &RawValue> = if text.trim().is_empty() {
        IndexMap::new()
    } else {
        serde_json::from_str(text).map_err(|e| {
            if e.classify() == serde_json::error::Category::Data {
                anyhow!("the top level is not a JSON object")
            } else {
                // `e` ends with its own " at line L column C".
                let message = e.to_string();
                let message = message.split(" at line ").next().unwrap_or_default().to_owned();
                anyhow!(
                    "not valid JSON at line {}, column {}: {message} (comments and trailing commas are not JSON)",
                    e.line(),
                    e.column()
                )
            }
        })?
    };
    let mut servers: IndexMap<String, Node<'_>> = match top.get(key) {
        None => IndexMap::new(),
        Some(raw) => {
            let map: IndexMap<String, &RawValue> =
                serde_json::from_str(raw.get()).map_err(|_| {
                    let offset = raw.get().as_ptr() as usize - text.as_ptr() as usize;
                    let (line, column) = line_column(text, offset);
                    anyhow!(
                        "\"{key}\" (line {line}, column {column}) is {}, not an object",
                        json_kind(raw.get())
                    )
                })?;
            map.into_iter().map(|(k, v)| (k, Node::Raw(v))).collect()
        }
    };
    let ours = serde_json::to_value(entry).context("cannot format the entry")?;
    let outcome = match servers.get(name) {
        None => Outcome::Added,
        Some(Node::Raw(raw)) => {
            let old = serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null);
            if old == ours {
                return Ok((Outcome::Unchanged, None));
            }
            if !force && !is_ours(&old) {
                return Err(NotOurs {
                    name: name.to_owned(),
                    what: entry_summary(&old),
                }
                .into());
            }
            Outcome::Replaced
        }
        Some(_) => Outcome::Replaced,
    };
    // `insert` keeps the position of a replaced entry.
    servers.insert(name.to_owned(), Node::Entry(entry.clone()));
    let mut out: IndexMap<String, Node<'_>> = top
        .drain(..)
        .map(|(k, v)| (k, Node::Raw(v)))
        .collect::<IndexMap<_, _>>();
    out.insert(key.to_owned(), Node::Map(servers));
    let indent = json_indent(text);
    let mut buf = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, formatter);
    out.serialize(&mut ser).context("cannot format the file")?;
    let mut new = String::from_utf8(buf).context("cannot format the file")?;
    if text.is_empty() || text.ends_with('\n') {
        new.push('\n');
    }
    Ok((outcome, Some(new)))
}

/// The indentation of the first indented member line of `text`.
fn json_indent(text: &str) -> &str {
    text.lines()
        .skip(1)
        .find_map(|l| {
            let rest = l.trim_start_matches([' ', '\t']);
            (rest.starts_with('"') && rest.len() < l.len()).then(|| &l[..l.len() - rest.len()])
        })
        .unwrap_or(DEFAULT_JSON_INDENT)
}

/// `entry` as a Codex `[mcp_servers.NAME]` table (`command`, `args`, `env` inline).
fn toml_table(entry: &Entry) -> Table {
    let mut t = Table::new();
    match entry {
        Entry::Stdio { command, args, env } => {
            t.insert("command", toml_edit::value(command.as_str()));
            let args: Array = args.iter().map(String::as_str).collect();
            t.insert("args", toml_edit::value(args));
            if !env.is_empty() {
                let mut e = InlineTable::new();
                for (k, v) in env {
                    e.insert(k, v.as_str().into());
                }
                t.insert("env", toml_edit::value(e));
            }
        }
        // Not produced for Codex (see `Client::speaks_http`); written as Codex's `url` key.
        Entry::Http { url, .. } => {
            t.insert("url", toml_edit::value(url.as_str()));
        }
    }
    t
}

/// A TOML item as JSON, to compare an existing entry with ours.
fn toml_json(item: &Item) -> Value {
    match item {
        Item::None => Value::Null,
        Item::Value(v) => toml_value_json(v),
        Item::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_owned(), toml_json(v)))
                .collect(),
        ),
        Item::ArrayOfTables(a) => Value::Array(
            a.iter()
                .map(|t| toml_json(&Item::Table(t.clone())))
                .collect(),
        ),
    }
}

fn toml_value_json(v: &toml_edit::Value) -> Value {
    use toml_edit::Value as V;
    match v {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(i) => Value::from(*i.value()),
        V::Float(f) => serde_json::Number::from_f64(*f.value()).map_or(Value::Null, Value::Number),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(d.value().to_string()),
        V::Array(a) => Value::Array(a.iter().map(toml_value_json).collect()),
        V::InlineTable(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_owned(), toml_value_json(v)))
                .collect(),
        ),
    }
}

fn merge_toml(text: &str, name: &str, entry: &Entry, force: bool) -> Result<Merged> {
    let mut doc: Document = text.parse().map_err(|e: toml_edit::TomlError| {
        let (line, column) = line_column(text, e.span().map_or(0, |s| s.start));
        // The error's Display quotes the offending line; a config file may hold secrets.
        anyhow!(
            "not valid TOML at line {line}, column {column}: {}",
            e.message().trim_end()
        )
    })?;
    let ours = toml_table(entry);
    let ours_json = toml_json(&Item::Table(ours.clone()));
    // `mcp_servers = { ... }` holds values, not tables.
    let inline = doc.get("mcp_servers").is_some_and(Item::is_inline_table);
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .context("\"mcp_servers\" is not a table")?;
    let outcome = match servers.get(name) {
        None => Outcome::Added,
        Some(old) if toml_json(old) == ours_json => return Ok((Outcome::Unchanged, None)),
        Some(old) if !force && !is_ours(&toml_json(old)) => {
            return Err(NotOurs {
                name: name.to_owned(),
                what: entry_summary(&toml_json(old)),
            }
            .into());
        }
        Some(_) => Outcome::Replaced,
    };
    let mut new = ours;
    if let Some(Item::Table(old)) = servers.get(name) {
        // Keep where it was and the comments above its header.
        if let Some(p) = old.position() {
            new.set_position(p);
        }
        *new.decor_mut() = old.decor().clone();
    }
    let item = Item::Table(new);
    let item = if inline {
        match item.into_value() {
            Ok(v) => Item::Value(v),
            Err(_) => bail!("cannot write an inline \"mcp_servers\" entry"),
        }
    } else {
        item
    };
    servers.insert(name, item);
    Ok((outcome, Some(doc.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio() -> Entry {
        Entry::Stdio {
            command: "/bin/m".into(),
            args: vec!["stdio".into()],
            env: Vec::new(),
        }
    }

    #[test]
    fn json_members_keep_their_order_and_text() {
        let text = "{\n    \"z\": 1.50,\n    \"mcpServers\": {\"b\": {\"command\": \"x\"}},\n    \"a\": \"\\u00e9\"\n}\n";
        let entry: JsonEntry = [("k".to_owned(), serde_json::json!(1))]
            .into_iter()
            .collect();
        let (outcome, new) = merge_json(text, "mcpServers", "m", &entry, false).expect("merges");
        assert_eq!(outcome, Outcome::Added);
        let new = new.expect("changed");
        assert_eq!(
            new,
            "{\n    \"z\": 1.50,\n    \"mcpServers\": {\n        \"b\": {\"command\": \"x\"},\n        \"m\": {\n            \"k\": 1\n        }\n    },\n    \"a\": \"\\u00e9\"\n}\n"
        );
    }

    #[test]
    fn a_server_map_of_the_wrong_type_is_refused_with_its_position() {
        let err = merge_json(
            "{\n  \"mcpServers\": []\n}",
            "mcpServers",
            "m",
            &JsonEntry::new(),
            false,
        )
        .expect_err("refused");
        assert_eq!(
            err.to_string(),
            "\"mcpServers\" (line 2, column 17) is an array, not an object"
        );
    }

    #[test]
    fn a_toml_parse_error_names_its_position_without_quoting_the_file() {
        let err = merge_toml("a = 1\nsecret = = 2\n", "m", &stdio(), false).expect_err("refused");
        let msg = err.to_string();
        assert!(
            msg.starts_with("not valid TOML at line 2, column 10"),
            "{msg}"
        );
        assert!(!msg.contains("secret"), "{msg}");
    }

    #[test]
    fn our_entries_are_told_from_other_servers() {
        use serde_json::json;
        for ours in [
            json!({"command": "/usr/local/bin/machine-mcp", "args": ["stdio"]}),
            json!({"type": "http", "url": "https://r.example/b/laptop/mcp"}),
            json!({"url": "http://127.0.0.1:8750/b/local/mcp/"}),
            json!({"url": "https://r.example/prefix/b/x/s/git/mcp"}),
            json!({"command": "npx", "args": ["-y", "mcp-remote", "https://r.example/b/x/mcp"]}),
        ] {
            assert!(is_ours(&ours), "{ours}");
        }
        for other in [
            json!({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"]}),
            json!({"command": "npx", "args": ["-y", "mcp-remote", "https://other.example/sse"]}),
            json!({"url": "https://other.example/mcp"}),
            json!({"url": "ftp://r.example/b/x/mcp"}),
            json!({}),
        ] {
            assert!(!is_ours(&other), "{other}");
        }
    }

    #[test]
    fn toml_inline_server_maps_get_an_inline_entry() {
        let (_, new) = merge_toml(
            "mcp_servers = { a = { command = \"x\" } }\n",
            "m",
            &stdio(),
            false,
        )
        .expect("ok");
        let new = new.expect("changed");
        let doc: Document = new.parse().expect("valid");
        assert_eq!(doc["mcp_servers"]["m"]["command"].as_str(), Some("/bin/m"));
        assert_eq!(doc["mcp_servers"]["a"]["command"].as_str(), Some("x"));
    }
}
