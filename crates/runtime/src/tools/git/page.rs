//! Paging through a patch (`git_diff`, `git_show`): each page is the next bytes of git's own
//! output, cut at a line break, and its cursor says exactly where the next one starts, so
//! following the cursors returns every byte of the patch once, in order.
//!
//! A page does not make git produce the patch again from its start: the cursor names the file
//! section the page ended in, and the next page runs git with `--skip-to=<that file>` (git 2.28;
//! the skipped files' patches are never computed) and drops the bytes of that section already
//! returned. The cursor also holds a hash of that section's first line, checked on the next page,
//! so a work tree or history that changed in between is reported (`conflict`) instead of giving
//! a wrong page. Where `--skip-to` does not apply (unmerged paths, whose combined diffs git
//! always prints first), the cursor is a plain offset into the whole output.

use std::{collections::HashMap, ffi::OsString};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    call::error::{ToolError, ToolResult},
    primitives::text::{lossy, sha256_hex},
    tools::{cursor, process::engine::output::complete_utf8_prefix},
};

use super::engine::{self, DIFF_HEADER, Repo};

/// Lines that begin a combined diff: `--skip-to` does not move them.
const COMBINED: [&[u8]; 3] = [b"diff --cc ", b"diff --combined ", b"* Unmerged path "];

/// One page of a patch.
#[derive(Debug)]
pub(super) struct Page {
    /// The page's text (lossy UTF-8).
    pub(super) text: String,
    /// Bytes of the patch before this page.
    pub(super) offset: u64,
    /// Bytes of the patch this page holds.
    pub(super) bytes: u64,
    /// Where the next page starts; `None` at the end of the patch.
    pub(super) next_cursor: Option<String>,
    /// The new-side paths of the file sections that begin in this page, in order.
    pub(super) files: Vec<Vec<u8>>,
    /// What the first page asked its cursors to carry (see [`page`]'s `carry`).
    pub(super) carried: Value,
}

/// Where a page starts, as its cursor carries it.
#[derive(Debug, Default)]
struct At {
    /// `--skip-to` path (raw bytes), or none: an offset into the whole output.
    skip_to: Option<Vec<u8>>,
    /// Bytes of that output to drop.
    offset: u64,
    /// Hash of the first line of the `--skip-to` output.
    first_line: Option<String>,
    /// `--skip-to` must not be used (combined diffs in the output).
    no_skip: bool,
    /// Bytes of the patch before the page.
    before: u64,
    /// The page starts inside a line.
    mid_line: bool,
    /// Carried from the first page to the last.
    carry: Value,
}

