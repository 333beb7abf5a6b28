//! Interactive process sessions: `start_process`, `read_process`, `write_process`,
//! `kill_process`, `list_processes` (see [`super::engine::sessions`]).

use std::{collections::BTreeMap, ffi::OsString, sync::Arc, time::Duration};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::{
    EXITED_SESSIONS_MAX, EXITED_SESSIONS_OUTPUT_MAX_BYTES, PROCESS_SESSIONS_MAX, PTY_DEFAULT_SIZE,
    RESULT_SUMMARY_MAX_CHARS, RESULT_TEXT_DEFAULT_CHARS, SESSION_READ_MAX_BYTES,
    SESSION_READ_WAIT_MAX, SESSION_RETENTION_AFTER_EXIT, SESSION_STDIN_WRITE_MAX_BYTES,
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
};

use super::{
    EXEC_HINTS, Processes, check_argv,
    engine::{
        Proc, StdinError, Stream,
        sessions::{Missing, Session},
    },
    spawn_error, spawn_spec,
};

/// Bounds of a pseudo-terminal's size (`rows`, `cols` of `start_process`).
const PTY_ROWS_MIN: u16 = 2;
const PTY_COLS_MIN: u16 = 10;
const PTY_SIDE_MAX: u16 = 1000;
/// Largest `wait_ms` of `read_process`: [`SESSION_READ_WAIT_MAX`] in milliseconds.
const WAIT_MS_MAX: u64 = SESSION_READ_WAIT_MAX.as_millis() as u64;

pub(crate) fn specs() -> Vec<ToolSpec> {
    let session_hints = Hints {
        read_only: false,
        destructive: false,
        idempotent: false,
        open_world: false,
    };
    vec![
        ToolSpec::structured(
            ToolMeta {
                name: "start_process",
                title: "Start an interactive process",
                description: "Start a program from an argv array (no shell) as a process session \
                              and return its session_id at once. With pty: true it runs on a real \
                              pseudo-terminal (rows x cols, default 24x80), so programs that check \
                              for a terminal (REPLs, curses tools) behave as in a terminal; stdout \
                              then carries the terminal output and stderr is empty. At most 8 \
                              sessions run at once; each keeps its newest 1 MiB per stream; exited \
                              sessions stay readable for 30 minutes, but at most 32 of them \
                              holding 16 MiB of output are kept (the one that exited first is \
                              discarded first). Sessions end with the server.",
                capability: Capability::ExecDirect,
                hints: EXEC_HINTS,
            },
            start_process,
        ),
        ToolSpec::structured_owned(
            ToolMeta {
                name: "read_process",
                title: "Read process output",
                description: "Read a process session's output from absolute byte offsets \
                              (stdout_offset, stderr_offset; pass the previous next_offset, named \
                              in the summary line, to get only new output, every byte once). The \
                              text is a summary line, then stdout exactly, then stderr after a \
                              [stderr] line. By default both streams share what fits in 45000 \
                              characters; max_bytes (per stream, at most 1 MiB) asks for more. \
                              dropped_bytes counts bytes no longer retained (the first 256 KiB and \
                              the newest 1 MiB are kept). Reports whether the process runs or its \
                              exit code. wait_ms (up to 30000) waits for new output or exit, \
                              returning as soon as either arrives; with wait_for_exit it waits for \
                              the exit.",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            read_process,
        )
        .larger_on_request(),
        ToolSpec::structured(
            ToolMeta {
                name: "write_process",
                title: "Write to a process",
                description: "Write text (at most 64 KiB) to a process session's stdin; \
                              close_stdin: true closes it afterwards (on a PTY it sends Ctrl-D). \
                              Include \"\\n\" to submit a line. If the process does not \
                              take the data within 5 s (it is not reading stdin), the call \
                              returns a timeout error with bytes_written.",
                capability: Capability::ExecDirect,
                hints: session_hints,
            },
            write_process,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "kill_process",
                title: "Stop a process",
                description: "Stop a process session and its whole process tree: SIGTERM, then \
                              SIGKILL after 2 s (at once with force: true). Returns the exit \
                              status. The session stays readable.",
                capability: Capability::ExecDirect,
                hints: Hints {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                    open_world: false,
                },
            },
            kill_process,
        ),
        ToolSpec::structured(
            ToolMeta {
                name: "list_processes",
                title: "List process sessions",
                description: "List this caller's process sessions (running, and exited within the \
                              last 30 minutes, at most 32 exited ones holding 16 MiB of output) \
                              with command, pid, state and output sizes.",
                capability: Capability::ExecDirect,
                hints: Hints::READ,
            },
            list_processes,
        ),
    ]
}

