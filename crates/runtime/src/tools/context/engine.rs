//! The instruction chain: which instruction files apply to a target
//! directory, lowest precedence first, with provenance, within budgets.
//!
//! Sources, lowest precedence first:
//! 1. the user-level instructions file named in the user's configuration (the caller decides
//!    whether it may be read: only callers whose paths are unrestricted get it);
//! 2. for each directory from the project root ([`project::project_root`]) down to the target,
//!    the first non-empty of `AGENTS.override.md` and `AGENTS.md`, then `CLAUDE.md` when it is
//!    present, non-empty and not the same file (a `CLAUDE.md` symlink to `AGENTS.md` is common).
//!
//! Deeper wins: a later source takes precedence over an earlier one. Budgets: each file's text
//! is cut at `max_file_bytes`; the chain's text at `max_total_bytes`, given out from the highest
//! precedence down (the deepest files are kept whole first). Files are found by name and
//! resolved through the caller's [`Workspace`] (symlinks followed, confinement re-checked), then
//! opened beneath its root without following links; a file that cannot be used is listed in
//! `skipped` with the reason, never fatal.

use std::{
    io::Read as _,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use crate::limits::INSTRUCTION_HASH_MAX_BYTES;
use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    path::Workspace,
    primitives::{project, text},
};

/// The override file: when present and non-empty it takes the place of `AGENTS.md`.
pub(crate) const OVERRIDE_FILE: &str = "AGENTS.override.md";
/// The instructions file of the AGENTS.md convention.
pub(crate) const AGENTS_FILE: &str = "AGENTS.md";
/// Claude Code's instructions file, included beside `AGENTS.md` and named as such.
pub(crate) const CLAUDE_FILE: &str = "CLAUDE.md";
/// Every file name the chain reads in a directory.
pub(crate) const FILE_NAMES: [&str; 3] = [OVERRIDE_FILE, AGENTS_FILE, CLAUDE_FILE];

/// What kind of source a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SourceKind {
    /// The user-level instructions file of the user's configuration.
    UserInstructions,
    /// `AGENTS.override.md`.
    AgentsOverride,
    /// `AGENTS.md`.
    Agents,
    /// `CLAUDE.md`.
    Claude,
}

impl SourceKind {
    /// How the kind reads in text.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SourceKind::UserInstructions => "user instructions",
            SourceKind::AgentsOverride => "AGENTS.override.md",
            SourceKind::Agents => "AGENTS.md",
            SourceKind::Claude => "CLAUDE.md",
        }
    }
}

/// One instruction file of the chain.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    /// What it is.
    pub(crate) kind: SourceKind,
    /// Its canonical path.
    pub(crate) real: PathBuf,
    /// The directory it applies to (`None` for the user's file, which applies everywhere).
    pub(crate) dir: Option<PathBuf>,
    /// The file's size in bytes.
    pub(crate) size: u64,
    /// SHA-256 (hex) of the whole file; `None` when it is larger than
    /// [`INSTRUCTION_HASH_MAX_BYTES`] (then its size and mtime identify it).
    pub(crate) sha256: Option<String>,
    /// What identifies this version of the file in the fingerprint.
    identity: String,
    /// Its text within the chain's budgets (invalid UTF-8 replaced by U+FFFD).
    pub(crate) text: String,
    /// Whether `text` is less than the whole file.
    pub(crate) truncated: bool,
    /// Why it was cut, when it was: `"file"` (the per-file budget) or `"chain"` (the total).
    pub(crate) cut_by: Option<&'static str>,
    /// Whether the file is not valid UTF-8 (invalid bytes are U+FFFD in `text`).
    pub(crate) invalid_utf8: bool,
}

/// A file that exists where the chain looks but was not used.
#[derive(Debug, Clone)]
pub(crate) struct Skipped {
    /// The path as found (not resolved: it may be a link that leads out).
    pub(crate) path: PathBuf,
    /// Why (`empty`, `binary`, `same file as AGENTS.md`, ...).
    pub(crate) reason: String,
}

