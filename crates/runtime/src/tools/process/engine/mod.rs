//! The engine of the process tools: child processes — spawning (argv or PTY), bounded capture,
//! waiting, stdin, tree termination — and the process session table ([`sessions`]).
//!
//! A [`Proc`] is one running child and everything it produced. Its stdout and stderr are pumped
//! into [`output::StreamBuf`]s (first 256 KiB kept for one-shot results, newest 1 MiB kept with
//! absolute offsets for session reads). When the leader exits, its pipes get a short drain, then
//! whatever is left of its tree is terminated, so nothing a call started outlives it; only then is
//! the exit published. Dropping a `Proc` that has not finished kills its tree.

pub(crate) mod env;
pub(crate) mod output;
mod program;
pub(crate) mod sessions;
mod start;
pub(crate) mod tree;
pub mod watchdog;

use std::{
    ffi::OsString,
    io::{Read, Write},
    os::fd::AsFd,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use lock::Lock;

use nix::sys::signal::Signal;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWriteExt},
    sync::watch,
};

use crate::limits::{
    PROCESS_ARGV_MAX, PROCESS_COMMAND_MAX_BYTES, PROCESS_OUTPUT_MAX_BYTES,
    SESSION_OUTPUT_RETAINED_BYTES, TERMINATION_GRACE,
};

use output::StreamBuf;

use crate::call::error::{ToolError, ToolResult};

/// How long the pipes may stay open after the leader exited before the tree is cleaned up.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// The shell `execvp(3)` runs a file with when the kernel cannot run it (glibc's
/// `_PATH_BSHELL`).
const SHELL: &str = "/bin/sh";
/// Read size of the output pumps.
const PUMP_CHUNK: usize = 64 * 1024;
/// How long a stdin write waits for the process to take the data (a full pipe or terminal
/// buffer means the process is not reading).
pub(crate) const STDIN_WRITE_WAIT: Duration = Duration::from_secs(5);

/// What to start.
#[derive(Debug, Clone)]
pub(crate) struct Spawn {
    pub(crate) argv: Vec<OsString>,
    pub(crate) cwd: PathBuf,
    pub(crate) env: Vec<(OsString, OsString)>,
    /// `Some((rows, cols))` for a pseudo-terminal; stdout and stderr are then one stream.
    pub(crate) pty: Option<(u16, u16)>,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exit {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
}

impl Exit {
    /// The signal's name (`SIGKILL`), when killed by one.
    pub(crate) fn signal_name(&self) -> Option<String> {
        self.signal.map(|s| {
            Signal::try_from(s)
                .map(|sig| sig.as_str().to_owned())
                .unwrap_or_else(|_| format!("signal {s}"))
        })
    }
}

/// One output stream shared between its pump and readers.
#[derive(Debug)]
pub(crate) struct Stream {
    buf: Lock<StreamBuf>,
    /// Bumped on every append; readers wait on it.
    changed: watch::Sender<u64>,
}

impl Stream {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            buf: Lock::new(StreamBuf::new(
                PROCESS_OUTPUT_MAX_BYTES / 2,
                SESSION_OUTPUT_RETAINED_BYTES.max(PROCESS_OUTPUT_MAX_BYTES / 2),
            )),
            changed: watch::channel(0).0,
        })
    }

    fn push(&self, data: &[u8]) {
        let total = {
            let mut b = self.buf.lock();
            b.push(data);
            b.total()
        };
        self.changed.send_replace(total);
    }

    /// Runs `f` on the buffer.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&StreamBuf) -> T) -> Option<T> {
        Some(f(&self.buf.lock()))
    }

    /// Gives back the buffer's spare capacity (once the process has finished) and returns the
    /// bytes it still holds.
    pub(crate) fn shrink(&self) -> usize {
        let mut b = self.buf.lock();
        b.shrink();
        b.retained()
    }

    /// A receiver that sees every append.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

enum StdinSink {
    Pipe(tokio::process::ChildStdin),
    Pty(Arc<Lock<TerminalInput>>),
}

/// What is written to a terminal's master, and whether a line is pending: bytes written since
/// the last newline, which a terminal in canonical mode holds until the line ends. Ending the
/// input sends end-of-file once (`VEOF`, Ctrl-D) at the start of a line, twice after a pending
/// line (the first hands the partial line over, the second is read as the end).
struct TerminalInput {
    w: Box<dyn Write + Send>,
    line_pending: bool,
}

