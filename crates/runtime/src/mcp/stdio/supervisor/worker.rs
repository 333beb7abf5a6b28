//! One worker process of a supervisor: `BINARY stdio --worker ...` with its stdin and stdout
//! as pipes (its stderr is the supervisor's, so its logs reach the host as before). Its lines
//! come to the supervisor as [`Event`]s tagged with its generation; lines to it go through a
//! bounded queue to a writer task, so the supervisor never blocks on one worker.

use std::{ffi::OsString, path::Path, process::Stdio};

use tokio::{
    io::{AsyncWriteExt, BufReader},
    process::Child,
    sync::mpsc,
};

use protocol::limits::WORKER_LINE_MAX_BYTES;

use super::super::framing::read_bounded_line;

/// Lines queued to one worker's stdin.
const TO_WORKER_QUEUE: usize = 256;

/// What a worker sends the supervisor.
#[derive(Debug)]
pub(super) enum Event {
    /// One line of its stdout (without the `\n`).
    Line(u64, Vec<u8>),
    /// Its stdout ended and it exited: its generation and how (`exit status 1`, `signal 9`).
    Exited(u64, String),
}

/// A running worker.
#[derive(Debug)]
pub(super) struct Worker {
    /// Its generation: 1 for the first worker, one more for each started after it.
    pub(super) generation: u64,
    /// Its process id.
    pub(super) pid: u32,
    /// The version it was started as (the binary's `--version`, or this build's for the first).
    pub(super) version: String,
    /// Lines to its stdin; `None` once closed (it then ends when it has answered).
    to_worker: Option<mpsc::Sender<Vec<u8>>>,
}

impl Worker {
    /// Starts `binary` with `args` as worker `generation`; its lines and its exit arrive on
    /// `events`.
    ///
    /// # Errors
    /// The process could not be started (the binary is missing, not executable, ...).
    pub(super) fn spawn(
        binary: &Path,
        args: &[OsString],
        generation: u64,
        version: String,
        events: mpsc::Sender<Event>,
    ) -> std::io::Result<Self> {
        let mut child = tokio::process::Command::new(binary)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the worker's pipes were not created"));
        };
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(TO_WORKER_QUEUE);
        // Writer: ends when the queue closes (the supervisor closed the worker's input) or the
        // pipe breaks (the worker is gone; its exit is reported by the reader).
        tokio::spawn(async move {
            while let Some(mut line) = rx.recv().await {
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() {
                    break;
                }
            }
            let _ = stdin.shutdown().await;
        });
        // Reader: every line, then the exit once stdout ended.
        tokio::spawn(read_worker(generation, child, stdout, events));
        Ok(Self {
            generation,
            pid,
            version,
            to_worker: Some(tx),
        })
    }

    /// Queues `line` for the worker's stdin; `false` when its input is closed or it is gone.
    pub(super) async fn send(&self, line: Vec<u8>) -> bool {
        match &self.to_worker {
            Some(tx) => tx.send(line).await.is_ok(),
            None => false,
        }
    }

    /// Closes the worker's stdin: it finishes what it has and exits.
    pub(super) fn close_input(&mut self) {
        self.to_worker = None;
    }

    /// Kills the worker (SIGKILL); its process tree is ended by its watchdog.
    pub(super) fn kill(&mut self) {
        self.close_input();
        if self.pid != 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Forwards `stdout`'s lines as [`Event::Line`], then waits for the process and reports
/// [`Event::Exited`]. A line longer than [`WORKER_LINE_MAX_BYTES`] is dropped with a warning
/// (its request is then answered as lost when the worker ends, or never).
async fn read_worker(
    generation: u64,
    mut child: Child,
    stdout: tokio::process::ChildStdout,
    events: mpsc::Sender<Event>,
) {
    let mut input = BufReader::with_capacity(64 * 1024, stdout);
    loop {
        let mut buf = Vec::new();
        match read_bounded_line(&mut input, &mut buf, WORKER_LINE_MAX_BYTES).await {
            Ok(Some(false)) => {
                if events.send(Event::Line(generation, buf)).await.is_err() {
                    break;
                }
            }
            Ok(Some(true)) => {
                tracing::warn!(generation, "a worker wrote a line over the bound; dropped");
            }
            Ok(None) | Err(_) => break,
        }
    }
    let how = match child.wait().await {
        Ok(status) => describe(status),
        Err(e) => format!("unknown ({e})"),
    };
    let _ = events.send(Event::Exited(generation, how)).await;
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
