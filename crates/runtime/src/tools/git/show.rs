//! `git_show`: one commit, its message and its patch, page by page ([`super::page`]). An
//! annotated tag is peeled to the commit it points to and named beside it.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::GIT_DIFF_DEFAULT_BYTES, limits::GIT_DIFF_MAX_BYTES};

use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{self, TextView},
    },
};

use super::{
    diff::{NUMSTAT_MAX_BYTES, carried_totals, page_limit, totals},
    engine::{self, check_revision},
    os, page, repo_at,
};

/// Most bytes of the message shown in the first page's text (the structure has all of it).
const MESSAGE_SHOWN_MAX: usize = 8_000;

/// Arguments of `git_show`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShowArgs {
    /// The commit, e.g. "HEAD", "HEAD~2", a hash or a tag (an annotated tag shows the commit it
    /// points to).
    revision: String,
    /// Most bytes of patch text in this page (default 42999 less the message shown, what fits in
    /// a host's default result size; at most 4194304).
    #[schemars(range(min = 1, max = GIT_DIFF_MAX_BYTES))]
    #[serde(skip_serializing)]
    max_bytes: Option<usize>,
    /// Include the author's (and an annotated tag's tagger's) e-mail address.
    #[serde(default)]
    include_email: bool,
    /// next_cursor of the previous page, to continue the same patch.
    #[serde(skip_serializing)]
    cursor: Option<String>,
}

/// Result of `git_show`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ShowOutput {
    /// Full hash.
    commit: String,
    /// Author name.
    author: String,
    /// Author e-mail (only when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    email: Option<String>,
    /// Author date, ISO 8601.
    date: String,
    /// The whole commit message.
    message: String,
    /// The annotated tag `revision` named (the outermost, for a tag of a tag); absent for
    /// anything else, a lightweight tag included.
    #[serde(skip_serializing_if = "Option::is_none")]
    tag: Option<TagInfo>,
    /// Files the commit changes.
    files_changed: usize,
    /// Lines added by the commit.
    lines_added: u64,
    /// Lines deleted by the commit.
    lines_deleted: u64,
    /// This page of the commit's patch: git's output from byte `offset`, cut at a line break.
    diff: String,
    /// Bytes of the patch before this page.
    offset: u64,
    /// More of the patch follows: next_cursor continues.
    truncated: bool,
    /// Pass as cursor (with the same other arguments) for the next page; absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    bytes: u64,
}

/// An annotated tag, as `git_show` reports the one its revision named.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct TagInfo {
    /// The tag's name (its `tag` header).
    name: String,
    /// Tagger name (absent when the tag has no tagger line, as very old tags do).
    #[serde(skip_serializing_if = "Option::is_none")]
    tagger: Option<String>,
    /// Tagger e-mail (only when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    email: Option<String>,
    /// Tag date, ISO 8601.
    #[serde(skip_serializing_if = "Option::is_none")]
    date: Option<String>,
    /// The tag's message, without a signature.
    message: String,
}

impl TextView for ShowOutput {
    fn summary(&self) -> String {
        let mut s = format!(
            "git_show {}{} by {}{} on {}: {} changed, +{} -{}; patch bytes {}-{}",
            self.commit,
            self.tag
                .as_ref()
                .map_or_else(String::new, |t| format!(" (tag {})", t.name)),
            self.author,
            self.email
                .as_deref()
                .map_or_else(String::new, |e| format!(" <{e}>")),
            self.date,
            text::count(self.files_changed as u64, "file", "files"),
            self.lines_added,
            self.lines_deleted,
            self.offset,
            self.offset + self.bytes
        );
        if self.offset == 0 {
            s.push_str(" (after the message)");
        }
        text::push_cursor_more(&mut s, self.next_cursor.as_deref());
        s
    }