/// The chain for one target.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    /// The project root the chain starts at.
    pub(crate) root: PathBuf,
    /// The sources, lowest precedence first.
    pub(crate) sources: Vec<Source>,
    /// Files found but not used, in the order they were found.
    pub(crate) skipped: Vec<Skipped>,
    /// SHA-256 (hex) over every source's kind, path and identity, in order: equal fingerprints
    /// mean the same instruction files with the same contents.
    pub(crate) fingerprint: String,
}

/// What to build a chain from.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// The caller's workspace and path rules.
    pub(crate) ws: &'a Workspace,
    /// The target directory (canonical).
    pub(crate) target: &'a Path,
    /// The user's instructions file, when the caller may have it and one is configured.
    pub(crate) user_file: Option<&'a Path>,
    /// Bytes of one file's text kept (≥ 1).
    pub(crate) max_file_bytes: usize,
    /// Bytes of text kept over the whole chain (≥ 1).
    pub(crate) max_total_bytes: usize,
}

/// Builds the chain for `req` (blocking filesystem reads; every file read is bounded).
pub(crate) fn collect(req: &Request<'_>) -> Chain {
    let ws = req.ws;
    let root = project::project_root(ws.root(), req.target, ws.restricted());
    let mut sources = Vec::new();
    let mut skipped = Vec::new();
    if let Some(user) = req.user_file {
        match read(ws, user, req.max_file_bytes) {
            Look::Used(s) => sources.push(s.into_source(SourceKind::UserInstructions, None)),
            Look::Empty(_) => skipped.push(Skipped {
                path: user.to_owned(),
                reason: "empty".to_owned(),
            }),
            Look::Absent => skipped.push(Skipped {
                path: user.to_owned(),
                reason: "named in the user configuration but not found".to_owned(),
            }),
            Look::Unused(reason) => skipped.push(Skipped {
                path: user.to_owned(),
                reason,
            }),
        }
    }
    for dir in project::chain(&root, req.target) {
        directory(ws, &dir, req.max_file_bytes, &mut sources, &mut skipped);
    }
    apply_total_budget(&mut sources, req.max_total_bytes);
    let fingerprint = fingerprint(ws, &sources);
    Chain {
        root,
        sources,
        skipped,
        fingerprint,
    }
}

/// The sources of one directory: the first non-empty of the override and `AGENTS.md`, then
/// `CLAUDE.md`.
fn directory(
    ws: &Workspace,
    dir: &Path,
    max_file_bytes: usize,
    sources: &mut Vec<Source>,
    skipped: &mut Vec<Skipped>,
) {
    let mut chosen: Option<PathBuf> = None;
    for (name, kind) in [
        (OVERRIDE_FILE, SourceKind::AgentsOverride),
        (AGENTS_FILE, SourceKind::Agents),
        (CLAUDE_FILE, SourceKind::Claude),
    ] {
        let path = dir.join(name);
        if kind == SourceKind::Agents
            && let Some(over) = &chosen
        {
            if path.symlink_metadata().is_ok() {
                skipped.push(Skipped {
                    path,
                    reason: format!("{} takes its place", ws.display(over)),
                });
            }
            continue;
        }
        match read(ws, &path, max_file_bytes) {
            Look::Absent => {}
            Look::Empty(_) => skipped.push(Skipped {
                path,
                reason: "empty".to_owned(),
            }),
            Look::Unused(reason) => skipped.push(Skipped { path, reason }),
            Look::Used(found) => {
                if kind == SourceKind::Claude
                    && let Some(same) = sources
                        .iter()
                        .rev()
                        .take_while(|s| s.dir.as_deref() == Some(dir))
                        .find(|s| s.real == found.real)
                {
                    skipped.push(Skipped {
                        reason: format!("the same file as {}", ws.display(&same.real)),
                        path,
                    });
                    continue;
                }
                if kind != SourceKind::Claude {
                    chosen = Some(found.real.clone());
                }
                sources.push(found.into_source(kind, Some(dir.to_owned())));
            }
        }
    }
}