impl TerminalInput {
    /// Writes `data`, then the end of input if `close`.
    fn write(&mut self, data: &[u8], close: bool) -> std::io::Result<()> {
        self.w.write_all(data)?;
        if let Some(&last) = data.last() {
            self.line_pending = last != b'\n';
        }
        if close {
            let eof: &[u8] = if self.line_pending {
                &[0x04, 0x04]
            } else {
                &[0x04]
            };
            self.w.write_all(eof)?;
            self.line_pending = false;
        }
        self.w.flush()
    }
}

/// A running (or finished) child process and its captured output.
pub(crate) struct Proc {
    tree: tree::Tree,
    pty: bool,
    pub(crate) stdout: Arc<Stream>,
    pub(crate) stderr: Arc<Stream>,
    stdin: tokio::sync::Mutex<Option<StdinSink>>,
    /// A terminal's input after it was ended: kept as long as the process, because dropping
    /// the writer (portable-pty's) sends a newline and another end-of-file to the terminal.
    ended_terminal_input: Lock<Option<Arc<Lock<TerminalInput>>>>,
    pty_master: Lock<Option<Box<dyn portable_pty::MasterPty + Send>>>,
    exit: watch::Receiver<Option<Exit>>,
    started: tokio::time::Instant,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proc")
            .field("pid", &self.tree.leader())
            .field("pty", &self.pty)
            .finish_non_exhaustive()
    }
}

/// Why a write to stdin failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StdinError {
    #[error("stdin is closed")]
    Closed,
    /// The process took only `written` bytes within [`STDIN_WRITE_WAIT`].
    #[error(
        "the process did not read its stdin for {} s: {written} of {total} bytes were written",
        STDIN_WRITE_WAIT.as_secs()
    )]
    Stalled { written: usize, total: usize },
    /// The call was cancelled after `written` bytes.
    #[error("cancelled after {written} bytes were written")]
    Cancelled { written: usize },
    #[error("writing stdin failed: {0}")]
    Io(#[from] std::io::Error),
}

impl Proc {
    /// Starts `spec`. With `stdin` bytes, they are written and stdin is closed (pipes only);
    /// otherwise stdin stays open for [`Proc::write_stdin`] when `keep_stdin_open`, else it is
    /// `/dev/null`.
    ///
    /// # Errors
    /// The program could not be started (not found, not executable, bad cwd).
    pub(crate) fn spawn(
        spec: &Spawn,
        stdin: Option<Vec<u8>>,
        keep_stdin_open: bool,
    ) -> std::io::Result<Arc<Self>> {
        match spec.pty {
            None => Self::spawn_pipes(spec, stdin, keep_stdin_open, None),
            Some((rows, cols)) => Self::spawn_pty(spec, rows, cols),
        }
    }

