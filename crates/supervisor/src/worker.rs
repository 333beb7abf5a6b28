//! One worker process of a supervisor: `BINARY stdio --worker ...` with its stdin and stdout
//! as pipes (its stderr is the supervisor's, so its logs reach the host as before).
//!
//! A thread of its own reads the worker's stdout and hands each line to the supervisor's
//! [`Sink`] as it arrives, then reports the exit. The client's reader thread writes the client's
//! lines to the worker's stdin itself ([`Worker::send`], blocking while the pipe is full), so a
//! round trip costs the two pipe crossings and little more. Every other thread (a worker's
//! reader, the control task) hands its lines to the worker's own writer thread instead
//! ([`Worker::send_later`]): a reader blocked on a full stdin pipe of the worker whose stdout
//! only it drains would deadlock.

use std::{
    ffi::OsString,
    io::{BufReader, IoSlice, Write},
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Stdio},
    sync::Arc,
};

use lock::Lock;

use crate::limits::WORKER_LINE_MAX_BYTES;

/// Where a worker's lines and exit go (the supervisor).
pub(super) trait Sink: Send + Sync + 'static {
    /// One line of worker `generation`'s stdout (without the `\n`).
    fn line(&self, generation: u64, line: Vec<u8>);
    /// Worker `generation`'s stdout ended and it exited (`how`: `exit status 1`, `killed by
    /// SIGKILL`).
    fn exited(&self, generation: u64, how: String);
}

/// The input side of a running worker; cheap to share between the threads that route to it.
#[derive(Debug)]
pub(super) struct Worker {
    /// Its generation: 1 for the first worker, one more for each started after it.
    pub(super) generation: u64,
    /// Its process id.
    pub(super) pid: u32,
    /// The version it was started as (the binary's `--version`, or this build's for the first).
    pub(super) version: String,
    /// Its stdin; `None` once closed (it then ends when it has answered).
    stdin: Arc<Lock<Option<ChildStdin>>>,
    /// The queue of its writer thread for [`Worker::send_later`], started on first use.
    later: Lock<Option<std::sync::mpsc::Sender<Vec<u8>>>>,
}

impl Worker {
    /// Starts `binary` with argv0 `named` (the path the host started the supervisor by, also
    /// when `binary` is the running file itself) and `args` as worker `generation`; its lines
    /// and its exit go to `sink` from a reader thread.
    ///
    /// # Errors
    /// The process or its reader thread could not be started.
    pub(super) fn spawn(
        binary: &Path,
        named: &Path,
        args: &[OsString],
        generation: u64,
        version: String,
        sink: Arc<dyn Sink>,
    ) -> std::io::Result<Arc<Self>> {
        let child = std::process::Command::new(binary)
            .arg0(named)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        Self::run(child, generation, version, sink)
    }