/// Arguments of `start_process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartProcessArgs {
    /// Program and arguments, e.g. ["python3", "-i"]. Not interpreted by a shell.
    argv: Vec<String>,
    /// Working directory, relative to the workspace (default: the workspace root).
    cwd: Option<String>,
    /// Environment variables to add or override.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Run on a pseudo-terminal.
    #[serde(default)]
    pty: bool,
    /// Terminal rows (pty only, default 24).
    #[schemars(range(min = PTY_ROWS_MIN, max = PTY_SIDE_MAX))]
    rows: Option<u16>,
    /// Terminal columns (pty only, default 80).
    #[schemars(range(min = PTY_COLS_MIN, max = PTY_SIDE_MAX))]
    cols: Option<u16>,
}

/// Result of `start_process`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct StartProcessOutput {
    /// Id for read_process, write_process, kill_process.
    session_id: String,
    /// Process id of the program.
    pid: u32,
    /// Runs on a pseudo-terminal.
    pty: bool,
}

async fn start_process(
    rt: Arc<Access>,
    args: StartProcessArgs,
    cx: CallContext,
) -> ToolResult<StartProcessOutput> {
    check_argv(&args.argv)?;
    if !args.pty && (args.rows.is_some() || args.cols.is_some()) {
        return Err(ToolError::invalid("rows and cols need pty: true"));
    }
    let rows = args.rows.unwrap_or(PTY_DEFAULT_SIZE.0);
    let cols = args.cols.unwrap_or(PTY_DEFAULT_SIZE.1);
    if !(PTY_ROWS_MIN..=PTY_SIDE_MAX).contains(&rows)
        || !(PTY_COLS_MIN..=PTY_SIDE_MAX).contains(&cols)
    {
        return Err(ToolError::invalid(format!(
            "a terminal of {rows} rows x {cols} columns: rows must be \
             {PTY_ROWS_MIN}-{PTY_SIDE_MAX} and cols {PTY_COLS_MIN}-{PTY_SIDE_MAX}"
        )));
    }
    let size = args.pty.then_some((rows, cols));
    let sessions = Processes::of(&rt)?.sessions();
    if sessions.running() >= PROCESS_SESSIONS_MAX {
        return Err(full());
    }
    let argv: Vec<OsString> = args.argv.iter().map(OsString::from).collect();
    let spec = spawn_spec(&rt, argv, args.cwd.as_deref(), &args.env, size)?;
    let proc = Proc::spawn(&spec, None, true).map_err(|e| spawn_error(&args.argv[0], &e))?;
    let session = sessions
        .insert(cx.principal.clone(), proc.clone(), args.argv, None)
        .map_err(|_| full())?;
    Ok(StartProcessOutput {
        session_id: session.id.clone(),
        pid: proc.pid(),
        pty: proc.is_pty(),
    })
}

impl TextView for StartProcessOutput {
    fn summary(&self) -> String {
        format!(
            "start_process: session {} (pid {}{}); read its output with read_process {{\"session_id\": \"{}\", \"wait_ms\": 1000}}",
            self.session_id,
            self.pid,
            if self.pty {
                ", on a pseudo-terminal"
            } else {
                ""
            },
            self.session_id
        )
    }
}

fn full() -> ToolError {
    ToolError::limit(format!(
        "{PROCESS_SESSIONS_MAX} process sessions are running; kill_process one or wait for one to exit"
    ))
    .retryable()
}

