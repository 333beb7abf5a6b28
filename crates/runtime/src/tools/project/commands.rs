//! `list_commands` and `run_command`: the registered commands of a project root (the
//! manifest's and the automatic aliases) and running one through `run_process`'s runner.

use std::{collections::BTreeMap, ffi::OsString, sync::Arc};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    COMMANDS_MAX, PROCESS_OUTPUT_MAX_BYTES, PROCESS_TIMEOUT_MAX, PROCESS_TIMEOUT_MIN,
    RESULT_TEXT_DEFAULT_CHARS,
};

use crate::{
    Access,
    call::{
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{Budget, TRAILER_RESERVE, TextView, body_limit, count, cut, trailer},
    },
    policy::Capability,
    tools::process::{CommonArgs, ProcessResult, check_argv, run},
};

use super::{
    dot,
    engine::{
        Problem, ProjectDir,
        manifest::{Command, Registry, alias_shaped},
    },
    nested_note, project_of, read_project, run_hint,
};

/// Characters of one command's text in `list_commands` (its argv may be long); a longer one
/// is cut there, and structuredContent has it whole.
const COMMAND_TEXT_MAX: usize = 2_000;

/// Arguments of `list_commands`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListCommandsArgs {
    /// A directory (or file) inside the project, relative to the workspace (default ".").
    /// Commands come from its project root only.
    #[serde(default = "dot")]
    path: String,
    /// Index of the first command to list (0-based; default 0): next_offset of the previous
    /// page.
    #[serde(default)]
    offset: usize,
}

/// Result of `list_commands`: one page of the project's commands.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct CommandList {
    /// The project root, as paths are shown.
    project_root: String,
    /// Index of this page's first command among all (0-based).
    offset: usize,
    /// This page: the manifest's commands (by name), then aliases (cargo, package.json,
    /// makefile); at most 512, and as many as the text shows whole.
    commands: Vec<Command>,
    /// Commands in all.
    total: usize,
    /// Pass as offset for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<usize>,
    /// Whether this caller's policy lets it call run_command (it needs an exec mode).
    run_command_allowed: bool,
    /// Project files between the project root and path (a nested package.json, Cargo.toml,
    /// makefile, ...) that are not read: commands come from the project root only.
    nested_project_files: Vec<String>,
    /// What could not be used, with why (a manifest that failed to parse, a manifest command
    /// whose cwd this caller cannot use, a package.json that is not JSON, a makefile too
    /// large, names starting with "-"); what is valid is still listed.
    problems: Vec<Problem>,
    #[serde(skip)]
    body: String,
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
    let project = project_of(ws, &args.path)?;
    let read = read_project(&rt, &project).await?;
    let reg = read.reg;
    // The manifest's problems, then those of the files aliases come from (package.json, the
    // makefile), which detection found.
    let mut problems = reg.problems.clone();
    problems.extend(read.facts.problems);
    let mut list = CommandList {
        project_root: ws.display(&project.root),
        offset: args.offset,
        commands: Vec::new(),
        total: reg.total(),
        next_offset: None,
        run_command_allowed: rt.policy().allows(Capability::ExecDirect),
        nested_project_files: read.nested,
        problems,
        body: String::new(),
    };
    page(&mut list, &reg);
    Ok(list)
}

/// Fills `list`'s page from `reg`, from `list.offset`: commands while their text fits in the
/// result's text (at least one), at most [`COMMANDS_MAX`]; then the notes and problems.
fn page(list: &mut CommandList, reg: &Registry) {
    let mut budget =
        Budget::new(body_limit(RESULT_TEXT_DEFAULT_CHARS).saturating_sub(TRAILER_RESERVE));
    let mut body = String::new();
    for c in reg.commands_from(list.offset) {
        let text = cut(
            c.lines(),
            COMMAND_TEXT_MAX,
            "… [cut here; structuredContent has this command whole]\n",
        );
        if list.commands.len() == COMMANDS_MAX
            || (!budget.take(text.len()) && !list.commands.is_empty())
        {
            list.next_offset = Some(list.offset + list.commands.len());
            break;
        }
        body.push_str(&text);
        list.commands.push(c);
    }
    let mut notes = Vec::new();
    let note = nested_note(&list.nested_project_files, &list.project_root);
    if !note.is_empty() {
        notes.push(note);
    }
    notes.extend(
        list.problems
            .iter()
            .map(|p| format!("problem: {}: {}", p.path, p.message)),
    );
    trailer(&mut body, &notes);
    list.body = body;
}

