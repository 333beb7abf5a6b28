//! One-shot processes: `run_process` (argv, no shell) and `exec_command` (a shell command line).
//!
//! A call waits for the process tree, up to `timeout_seconds`; on timeout the tree is terminated
//! and the output so far is returned with `timed_out: true`. With a foreground budget
//! (`yield_after_seconds`, or the server default for remote callers) a process still running at
//! the budget becomes a process session and the call returns its id with the output so far; the
//! process keeps its deadline. Cancellation terminates the tree. Long calls with a progress token
//! report the elapsed time and the newest output line.
//!
//! The process session tools (`start_process`, ...) are in `session`; spawning, capture, tree
//! termination and the session table are the `engine`; what the runtime keeps for them is
//! `state` (`Processes`). The [`watchdog`] is public: the binary runs it.

use std::{collections::BTreeMap, ffi::OsString, sync::Arc, time::Duration};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::{
    PROCESS_COMMAND_MAX_BYTES, PROCESS_OUTPUT_MAX_BYTES, PROCESS_STDIN_MAX_BYTES,
    PROCESS_TIMEOUT_DEFAULT, PROCESS_TIMEOUT_MAX, PROCESS_TIMEOUT_MIN, RESULT_SUMMARY_MAX_CHARS,
    RESULT_TEXT_DEFAULT_CHARS,
};

use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::{TextView, body_limit},
    },
    policy::Capability,
    tools::family::Family,
};

pub(crate) mod engine;
pub(super) mod session;
mod state;

pub(crate) use engine::check_argv;
/// The watchdog that ends what a server started when the server is gone (see the module).
pub use engine::watchdog;
use engine::{Proc, Spawn, env, sessions::Sessions};
pub(crate) use state::Processes;

/// The family's entry in the registry: `run_process`, `exec_command` and the process session
/// tools ([`session`]), and what the runtime keeps for them ([`Processes`]).
pub(crate) const FAMILY: Family = Family {
    specs: all_specs,
    state: Some(Processes::make),
    resources: None,
    prompts: None,
};

/// The family's catalog entries: the one-shot tools, then the process session tools.
fn all_specs() -> Vec<ToolSpec> {
    let mut v = specs();
    v.extend(session::specs());
    v
}

/// Hints of tools that run arbitrary programs.
pub(crate) const EXEC_HINTS: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: false,
    open_world: true,
};

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "run_process",
                title: "Run a program",
                description: "Run a program from an argv array (no shell: $, ;, | and quotes are \
                              passed literally) in the workspace or cwd, wait for it and return \
                              exit code or signal, duration and stdout/stderr (the text: a summary \
                              line, stdout, then stderr after a [stderr] line). By default both \
                              streams share what fits in 45000 characters, head and tail kept \
                              around a marker; max_output_bytes (at most 512 KiB per stream) asks \
                              for more. Output left out stays readable: the result names a \
                              session_id and offsets for read_process. timeout_seconds 1-600 \
                              (default 120): on timeout the whole process tree is terminated and \
                              the output so far is returned with timed_out: true. With \
                              yield_after_seconds, a process still running then becomes a process \
                              session: the call returns session_id and the output so far with \
                              still_running: true. Cancelling the call kills the process tree.",
                capability: Capability::ExecDirect,
                hints: EXEC_HINTS,
            },
            run_process,
        )
        .larger_on_request(),
        ToolSpec::structured(
            ToolMeta {
                name: "exec_command",
                title: "Run a shell command",
                description: "Run a shell command line with /bin/sh -c (pipes, redirections, \
                              variables work) and return as run_process does: exit code, \
                              bounded stdout/stderr (max_output_bytes), timed_out, and a \
                              session_id when it outlives yield_after_seconds or its output was \
                              cut (read_process reads the rest).",
                capability: Capability::ExecShell,
                hints: EXEC_HINTS,
            },
            exec_command,
        )
        .larger_on_request(),
    ]
}