/// `not_found` for a session the caller cannot see, saying why when it is known.
fn session(rt: &Access, id: &str, cx: &CallContext) -> ToolResult<Arc<Session>> {
    Processes::of(rt)?.sessions().get(id, &cx.principal).map_err(|why| {
        let retention = SESSION_RETENTION_AFTER_EXIT.as_secs() / 60;
        let message = match why {
            Missing::Unknown => format!(
                "no process session {id} (exited sessions are kept for {retention} minutes, \
                 at most {EXITED_SESSIONS_MAX} of them)"
            ),
            Missing::Expired => format!(
                "process session {id} exited more than {retention} minutes ago and was discarded"
            ),
            Missing::Evicted => format!(
                "process session {id} had exited and was discarded to bound memory: at most \
                 {EXITED_SESSIONS_MAX} exited sessions holding {} MiB of output are kept, and \
                 the one that exited first goes first; read a session's output before starting \
                 many more",
                EXITED_SESSIONS_OUTPUT_MAX_BYTES >> 20
            ),
        };
        ToolError::new(ToolErrorCode::NotFound, message)
    })
}

/// Arguments of `read_process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadProcessArgs {
    /// The session.
    session_id: String,
    /// Absolute stdout byte offset to read from (default 0).
    #[serde(default)]
    stdout_offset: u64,
    /// Absolute stderr byte offset to read from (default 0).
    #[serde(default)]
    stderr_offset: u64,
    /// Most bytes per stream (at most 1048576). Default: both streams together what fits in a
    /// host's default result size (about 42000 bytes, shared by need).
    #[schemars(range(min = 1, max = SESSION_READ_MAX_BYTES))]
    max_bytes: Option<usize>,
    /// Milliseconds to wait for new output or exit when there is none yet (0-30000, default 0).
    #[serde(default)]
    #[schemars(range(min = 0, max = WAIT_MS_MAX))]
    wait_ms: u64,
    /// Wait (up to wait_ms) for the process to exit rather than for new output.
    #[serde(default)]
    wait_for_exit: bool,
}

/// Output of one stream read.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Chunk {
    /// The text (lossy UTF-8; never ends inside a character while the process runs).
    data: String,
    /// Absolute offset of the first byte of `data`.
    offset: u64,
    /// Offset to pass next time.
    next_offset: u64,
    /// Requested bytes that are no longer retained (only the newest 1 MiB is kept).
    dropped_bytes: u64,
    /// Bytes written to the stream in all.
    total_bytes: u64,
}

/// Result of `read_process` and `kill_process`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ProcessState {
    /// The session.
    session_id: String,
    /// Still running.
    running: bool,
    /// Exit code after a normal exit.
    exit_code: Option<i32>,
    /// Name of the signal that ended it, if any.
    signal: Option<String>,
    /// Its deadline (from run_process's timeout) terminated it.
    timed_out: bool,
    /// stdin can still be written.
    stdin_open: bool,
    /// Standard output (or the terminal output of a PTY session).
    stdout: Chunk,
    /// Standard error (always empty for a PTY session).
    stderr: Chunk,
    #[serde(skip)]
    limit: usize,
    #[serde(skip)]
    tool: &'static str,
}

impl ProcessState {
    fn state(&self) -> String {
        match (self.running, self.exit_code, &self.signal) {
            (true, ..) => "running".to_owned(),
            (false, Some(c), _) => format!("exited with code {c}"),
            (false, None, Some(sig)) => format!("ended by {sig}"),
            (false, None, None) => "ended".to_owned(),
        }
    }
}

/// `stdout bytes A-B of T` (with what was not retained), for summaries.
fn chunk_summary(name: &str, c: &Chunk) -> String {
    let mut s = if c.data.is_empty() {
        format!("{name}: nothing new ({} bytes in all)", c.total_bytes)
    } else {
        format!(
            "{name} bytes {}-{} of {}",
            c.offset, c.next_offset, c.total_bytes
        )
    };
    if c.dropped_bytes > 0 {
        s.push_str(&format!(
            " ({} bytes before it were not retained)",
            c.dropped_bytes
        ));
    }
    s
}

impl TextView for ProcessState {
    fn summary(&self) -> String {
        let mut s = format!(
            "{} {}: {}{}; {}; {}",
            self.tool,
            self.session_id,
            self.state(),
            if self.timed_out { " (timed out)" } else { "" },
            chunk_summary("stdout", &self.stdout),
            chunk_summary("stderr", &self.stderr)
        );
        if !self.stdout.data.is_empty() && !self.stderr.data.is_empty() {
            s.push_str(" (stderr after the [stderr] line)");
        }
        let more = self.stdout.next_offset < self.stdout.total_bytes
            || self.stderr.next_offset < self.stderr.total_bytes;
        let args = serde_json::json!({
            "session_id": self.session_id,
            "stdout_offset": self.stdout.next_offset,
            "stderr_offset": self.stderr.next_offset,
        });
        if more {
            s.push_str(&format!("; more: call read_process with {args}"));
        } else if self.running {
            s.push_str(&format!("; new output: call read_process with {args}"));
        } else {
            s.push_str("; all output read");
        }
        s
    }

