//! `list_commands` and `run_command`: the registered commands of a project root (the
//! manifest's and the automatic aliases) and running one through `run_process`'s runner.

use std::{collections::BTreeMap, ffi::OsString, sync::Arc};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use protocol::limits::{
    PROCESS_OUTPUT_MAX_BYTES, PROCESS_TIMEOUT_MAX, PROCESS_TIMEOUT_MIN, RESULT_TEXT_DEFAULT_CHARS,
};

use crate::{
    Access,
    mcp::{
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{TextView, body_limit, count},
    },
    tools::process::{CommonArgs, ProcessResult, check_argv, run},
};

use super::{
    Lines, dot,
    engine::{
        Problem,
        manifest::{Command, Registry},
    },
    facts_and_commands, root_of,
};

/// Arguments of `list_commands`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListCommandsArgs {
    /// A directory (or file) inside the project, relative to the workspace (default ".").
    #[serde(default = "dot")]
    path: String,
}

/// Result of `list_commands`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct CommandList {
    /// The project root, as paths are shown.
    project_root: String,
    /// The commands: the manifest's (by name), then aliases (cargo, package.json, makefile);
    /// at most 512.
    commands: Vec<Command>,
    /// Commands in all (more than listed when over 512).
    total: usize,
    /// Files that could not be used (a manifest that failed to parse, a package.json that is
    /// not JSON, a makefile too large), with why; what is valid is still listed.
    problems: Vec<Problem>,
}

/// Arguments of `run_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunCommandArgs {
    /// The command's name, as list_commands shows it (e.g. "cargo.test", "npm.build").
    name: String,
    /// Extra arguments appended to the command's argv; refused unless the command allows them.
    #[serde(default)]
    args: Vec<String>,
    /// A directory (or file) inside the project, relative to the workspace (default ".").
    #[serde(default = "dot")]
    path: String,
    /// Seconds before the process tree is terminated: at most the command's timeout_seconds
    /// (default: the command's).
    #[schemars(range(min = PROCESS_TIMEOUT_MIN.as_secs(), max = PROCESS_TIMEOUT_MAX.as_secs()))]
    timeout_seconds: Option<u64>,
    /// Return after this many seconds if the process is still running, leaving it as a process
    /// session (1-600); continue with read_process from stdout_bytes/stderr_bytes.
    #[schemars(range(min = PROCESS_TIMEOUT_MIN.as_secs(), max = PROCESS_TIMEOUT_MAX.as_secs()))]
    yield_after_seconds: Option<u64>,
    /// Most bytes of each stream in the result, head and tail around a marker (at most 524288).
    /// Default: both streams together what fits in a host's default result size.
    #[schemars(range(min = 1, max = PROCESS_OUTPUT_MAX_BYTES))]
    max_output_bytes: Option<usize>,
}

// === list_commands ===

pub(super) async fn list_commands(
    rt: Arc<Access>,
    args: ListCommandsArgs,
    _cx: CallContext,
) -> ToolResult<CommandList> {
    let ws = rt.workspace();
    let root = root_of(ws, &args.path)?;
    let (facts, reg) = facts_and_commands(&rt, &root).await?;
    // The manifest's problem, then those of the files aliases come from (package.json, the
    // makefile), which detection found.
    let mut problems = reg.problems;
    problems.extend(facts.problems);
    Ok(CommandList {
        project_root: ws.display(&root),
        commands: reg.commands,
        total: reg.total,
        problems,
    })
}

impl Command {
    /// The command's lines in a text: `name — description`, then argv, cwd, timeout, extra
    /// arguments and provenance.
    fn lines(&self) -> String {
        format!(
            "{} — {}\n  argv {} cwd {} timeout {} s{} ({}, {})\n",
            self.name,
            self.description,
            serde_json::Value::from(self.argv.clone()),
            self.cwd,
            self.timeout_seconds,
            if self.allow_extra_args {
                "; takes extra args"
            } else {
                ""
            },
            self.source,
            self.provenance
        )
    }
}