/// Arguments of `run_process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunProcessArgs {
    /// Program and arguments, e.g. ["cargo", "test", "--lib"]. Not interpreted by a shell.
    argv: Vec<String>,
    /// Working directory, relative to the workspace (default: the workspace root).
    cwd: Option<String>,
    /// Environment variables to add or override.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Text written to the process's stdin, then closed (at most 1 MiB). Default: no stdin.
    stdin: Option<String>,
    /// Seconds before the process tree is terminated: 1-600, default 120.
    #[schemars(range(min = PROCESS_TIMEOUT_MIN.as_secs(), max = PROCESS_TIMEOUT_MAX.as_secs()))]
    timeout_seconds: Option<u64>,
    /// Return after this many seconds if the process is still running, leaving it as a process
    /// session (1-600); continue with read_process from stdout_bytes/stderr_bytes.
    #[schemars(range(min = PROCESS_TIMEOUT_MIN.as_secs(), max = PROCESS_TIMEOUT_MAX.as_secs()))]
    yield_after_seconds: Option<u64>,
    /// Most bytes of each stream in the result, head and tail around a marker (at most 524288).
    /// Default: both streams together what fits in a host's default result size (about 42000
    /// bytes, shared by need). Output left out stays readable with read_process (session_id).
    #[schemars(range(min = 1, max = PROCESS_OUTPUT_MAX_BYTES))]
    max_output_bytes: Option<usize>,
}

/// Arguments of `exec_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecCommandArgs {
    /// A shell command line, run with /bin/sh -c.
    command: String,
    /// Working directory, relative to the workspace (default: the workspace root).
    cwd: Option<String>,
    /// Environment variables to add or override.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Text written to the process's stdin, then closed (at most 1 MiB). Default: no stdin.
    stdin: Option<String>,
    /// Seconds before the process tree is terminated: 1-600, default 120.
    #[schemars(range(min = PROCESS_TIMEOUT_MIN.as_secs(), max = PROCESS_TIMEOUT_MAX.as_secs()))]
    timeout_seconds: Option<u64>,
    /// Return after this many seconds if the process is still running, leaving it as a process
    /// session (1-600); continue with read_process from stdout_bytes/stderr_bytes.
    #[schemars(range(min = PROCESS_TIMEOUT_MIN.as_secs(), max = PROCESS_TIMEOUT_MAX.as_secs()))]
    yield_after_seconds: Option<u64>,
    /// Most bytes of each stream in the result, head and tail around a marker (at most 524288).
    /// Default: both streams together what fits in a host's default result size (about 42000
    /// bytes, shared by need). Output left out stays readable with read_process (session_id).
    #[schemars(range(min = 1, max = PROCESS_OUTPUT_MAX_BYTES))]
    max_output_bytes: Option<usize>,
}

/// What the one-shot tools (`run_process`, `exec_command`, and `run_command` of the project
/// family) share once their argv is known; each field as the tools' arguments document it.
pub(crate) struct CommonArgs {
    /// Working directory as a caller's path (resolved and confined by [`spawn_spec`]); `None`
    /// for the workspace root.
    pub(crate) cwd: Option<String>,
    /// Environment variables to add or override.
    pub(crate) env: BTreeMap<String, String>,
    /// Text written to stdin, then closed (at most `PROCESS_STDIN_MAX_BYTES`).
    pub(crate) stdin: Option<String>,
    /// Seconds before the tree is terminated (1-600; default 120).
    pub(crate) timeout_seconds: Option<u64>,
    /// Seconds of foreground before the process becomes a process session (at least 1).
    pub(crate) yield_after_seconds: Option<u64>,
    /// Most bytes of each stream in the result (at least 1).
    pub(crate) max_output_bytes: Option<usize>,
    /// The tool's name, shown in the result's summary line.
    pub(crate) tool: &'static str,
}

macro_rules! common_args {
    ($a:expr, $tool:expr) => {
        CommonArgs {
            tool: $tool,
            cwd: $a.cwd,
            env: $a.env,
            stdin: $a.stdin,
            timeout_seconds: $a.timeout_seconds,
            yield_after_seconds: $a.yield_after_seconds,
            max_output_bytes: $a.max_output_bytes,
        }
    };
}

/// Result of a one-shot process call.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ProcessResult {
    /// Exit code, when the process exited normally (null while running or when killed).
    exit_code: Option<i32>,
    /// Name of the signal that killed it (e.g. "SIGKILL"), if any.
    signal: Option<String>,
    /// Milliseconds from start to exit (or to the return, while running).
    duration_ms: u64,
    /// Standard output (lossy UTF-8), head and tail around a marker when longer than this
    /// result's share (max_output_bytes).
    stdout: String,
    /// Standard error, bounded the same way.
    stderr: String,
    /// Bytes written to stdout in all.
    stdout_bytes: u64,
    /// Bytes written to stderr in all.
    stderr_bytes: u64,
    /// stdout was cut to head and tail.
    stdout_truncated: bool,
    /// stderr was cut to head and tail.
    stderr_truncated: bool,
    /// Where the stdout bytes left out of `stdout` start: read them with read_process
    /// (session_id, stdout_offset). Absent when nothing was left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout_next_offset: Option<u64>,
    /// Where the stderr bytes left out of `stderr` start (see stdout_next_offset).
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr_next_offset: Option<u64>,
    /// The timeout terminated the process tree.
    timed_out: bool,
    /// The process is still running as session `session_id`.
    still_running: bool,
    /// The process session to continue with read_process (and, while it runs, write_process or
    /// kill_process). Also set for a process that exited when its output was cut: its output
    /// stays readable as an exited session (see read_process).
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(skip)]
    limit: usize,
    /// `run_process`, `exec_command` or `run_command`.
    #[serde(skip)]
    tool: &'static str,
}

