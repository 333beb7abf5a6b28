//! The instruction chain: `session_bootstrap` (a short start: what this
//! server is, the policy in one line, project facts and the instructions within a budget) and
//! `agent_context` (the whole chain with provenance and a fingerprint). The chain itself is the
//! [`engine`]; the same sources are MCP resources (`machine://context/...`, see
//! [`resource_list`] and [`resource_read`]), which the registry serves.
//!
//! The user-level instructions file (`[context] instructions` of the user configuration,
//! [`crate::config`]) is read only for callers whose paths are unrestricted: a caller confined
//! to the workspace (a remote reviewer, `--profile agent`) never receives it, and is not told
//! whether one exists.

use std::{
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::limits::{
    BOOTSTRAP_INSTRUCTIONS_MAX_CHARS, INSTRUCTION_FILE_MAX_BYTES, INSTRUCTIONS_TOTAL_MAX_BYTES,
    RESULT_TEXT_DEFAULT_CHARS, RESULT_TEXT_RAISED_MAX_CHARS,
};

use crate::{
    Access, SERVER_NAME,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{self, TextView, body_limit},
    },
    config::UserConfig,
    path::Workspace,
    policy::{Capability, ExecMode},
    primitives::{project::target_dir, uri},
    tools::{
        blocking::blocking,
        cursor,
        family::{Family, ResourceEntry, ResourceTemplate, ResourceText, Resources},
    },
};

pub(crate) mod engine;

use engine::{Chain, SourceKind};

/// The family's entry in the registry: `session_bootstrap`, `agent_context`, and the context
/// resources (`machine://context/...`).
pub(crate) const FAMILY: Family = Family {
    specs,
    state: None,
    resources: Some(&RESOURCES),
    prompts: None,
};

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "session_bootstrap",
                title: "Start a session",
                description: "Call first. What this server is, the effective policy in one \
                              line, the project's facts (repository, build systems, commands) \
                              and the project's agent instructions (AGENTS.md and the like, \
                              from the project root down to path) within a short budget. For \
                              the whole instruction chain with provenance use agent_context.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            session_bootstrap,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "agent_context",
                title: "Agent instructions",
                description: "The instruction chain that applies to path: the user's \
                              instructions file (unrestricted callers only), then from the \
                              project root (nearest Git work tree, else the workspace) down to \
                              path, in each directory AGENTS.override.md or else AGENTS.md, \
                              plus CLAUDE.md. Lowest precedence first: deeper files win. Each \
                              source with path, size and SHA-256; a fingerprint over all. Pass \
                              known_fingerprint to get \"unchanged\" instead of the text. 32 \
                              KiB per file and 128 KiB in all by default (truncation noted); \
                              pages of 45000 characters (cursor), max_chars up to 500000.",
                capability: Capability::Read,
                hints: Hints::READ,
            },
            agent_context,
        )
        .larger_on_request(),
    ]
}

fn dot() -> String {
    ".".to_owned()
}

/// Arguments of `session_bootstrap`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BootstrapArgs {
    /// The directory (or a file in it) the session works in, relative to the workspace
    /// (default "."): instructions are gathered from the project root down to it.
    #[serde(default = "dot")]
    path: String,
}

/// Arguments of `agent_context`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentContextArgs {
    /// The directory (or a file in it) the instructions should apply to, relative to the
    /// workspace (default ".").
    #[serde(default = "dot")]
    path: String,
    /// The fingerprint of an earlier answer: when the chain is unchanged the answer says so
    /// and leaves the text out.
    known_fingerprint: Option<String>,
    /// Bytes of one file's text kept (1 to 32768, default 32768).
    #[schemars(range(min = 1, max = INSTRUCTION_FILE_MAX_BYTES))]
    max_file_bytes: Option<usize>,
    /// Bytes of text kept over the whole chain (1 to 131072, default 131072).
    #[schemars(range(min = 1, max = INSTRUCTIONS_TOTAL_MAX_BYTES))]
    max_total_bytes: Option<usize>,
    /// Most characters of this answer's text (10000 to 500000, default 45000).
    #[schemars(range(min = AGENT_CONTEXT_MIN_CHARS, max = RESULT_TEXT_RAISED_MAX_CHARS))]
    max_chars: Option<usize>,
    /// next_cursor of the previous page, to continue the same chain.
    cursor: Option<String>,
}