    fn body(&self, out: &mut String) {
        out.push_str(&self.stdout.data);
        if !self.stderr.data.is_empty() {
            if !out.ends_with('\n') && !self.stdout.data.is_empty() {
                out.push('\n');
            }
            out.push_str("[stderr]\n");
            out.push_str(&self.stderr.data);
        }
    }

    fn text_limit(&self) -> usize {
        self.limit
    }
}

/// Room the two streams' text shares by default: the default body less the `[stderr]` line and a
/// line break.
const SHARED_BODY: usize = body_limit(RESULT_TEXT_DEFAULT_CHARS) - 16;

/// How many bytes each stream may take by default when `a` and `b` bytes are waiting: all of
/// both when they fit, else the smaller whole and the rest for the larger, else half each.
pub(crate) fn share(a: u64, b: u64, room: usize) -> (usize, usize) {
    let half = room / 2;
    let (a, b) = (a.min(room as u64) as usize, b.min(room as u64) as usize);
    if a + b <= room {
        (a.max(1), b.max(1))
    } else if a < half {
        (a.max(1), room - a)
    } else if b < half {
        (room - b, b.max(1))
    } else {
        (half, room - half)
    }
}

// By hand, not with `json!`, which serializes each field by reference (a copy of `data`).
impl From<Chunk> for Value {
    fn from(c: Chunk) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("data".into(), Value::String(c.data));
        m.insert("offset".into(), c.offset.into());
        m.insert("next_offset".into(), c.next_offset.into());
        m.insert("dropped_bytes".into(), c.dropped_bytes.into());
        m.insert("total_bytes".into(), c.total_bytes.into());
        Value::Object(m)
    }
}

impl From<ProcessState> for Value {
    fn from(p: ProcessState) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("session_id".into(), Value::String(p.session_id));
        m.insert("running".into(), p.running.into());
        m.insert("exit_code".into(), p.exit_code.into());
        m.insert("signal".into(), p.signal.into());
        m.insert("timed_out".into(), p.timed_out.into());
        m.insert("stdin_open".into(), p.stdin_open.into());
        m.insert("stdout".into(), p.stdout.into());
        m.insert("stderr".into(), p.stderr.into());
        Value::Object(m)
    }
}

async fn read_process(
    rt: Arc<Access>,
    args: ReadProcessArgs,
    cx: CallContext,
) -> ToolResult<ProcessState> {
    let s = session(&rt, &args.session_id, &cx)?;
    if args.max_bytes == Some(0) {
        return Err(ToolError::invalid("max_bytes must be at least 1"));
    }
    let explicit = args.max_bytes.map(|m| m.min(SESSION_READ_MAX_BYTES));
    let wait = Duration::from_millis(args.wait_ms).min(SESSION_READ_WAIT_MAX);
    if !wait.is_zero() {
        let deadline = tokio::time::Instant::now() + wait;
        let mut exit = s.proc.exit_watch();
        let mut out = s.proc.stdout.subscribe();
        let mut err = s.proc.stderr.subscribe();
        loop {
            if exit.borrow_and_update().is_some() {
                break;
            }
            let fresh = total(&s.proc.stdout) > args.stdout_offset
                || total(&s.proc.stderr) > args.stderr_offset;
            if fresh && !args.wait_for_exit {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                _ = cx.cancel.cancelled() => return Err(ToolError::cancelled()),
                r = exit.changed() => if r.is_err() { break },
                _ = out.changed() => {}
                _ = err.changed() => {}
            }
        }
    }
    // By default the two streams share one result's room, by need.
    let waiting = |stream: &Stream, offset: u64| {
        stream
            .with(|b| b.total().saturating_sub(offset))
            .unwrap_or(0)
    };
    let (max_out, max_err) = match explicit {
        Some(m) => (m, m),
        None => share(
            waiting(&s.proc.stdout, args.stdout_offset),
            waiting(&s.proc.stderr, args.stderr_offset),
            SHARED_BODY,
        ),
    };
    let mut st = state(
        &s,
        args.stdout_offset,
        args.stderr_offset,
        (max_out, max_err),
    )
    .await;
    st.limit = explicit.map_or(RESULT_TEXT_DEFAULT_CHARS, |m| {
        2 * m + RESULT_SUMMARY_MAX_CHARS + 64
    });
    Ok(st)
}