    /// [`Proc::spawn`] with pipes, every chunk of stdout also sent to `tap` as it is read, for
    /// a reader that must see every byte however much is written (the buffers keep only the
    /// head and the newest bytes). The tap holds the pump back, and so the child's writes,
    /// while it is full (the child waits, nothing is dropped); once the receiver is dropped
    /// the pump goes on without it. `spec.pty` is ignored.
    ///
    /// # Errors
    /// As [`Proc::spawn`].
    pub(crate) fn spawn_tapped(
        spec: &Spawn,
        stdin: Option<Vec<u8>>,
        tap: tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> std::io::Result<Arc<Self>> {
        Self::spawn_pipes(spec, stdin, false, Some(tap))
    }

    fn spawn_pipes(
        spec: &Spawn,
        stdin: Option<Vec<u8>>,
        keep_stdin_open: bool,
        tap: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    ) -> std::io::Result<Arc<Self>> {
        let stdios = start::Stdios::Pipes {
            stdin: stdin.is_some() || keep_stdin_open,
        };
        let (mut child, tree) = start::start(spec, &stdios)?;
        let stdout = Stream::new();
        let stderr = Stream::new();
        let (exit_tx, exit_rx) = watch::channel(None);
        let mut pumps = Vec::new();
        if let Some(out) = child.stdout.take() {
            crate::pipe::widen(out.as_fd());
            pumps.push(tokio::spawn(pump_async(out, stdout.clone(), tap)));
        }
        if let Some(err) = child.stderr.take() {
            crate::pipe::widen(err.as_fd());
            pumps.push(tokio::spawn(pump_async(err, stderr.clone(), None)));
        }
        let mut sink = child.stdin.take();
        if let Some(data) = stdin
            && let Some(mut pipe) = sink.take()
        {
            // Feed stdin in the background and close it, so a child that does not read cannot
            // block the call.
            tokio::spawn(async move {
                let _ = pipe.write_all(&data).await;
                let _ = pipe.shutdown().await;
            });
        }
        let proc = Arc::new(Self {
            tree: tree.clone(),
            pty: false,
            stdout,
            stderr,
            stdin: tokio::sync::Mutex::new(sink.map(StdinSink::Pipe)),
            ended_terminal_input: Lock::new(None),
            pty_master: Lock::new(None),
            exit: exit_rx,
            started: tokio::time::Instant::now(),
        });
        tokio::spawn(async move {
            let exit = exit_of(child.wait().await);
            finish(&tree, pumps, exit, exit_tx).await;
        });
        Ok(proc)
    }

    fn spawn_pty(spec: &Spawn, rows: u16, cols: u16) -> std::io::Result<Arc<Self>> {
        let io = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
        let pair = portable_pty::native_pty_system()
            .openpty(portable_pty::PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| io(&e))?;
        let tty = pair
            .master
            .tty_name()
            .ok_or_else(|| std::io::Error::other("the new terminal has no name"))?;
        let stdios = start::Stdios::terminal(&tty)?;
        drop(pair.slave);
        let (mut child, tree) = start::start(spec, &stdios)?;
        // The child holds the terminal now; this process keeps only the master.
        drop(stdios);
        let reader = pair.master.try_clone_reader().map_err(|e| io(&e))?;
        let writer = pair.master.take_writer().map_err(|e| io(&e))?;
        let stdout = Stream::new();
        let stderr = Stream::new();
        let (exit_tx, exit_rx) = watch::channel(None);
        let out = stdout.clone();
        let pump = tokio::task::spawn_blocking(move || pump_blocking(reader, out));
        let proc = Arc::new(Self {
            tree: tree.clone(),
            pty: true,
            stdout,
            stderr,
            stdin: tokio::sync::Mutex::new(Some(StdinSink::Pty(Arc::new(Lock::new(
                TerminalInput {
                    w: writer,
                    line_pending: false,
                },
            ))))),
            ended_terminal_input: Lock::new(None),
            pty_master: Lock::new(Some(pair.master)),
            exit: exit_rx,
            started: tokio::time::Instant::now(),
        });
        let weak = Arc::downgrade(&proc);
        tokio::spawn(async move {
            let exit = exit_of(child.wait().await);
            // The PTY reader sees EOF only once the master is closed.
            let finish_fut = async {
                tokio::time::sleep(DRAIN_AFTER_EXIT).await;
                tree::terminate_tree(&tree, TERMINATION_GRACE).await;
                if let Some(p) = weak.upgrade() {
                    let mut m = p.pty_master.lock();
                    m.take();
                }
            };
            finish_fut.await;
            let _ = tokio::time::timeout(Duration::from_secs(1), pump).await;
            exit_tx.send_replace(Some(exit));
        });
        Ok(proc)
    }

    /// The leader's pid (also its process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.tree.leader()
    }

    /// Whether stdout and stderr are one terminal stream.
    pub(crate) fn is_pty(&self) -> bool {
        self.pty
    }

    /// When the process was started.
    pub(crate) fn started(&self) -> tokio::time::Instant {
        self.started
    }