impl Command {
    /// The command's lines in a text: `name — description`, then argv, cwd, timeout, extra
    /// arguments and provenance, and why it cannot run when its cwd cannot be used.
    fn lines(&self) -> String {
        let mut s = format!(
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
        );
        if let Some(why) = &self.cwd_problem {
            s.push_str(&format!("  cannot run here: cwd {why}\n"));
        }
        s
    }
}

impl TextView for CommandList {
    fn summary(&self) -> String {
        let shown = self.commands.len();
        let mut s = format!(
            "list_commands {}: {}",
            self.project_root,
            count(self.total as u64, "command", "commands")
        );
        if shown < self.total {
            if shown == 0 {
                s.push_str(&format!(", none from offset {}", self.offset));
            } else {
                s.push_str(&format!(
                    ", {}-{} here",
                    self.offset + 1,
                    self.offset + shown
                ));
            }
        }
        if !self.nested_project_files.is_empty() {
            s.push_str(&format!(
                "; from the project root only ({} nearer to path not read)",
                count(
                    self.nested_project_files.len() as u64,
                    "project file",
                    "project files"
                )
            ));
        }
        if !self.problems.is_empty() {
            s.push_str(&format!(
                "; {} (after the commands)",
                count(self.problems.len() as u64, "problem", "problems")
            ));
        }
        s.push_str("; ");
        s.push_str(run_hint(
            self.run_command_allowed,
            "run one with run_command {\"name\": NAME}",
        ));
        match self.next_offset {
            Some(n) => s.push_str(&format!(
                "; more: repeat the call with the same arguments and \"offset\": {n}"
            )),
            None => s.push_str("; complete"),
        }
        s
    }

    fn body(&self, out: &mut String) {
        out.push_str(&self.body);
    }
}

// === run_command ===

pub(super) async fn run_command(
    rt: Arc<Access>,
    args: RunCommandArgs,
    cx: CallContext,
) -> ToolResult<ProcessResult> {
    let ws = rt.workspace();
    let project = project_of(ws, &args.path)?;
    let read = read_project(&rt, &project).await?;
    let Some(cmd) = read.reg.find(&args.name) else {
        let root = ws.display(&project.root);
        return Err(unknown_command(&read.reg, &args.name, &root, &read.nested));
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
    // The cwd as the caller's own paths are shown (workspace-relative for a confined caller):
    // checked as list_commands checks it (the same reason), then resolved again by the
    // runner by the caller's rules.
    let dir = ProjectDir::new(ws, &project.root);
    if cmd.cwd != "."
        && let Some(e) = dir.dir_error(&cmd.cwd)
    {
        return Err(e.detail("command", cmd.name.clone()));
    }
    let cwd = dir.display(&cmd.cwd);
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

/// Longest name an error about an unknown command repeats, in bytes.
const NAME_SHOWN_MAX: usize = 300;
/// Names an error about an unknown command suggests.
const SIMILAR_MAX: usize = 10;

/// The error for a name `reg` does not have: `not_found` with similar names, saying that
/// commands come from the project root `root` only when `nested` names project files nearer
/// to the path. When the manifest could not be read, the error also says so (the name may be
/// one of its commands, which cannot run): its code is then the manifest's, except for a name
/// of an alias's shape (`npm.x`, `make.x`, ...), which stays `not_found`.
fn unknown_command(reg: &Registry, name: &str, root: &str, nested: &[String]) -> ToolError {
    let suffix = format!(".{name}");
    let similar: Vec<String> = reg
        .names()
        .map(|(n, _)| n)
        .filter(|c| c.ends_with(&suffix) || c.eq_ignore_ascii_case(name))
        .take(SIMILAR_MAX)
        .collect();
    let shown = cut(name.replace(char::is_control, " "), NAME_SHOWN_MAX, "…");
    let mut message = format!(
        "no registered command {shown:?} in the project at {root} ({}; list_commands lists them)",
        count(reg.total() as u64, "command", "commands")
    );
    if !similar.is_empty() {
        message.push_str(&format!("; did you mean {}?", similar.join(", ")));
    }
    let note = nested_note(nested, root);
    if !note.is_empty() {
        message.push_str("; ");
        message.push_str(&note);
    }
    let code = match &reg.manifest_error {
        Some(e) => {
            message.push_str(&format!(
                "; and the manifest is broken, so its commands cannot run: {}",
                e.message()
            ));
            if alias_shaped(name) {
                ToolErrorCode::NotFound
            } else {
                e.code()
            }
        }
        None => ToolErrorCode::NotFound,
    };
    ToolError::new(code, message).detail("name", shown)
}