/// One source of the chain, as callers see it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SourceView {
    /// Place in the chain, 1 = lowest precedence.
    precedence: usize,
    /// What it is.
    kind: SourceKind,
    /// The file.
    path: String,
    /// The directory it applies to (absent for the user's file, which applies everywhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    applies_to: Option<String>,
    /// The file's size in bytes.
    bytes: u64,
    /// SHA-256 (hex) of the whole file; absent for a file over 16 MiB (its size and
    /// modification time identify it).
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    /// Bytes of its text in the chain.
    included_bytes: usize,
    /// Whether the chain has less than the whole file.
    truncated: bool,
    /// Which budget cut it: "file" (the per-file budget) or "chain" (the total).
    #[serde(skip_serializing_if = "Option::is_none")]
    cut_by: Option<&'static str>,
    /// The file is not valid UTF-8: its invalid bytes are U+FFFD in the text (so the text may
    /// have more bytes than the file). Absent when it is valid.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    invalid_utf8: bool,
}

/// A file found where the chain looks but not used.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SkippedView {
    /// The file.
    path: String,
    /// Why it was not used.
    reason: String,
}

/// A chain rendered for one caller.
struct Rendered {
    sources: Vec<SourceView>,
    skipped: Vec<SkippedView>,
    text: String,
}

/// The sources of `chain`, what it skipped, and its text: a heading per source, lowest
/// precedence first.
fn render(ws: &Workspace, chain: &Chain) -> Rendered {
    let n = chain.sources.len();
    let mut text = String::new();
    let mut sources = Vec::with_capacity(n);
    for (i, s) in chain.sources.iter().enumerate() {
        let path = ws.display(&s.real);
        let applies_to = s.dir.as_deref().map(|d| ws.display(d));
        let scope = match &applies_to {
            Some(d) => format!("applies to {d}"),
            None => "the user's own, applies everywhere".to_owned(),
        };
        text.push_str(&format!(
            "## {}/{n} {} — {path} ({scope}; {} bytes)\n",
            i + 1,
            s.kind.label(),
            s.size
        ));
        text.push_str(&s.text);
        if !s.text.is_empty() && !s.text.ends_with('\n') {
            text.push('\n');
        }
        if s.invalid_utf8 {
            text.push_str("[not valid UTF-8: its invalid bytes are shown as U+FFFD]\n");
        }
        if s.truncated {
            let why = match s.cut_by {
                Some("chain") => "the chain's total budget",
                _ => "the per-file budget",
            };
            text.push_str(&format!(
                "[cut by {why}: {} of {} bytes shown; read_file {} for the rest]\n",
                s.text.len(),
                s.size,
                text::arg(&path)
            ));
        }
        text.push('\n');
        sources.push(SourceView {
            precedence: i + 1,
            kind: s.kind,
            path,
            applies_to,
            bytes: s.size,
            sha256: s.sha256.clone(),
            included_bytes: s.text.len(),
            truncated: s.truncated,
            cut_by: s.cut_by,
            invalid_utf8: s.invalid_utf8,
        });
    }
    let skipped = chain
        .skipped
        .iter()
        .map(|k| SkippedView {
            path: ws.display(&k.path),
            reason: k.reason.clone(),
        })
        .collect();
    Rendered {
        sources,
        skipped,
        text,
    }
}