impl TextView for ProcessResult {
    fn summary(&self) -> String {
        let state = match (self.still_running, self.exit_code, &self.signal) {
            (true, ..) => "still running".to_owned(),
            (false, Some(c), _) => format!("exited with code {c}"),
            (false, None, Some(sig)) => format!("ended by {sig}"),
            (false, None, None) => "ended".to_owned(),
        };
        let stream = |name: &str, shown: &str, total: u64, cut: bool| {
            if cut {
                format!("{name} {total} bytes (head and tail shown)")
            } else if shown.len() as u64 != total {
                // The text is UTF-8: bytes that are not are shown as U+FFFD.
                format!("{name} {total} bytes (not UTF-8; shown with replacement characters)")
            } else {
                format!("{name} {total} bytes")
            }
        };
        let mut s = format!(
            "{}: {state}{} after {} ms; {}; {}",
            self.tool,
            if self.timed_out { " (timed out)" } else { "" },
            self.duration_ms,
            stream(
                "stdout",
                &self.stdout,
                self.stdout_bytes,
                self.stdout_truncated
            ),
            stream(
                "stderr",
                &self.stderr,
                self.stderr_bytes,
                self.stderr_truncated
            ),
        );
        if !self.stdout.is_empty() && !self.stderr.is_empty() {
            s.push_str(" (stderr after the [stderr] line)");
        }
        match &self.session_id {
            Some(id) => {
                let args = serde_json::json!({
                    "session_id": id,
                    "stdout_offset": self.stdout_next_offset.unwrap_or(self.stdout_bytes),
                    "stderr_offset": self.stderr_next_offset.unwrap_or(self.stderr_bytes),
                });
                let what = if self.still_running {
                    "output from here on"
                } else {
                    "the bytes left out"
                };
                s.push_str(&format!("; {what}: call read_process with {args}"));
            }
            None if self.stdout_truncated || self.stderr_truncated => {
                s.push_str("; the bytes left out were not kept (the session table is full)");
            }
            None => s.push_str("; complete"),
        }
        s
    }