/// `prefix` + `path` as git writes it in a patch header: quoted C-style (with octal escapes for
/// bytes from 0x7f, as `core.quotePath` does by default) when any byte needs it.
fn quoted(prefix: &[u8], path: &[u8]) -> Vec<u8> {
    let needs = |c: u8| c < 0x20 || c == b'"' || c == b'\\' || c >= 0x7f;
    let mut name = prefix.to_vec();
    name.extend_from_slice(path);
    if !path.iter().any(|&c| needs(c)) {
        return name;
    }
    let mut out = vec![b'"'];
    for c in name {
        match c {
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            11 => out.extend_from_slice(b"\\v"),
            12 => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            c if needs(c) => out.extend_from_slice(format!("\\{c:03o}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
    out
}

/// C-style unquoting of one quoted name at the start of `b` (after its opening `"`): the bytes
/// and the rest after the closing quote.
fn unquote(b: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => return Some((out, &b[i + 1..])),
            b'\\' => {
                let c = *b.get(i + 1)?;
                let (byte, len) = match c {
                    b'a' => (7, 2),
                    b'b' => (8, 2),
                    b't' => (b'\t', 2),
                    b'n' => (b'\n', 2),
                    b'v' => (11, 2),
                    b'f' => (12, 2),
                    b'r' => (b'\r', 2),
                    b'0'..=b'3' => {
                        let oct = std::str::from_utf8(b.get(i + 1..i + 4)?).ok()?;
                        (u8::from_str_radix(oct, 8).ok()?, 4)
                    }
                    c => (c, 2),
                };
                out.push(byte);
                i += len;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    None
}

/// The path of a `diff --git a/P b/P` header whose two sides are the same path (every section
/// but a rename or copy), read from the header alone.
fn same_path(header: &[u8]) -> Option<Vec<u8>> {
    let body = header.strip_prefix(DIFF_HEADER)?;
    if let Some(rest) = body.strip_prefix(b"\"") {
        let (a, rest) = unquote(rest)?;
        let (b, rest) = unquote(rest.strip_prefix(b" \"")?)?;
        let (pa, pb) = (a.strip_prefix(b"a/")?, b.strip_prefix(b"b/")?);
        return (rest.is_empty() && pa == pb).then(|| pa.to_vec());
    }
    if body.len() < 5 || (body.len() - 5) % 2 != 0 {
        return None;
    }
    let n = (body.len() - 5) / 2;
    let (pa, pb) = (&body[2..2 + n], &body[5 + n..]);
    (body.starts_with(b"a/") && &body[2 + n..5 + n] == b" b/" && pa == pb).then(|| pa.to_vec())
}

/// Finds which of `names` (new-side paths, as `--numstat -z` lists them) a `diff --git a/X b/Y`
/// header belongs to.
struct Names {
    by_header_end: HashMap<Vec<u8>, usize>,
}

impl Names {
    fn new(names: &[Vec<u8>]) -> Self {
        let by_header_end = names
            .iter()
            .enumerate()
            .map(|(i, p)| (quoted(b"b/", p), i))
            .collect();
        Self { by_header_end }
    }

    /// The name whose `b/` part ends `header`; the longest when several do.
    fn find(&self, header: &[u8]) -> Option<usize> {
        let body = header.strip_prefix(DIFF_HEADER)?;
        (0..body.len())
            .filter(|&i| i == 0 || body[i - 1] == b' ')
            .filter(|&i| body[i..].starts_with(b"b/") || body[i..].starts_with(b"\"b/"))
            .find_map(|i| self.by_header_end.get(&body[i..]).copied())
    }
}

fn decode(c: &str, fingerprint: &str, tool: &str) -> ToolResult<At> {
    let v = cursor::decode(c, tool)?;
    if v["q"].as_str() != Some(fingerprint) {
        return Err(ToolError::invalid(format!(
            "cursor belongs to a different {tool} call: repeat the same arguments with it"
        )));
    }
    let skip_to = match v["s"].as_str() {
        Some(h) => Some(hex::decode(h).map_err(|_| {
            ToolError::invalid(format!("cursor is not a next_cursor returned by {tool}"))
        })?),
        None => None,
    };
    Ok(At {
        skip_to,
        offset: cursor::u64_field(&v, "o", tool)?,
        first_line: v["h"].as_str().map(str::to_owned),
        no_skip: v["u"].as_bool().unwrap_or(false),
        before: cursor::u64_field(&v, "b", tool)?,
        mid_line: v["m"].as_bool().unwrap_or(false),
        carry: v["c"].clone(),
    })
}

fn encode(at: &At, fingerprint: &str) -> String {
    let v: Value = json!({
        "s": at.skip_to.as_ref().map(hex::encode),
        "o": at.offset,
        "h": at.first_line,
        "u": at.no_skip,
        "b": at.before,
        "m": at.mid_line,
        "c": at.carry,
        "q": fingerprint,
    });
    cursor::encode(&v)
}

fn line_hash(line: &[u8]) -> String {
    sha256_hex(line)[..16].to_owned()
}

/// The page of `git <pre> [--skip-to=P] <post>` that `cursor` names (the first without one), at
/// most `max` bytes. `names` are the patch's new-side paths (`--numstat -z`), when the caller
/// listed them (the first page: a listing computes every file's diff, so later pages go without
/// and read paths from the headers, renamed files excepted); `fingerprint` identifies the call's
/// other arguments; `carry` (the first page's totals) travels in every cursor of the call and
/// comes back in [`Page::carried`].
///
/// # Errors
/// `conflict` when the patch changed since the cursor was made; `invalid_request` for a cursor
/// of another call; git's own failures as [`engine::run_page`] reports them.
#[allow(clippy::too_many_arguments)]
pub(super) async fn page(
    repo: &Repo,
    pre: &[OsString],
    post: &[OsString],
    names: Option<&[Vec<u8>]>,
    cursor: Option<&str>,
    fingerprint: &str,
    tool: &str,
    max: usize,
    carry: Value,
    cancel: &CancellationToken,
) -> ToolResult<Page> {
    let at = match cursor {
        Some(c) => decode(c, fingerprint, tool)?,
        None => At {
            carry,
            ..At::default()
        },
    };
    let changed = || {
        ToolError::conflict(format!(
            "the patch changed since this cursor was returned; call {tool} again without a cursor"
        ))
    };
    let mut args = pre.to_vec();
    if let Some(p) = &at.skip_to {
        use std::os::unix::ffi::OsStringExt;
        let mut a = b"--skip-to=".to_vec();
        a.extend_from_slice(p);
        args.push(OsString::from_vec(a));
    }
    args.extend_from_slice(post);
    let max = max.max(4);
    let out = engine::run_page(repo, &args, at.offset, max, cancel).await?;
    if !out.ok() && !out.truncated {
        if at.skip_to.is_some() && out.stderr.contains("No such path") {
            return Err(changed());
        }
        return Err(out.error(&format!("git {}", pre[0].to_string_lossy())));
    }
    if at.skip_to.is_some() {
        let first: &[u8] = if at.offset > 0 {
            &out.skipped.first_line
        } else {
            let end = memchr::memchr(b'\n', &out.stdout).unwrap_or(out.stdout.len());
            &out.stdout[..end]
        };
        if at.first_line.as_deref() != Some(line_hash(first).as_str()) {
            return Err(changed());
        }
    }
    let raw = out.stdout;
    let more = out.truncated;
    // Cut at the last line break; a line longer than the page is cut on a char boundary.
    let mut end = raw.len();
    if more {
        end = match memchr::memrchr(b'\n', &raw) {
            Some(i) => i + 1,
            None => match complete_utf8_prefix(&raw) {
                0 => raw.len(),
                n => n,
            },
        };
    }
    let mut text = lossy(&raw[..end]).into_owned();
    while text.len() > max && end > 1 {
        // Invalid bytes grew into U+FFFD: give back bytes until the text fits.
        let want = (end as u64 * max as u64 / text.len() as u64) as usize;
        let want = want.clamp(1, end - 1);
        end = match memchr::memrchr(b'\n', &raw[..want]) {
            Some(i) => i + 1,
            None => want,
        };
        text = lossy(&raw[..end]).into_owned();
    }
    let page = &raw[..end];
    // Header lines that begin in the page, with their positions.
    let mut headers: Vec<(usize, &[u8])> = Vec::new();
    let mut combined = at.no_skip;
    let mut line_start = !at.mid_line;
    let mut pos = 0;
    while pos < page.len() {
        let nl = memchr::memchr(b'\n', &page[pos..]).map(|i| pos + i);
        let line = &page[pos..nl.unwrap_or(page.len())];
        if line_start {
            if line.starts_with(DIFF_HEADER) {
                headers.push((pos, line));
            }
            if COMBINED.iter().any(|c| line.starts_with(c)) {
                combined = true;
            }
        }
        line_start = nl.is_some();
        pos = nl.map_or(page.len(), |i| i + 1);
    }
    let names_index = names.map(Names::new);
    let path_of = |h: &[u8]| {
        same_path(h).or_else(|| {
            let (idx, names) = (names_index.as_ref()?, names?);
            idx.find(h).map(|i| names[i].clone())
        })
    };
    let mut files: Vec<Vec<u8>> = Vec::new();
    for (_, h) in &headers {
        if let Some(p) = path_of(h)
            && !files.contains(&p)
        {
            files.push(p);
        }
    }
    let next_cursor = more.then(|| {
        let abs_end = at.offset + end as u64;
        let mid_line = !page.ends_with(b"\n");
        let mut next = At {
            skip_to: at.skip_to.clone(),
            offset: abs_end,
            first_line: at.first_line.clone(),
            no_skip: combined,
            before: at.before + end as u64,
            mid_line,
            carry: at.carry.clone(),
        };
        if combined {
            // Offsets into the whole output from here on.
            next.skip_to = None;
            next.first_line = None;
            if at.skip_to.is_some() {
                // Unreachable: combined diffs come first, before any cursor with --skip-to.
                next.offset = at.before + end as u64;
            }
        } else {
            // The last file section that begins in the page (not the second section of a
            // type change, which repeats its header) becomes the --skip-to of the next page.
            let before_page = if at.offset > 0 {
                out.skipped.last_header.as_deref()
            } else {
                None
            };
            let candidate = (0..headers.len()).rev().find_map(|k| {
                let (p, h) = headers[k];
                let prev = if k > 0 {
                    Some(headers[k - 1].1)
                } else {
                    before_page
                };
                if prev == Some(h) {
                    return None;
                }
                path_of(h).map(|path| (p, h, path))
            });
            if let Some((p, h, path)) = candidate {
                next.skip_to = Some(path);
                next.offset = (end - p) as u64;
                next.first_line = Some(line_hash(h));
            }
        }
        encode(&next, fingerprint)
    });
    Ok(Page {
        text,
        offset: at.before,
        bytes: end as u64,
        next_cursor,
        files,
        carried: at.carry,
    })
}

/// Parses `--numstat -z`: `added\tdeleted\tpath\0`, or for renames `added\tdeleted\t\0old\0new\0`;
/// the path is the new side's, as raw bytes.
pub(super) fn parse_numstat(bytes: &[u8]) -> Vec<(Option<u64>, Option<u64>, Vec<u8>)> {
    let mut recs = bytes.split(|&b| b == 0);
    let mut out = Vec::new();
    while let Some(r) = recs.next() {
        if r.is_empty() {
            continue;
        }
        let mut f = r.splitn(3, |&b| b == b'\t');
        let num = |v: Option<&[u8]>| {
            v.and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok())
        };
        let a = num(f.next());
        let d = num(f.next());
        let p = f.next().unwrap_or(b"");
        let path = if p.is_empty() {
            let _old = recs.next();
            recs.next().unwrap_or(b"").to_vec()
        } else {
            p.to_vec()
        };
        out.push((a, d, path));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_matched_to_their_paths_quoted_or_not() {
        let names = vec![
            b"a.txt".to_vec(),
            b"d e".to_vec(),
            "\u{e9}t\u{e9}".as_bytes().to_vec(),
            b"x b/y".to_vec(),
            b"y".to_vec(),
        ];
        let n = Names::new(&names);
        assert_eq!(n.find(b"diff --git a/a.txt b/a.txt"), Some(0));
        assert_eq!(n.find(b"diff --git a/d e b/d e"), Some(1));
        assert_eq!(
            n.find(b"diff --git \"a/\\303\\251t\\303\\251\" \"b/\\303\\251t\\303\\251\""),
            Some(2)
        );
        assert_eq!(
            n.find(b"diff --git a/x b/y b/x b/y"),
            Some(3),
            "the longest wins"
        );
        assert_eq!(n.find(b"diff --git a/old b/y"), Some(4));
        assert_eq!(n.find(b"diff --git a/q b/q"), None);
        assert_eq!(
            quoted(b"b/", b"a\"b\\c\td\x7f"),
            b"\"b/a\\\"b\\\\c\\td\\177\"".to_vec()
        );
    }

    #[test]
    fn a_header_with_one_path_on_both_sides_names_it() {
        assert_eq!(same_path(b"diff --git a/d e b/d e"), Some(b"d e".to_vec()));
        assert_eq!(same_path(b"diff --git a/x b/y"), None);
        let e = "\u{e9}".as_bytes().to_vec();
        assert_eq!(
            same_path(b"diff --git \"a/\\303\\251\" \"b/\\303\\251\""),
            Some(e)
        );
        assert_eq!(
            same_path(b"diff --git \"a/q\\\"t\" \"b/q\\\"t\""),
            Some(b"q\"t".to_vec())
        );
    }

    #[test]
    fn numstat_with_renames() {
        let v = parse_numstat(b"1\t2\ta.txt\0-\t-\tbin.dat\0" as &[u8]);
        assert_eq!(
            v,
            vec![
                (Some(1), Some(2), b"a.txt".to_vec()),
                (None, None, b"bin.dat".to_vec())
            ]
        );
        let v = parse_numstat(b"3\t0\t\0old.rs\0new.rs\0" as &[u8]);
        assert_eq!(v, vec![(Some(3), Some(0), b"new.rs".to_vec())]);
    }
}