/// A file read for the chain.
#[derive(Debug)]
pub(crate) struct Found {
    /// Its canonical path.
    pub(crate) real: PathBuf,
    /// Its size in bytes.
    pub(crate) size: u64,
    sha256: Option<String>,
    identity: String,
    /// Its first bytes as text (within the budget it was read with).
    pub(crate) text: String,
    /// Whether `text` is less than the whole file.
    pub(crate) truncated: bool,
    /// Whether the bytes read are not valid UTF-8.
    pub(crate) invalid_utf8: bool,
}

/// One instruction file read on its own (a `resources/read`), its text within `max` bytes.
///
/// # Errors
/// Why it cannot be used, as a sentence: not there, a link out of the caller's workspace,
/// binary, empty, not a regular file, unreadable.
pub(crate) fn read_one(ws: &Workspace, path: &Path, max: usize) -> Result<Found, String> {
    match read(ws, path, max) {
        Look::Absent => Err("no such file".to_owned()),
        Look::Unused(why) => Err(why),
        Look::Used(found) | Look::Empty(found) => Ok(found),
    }
}

impl Found {
    fn into_source(self, kind: SourceKind, dir: Option<PathBuf>) -> Source {
        Source {
            kind,
            real: self.real,
            dir,
            size: self.size,
            sha256: self.sha256,
            identity: self.identity,
            text: self.text,
            cut_by: self.truncated.then_some("file"),
            truncated: self.truncated,
            invalid_utf8: self.invalid_utf8,
        }
    }
}

/// The outcome of looking at one candidate path.
#[derive(Debug)]
enum Look {
    /// Nothing there.
    Absent,
    /// There, but not usable (the reason).
    Unused(String),
    /// There, and empty or only white space.
    Empty(Found),
    /// Read.
    Used(Found),
}

/// Reads `path` for the chain: resolved through the caller's workspace (a link out of it is
/// refused for a restricted caller), opened beneath its root, checked to be a non-empty text
/// file; its first `max` bytes kept (cut on a character boundary), the whole file hashed up to
/// [`INSTRUCTION_HASH_MAX_BYTES`].
fn read(ws: &Workspace, path: &Path, max: usize) -> Look {
    if path.symlink_metadata().is_err() {
        return Look::Absent;
    }
    let resolved = match ws.resolve(&ws.display(path)) {
        Ok(r) => r,
        Err(e) => return Look::Unused(e.message().to_owned()),
    };
    if !resolved.exists() {
        return Look::Unused("a link to nothing".to_owned());
    }
    let real = resolved.real().to_owned();
    let mut file = match ws.open_file(&real) {
        Ok(f) => f,
        Err(e) => {
            return Look::Unused(
                Workspace::open_error(&ws.display(path), &e)
                    .message()
                    .to_owned(),
            );
        }
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Look::Unused(format!("cannot be read: {e}")),
    };
    if !meta.is_file() {
        return Look::Unused("not a regular file".to_owned());
    }
    let size = meta.len();
    let mut head = Vec::with_capacity(max.min(size as usize) + text::UTF8_BOM.len() + 1);
    let mut hasher = Sha256::new();
    let mut hashed: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let hash_all = size <= INSTRUCTION_HASH_MAX_BYTES as u64;
    loop {
        // Stop reading once the text is kept and hashing is not needed (a 50 MB file costs
        // one read of its head).
        if head.len() > max + text::UTF8_BOM.len() && !hash_all {
            break;
        }
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Look::Unused(format!("cannot be read: {e}")),
        };
        // One byte past `max` (and a BOM) tells that there is more.
        let room = (max + text::UTF8_BOM.len() + 1).saturating_sub(head.len());
        head.extend_from_slice(&buf[..n.min(room)]);
        if hash_all {
            hasher.update(&buf[..n]);
            hashed += n as u64;
            if hashed > INSTRUCTION_HASH_MAX_BYTES as u64 {
                // It grew while being read: identify it by size and time instead.
                break;
            }
        }
    }
    if text::looks_binary(&head[..head.len().min(text::BINARY_SNIFF_BYTES)]) {
        return Look::Unused("binary (a NUL byte in its first 8 KiB)".to_owned());
    }
    let (text, truncated, invalid_utf8) = head_text(&head, max, size);
    let sha256 = (hash_all && hashed <= INSTRUCTION_HASH_MAX_BYTES as u64)
        .then(|| hex::encode(hasher.finalize()));
    let identity = sha256.clone().unwrap_or_else(|| {
        format!(
            "size {size} mtime {}.{:09}",
            meta.mtime(),
            meta.mtime_nsec()
        )
    });
    let found = Found {
        real,
        size,
        sha256,
        identity,
        text,
        truncated,
        invalid_utf8,
    };
    if !found.truncated && found.text.trim().is_empty() {
        Look::Empty(found)
    } else {
        Look::Used(found)
    }
}