    fn body(&self, out: &mut String) {
        out.push_str(&self.stdout);
        if !self.stderr.is_empty() {
            if !out.ends_with('\n') && !self.stdout.is_empty() {
                out.push('\n');
            }
            out.push_str("[stderr]\n");
            out.push_str(&self.stderr);
        }
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

async fn run_process(
    rt: Arc<Access>,
    args: RunProcessArgs,
    cx: CallContext,
) -> ToolResult<ProcessResult> {
    check_argv(&args.argv)?;
    let argv: Vec<OsString> = args.argv.iter().map(OsString::from).collect();
    let display = args.argv.clone();
    run(rt, cx, argv, display, common_args!(args, "run_process")).await
}

async fn exec_command(
    rt: Arc<Access>,
    args: ExecCommandArgs,
    cx: CallContext,
) -> ToolResult<ProcessResult> {
    if args.command.trim().is_empty() {
        return Err(ToolError::invalid("command is empty"));
    }
    if args.command.len() > PROCESS_COMMAND_MAX_BYTES || args.command.contains('\0') {
        return Err(ToolError::invalid(format!(
            "command must be at most {PROCESS_COMMAND_MAX_BYTES} bytes without NUL"
        )));
    }
    let argv = vec!["/bin/sh".into(), "-c".into(), OsString::from(&args.command)];
    let display = vec!["/bin/sh".to_owned(), "-c".to_owned(), args.command.clone()];
    run(rt, cx, argv, display, common_args!(args, "exec_command")).await
}

/// Builds the spawn spec: confined cwd and the policy's environment.
pub(crate) fn spawn_spec(
    rt: &Access,
    argv: Vec<OsString>,
    cwd: Option<&str>,
    env_additions: &BTreeMap<String, String>,
    pty: Option<(u16, u16)>,
) -> ToolResult<Spawn> {
    env::validate(env_additions).map_err(ToolError::invalid)?;
    let ws = rt.workspace();
    let cwd = ws.resolve(cwd.unwrap_or("."))?;
    let problem = match std::fs::metadata(cwd.real()) {
        Ok(m) if m.is_dir() => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist"),
        _ => Some("not a directory"),
    };
    if let Some(problem) = problem {
        return Err(ToolError::invalid(format!(
            "cwd {}: {problem}",
            ws.display(cwd.real())
        )));
    }
    let env = env::child_env(
        rt.policy().full_env(),
        Processes::of(rt)?.scratch(),
        pty.is_some(),
        env_additions,
    )
    .map_err(|e| ToolError::io("the private directories of the process", &e))?;
    Ok(Spawn {
        argv,
        cwd: cwd.real().to_owned(),
        env,
        pty,
    })
}

/// Maps a spawn failure to a tool error naming the program. "Not found" says where the program
/// was looked for: a name with a `/` is a path (relative to the cwd), any other name is looked
/// up along the child's `PATH`; either way an existing file whose `#!` interpreter is missing
/// fails the same way (`execve(2)` gives `ENOENT`).
pub(crate) fn spawn_error(program: &str, e: &std::io::Error) -> ToolError {
    match e.kind() {
        std::io::ErrorKind::NotFound if program.contains('/') => ToolError::new(
            ToolErrorCode::NotFound,
            format!("{program}: no such file, or the interpreter its `#!` line names is missing"),
        ),
        std::io::ErrorKind::NotFound => ToolError::new(
            ToolErrorCode::NotFound,
            format!(
                "{program}: program not found (looked in PATH; a file found whose `#!` \
                 interpreter is missing counts as not found)"
            ),
        ),
        std::io::ErrorKind::PermissionDenied => ToolError::new(
            ToolErrorCode::PermissionDenied,
            format!("{program}: permission denied"),
        ),
        _ => ToolError::new(ToolErrorCode::ExecutionFailed, format!("{program}: {e}")),
    }
}

/// Runs `argv` (already checked with [`check_argv`]; `display` is how it is shown) as a one-shot
/// process: the timeout, cancellation, progress and yield to a process session of the module
/// docs, with `common`'s settings.
///
/// # Errors
/// `invalid_request` for a timeout outside 1-600, a zero `yield_after_seconds` or
/// `max_output_bytes`, a bad environment variable or a cwd that is missing or not a directory;
/// `limit_exceeded` for stdin over `PROCESS_STDIN_MAX_BYTES`; the cwd's resolution errors
/// (`path_boundary`, ...); `not_found`/`permission_denied`/`execution_failed` when the program
/// cannot start; `cancelled`.
pub(crate) async fn run(
    rt: Arc<Access>,
    cx: CallContext,
    argv: Vec<OsString>,
    display: Vec<String>,
    common: CommonArgs,
) -> ToolResult<ProcessResult> {
    let timeout = match common.timeout_seconds {
        None => PROCESS_TIMEOUT_DEFAULT,
        Some(s) => {
            let t = Duration::from_secs(s);
            if !(PROCESS_TIMEOUT_MIN..=PROCESS_TIMEOUT_MAX).contains(&t) {
                return Err(ToolError::invalid(
                    "timeout_seconds must be between 1 and 600",
                ));
            }
            t
        }
    };
    let yield_after = match common.yield_after_seconds {
        Some(0) => return Err(ToolError::invalid("yield_after_seconds must be at least 1")),
        Some(s) => Some(Duration::from_secs(s)),
        None if cx.in_task => None,
        None => rt.default_yield_after(),
    };
    let stdin = match common.stdin {
        Some(s) if s.len() > PROCESS_STDIN_MAX_BYTES => {
            return Err(ToolError::limit(format!(
                "stdin is {} bytes; at most {PROCESS_STDIN_MAX_BYTES}",
                s.len()
            )));
        }
        Some(s) => Some(s.into_bytes()),
        None => None,
    };
    if common.max_output_bytes == Some(0) {
        return Err(ToolError::invalid("max_output_bytes must be at least 1"));
    }
    let max_output = common.max_output_bytes;
    let sessions = Processes::of(&rt)?.sessions();
    let spec = spawn_spec(&rt, argv, common.cwd.as_deref(), &common.env, None)?;
    let proc = Proc::spawn(&spec, stdin, false).map_err(|e| spawn_error(&display[0], &e))?;
    let started = proc.started();
    let deadline = started + timeout;
    let yield_at = yield_after.map(|d| started + d).filter(|&y| y < deadline);
    let one_shot = OneShot {
        tool: common.tool,
        sessions,
        cx: &cx,
        max_output_bytes: max_output,
        display: &display,
    };
    let mut yield_refused = false;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            exit = proc.wait() => {
                return Ok(result(&one_shot, &proc, Some(exit), false, None));
            }
            _ = tokio::time::sleep_until(deadline) => {
                let exit = proc.terminate(false).await;
                return Ok(result(&one_shot, &proc, Some(exit), true, None));
            }
            _ = cx.cancel.cancelled() => {
                proc.terminate(false).await;
                return Err(ToolError::cancelled());
            }
            _ = tokio::time::sleep_until(yield_at.unwrap_or(deadline)), if yield_at.is_some() && !yield_refused => {
                match sessions.insert(cx.principal.clone(), proc.clone(), display.clone(), Some(deadline)) {
                    Ok(session) => return Ok(result(&one_shot, &proc, None, false, Some(session.id.clone()))),
                    Err(_) => {
                        tracing::info!("process session table full; the call stays in the foreground");
                        yield_refused = true;
                    }
                }
            }
            _ = tick.tick(), if cx.progress.is_enabled() => {
                let elapsed = started.elapsed().as_secs();
                let line = proc
                    .stdout
                    .with(|b| b.last_line())
                    .filter(|l| !l.is_empty())
                    .or_else(|| proc.stderr.with(|b| b.last_line()))
                    .unwrap_or_default();
                cx.progress.report(elapsed as f64, Some(timeout.as_secs() as f64), || {
                    if line.is_empty() { format!("running for {elapsed} s") } else { line.clone() }
                });
            }
        }
    }
}