/// The user's instructions file for `rt`, when the caller may have it: `Ok(None)` for a
/// restricted caller or when none is configured; `Err` names a configuration that cannot be
/// used (shown to unrestricted callers only).
fn user_file(rt: &Access) -> Result<Option<PathBuf>, String> {
    if rt.workspace().restricted() {
        return Ok(None);
    }
    let Some(path) = UserConfig::path() else {
        return Ok(None);
    };
    let config = UserConfig::load_from(&path).map_err(|e| e.to_string())?;
    Ok(config.instructions(&path))
}

/// The chain for `target` as `rt`'s caller may see it, with the problems of the user
/// configuration.
fn chain_for(
    rt: &Access,
    target: &Path,
    max_file_bytes: usize,
    max_total_bytes: usize,
) -> (Chain, Vec<String>) {
    let mut problems = Vec::new();
    let user = user_file(rt).unwrap_or_else(|e| {
        problems.push(format!("user configuration: {e}"));
        None
    });
    let chain = engine::collect(&engine::Request {
        ws: rt.workspace(),
        target,
        user_file: user.as_deref(),
        max_file_bytes,
        max_total_bytes,
    });
    (chain, problems)
}

/// Result of `agent_context`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct AgentContext {
    /// The target directory.
    target: String,
    /// The project root the chain starts at.
    project_root: String,
    /// SHA-256 over every source's kind, path and content: pass it back as known_fingerprint.
    fingerprint: String,
    /// The chain is the one known_fingerprint named: text left out.
    unchanged: bool,
    /// The sources, lowest precedence first (deeper files win).
    sources: Vec<SourceView>,
    /// Files found but not used (empty, binary, replaced by AGENTS.override.md, ...).
    skipped: Vec<SkippedView>,
    /// What could not be used (the user configuration, when it is broken).
    problems: Vec<String>,
    /// This page of the chain's text: each source under a "## n/N kind — path" heading.
    text: String,
    /// Bytes (UTF-8) of the chain's text before this page.
    offset: usize,
    /// Bytes (UTF-8) of the chain's whole text.
    total_bytes: usize,
    /// Pass as cursor (with the same other arguments) to get the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip)]
    limit: usize,
}

impl TextView for AgentContext {
    fn summary(&self) -> String {
        let bytes: usize = self.sources.iter().map(|s| s.included_bytes).sum();
        let cut = self.sources.iter().filter(|s| s.truncated).count();
        let mut s = format!(
            "agent_context for {} (project root {}): {}, {bytes} bytes of text{}, {}; fingerprint {}",
            self.target,
            self.project_root,
            text::count(self.sources.len() as u64, "source", "sources"),
            if cut > 0 {
                format!(" ({cut} cut, see the notes)")
            } else {
                String::new()
            },
            text::count(self.skipped.len() as u64, "file skipped", "files skipped"),
            self.fingerprint
        );
        if self.unchanged {
            s.push_str("; unchanged since known_fingerprint: text left out");
            return s;
        }
        if !self.problems.is_empty() {
            s.push_str("; problems listed at the end");
        }
        text::push_cursor_more(&mut s, self.next_cursor.as_deref());
        s
    }