    fn body(&self, out: &mut String) {
        if self.offset == 0 {
            if let Some(t) = &self.tag {
                out.push_str(&format!("tag {}", t.name));
                if let Some(by) = &t.tagger {
                    out.push_str(&format!(" by {by}"));
                }
                out.push_str(":\n");
                out.push_str(&message_shown(&t.message));
            }
            out.push_str(&message_shown(&self.message));
        }
        out.push_str(&self.diff);
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

/// The message as the first page shows it: cut to [`MESSAGE_SHOWN_MAX`], then a blank line.
fn message_shown(message: &str) -> String {
    let mut m = text::cut(message.to_owned(), MESSAGE_SHOWN_MAX, "…");
    m.push_str("\n\n");
    m
}

pub(super) async fn git_show(
    rt: Arc<Access>,
    args: ShowArgs,
    cx: CallContext,
) -> ToolResult<ShowOutput> {
    check_revision(&args.revision)?;
    let max = args
        .max_bytes
        .unwrap_or(GIT_DIFF_DEFAULT_BYTES)
        .clamp(1, GIT_DIFF_MAX_BYTES);
    let (repo, _) = repo_at(&rt, ".", &cx).await?;
    // An annotated tag is peeled to its commit: `git show` of the tag object would print the
    // tag's own header (tagger name and e-mail) ahead of the commit's fields.
    let tag = annotated_tag(&repo, &args.revision, args.include_email, &cx).await?;
    let shown = if tag.is_some() {
        format!("{}^{{commit}}", args.revision)
    } else {
        args.revision.clone()
    };
    let mut meta = os(&[
        "show",
        "-s",
        "--no-color",
        "--no-show-signature",
        "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%B",
        "--end-of-options",
    ]);
    meta.push(shown.into());
    let m = engine::run_in(&repo, &meta, None, 1024 * 1024, &cx.cancel).await?;
    if !m.ok() && tag.is_some() {
        return Err(ToolError::invalid(format!(
            "revision {:?} is a tag of something that is not a commit (git_show shows one commit)",
            args.revision
        )));
    }
    if !m.ok() {
        return Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!("revision {:?}: {}", args.revision, m.stderr.trim()),
        ));
    }
    let text = crate::primitives::text::lossy(&m.stdout).into_owned();
    let f: Vec<&str> = text.splitn(5, '\x1f').collect();
    if f.len() != 5 {
        // `git show` prints a blob or tree as it is, and nothing for `^REV`.
        return Err(ToolError::invalid(format!(
            "revision {:?} is not a commit (git_show shows one commit; use read_file for a file)",
            args.revision
        )));
    }
    let commit = f[0].to_owned();
    let message = f[4].trim_end().to_owned();
    let pre = os(&[
        "show",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--no-show-signature",
        "--format=",
        "--patch",
    ]);
    // The commit by hash, so every page shows the same one.
    let post = vec!["--end-of-options".into(), commit.clone().into()];
    let mut numstat = os(&[
        "show",
        "--no-ext-diff",
        "--no-color",
        "--no-show-signature",
        "--format=",
        "--numstat",
        "-z",
        "--end-of-options",
    ]);
    numstat.push(commit.clone().into());
    // The first page counts the files (which computes every file's diff); later pages carry it.
    let ns = if args.cursor.is_none() {
        let ns = engine::run_in(&repo, &numstat, None, NUMSTAT_MAX_BYTES, &cx.cancel).await?;
        Some(page::parse_numstat(&ns.stdout))
    } else {
        None
    };
    let names: Option<Vec<Vec<u8>>> = ns
        .as_ref()
        .map(|ns| ns.iter().map(|f| f.2.clone()).collect());
    let carry = ns.as_ref().map_or(serde_json::Value::Null, |ns| {
        let (f, a, d) = totals(ns);
        serde_json::json!([f, a, d])
    });
    let fingerprint = crate::primitives::text::sha256_hex(
        serde_json::to_string(&args).unwrap_or_default().as_bytes(),
    )[..16]
        .to_owned();
    // The first page shares its room with the message.
    let room = if args.cursor.is_none() && args.max_bytes.is_none() {
        max.saturating_sub(message_shown(&message).len()).max(1)
    } else {
        max
    };
    let p = page::page(
        &repo,
        &pre,
        &post,
        names.as_deref(),
        args.cursor.as_deref(),
        &fingerprint,
        "git_show",
        room,
        carry,
        &cx.cancel,
    )
    .await?;
    let (files_changed, lines_added, lines_deleted) = carried_totals(&p.carried);
    Ok(ShowOutput {
        commit,
        author: f[1].to_owned(),
        email: args.include_email.then(|| f[2].to_owned()),
        date: f[3].to_owned(),
        message,
        tag,
        files_changed,
        lines_added,
        lines_deleted,
        diff: p.text,
        offset: p.offset,
        truncated: p.next_cursor.is_some(),
        next_cursor: p.next_cursor,
        limit: page_limit(max + MESSAGE_SHOWN_MAX + 2),
        bytes: p.bytes,
    })
}