/// The text of a file's first bytes `raw` (at most `max` of them after a leading BOM, cut back
/// to a character boundary; invalid UTF-8 replaced by U+FFFD), whether that is less than the
/// whole file of `size` bytes, and whether invalid UTF-8 was replaced.
fn head_text(raw: &[u8], max: usize, size: u64) -> (String, bool, bool) {
    let body = raw.strip_prefix(text::UTF8_BOM).unwrap_or(raw);
    let mut truncated = (raw.len() as u64) < size;
    let mut end = body.len();
    if end > max {
        truncated = true;
        end = max;
        // Back up over a cut multi-byte sequence (at most 3 continuation bytes).
        while end > max.saturating_sub(3) && end > 0 && (body[end] & 0xC0) == 0x80 {
            end -= 1;
        }
    }
    let kept = &body[..end];
    let invalid = std::str::from_utf8(kept).is_err();
    (text::lossy(kept).into_owned(), truncated, invalid)
}

/// Cuts the sources' text to `max_total` bytes in all, giving it out from the highest
/// precedence (the last source) down: the deepest files are kept whole first.
pub(crate) fn apply_total_budget(sources: &mut [Source], max_total: usize) {
    let mut left = max_total;
    for s in sources.iter_mut().rev() {
        if s.text.len() <= left {
            left -= s.text.len();
            continue;
        }
        let mut end = left;
        while !s.text.is_char_boundary(end) {
            end -= 1;
        }
        s.text.truncate(end);
        s.truncated = true;
        s.cut_by = Some("chain");
        left = 0;
    }
}