    fn body(&self, out: &mut String) {
        if self.sources.is_empty() {
            out.push_str("No instruction files apply here.\n");
        } else if self.offset == 0 && !self.unchanged {
            out.push_str(
                "Lowest precedence first: where they disagree, a later (deeper) file wins.\n\n",
            );
        }
        out.push_str(&self.text);
        let lines: Vec<String> = self
            .skipped
            .iter()
            .map(|k| format!("skipped {}: {}", k.path, k.reason))
            .chain(self.problems.iter().cloned())
            .collect();
        text::trailer(out, &lines);
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

/// Smallest `max_chars` of `agent_context`: a page keeps room for its summary line and the
/// trailer of skipped files and problems, and still holds text.
const AGENT_CONTEXT_MIN_CHARS: usize = 10_000;

/// The page of `text` that starts at `offset` and has at most `max` bytes (at least one
/// character, so that a page always advances), ending at a line break when there is one in
/// its second half, else on a character boundary.
fn page(text: &str, offset: usize, max: usize) -> (&str, Option<usize>) {
    let rest = &text[offset..];
    if rest.len() <= max {
        return (rest, None);
    }
    let mut end = max;
    while !rest.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 {
        end = rest.chars().next().map_or(rest.len(), char::len_utf8);
    }
    if let Some(nl) = rest[..end].rfind('\n').filter(|&nl| nl >= end / 2) {
        end = nl + 1;
    }
    (&rest[..end], Some(offset + end))
}

async fn agent_context(
    rt: Arc<Access>,
    args: AgentContextArgs,
    _cx: CallContext,
) -> ToolResult<AgentContext> {
    let max_file = args.max_file_bytes.unwrap_or(INSTRUCTION_FILE_MAX_BYTES);
    let max_total = args.max_total_bytes.unwrap_or(INSTRUCTIONS_TOTAL_MAX_BYTES);
    if !(1..=INSTRUCTION_FILE_MAX_BYTES).contains(&max_file)
        || !(1..=INSTRUCTIONS_TOTAL_MAX_BYTES).contains(&max_total)
    {
        return Err(ToolError::invalid(format!(
            "max_file_bytes is 1 to {INSTRUCTION_FILE_MAX_BYTES} and max_total_bytes 1 to {INSTRUCTIONS_TOTAL_MAX_BYTES}"
        )));
    }
    let limit = match args.max_chars {
        None => RESULT_TEXT_DEFAULT_CHARS,
        Some(m) if (AGENT_CONTEXT_MIN_CHARS..=RESULT_TEXT_RAISED_MAX_CHARS).contains(&m) => m,
        Some(_) => {
            return Err(ToolError::invalid(format!(
                "max_chars is {AGENT_CONTEXT_MIN_CHARS} to {RESULT_TEXT_RAISED_MAX_CHARS}"
            )));
        }
    };
    blocking(move || {
        let ws = rt.workspace();
        let target = target_dir(ws, &args.path)?;
        let (chain, problems) = chain_for(&rt, &target, max_file, max_total);
        let rendered = render(ws, &chain);
        let offset = match &args.cursor {
            None => 0,
            Some(c) => {
                let v = cursor::decode(c, "agent_context")?;
                if v["f"].as_str() != Some(chain.fingerprint.as_str()) {
                    return Err(ToolError::conflict(
                        "the instruction files changed since this cursor was returned; call agent_context again without cursor",
                    ));
                }
                let o = cursor::u64_field(&v, "o", "agent_context")? as usize;
                if o > rendered.text.len() || !rendered.text.is_char_boundary(o) {
                    return Err(ToolError::invalid(
                        "cursor is not a next_cursor returned by agent_context with these arguments",
                    ));
                }
                o
            }
        };
        let unchanged = args.known_fingerprint.as_deref() == Some(chain.fingerprint.as_str());
        // Room for the heading line, the skipped files and problems.
        let room = body_limit(limit).saturating_sub(text::TRAILER_RESERVE + 100);
        let (text, next) = if unchanged {
            ("", None)
        } else {
            page(&rendered.text, offset, room)
        };
        Ok(AgentContext {
            target: ws.display(&target),
            project_root: ws.display(&chain.root),
            next_cursor: next.map(|o| cursor::encode(&json!({"o": o, "f": chain.fingerprint}))),
            fingerprint: chain.fingerprint,
            unchanged,
            total_bytes: rendered.text.len(),
            text: text.to_owned(),
            offset,
            sources: rendered.sources,
            skipped: rendered.skipped,
            problems,
            limit,
        })
    })
    .await
}

/// Result of `session_bootstrap`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Bootstrap {
    /// This server: name and version.
    server: String,
    /// Absolute path of the workspace root.
    workspace: String,
    /// The effective policy in one line.
    policy: String,
    /// The project root (nearest Git work tree containing path, else the workspace).
    project_root: String,
    /// Facts about the project: repository, build systems and package managers, commands.
    project: String,
    /// The instruction files, lowest precedence first (paths).
    instruction_sources: Vec<String>,
    /// The instructions' text within a short budget (24000 characters).
    instructions: String,
    /// Whether `instructions` holds the whole chain (else: agent_context).
    instructions_complete: bool,
    /// The chain's fingerprint (agent_context's known_fingerprint).
    fingerprint: String,
    /// Tools to call next.
    next_steps: Vec<String>,
}

impl TextView for Bootstrap {
    fn summary(&self) -> String {
        format!(
            "session_bootstrap: {} on {}; project root {}; {}{}",
            self.server,
            self.workspace,
            self.project_root,
            text::count(
                self.instruction_sources.len() as u64,
                "instruction file",
                "instruction files"
            ),
            if self.instructions_complete {
                ""
            } else {
                " (cut: agent_context has them all)"
            }
        )
    }

