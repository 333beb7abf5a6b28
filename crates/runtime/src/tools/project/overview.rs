//! `project_overview`: the facts of a project root, as a summary or in full, within
//! [`PROJECT_OVERVIEW_MAX_BYTES`] of text.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use protocol::limits::PROJECT_OVERVIEW_MAX_BYTES;

use crate::{
    Access,
    mcp::{
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{TextView, body_limit, count},
    },
};

use super::{
    Lines, dot, engine,
    engine::{Problem, detect::Facts, repo::RepoFacts},
    facts_and_commands, root_of,
};

/// Names of each build system, and command names, a summary shows.
const SUMMARY_NAMES: usize = 10;
/// Top-level entries a summary shows.
const SUMMARY_ENTRIES: usize = 40;

/// How much `project_overview` shows.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Detail {
    /// Counts and the first names of each list.
    #[default]
    Summary,
    /// Every name (still within 16 KiB of text).
    Full,
}

/// Arguments of `project_overview`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OverviewArgs {
    /// A directory (or file) inside the project, relative to the workspace (default ".").
    #[serde(default = "dot")]
    path: String,
    /// "summary" (default: counts and the first names) or "full" (every name).
    #[serde(default)]
    detail: Detail,
}

/// Result of `project_overview`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Overview {
    /// The workspace root, as paths are shown.
    workspace: String,
    /// The project root: the nearest git work tree containing path, else the workspace.
    project_root: String,
    /// How much is shown.
    detail: Detail,
    /// The repository at the project root; absent when there is none the caller may read.
    #[serde(skip_serializing_if = "Option::is_none")]
    repository: Option<RepoFacts>,
    /// What the project root holds.
    #[serde(flatten)]
    facts: Facts,
    /// Names of registered commands (list_commands shows their argv; run_command runs them).
    commands: Vec<String>,
    /// Registered commands in all.
    commands_total: usize,
    /// The text was cut at 16 KiB (every list here is whole up to its own bound).
    text_cut: bool,
    #[serde(skip)]
    body: String,
}

// === project_overview ===

pub(super) async fn project_overview(
    rt: Arc<Access>,
    args: OverviewArgs,
    cx: CallContext,
) -> ToolResult<Overview> {
    let ws = rt.workspace();
    let root = root_of(ws, &args.path)?;
    let (mut facts, reg) = facts_and_commands(&rt, &root).await?;
    let repository = match engine::repo::facts(ws, &root, &cx.cancel).await {
        Ok(r) => r,
        Err(_) if cx.cancel.is_cancelled() => return Err(ToolError::cancelled()),
        Err(e) => {
            facts.problems.push(Problem {
                path: ws.display(&root),
                message: format!("git: {e}; the repository facts are left out"),
            });
            None
        }
    };
    facts.problems.splice(0..0, reg.problems);
    let mut commands: Vec<String> = reg.commands.iter().map(|c| c.name.clone()).collect();
    if args.detail == Detail::Summary {
        facts.keep_first(SUMMARY_NAMES, SUMMARY_ENTRIES);
        commands.truncate(SUMMARY_NAMES);
    }
    let mut o = Overview {
        workspace: ws.display(ws.root()),
        project_root: ws.display(&root),
        detail: args.detail,
        repository,
        facts,
        commands,
        commands_total: reg.total,
        text_cut: false,
        body: String::new(),
    };
    let (body, cut) = overview_body(&o);
    o.body = body;
    o.text_cut = cut;
    Ok(o)
}

/// `names` of `total` as `a, b, c (+N more)`.
fn names_line(names: &[String], total: usize) -> String {
    let mut s = names.join(", ");
    if total > names.len() {
        s.push_str(&format!(" (+{} more)", total - names.len()));
    }
    s
}