/// The annotated tag `revision` names (`git cat-file -t` says `tag`), parsed from the tag object;
/// `None` for anything else, including a revision git does not know (the caller reports that).
///
/// # Errors
/// Only what running git returns (cancellation, a git that cannot start).
async fn annotated_tag(
    repo: &engine::Repo,
    revision: &str,
    include_email: bool,
    cx: &CallContext,
) -> ToolResult<Option<TagInfo>> {
    let mut kind = os(&["cat-file", "-t", "--end-of-options"]);
    kind.push(revision.into());
    let k = engine::run_in(repo, &kind, None, 64, &cx.cancel).await?;
    if !k.ok() || k.stdout.trim_ascii() != b"tag" {
        return Ok(None);
    }
    let mut raw = os(&["cat-file", "tag", "--end-of-options"]);
    raw.push(revision.into());
    let t = engine::run_in(repo, &raw, None, 1024 * 1024, &cx.cancel).await?;
    if !t.ok() {
        return Ok(None);
    }
    Ok(Some(parse_tag(
        &crate::primitives::text::lossy(&t.stdout),
        include_email,
    )))
}

/// A tag object's text (`object`, `type`, `tag`, `tagger` headers, a blank line, the message,
/// perhaps a signature) as [`TagInfo`].
fn parse_tag(text: &str, include_email: bool) -> TagInfo {
    let (head, message) = text.split_once("\n\n").unwrap_or((text, ""));
    let mut name = String::new();
    let (mut tagger, mut email, mut date) = (None, None, None);
    for line in head.lines() {
        if let Some(n) = line.strip_prefix("tag ") {
            name = n.to_owned();
        } else if let Some(who) = line.strip_prefix("tagger ") {
            // "Name <email> 1700000000 +0100"
            let (n, rest) = who.split_once(" <").unwrap_or((who, ""));
            let (e, when) = rest.split_once("> ").unwrap_or((rest, ""));
            tagger = Some(n.to_owned());
            email = include_email.then(|| e.trim_end_matches('>').to_owned());
            date = iso_date(when);
        }
    }
    let message = [
        "-----BEGIN PGP SIGNATURE-----",
        "-----BEGIN SSH SIGNATURE-----",
        "-----BEGIN SIGNED MESSAGE-----",
    ]
    .iter()
    .filter_map(|m| message.find(m))
    .min()
    .map_or(message, |at| &message[..at]);
    TagInfo {
        name,
        tagger,
        email,
        date,
        message: message.trim_end().to_owned(),
    }
}

/// Git's raw date (`1700000000 +0100`) as ISO 8601 in its own offset.
fn iso_date(raw: &str) -> Option<String> {
    let (secs, tz) = raw.trim().split_once(' ')?;
    let secs: i64 = secs.parse().ok()?;
    let sign = if tz.starts_with('-') { -1 } else { 1 };
    let digits = tz.trim_start_matches(['+', '-']);
    let hours: i32 = digits.get(..2)?.parse().ok()?;
    let minutes: i32 = digits.get(2..4)?.parse().ok()?;
    let offset = chrono::FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))?;
    let at = chrono::DateTime::from_timestamp(secs, 0)?.with_timezone(&offset);
    Some(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_object_is_parsed_and_the_email_kept_only_when_asked() {
        let raw = "object 0123\ntype commit\ntag v1\ntagger Tess Tagger <tess@example.org> 1700000000 +0130\n\nrelease one\n-----BEGIN PGP SIGNATURE-----\nxyz\n-----END PGP SIGNATURE-----\n";
        let t = parse_tag(raw, false);
        assert_eq!(t.name, "v1");
        assert_eq!(t.tagger.as_deref(), Some("Tess Tagger"));
        assert_eq!(t.email, None);
        assert_eq!(t.date.as_deref(), Some("2023-11-14T23:43:20+01:30"));
        assert_eq!(t.message, "release one");
        assert_eq!(
            parse_tag(raw, true).email.as_deref(),
            Some("tess@example.org")
        );
        let old = parse_tag("object 0123\ntype commit\ntag v0\n\nno tagger\n", true);
        assert_eq!(
            (old.tagger, old.email, old.message.as_str()),
            (None, None, "no tagger")
        );
    }
}