    fn body(&self, out: &mut String) {
        out.push_str(&format!("Policy: {}\n\n", self.policy));
        if !self.project.is_empty() {
            out.push_str(&format!("Project:\n{}\n", self.project.trim_end()));
            out.push('\n');
        }
        if self.instruction_sources.is_empty() {
            out.push_str(
                "Instructions: none (no AGENTS.md, AGENTS.override.md or CLAUDE.md applies).\n\n",
            );
        } else {
            out.push_str("Instructions (lowest precedence first; deeper files win):\n\n");
            out.push_str(&self.instructions);
            if !self.instructions.ends_with('\n') {
                out.push('\n');
            }
            out.push('\n');
        }
        out.push_str("Next: ");
        out.push_str(&self.next_steps.join("; "));
        out.push('\n');
    }
}

/// `chain` rendered within about `max` bytes: the chain's total budget lowered until its text
/// (headings and notes included) fits, so that the lowest-precedence sources are the ones cut
/// ([`engine::apply_total_budget`]), never the deepest.
fn within(ws: &Workspace, chain: &Chain, max: usize) -> Rendered {
    let mut total = max;
    let mut fitted = chain.clone();
    for _ in 0..4 {
        engine::apply_total_budget(&mut fitted.sources, total);
        let rendered = render(ws, &fitted);
        if rendered.text.len() <= max || total == 0 {
            return rendered;
        }
        // The headings and notes take the rest; lower the text's budget by the excess.
        total = total.saturating_sub(rendered.text.len() - max);
        fitted = chain.clone();
    }
    render(ws, &fitted)
}

/// The effective policy of `rt` in one line.
fn policy_line(rt: &Access) -> String {
    let p = rt.policy();
    let exec = match p.exec_mode() {
        ExecMode::Off => "no processes",
        ExecMode::Direct => "processes from an argv (no shell)",
        ExecMode::Shell => "processes and shell commands",
    };
    format!(
        "profile {}: {}, {exec}, {}, {} environment, {} paths in results",
        p.name(),
        if p.write() {
            "writes allowed"
        } else {
            "read-only"
        },
        if p.unrestricted_paths() {
            "any path on the machine"
        } else {
            "paths confined to the workspace"
        },
        if p.full_env() {
            "inherited"
        } else {
            "isolated"
        },
        if p.absolute_paths() {
            "absolute"
        } else {
            "workspace-relative"
        }
    )
}

async fn session_bootstrap(
    rt: Arc<Access>,
    args: BootstrapArgs,
    _cx: CallContext,
) -> ToolResult<Bootstrap> {
    let access = rt.clone();
    let (mut bootstrap, root) = blocking(move || {
        let ws = access.workspace();
        let target = target_dir(ws, &args.path)?;
        let (chain, problems) = chain_for(
            &access,
            &target,
            INSTRUCTION_FILE_MAX_BYTES,
            INSTRUCTIONS_TOTAL_MAX_BYTES,
        );
        let rendered = within(ws, &chain, BOOTSTRAP_INSTRUCTIONS_MAX_CHARS);
        let (shown, more) = page(&rendered.text, 0, BOOTSTRAP_INSTRUCTIONS_MAX_CHARS);
        let mut instructions = shown.to_owned();
        for p in &problems {
            instructions.push_str(&format!("[{p}]\n"));
        }
        let complete = more.is_none() && !rendered.sources.iter().any(|s| s.truncated);
        if !complete {
            instructions.push_str(&format!(
                "[cut to fit {BOOTSTRAP_INSTRUCTIONS_MAX_CHARS} characters, the deepest files \
                 kept whole first: agent_context {} has the whole chain]\n",
                text::arg(&args.path)
            ));
        }
        let mut next_steps = vec![
            "agent_context for the whole instruction chain with provenance".to_owned(),
            "project_overview for the project's layout and build facts".to_owned(),
            "list_skills for the project's skills".to_owned(),
        ];
        if access.policy().allows(Capability::ExecDirect) {
            next_steps.push("list_commands / run_command for the project's commands".to_owned());
        }
        Ok((
            Bootstrap {
                server: format!("{SERVER_NAME} {}", crate::version()),
                workspace: ws.root().to_string_lossy().into_owned(),
                policy: policy_line(&access),
                project_root: ws.display(&chain.root),
                project: String::new(),
                instruction_sources: rendered
                    .sources
                    .iter()
                    .map(|s| format!("{} ({})", s.path, s.kind.label()))
                    .collect(),
                instructions,
                instructions_complete: complete,
                fingerprint: chain.fingerprint,
                next_steps,
            },
            chain.root,
        ))
    })
    .await?;
    bootstrap.project = crate::tools::project::facts_summary(rt, root).await;
    Ok(bootstrap)
}

// === MCP resources (`resources/list`, `resources/read`) ===

/// The URI scheme and authority of the context resources.
const URI_PREFIX: &str = "machine://context/";
/// The whole chain for the workspace root.
const CHAIN_URI: &str = "machine://context/chain";
/// The user's instructions file (unrestricted callers only).
const USER_URI: &str = "machine://context/user-instructions";
/// One instruction file, by its path as the caller sees it, percent-encoded.
const FILE_URI_PREFIX: &str = "machine://context/file/";

/// The MIME type of the context resources.
const MARKDOWN: &str = "text/markdown";

/// The context resources, as the registry serves them.
static RESOURCES: Resources = Resources {
    prefix: URI_PREFIX,
    templates: &[ResourceTemplate {
        // RFC 6570 reserved expansion of FILE_URI_PREFIX's path.
        uri_template: "machine://context/file/{+path}",
        name: "instruction-file",
        description: "An instruction file (AGENTS.md, AGENTS.override.md or CLAUDE.md) by its path in the workspace",
        mime_type: MARKDOWN,
    }],
    list: resource_list,
    read: resource_read,
};

/// The context resources of the workspace root for `rt`'s caller (blocking): the whole chain,
/// then each of its instruction files, lowest precedence first.
fn resource_list(rt: &Access) -> Vec<ResourceEntry> {
    let ws = rt.workspace();
    let (chain, _) = chain_for(
        rt,
        ws.root(),
        INSTRUCTION_FILE_MAX_BYTES,
        INSTRUCTIONS_TOTAL_MAX_BYTES,
    );
    let mut out = vec![ResourceEntry {
        uri: CHAIN_URI.to_owned(),
        name: "instruction-chain".to_owned(),
        description: "The agent instructions that apply to the workspace root, lowest precedence first (as agent_context)".to_owned(),
        mime_type: MARKDOWN,
        size: None,
    }];
    for s in &chain.sources {
        let path = ws.display(&s.real);
        let uri = match s.kind {
            SourceKind::UserInstructions => USER_URI.to_owned(),
            _ => format!(
                "{FILE_URI_PREFIX}{}",
                uri::encode_path(std::ffi::OsStr::new(&path))
            ),
        };
        out.push(ResourceEntry {
            uri,
            name: path.clone(),
            mime_type: MARKDOWN,
            description: match &s.dir {
                Some(d) => format!("{} for {}", s.kind.label(), ws.display(d)),
                None => "The user's own instructions".to_owned(),
            },
            size: Some(s.size),
        });
    }
    out
}

/// Reads the context resource `uri` for `rt`'s caller (blocking).
///
/// # Errors
/// `not_found` for a URI that is not a context resource this caller may read: another scheme,
/// the user's file for a restricted caller or when none is configured, a file whose name is not
/// an instruction file's; the path errors of [`Workspace::resolve`] (`path_boundary`, ...); a
/// file that is empty, binary or unreadable (`not_found`, naming why).
fn resource_read(rt: &Access, uri: &str) -> ToolResult<ResourceText> {
    let ws = rt.workspace();
    let missing = |why: &str| ToolError::new(ToolErrorCode::NotFound, format!("{uri}: {why}"));
    let found = |text: String| {
        Ok(ResourceText {
            uri: uri.to_owned(),
            mime_type: MARKDOWN,
            text,
        })
    };
    if uri == CHAIN_URI {
        let (chain, problems) = chain_for(
            rt,
            ws.root(),
            INSTRUCTION_FILE_MAX_BYTES,
            INSTRUCTIONS_TOTAL_MAX_BYTES,
        );
        let mut text = render(ws, &chain).text;
        for p in problems {
            text.push_str(&format!("[{p}]\n"));
        }
        if text.is_empty() {
            text = "No instruction files apply to the workspace root.\n".to_owned();
        }
        return found(text);
    }
    let path = if uri == USER_URI {
        match user_file(rt) {
            Ok(Some(p)) => p,
            Ok(None) => return Err(missing("no user instructions for this caller")),
            Err(e) => return Err(missing(&format!("the user configuration: {e}"))),
        }
    } else if let Some(encoded) = uri.strip_prefix(FILE_URI_PREFIX) {
        let bytes = uri::decode_path(encoded);
        let decoded = crate::path::quote::render(std::ffi::OsStr::from_bytes(&bytes));
        let p = ws.resolve(&decoded)?;
        let named = p
            .real()
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| engine::FILE_NAMES.contains(&n));
        if !named {
            return Err(missing(&format!(
                "not an instruction file (one of {})",
                engine::FILE_NAMES.join(", ")
            )));
        }
        p.real().to_owned()
    } else if uri.starts_with(URI_PREFIX) {
        return Err(missing("no such context resource"));
    } else {
        return Err(missing("not a machine://context/ resource"));
    };
    match engine::read_one(ws, &path, INSTRUCTION_FILE_MAX_BYTES) {
        Ok(s) => {
            let mut text = s.text;
            if s.truncated {
                text.push_str(&format!(
                    "\n[cut: {} of {} bytes shown; read_file {} for the rest]\n",
                    text.len(),
                    s.size,
                    text::arg(&ws.display(&s.real))
                ));
            }
            found(text)
        }
        Err(why) => Err(missing(&why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_end_at_line_breaks_and_continue_where_they_ended() {
        let text = "aaaa\nbbbb\ncccc\n";
        let (p, next) = page(text, 0, 12);
        assert_eq!(p, "aaaa\nbbbb\n");
        let (q, end) = page(text, next.unwrap(), 12);
        assert_eq!(q, "cccc\n");
        assert_eq!(end, None);
        let (r, _) = page("ééééé", 0, 5);
        assert_eq!(r, "éé", "a character is never split");
    }
}