fn total(stream: &Stream) -> u64 {
    stream.with(|b| b.total()).unwrap_or(0)
}

async fn state(
    s: &Session,
    stdout_offset: u64,
    stderr_offset: u64,
    (max_out, max_err): (usize, usize),
) -> ProcessState {
    let exit = s.proc.exit();
    let chunk = |stream: &Stream, offset: u64, max: usize| {
        stream
            .with(|b| {
                let (start, bytes, dropped) = b.read(offset, max, exit.is_some());
                (start, bytes, dropped, b.total())
            })
            // Decoded after the buffer's lock is released: the reader task appends meanwhile.
            .map(|(start, bytes, dropped, total)| Chunk {
                offset: start,
                next_offset: start + bytes.len() as u64,
                data: crate::primitives::text::utf8_lossy(bytes),
                dropped_bytes: dropped,
                total_bytes: total,
            })
            .unwrap_or(Chunk {
                data: String::new(),
                offset,
                next_offset: offset,
                dropped_bytes: 0,
                total_bytes: 0,
            })
    };
    ProcessState {
        session_id: s.id.clone(),
        running: exit.is_none(),
        exit_code: exit.and_then(|e| e.code),
        signal: exit.and_then(|e| e.signal_name()),
        timed_out: s.timed_out.load(std::sync::atomic::Ordering::Relaxed),
        stdin_open: exit.is_none() && s.proc.stdin_open().await,
        stdout: chunk(&s.proc.stdout, stdout_offset, max_out),
        stderr: chunk(&s.proc.stderr, stderr_offset, max_err),
        limit: RESULT_TEXT_DEFAULT_CHARS,
        tool: "read_process",
    }
}

/// Arguments of `write_process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteProcessArgs {
    /// The session.
    session_id: String,
    /// Text to write (at most 64 KiB); "\n" submits a line.
    #[serde(default)]
    data: String,
    /// Close stdin after writing (a PTY gets Ctrl-D).
    #[serde(default)]
    close_stdin: bool,
}

/// Result of `write_process`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct WriteProcessOutput {
    /// Bytes written.
    bytes_written: usize,
    /// stdin can still be written.
    stdin_open: bool,
}

impl TextView for WriteProcessOutput {
    fn summary(&self) -> String {
        format!(
            "write_process: {} bytes written; stdin {}",
            self.bytes_written,
            if self.stdin_open { "open" } else { "closed" }
        )
    }
}

async fn write_process(
    rt: Arc<Access>,
    args: WriteProcessArgs,
    cx: CallContext,
) -> ToolResult<WriteProcessOutput> {
    if args.data.len() > SESSION_STDIN_WRITE_MAX_BYTES {
        return Err(ToolError::limit(format!(
            "data is {} bytes; at most {SESSION_STDIN_WRITE_MAX_BYTES} per write",
            args.data.len()
        )));
    }
    let s = session(&rt, &args.session_id, &cx)?;
    if s.proc.exit().is_some() {
        return Err(ToolError::conflict(format!(
            "process session {} has exited",
            s.id
        )));
    }
    s.proc
        .write_stdin(args.data.as_bytes(), args.close_stdin, &cx.cancel)
        .await
        .map_err(|e| {
            let message = format!("process session {}: {e}", s.id);
            match e {
                StdinError::Stalled { written, .. } => {
                    let e = ToolError::new(ToolErrorCode::Timeout, message)
                        .detail("bytes_written", written)
                        .retryable();
                    // Bytes that went in are an effect on the process.
                    if written > 0 {
                        e.with_side_effects()
                    } else {
                        e
                    }
                }
                StdinError::Cancelled { .. } => ToolError::cancelled(),
                StdinError::Closed | StdinError::Io(_) => ToolError::conflict(message),
            }
        })?;
    Ok(WriteProcessOutput {
        bytes_written: args.data.len(),
        stdin_open: s.proc.stdin_open().await,
    })
}