    /// The exit, once the process and its tree are finished.
    pub(crate) fn exit(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    /// A receiver that changes when the process finishes.
    pub(crate) fn exit_watch(&self) -> watch::Receiver<Option<Exit>> {
        self.exit.clone()
    }

    /// Waits until the process and its tree are finished.
    pub(crate) async fn wait(&self) -> Exit {
        let mut rx = self.exit.clone();
        loop {
            if let Some(e) = *rx.borrow_and_update() {
                return e;
            }
            if rx.changed().await.is_err() {
                return Exit {
                    code: None,
                    signal: None,
                };
            }
        }
    }

    /// SIGTERM to the tree, SIGKILL after the grace (or at once with `force`); returns when it
    /// has finished.
    pub(crate) async fn terminate(&self, force: bool) -> Exit {
        if self.exit().is_none() {
            if force {
                tree::kill_tree_now(&self.tree).await;
            } else {
                tree::terminate_tree(&self.tree, TERMINATION_GRACE).await;
            }
        }
        self.wait().await
    }

    /// Writes `data` to stdin, then closes it if `close`, waiting at most [`STDIN_WRITE_WAIT`]
    /// for the process to take it.
    ///
    /// # Errors
    /// Stdin was closed before; the write failed (the process exited); the process took not all
    /// of it in time ([`StdinError::Stalled`], stdin stays open); `cancel` fired.
    pub(crate) async fn write_stdin(
        &self,
        data: &[u8],
        close: bool,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<(), StdinError> {
        let deadline = tokio::time::Instant::now() + STDIN_WRITE_WAIT;
        let mut guard = tokio::select! {
            g = self.stdin.lock() => g,
            _ = tokio::time::sleep_until(deadline) => {
                return Err(StdinError::Stalled { written: 0, total: data.len() });
            }
            _ = cancel.cancelled() => return Err(StdinError::Cancelled { written: 0 }),
        };
        match guard.as_mut() {
            None if data.is_empty() && close => Ok(()),
            None => Err(StdinError::Closed),
            Some(StdinSink::Pipe(p)) => {
                let mut written = 0;
                while written < data.len() {
                    // A pipe write that has not completed has written nothing, so dropping it
                    // at the deadline loses no byte.
                    let n = tokio::select! {
                        r = p.write(&data[written..]) => r?,
                        _ = tokio::time::sleep_until(deadline) => {
                            return Err(StdinError::Stalled { written, total: data.len() });
                        }
                        _ = cancel.cancelled() => return Err(StdinError::Cancelled { written }),
                    };
                    if n == 0 {
                        return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
                    }
                    written += n;
                }
                p.flush().await?;
                if close {
                    let _ = p.shutdown().await;
                    *guard = None;
                }
                Ok(())
            }
            Some(StdinSink::Pty(w)) => {
                let w = w.clone();
                let bytes = data.to_vec();
                let total = bytes.len();
                // A terminal write blocks in a thread; past the deadline the call returns and
                // the thread finishes when the process reads or the session ends.
                let input = w.clone();
                let write = tokio::task::spawn_blocking(move || input.lock().write(&bytes, close));
                tokio::select! {
                    r = write => r.map_err(|e| std::io::Error::other(e.to_string()))??,
                    _ = tokio::time::sleep_until(deadline) => {
                        return Err(StdinError::Stalled { written: 0, total });
                    }
                }
                if close {
                    *guard = None;
                    *self.ended_terminal_input.lock() = Some(w);
                }
                Ok(())
            }
        }
    }

    /// Whether stdin can still be written.
    pub(crate) async fn stdin_open(&self) -> bool {
        self.stdin.lock().await.is_some()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exit().is_none() && self.tree.leader() != 0 {
            tree::signal_tree(&self.tree, Signal::SIGKILL);
        }
    }
}

/// After the leader exited: drain the pipes briefly, terminate what is left of the tree, then
/// publish the exit.
async fn finish(
    tree: &tree::Tree,
    pumps: Vec<tokio::task::JoinHandle<()>>,
    exit: Exit,
    tx: watch::Sender<Option<Exit>>,
) {
    let all = futures_join(pumps);
    tokio::pin!(all);
    if tokio::time::timeout(DRAIN_AFTER_EXIT, &mut all)
        .await
        .is_err()
    {
        // Something in the tree still holds the pipes open.
        tree::terminate_tree(tree, TERMINATION_GRACE).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut all).await;
    } else if !tree::members(tree).is_empty() {
        tree::terminate_tree(tree, TERMINATION_GRACE).await;
    }
    tx.send_replace(Some(exit));
}

async fn futures_join(handles: Vec<tokio::task::JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

async fn pump_async<R: AsyncRead + Unpin>(
    mut r: R,
    stream: Arc<Stream>,
    mut tap: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
) {
    let mut buf = vec![0u8; PUMP_CHUNK];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                stream.push(&buf[..n]);
                if let Some(t) = &tap
                    && t.send(buf[..n].to_vec()).await.is_err()
                {
                    tap = None;
                }
            }
        }
    }
}

fn pump_blocking(mut r: Box<dyn Read + Send>, stream: Arc<Stream>) {
    let mut buf = vec![0u8; PUMP_CHUNK];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => stream.push(&buf[..n]),
        }
    }
}

/// The exit of a child as `wait` reported it (neither code nor signal when waiting failed).
fn exit_of(status: std::io::Result<std::process::ExitStatus>) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    status.map_or(
        Exit {
            code: None,
            signal: None,
        },
        |s| Exit {
            code: s.code(),
            signal: s.signal(),
        },
    )
}

/// Checks an argv against the contract's bounds.
pub(crate) fn check_argv(argv: &[String]) -> ToolResult<()> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(ToolError::invalid("argv must name a program"));
    }
    if argv.len() > PROCESS_ARGV_MAX {
        return Err(ToolError::invalid(format!(
            "argv has {} entries; at most {PROCESS_ARGV_MAX}",
            argv.len()
        )));
    }
    let size: usize = argv.iter().map(|a| a.len() + 1).sum();
    if size > PROCESS_COMMAND_MAX_BYTES {
        return Err(ToolError::invalid(format!(
            "argv is {size} bytes; at most {PROCESS_COMMAND_MAX_BYTES}"
        )));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(ToolError::invalid("argv entries cannot contain NUL bytes"));
    }
    Ok(())
}
