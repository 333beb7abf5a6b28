//! `project_overview`: the facts of a project root, as a summary or in full, within
//! [`PROJECT_OVERVIEW_MAX_BYTES`] of text.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{limits::COMMANDS_MAX, limits::PROJECT_OVERVIEW_MAX_BYTES};

use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolResult},
        text::{TextView, body_limit, count},
    },
    policy::Capability,
};

use super::{
    Lines, dot, engine,
    engine::{
        DIR_SCAN_MAX, Problem,
        detect::{Facts, NAMES_MAX, TOP_LEVEL_MAX},
        repo::RepoFacts,
    },
    nested_note, project_of, read_project, run_hint,
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
    /// Up to 512 names of each list and 500 top-level entries (the text within 16 KiB).
    Full,
}

/// Arguments of `project_overview`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OverviewArgs {
    /// A directory (or file) inside the project, relative to the workspace (default ".").
    /// Facts come from its project root only.
    #[serde(default = "dot")]
    path: String,
    /// "summary" (default: counts and the first names) or "full" (up to 512 names of each
    /// list).
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
    /// Names of registered commands, the first 10 in a summary, at most 512 in full
    /// (list_commands pages through all of them with their argv; run_command runs them).
    commands: Vec<String>,
    /// Registered commands in all.
    commands_total: usize,
    /// Whether this caller's policy lets it call run_command (it needs an exec mode).
    run_command_allowed: bool,
    /// Project files between the project root and path (a nested package.json, Cargo.toml,
    /// makefile, ...) that are not read: facts come from the project root only.
    nested_project_files: Vec<String>,
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
    let project = project_of(ws, &args.path)?;
    let root = project.root.clone();
    let read = read_project(&rt, &project).await?;
    let (mut facts, reg) = (read.facts, read.reg);
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
    facts.problems.splice(0..0, reg.problems.iter().cloned());
    let (names, entries, shown_commands) = match args.detail {
        Detail::Summary => (SUMMARY_NAMES, SUMMARY_ENTRIES, SUMMARY_NAMES),
        Detail::Full => (NAMES_MAX, TOP_LEVEL_MAX, COMMANDS_MAX),
    };
    facts.keep_first(names, entries);
    let commands: Vec<String> = reg.names().map(|(n, _)| n).take(shown_commands).collect();
    let mut o = Overview {
        workspace: ws.display(ws.root()),
        project_root: ws.display(&root),
        detail: args.detail,
        repository,
        facts,
        commands,
        commands_total: reg.total(),
        run_command_allowed: rt.policy().allows(Capability::ExecDirect),
        nested_project_files: read.nested,
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
    let note = nested_note(&o.nested_project_files, &o.project_root);
    if !note.is_empty() {
        out.push(&note);
    }
    if f.top_level_complete {
        out.push(&format!(
            "top level ({}): {}",
            f.top_level_total,
            names_line(&f.top_level, f.top_level_total)
        ));
    } else {
        // What was read is a directory-order sample: its sorted names are not the
        // directory's first.
        let mut line = format!(
            "top level: more than {DIR_SCAN_MAX} entries; the first {DIR_SCAN_MAX} read (in \
             directory order, not sorted), of which the first {} by name: {}",
            f.top_level.len(),
            f.top_level.join(", ")
        );
        if f.top_level_total > f.top_level.len() {
            line.push_str(&format!(
                " (+{} more of those read)",
                f.top_level_total - f.top_level.len()
            ));
        }
        out.push(&line);
    }
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
            format!(
                " — list_commands shows their argv; {}",
                run_hint(o.run_command_allowed, "run_command runs one")
            )
        } else {
            String::new()
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
                "; summary (the first {SUMMARY_NAMES} names of each list); \"detail\": \"full\" shows up to {NAMES_MAX} of each"
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