/// The text under `o`'s summary line, at most `body_limit(PROJECT_OVERVIEW_MAX_BYTES)`
/// characters, and whether it was cut.
fn overview_body(o: &Overview) -> (String, bool) {
    let f = &o.facts;
    let full = o.detail == Detail::Full;
    let mut out = Lines::new(
        body_limit(PROJECT_OVERVIEW_MAX_BYTES),
        "[cut at the 16 KiB bound of this text; structuredContent has every listed name]",
    );
    out.push(&format!("workspace: {}", o.workspace));
    out.push(&format!("project root: {}", o.project_root));
    match &o.repository {
        Some(r) => out.push(&format!("repository: {}", r.line())),
        None => out.push("repository: none"),
    }
    out.push(&format!(
        "top level ({}{}): {}",
        f.top_level_total,
        if f.top_level_complete { "" } else { "+" },
        names_line(&f.top_level, f.top_level_total)
    ));
    if f.build_systems.is_empty() {
        out.push("build systems: none detected");
    } else {
        out.push("build systems:");
    }
    for b in &f.build_systems {
        let mut line = format!("- {}", b.head());
        if let Some(kind) = b.names_kind {
            line.push_str(&format!(
                ": {kind} ({}): {}",
                b.names_total,
                names_line(&b.names, b.names_total)
            ));
        }
        out.push(&line);
        if full {
            out.push(&format!("  files: {}", b.files.join(", ")));
        }
    }
    if !f.ci.is_empty() {
        out.push(&format!(
            "CI ({}): {}",
            f.ci_total,
            names_line(&f.ci, f.ci_total)
        ));
    }
    if !f.version_hints.is_empty() {
        let hints: Vec<String> = f
            .version_hints
            .iter()
            .map(|h| match &h.value {
                Some(v) => format!("{} ({} {v})", h.file, h.tool),
                None => format!("{} ({})", h.file, h.tool),
            })
            .collect();
        out.push(&format!("version hints: {}", hints.join(", ")));
    }
    if !f.docs.is_empty() {
        out.push(&format!("docs: {}", f.docs.join(", ")));
    }
    out.push(&format!(
        "commands ({}): {}{}",
        o.commands_total,
        names_line(&o.commands, o.commands_total),
        if o.commands_total > 0 {
            " — list_commands shows their argv; run_command runs one"
        } else {
            ""
        }
    ));
    if !f.problems.is_empty() {
        out.push(&format!("problems ({}):", f.problems.len()));
        for p in &f.problems {
            out.push(&format!("- {}: {}", p.path, p.message));
        }
    }
    out.finish()
}

impl TextView for Overview {
    fn summary(&self) -> String {
        let f = &self.facts;
        let repo = self.repository.as_ref().map_or_else(
            || "no repository".to_owned(),
            |r| format!("git {}", r.line()),
        );
        let systems: Vec<String> = f
            .build_systems
            .iter()
            .map(|b| format!("{} ({})", b.tool, b.decided_by))
            .collect();
        let mut s = format!(
            "project_overview {}: {repo}; build: {}; {}, {}, {}, {}",
            self.project_root,
            if systems.is_empty() {
                "none detected".to_owned()
            } else {
                systems.join(", ")
            },
            count(f.ci_total as u64, "CI entry point", "CI entry points"),
            count(
                f.version_hints.len() as u64,
                "version hint",
                "version hints"
            ),
            count(f.docs.len() as u64, "doc", "docs"),
            count(self.commands_total as u64, "command", "commands"),
        );
        if !f.problems.is_empty() {
            s.push_str(&format!(
                "; {}",
                count(f.problems.len() as u64, "problem", "problems")
            ));
        }
        match self.detail {
            Detail::Summary => s.push_str(&format!(
                "; summary (the first {SUMMARY_NAMES} names of each list); \"detail\": \"full\" shows all"
            )),
            Detail::Full if self.text_cut => s.push_str("; full, the text cut at 16 KiB"),
            Detail::Full => s.push_str("; full"),
        }
        s
    }

    fn body(&self, out: &mut String) {
        out.push_str(&self.body);
    }

    fn text_limit(&self) -> usize {
        PROJECT_OVERVIEW_MAX_BYTES
    }
}