/// Arguments of `kill_process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KillProcessArgs {
    /// The session.
    session_id: String,
    /// SIGKILL at once instead of SIGTERM with a 2 s grace.
    #[serde(default)]
    force: bool,
}

async fn kill_process(
    rt: Arc<Access>,
    args: KillProcessArgs,
    cx: CallContext,
) -> ToolResult<ProcessState> {
    let s = session(&rt, &args.session_id, &cx)?;
    s.proc.terminate(args.force).await;
    let (o, e) = (total(&s.proc.stdout), total(&s.proc.stderr));
    let mut st = state(&s, o, e, (1, 1)).await;
    st.tool = "kill_process";
    Ok(st)
}

/// Arguments of `list_processes` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListProcessesArgs {}

/// One session in a listing.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SessionSummary {
    /// The session.
    session_id: String,
    /// The command as started.
    command: Vec<String>,
    /// Process id.
    pid: u32,
    /// Runs on a pseudo-terminal.
    pty: bool,
    /// Still running.
    running: bool,
    /// Exit code after a normal exit.
    exit_code: Option<i32>,
    /// Signal that ended it.
    signal: Option<String>,
    /// Start time, RFC 3339 UTC.
    started_at: String,
    /// Bytes written to stdout in all.
    stdout_bytes: u64,
    /// Bytes written to stderr in all.
    stderr_bytes: u64,
}

/// Result of `list_processes`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListProcessesOutput {
    /// Sessions, oldest first.
    sessions: Vec<SessionSummary>,
}

impl TextView for ListProcessesOutput {
    fn summary(&self) -> String {
        format!(
            "list_processes: {} (session, pid, state, stdout bytes, stderr bytes, command)",
            crate::call::text::count(self.sessions.len() as u64, "session", "sessions")
        )
    }

    fn body(&self, out: &mut String) {
        for s in &self.sessions {
            let state = match (s.running, s.exit_code, &s.signal) {
                (true, ..) => "running".to_owned(),
                (false, Some(c), _) => format!("exit {c}"),
                (false, None, Some(sig)) => sig.clone(),
                (false, None, None) => "ended".to_owned(),
            };
            let command = crate::call::text::cut(s.command.join(" "), 200, "…");
            out.push_str(&format!(
                "{}\t{}\t{state}\t{}\t{}\t{command}\n",
                s.session_id, s.pid, s.stdout_bytes, s.stderr_bytes
            ));
        }
    }
}

async fn list_processes(
    rt: Arc<Access>,
    _args: ListProcessesArgs,
    cx: CallContext,
) -> ToolResult<ListProcessesOutput> {
    let sessions = Processes::of(&rt)?
        .sessions()
        .list(&cx.principal)
        .into_iter()
        .map(|s| {
            let exit = s.proc.exit();
            SessionSummary {
                session_id: s.id.clone(),
                command: s.command.clone(),
                pid: s.proc.pid(),
                pty: s.proc.is_pty(),
                running: exit.is_none(),
                exit_code: exit.and_then(|e| e.code),
                signal: exit.and_then(|e| e.signal_name()),
                started_at: s.started_at.clone(),
                stdout_bytes: total(&s.proc.stdout),
                stderr_bytes: total(&s.proc.stderr),
            }
        })
        .collect();
    Ok(ListProcessesOutput { sessions })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: &str, offset: u64) -> Chunk {
        Chunk {
            data: data.to_owned(),
            offset,
            next_offset: offset + data.len() as u64,
            dropped_bytes: 3,
            total_bytes: 99,
        }
    }

    fn state(exited: bool) -> ProcessState {
        ProcessState {
            session_id: "proc-1".into(),
            running: !exited,
            exit_code: exited.then_some(2),
            signal: exited.then(|| "SIGTERM".to_owned()),
            timed_out: exited,
            stdin_open: !exited,
            stdout: chunk("out\n\"quoted\"", 7),
            stderr: chunk("", 0),
            limit: RESULT_TEXT_DEFAULT_CHARS,
            tool: "read_process",
        }
    }

    #[test]
    fn owned_conversion_matches_serde() {
        for exited in [false, true] {
            let by_serde = serde_json::to_value(state(exited)).unwrap();
            assert_eq!(Value::from(state(exited)), by_serde);
        }
    }
}