/// What a one-shot call's result needs from the call.
struct OneShot<'a> {
    tool: &'static str,
    sessions: &'a Sessions,
    cx: &'a CallContext,
    max_output_bytes: Option<usize>,
    display: &'a [String],
}

/// Room the two streams (and the head/tail markers) share in a default result.
const SHARED_OUTPUT: usize = body_limit(RESULT_TEXT_DEFAULT_CHARS) - 400;

/// The result of a one-shot call. Output cut to fit is kept readable: a process that already
/// has a session (it yielded) keeps it; a finished one becomes an exited session of `owner`
/// when there is room, so read_process reads what was left out.
fn result(
    call: &OneShot<'_>,
    proc: &Arc<Proc>,
    exit: Option<engine::Exit>,
    timed_out: bool,
    session: Option<String>,
) -> ProcessResult {
    let (sessions, cx, max_output_bytes, display) =
        (call.sessions, call.cx, call.max_output_bytes, call.display);
    let totals = (
        proc.stdout.with(|b| b.total()).unwrap_or(0),
        proc.stderr.with(|b| b.total()).unwrap_or(0),
    );
    let (max_out, max_err) = match max_output_bytes {
        Some(m) => {
            let m = m.clamp(1, PROCESS_OUTPUT_MAX_BYTES);
            (m, m)
        }
        None => session::share(totals.0, totals.1, SHARED_OUTPUT),
    };
    let view = |stream: &engine::Stream, max: usize| {
        stream.with(|b| b.head_and_tail(max)).unwrap_or_default()
    };
    let (stdout, stdout_truncated, out_head) = view(&proc.stdout, max_out);
    let (stderr, stderr_truncated, err_head) = view(&proc.stderr, max_err);
    let cut = stdout_truncated || stderr_truncated;
    let session = match session {
        Some(id) => Some(id),
        None if cut => sessions
            .insert(cx.principal.clone(), proc.clone(), display.to_vec(), None)
            .ok()
            .map(|s| s.id.clone()),
        None => None,
    };
    ProcessResult {
        exit_code: exit.and_then(|e| e.code),
        signal: exit.and_then(|e| e.signal_name()),
        duration_ms: proc.started().elapsed().as_millis() as u64,
        stdout,
        stderr,
        stdout_bytes: totals.0,
        stderr_bytes: totals.1,
        stdout_truncated,
        stderr_truncated,
        stdout_next_offset: stdout_truncated.then_some(out_head),
        stderr_next_offset: stderr_truncated.then_some(err_head),
        timed_out,
        still_running: exit.is_none(),
        session_id: session,
        tool: call.tool,
        limit: max_output_bytes.map_or(RESULT_TEXT_DEFAULT_CHARS, |m| {
            2 * m.min(PROCESS_OUTPUT_MAX_BYTES) + 2 * 200 + RESULT_SUMMARY_MAX_CHARS + 64
        }),
    }
}