impl TextView for CommandList {
    fn summary(&self) -> String {
        let mut s = format!(
            "list_commands {}: {}",
            self.project_root,
            count(self.total as u64, "command", "commands")
        );
        if self.total > self.commands.len() {
            s.push_str(&format!(" ({} listed)", self.commands.len()));
        }
        if !self.problems.is_empty() {
            s.push_str(&format!(
                "; {} (after the commands)",
                count(self.problems.len() as u64, "problem", "problems")
            ));
        }
        s.push_str("; run one with run_command {\"name\": NAME}");
        s
    }

    fn body(&self, out: &mut String) {
        let mut lines = Lines::new(
            body_limit(RESULT_TEXT_DEFAULT_CHARS),
            "[cut at the result's text bound; structuredContent lists every command]",
        );
        for c in &self.commands {
            for l in c.lines().lines() {
                lines.push(l);
            }
        }
        if !self.problems.is_empty() {
            lines.push("problems:");
            for p in &self.problems {
                lines.push(&format!("- {}: {}", p.path, p.message));
            }
        }
        out.push_str(&lines.finish().0);
    }
}

// === run_command ===

pub(super) async fn run_command(
    rt: Arc<Access>,
    args: RunCommandArgs,
    cx: CallContext,
) -> ToolResult<ProcessResult> {
    let ws = rt.workspace();
    let root = root_of(ws, &args.path)?;
    let (_, reg) = facts_and_commands(&rt, &root).await?;
    let Some(cmd) = reg.find(&args.name).cloned() else {
        return Err(unknown_command(&reg, &args.name, &ws.display(&root)));
    };
    if !args.args.is_empty() && !cmd.allow_extra_args {
        return Err(ToolError::invalid(format!(
            "{} does not allow extra arguments (allow_extra_args is false in {}); call it \
             without args",
            cmd.name, cmd.provenance
        ))
        .detail("command", cmd.name.clone()));
    }
    if let Some(t) = args.timeout_seconds
        && t > cmd.timeout_seconds
    {
        return Err(ToolError::invalid(format!(
            "timeout_seconds {t} is above {}'s timeout of {} s: a caller may lower a command's \
             timeout, never raise it",
            cmd.name, cmd.timeout_seconds
        ))
        .detail("command", cmd.name.clone()));
    }
    let mut argv = cmd.argv.clone();
    argv.extend(args.args);
    check_argv(&argv)?;
    let cwd = crate::path::quote::render(root.join(&cmd.cwd).as_os_str());
    let common = CommonArgs {
        cwd: Some(cwd),
        env: BTreeMap::new(),
        stdin: None,
        timeout_seconds: Some(args.timeout_seconds.unwrap_or(cmd.timeout_seconds)),
        yield_after_seconds: args.yield_after_seconds,
        max_output_bytes: args.max_output_bytes,
        tool: "run_command",
    };
    let os: Vec<OsString> = argv.iter().map(OsString::from).collect();
    run(rt, cx, os, argv, common).await
}

/// The error for a name `reg` does not have: the manifest's error when it could not be read
/// (the name may be one of its commands), else `not_found` with similar names.
fn unknown_command(reg: &Registry, name: &str, root: &str) -> ToolError {
    if let Some(e) = &reg.manifest_error {
        return e.clone();
    }
    let suffix = format!(".{name}");
    let similar: Vec<&str> = reg
        .commands
        .iter()
        .map(|c| c.name.as_str())
        .filter(|c| c.ends_with(&suffix) || c.eq_ignore_ascii_case(name))
        .take(10)
        .collect();
    let mut message = format!(
        "no registered command {name:?} in the project at {root} ({}; list_commands lists them)",
        count(reg.total as u64, "command", "commands")
    );
    if !similar.is_empty() {
        message.push_str(&format!("; did you mean {}?", similar.join(", ")));
    }
    ToolError::new(ToolErrorCode::NotFound, message).detail("name", name)
}