/// The chain's fingerprint (see [`Chain::fingerprint`]).
fn fingerprint(ws: &Workspace, sources: &[Source]) -> String {
    let mut h = Sha256::new();
    for s in sources {
        h.update(format!("{:?}\t{}\t{}\n", s.kind, ws.display(&s.real), s.identity).as_bytes());
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(dir: &Path, restricted: bool) -> Workspace {
        Workspace::new(dir, restricted, false).unwrap()
    }

    fn request<'a>(ws: &'a Workspace, target: &'a Path) -> Request<'a> {
        Request {
            ws,
            target,
            user_file: None,
            max_file_bytes: 32 * 1024,
            max_total_bytes: 128 * 1024,
        }
    }

    #[test]
    fn deeper_files_come_later_and_an_override_replaces_agents_md() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir(top.join(".git")).unwrap();
        let pkg = top.join("pkg");
        let deep = pkg.join("deep");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(top.join("AGENTS.md"), "root rules\n").unwrap();
        std::fs::write(top.join("CLAUDE.md"), "claude rules\n").unwrap();
        std::fs::write(pkg.join("AGENTS.md"), "pkg rules\n").unwrap();
        std::fs::write(pkg.join("AGENTS.override.md"), "pkg override\n").unwrap();
        std::fs::write(deep.join("AGENTS.override.md"), "  \n").unwrap();
        std::fs::write(deep.join("AGENTS.md"), "deep rules\n").unwrap();
        let w = ws(&top, true);
        let chain = collect(&request(&w, &deep));
        let got: Vec<(SourceKind, &str)> = chain
            .sources
            .iter()
            .map(|s| (s.kind, s.text.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (SourceKind::Agents, "root rules\n"),
                (SourceKind::Claude, "claude rules\n"),
                (SourceKind::AgentsOverride, "pkg override\n"),
                (SourceKind::Agents, "deep rules\n"),
            ]
        );
        let reasons: Vec<(String, &str)> = chain
            .skipped
            .iter()
            .map(|s| (w.display(&s.path), s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (
                    "pkg/AGENTS.md".to_owned(),
                    "pkg/AGENTS.override.md takes its place"
                ),
                ("pkg/deep/AGENTS.override.md".to_owned(), "empty"),
            ]
        );
    }

    #[test]
    fn a_claude_link_to_agents_md_is_not_read_twice_and_binary_files_are_skipped() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap();
        std::fs::write(top.join("AGENTS.md"), "rules\n").unwrap();
        std::os::unix::fs::symlink("AGENTS.md", top.join("CLAUDE.md")).unwrap();
        let sub = top.join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("AGENTS.md"), b"\x00\x01binary").unwrap();
        let w = ws(&top, true);
        let chain = collect(&request(&w, &sub));
        assert_eq!(chain.sources.len(), 1);
        assert_eq!(chain.skipped.len(), 2, "{:?}", chain.skipped);
        assert!(
            chain.skipped[0]
                .reason
                .contains("the same file as AGENTS.md")
        );
        assert!(chain.skipped[1].reason.starts_with("binary"));
    }

    #[test]
    fn budgets_cut_files_and_keep_the_deepest_whole_first() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap();
        let sub = top.join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(top.join("AGENTS.md"), "é".repeat(100)).unwrap();
        std::fs::write(sub.join("AGENTS.md"), "x".repeat(150)).unwrap();
        let w = ws(&top, true);
        let mut r = request(&w, &sub);
        r.max_file_bytes = 101;
        r.max_total_bytes = 120;
        let chain = collect(&r);
        let root = &chain.sources[0];
        let deep = &chain.sources[1];
        assert_eq!(deep.text.len(), 101, "cut at the file budget");
        assert_eq!(deep.cut_by, Some("file"));
        assert_eq!(
            root.text.len(),
            18,
            "the rest of the total, on a char boundary"
        );
        assert_eq!(root.cut_by, Some("chain"));
        assert!(root.truncated && deep.truncated);
        assert_eq!(root.size, 200);
    }

    #[test]
    fn the_fingerprint_changes_with_any_content_and_only_then() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap();
        std::fs::write(top.join("AGENTS.md"), "one\n").unwrap();
        let w = ws(&top, true);
        let a = collect(&request(&w, &top)).fingerprint;
        assert_eq!(a, collect(&request(&w, &top)).fingerprint);
        std::fs::write(top.join("AGENTS.md"), "two\n").unwrap();
        let b = collect(&request(&w, &top)).fingerprint;
        assert_ne!(a, b);
    }

    #[test]
    fn a_link_out_of_the_workspace_is_refused_for_a_restricted_caller() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap();
        let ws_dir = top.join("ws");
        std::fs::create_dir(&ws_dir).unwrap();
        std::fs::write(top.join("secret.md"), "secret\n").unwrap();
        std::os::unix::fs::symlink("../secret.md", ws_dir.join("AGENTS.md")).unwrap();
        let w = ws(&ws_dir, true);
        let chain = collect(&request(&w, &ws_dir));
        assert!(chain.sources.is_empty());
        assert!(
            chain.skipped[0].reason.contains("outside the workspace"),
            "{:?}",
            chain.skipped
        );
        let open = ws(&ws_dir, false);
        assert_eq!(
            collect(&request(&open, &ws_dir)).sources[0].text,
            "secret\n"
        );
    }
}