    /// Runs `child` (started with piped stdin and stdout) as the worker of `generation`: its
    /// reader thread starts.
    pub(super) fn run(
        mut child: std::process::Child,
        generation: u64,
        version: String,
        sink: Arc<dyn Sink>,
    ) -> std::io::Result<Arc<Self>> {
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("the worker's pipes were not created"));
        };
        let pid = child.id();
        runtime::pipe::widen(std::os::fd::AsFd::as_fd(&stdout));
        let worker = Arc::new(Self {
            generation,
            pid,
            version,
            stdin: Arc::new(Lock::new(Some(stdin))),
            later: Lock::new(None),
        });
        let spawned = std::thread::Builder::new()
            .name(format!("worker-{generation}-reader"))
            .spawn(move || read_worker(generation, child, stdout, &*sink));
        if let Err(e) = spawned {
            worker.kill();
            return Err(e);
        }
        Ok(worker)
    }

    /// Writes `line` and a `\n` to the worker's stdin (blocking while its pipe is full); `false`
    /// when its input is closed or it is gone.
    pub(super) fn send(&self, line: &[u8]) -> bool {
        write_line(&self.stdin, line)
    }

    /// Queues `line` for the worker's writer thread, which writes it after the lines queued
    /// before it (for the threads that must never block on the worker's stdin). A line the
    /// worker can no longer take is dropped: its request, still in flight, is answered when the
    /// worker's exit is reported.
    pub(super) fn send_later(&self, line: Vec<u8>) {
        let mut later = self.later.lock();
        if later.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
            let stdin = self.stdin.clone();
            let started = std::thread::Builder::new()
                .name(format!("worker-{}-writer", self.generation))
                .spawn(move || {
                    while let Ok(line) = rx.recv() {
                        if !write_line(&stdin, &line) {
                            break;
                        }
                    }
                });
            if started.is_err() {
                tracing::warn!(
                    generation = self.generation,
                    "no writer thread for the worker"
                );
                return;
            }
            *later = Some(tx);
        }
        if let Some(tx) = later.as_ref() {
            let _ = tx.send(line);
        }
    }

    /// Closes the worker's stdin: it finishes what it has and exits.
    pub(super) fn close_input(&self) {
        *self.later.lock() = None;
        *self.stdin.lock() = None;
    }

    /// Closes the worker's stdin and sends it SIGTERM: it ends its process sessions and exits,
    /// as a server without a supervisor does on the host's Ctrl-C.
    pub(super) fn terminate(&self) {
        self.close_input();
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// Kills the worker (SIGKILL; a write blocked on its stdin then fails, so closing it never
    /// waits); its process tree is ended by its watchdog.
    pub(super) fn kill(&self) {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.close_input();
    }
}

/// Writes `line` and a `\n` to `stdin` (blocking while its pipe is full); `false` when it is
/// closed or the write failed (then it is closed).
fn write_line(stdin: &Lock<Option<ChildStdin>>, line: &[u8]) -> bool {
    let mut guard = stdin.lock();
    let Some(pipe) = guard.as_mut() else {
        return false;
    };
    // The line and its `\n` in one write: a reader woken by the line alone would read again.
    let ok = write_all_vectored(pipe, line).is_ok();
    if !ok {
        *guard = None;
    }
    ok
}

/// Writes `line` and `\n` to `w` with as few `writev(2)` calls as the pipe takes.
///
/// # Errors
/// The write failed (the worker closed its end: `EPIPE`), or wrote nothing.
fn write_all_vectored(w: &mut impl Write, line: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    let total = line.len() + 1;
    while done < total {
        let n = if done < line.len() {
            w.write_vectored(&[IoSlice::new(&line[done..]), IoSlice::new(b"\n")])
        } else {
            w.write(b"\n")
        };
        match n {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Hands `stdout`'s lines to `sink`, then waits for the process and reports its exit. A line
/// longer than [`WORKER_LINE_MAX_BYTES`] is dropped with a warning (its request is answered as
/// lost when the worker ends).
fn read_worker(generation: u64, mut child: Child, stdout: ChildStdout, sink: &dyn Sink) {
    let mut input = BufReader::with_capacity(64 * 1024, stdout);
    loop {
        let mut buf = Vec::new();
        match crate::read_line_blocking(&mut input, &mut buf, WORKER_LINE_MAX_BYTES) {
            Ok(Some(false)) => sink.line(generation, buf),
            Ok(Some(true)) => {
                tracing::warn!(generation, "a worker wrote a line over the bound; dropped");
            }
            Ok(None) | Err(_) => break,
        }
    }
    let how = match child.wait() {
        Ok(status) => describe(status),
        Err(e) => format!("unknown ({e})"),
    };
    sink.exited(generation, how);
}

/// How a process ended, in words.
fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => match nix::sys::signal::Signal::try_from(s) {
            Ok(sig) => format!("killed by {sig}"),
            Err(_) => format!("killed by signal {s}"),
        },
        _ => "ended".to_owned(),
    }
}
