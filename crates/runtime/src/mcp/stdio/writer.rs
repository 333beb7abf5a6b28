//! The writers of the stdio transport: every outgoing message as one `\n`-terminated line,
//! either from a Tokio task into any `AsyncWrite` ([`write_loop`], what [`super::serve`] uses)
//! or from a dedicated thread straight into a blocking writer ([`write_thread`], what
//! [`super::serve_process_stdio`] uses for file descriptor 1).

use std::io;

use rmcp::model::ServerJsonRpcMessage;
use tokio::{
    io::{AsyncWrite, AsyncWriteExt},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

/// One line to write: a message to serialize, or a line already written out (an error the
/// reader answers by itself).
pub(super) enum Outgoing {
    Message(Box<ServerJsonRpcMessage>),
    Raw(String),
}

/// The queue to the line writer: a Tokio task (async output) or a thread (blocking output).
#[derive(Clone)]
pub(super) enum OutQueue {
    Task(mpsc::Sender<Outgoing>),
    Thread(std::sync::mpsc::SyncSender<Outgoing>),
}

impl OutQueue {
    /// Queues `msg`; waits while the queue is full (the client is not reading).
    pub(super) async fn send(&self, msg: Outgoing) -> Result<(), OutputClosed> {
        match self {
            OutQueue::Task(tx) => tx.send(msg).await.map_err(|_| OutputClosed),
            OutQueue::Thread(tx) => match tx.try_send(msg) {
                Ok(()) => Ok(()),
                Err(std::sync::mpsc::TrySendError::Disconnected(_)) => Err(OutputClosed),
                Err(std::sync::mpsc::TrySendError::Full(msg)) => {
                    // Wait for room off the async workers.
                    let tx = tx.clone();
                    tokio::task::spawn_blocking(move || tx.send(msg))
                        .await
                        .map_err(|_| OutputClosed)?
                        .map_err(|_| OutputClosed)
                }
            },
        }
    }
}

/// The transport's writer is gone (stdout closed).
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub struct OutputClosed;

/// A writer to file descriptor 1 without `std::io::Stdout`'s line buffering, which scans every
/// write for its last newline (a megabyte per result); the writer thread buffers by itself.
/// Nothing else writes to stdout in a stdio session (see [`super`]).
///
/// # Errors
/// Duplicating file descriptor 1 failed.
pub fn raw_stdout() -> io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    Ok(std::fs::File::from(
        io::stdout().as_fd().try_clone_to_owned()?,
    ))
}

/// Whether the reading end of this process's stdout is closed, asked without writing: a pipe
/// or socket whose reader is gone reports an error or a hang-up to `poll(2)`; a file, or a
/// terminal that is still there, reports neither. A failed write says it too, but a write can
/// succeed while another process briefly holds a copy of the closed end (a fork before its
/// exec), so a server that waits for one may never learn it.
pub fn stdout_reader_gone() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| {
        n > 0
            && fds[0]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
    })
}

/// Returns once [`stdout_reader_gone`] says so, asked every [`STDOUT_CHECK_INTERVAL`].
pub async fn stdout_closed() {
    let mut tick = tokio::time::interval(STDOUT_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if stdout_reader_gone() {
            return;
        }
    }
}

/// How often [`stdout_closed`] asks whether stdout's reader is gone.
pub const STDOUT_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

pub(super) fn widen_stdout_pipe() {
    use std::os::fd::AsFd;
    crate::pipe::widen(io::stdout().as_fd());
}

/// How long a writer keeps its line buffer after the last message (see [`Lines`]).
const KEEP_LINE_BUFFER: std::time::Duration = std::time::Duration::from_secs(1);

/// The writers' line buffer. Messages are serialized into one buffer that is reused while
/// messages keep coming (a stream of megabyte `read_process` results would otherwise fault in
/// fresh pages for every line) and released after [`KEEP_LINE_BUFFER`] without messages, so an
/// idle server does not keep a megabyte line alive.
#[derive(Default)]
struct Lines(Vec<u8>);

impl Lines {
    /// `msg` as one `\n`-terminated line, or `None` if it cannot be serialized (logged).
    fn encode(&mut self, msg: Outgoing) -> Option<&[u8]> {
        self.0.clear();
        match msg {
            Outgoing::Raw(s) => self.0.extend_from_slice(s.as_bytes()),
            Outgoing::Message(m) => {
                if let Err(e) = crate::call::json::to_writer(&mut self.0, &m) {
                    tracing::error!(error = %e, "could not serialize an outgoing message");
                    return None;
                }
            }
        }
        self.0.push(b'\n');
        Some(&self.0)
    }

    fn release(&mut self) {
        self.0 = Vec::new();
    }
}

/// Writes each outgoing message as one line to an async `output`.
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    mut output: W,
    mut rx: mpsc::Receiver<Outgoing>,
    closed: CancellationToken,
) {
    let mut lines = Lines::default();
    loop {
        let msg = match tokio::time::timeout(KEEP_LINE_BUFFER, rx.recv()).await {
            Ok(Some(msg)) => msg,
            Ok(None) => break,
            Err(_idle) => {
                lines.release();
                continue;
            }
        };
        let Some(line) = lines.encode(msg) else {
            continue;
        };
        if output.write_all(line).await.is_err() || (rx.is_empty() && output.flush().await.is_err())
        {
            closed.cancel();
            return;
        }
    }
    let _ = output.flush().await;
}

/// Writes each outgoing message as one line to a blocking `output`, on its own thread.
pub(super) fn write_thread<W: io::Write>(output: W, rx: std::sync::mpsc::Receiver<Outgoing>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut out = io::BufWriter::with_capacity(WRITE_CHUNK, output);
    let mut next = rx.recv().ok();
    while let Some(mut msg) = next.take() {
        // The serializer's scratch buffer (as large as the longest string escaped so far) lives
        // while messages keep coming, and is freed after KEEP_LINE_BUFFER without any.
        let mut json = sonic_rs::writer::BufferedWriter::new(&mut out);
        loop {
            if write_line(&mut json, msg).is_err() {
                return;
            }
            match rx.recv_timeout(KEEP_LINE_BUFFER) {
                Ok(m) => msg = m,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        drop(json);
        // The answers of a burst are freed only as they are written, which can be after the
        // runtime's idle trim ran: give the memory back now that the writer is idle too.
        crate::memory::trim();
        next = rx.recv().ok();
    }
}

/// Buffer size of [`write_thread`]: small parts of a message are gathered up to this size;
/// a longer string goes to the output in one write.
const WRITE_CHUNK: usize = 64 * 1024;

/// Serializes `msg` straight into `out` and ends the line. A megabyte result leaves as it is
/// serialized (a few writes: one per long string), so the client reads its first part while
/// the rest is being escaped, and no line-sized buffer is built first (measured on a paced
/// 100 MB `read_process` stream, median of 5 runs: about 155 → 200 MB/s).
///
/// # Errors
/// Writing failed. A serialization error (impossible for the rmcp message types, whose maps
/// have string keys) is logged and ends the line where it stopped, so the next message still
/// starts on a line of its own.
fn write_line<J: sonic_rs::writer::WriteExt>(out: &mut J, msg: Outgoing) -> io::Result<()> {
    match msg {
        Outgoing::Raw(s) => out.write_all(s.as_bytes())?,
        Outgoing::Message(m) => {
            if let Err(e) = sonic_rs::to_writer(&mut *out, &m) {
                if e.is_io() {
                    return Err(io::Error::other(e));
                }
                tracing::error!(error = %e, "could not serialize an outgoing message");
            }
        }
    }
    out.write_all(b"\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::super::{StdioTransport, serve_transport};
    use crate::Runtime;

    /// The writer thread serializes straight into the pipe, a few writes per message: a
    /// megabyte result must still arrive as one intact line, its mirror equal to its
    /// structured content, with every character class that JSON escapes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_output_streams_megabyte_results_intact() {
        use std::io::BufRead;
        use tokio::io::AsyncWriteExt;

        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        while text.len() < 1_500_000 {
            text.push_str("line \"quoted\" \\ tab\t \u{e9} \u{1f600} \u{1} \u{2028}\r\n");
        }
        std::fs::write(dir.path().join("big.txt"), &text).unwrap();
        let runtime = Arc::new(
            Runtime::new(crate::RuntimeConfig {
                workspace: dir.path().into(),
                policy: crate::policy::Policy::profile(crate::policy::Profile::Full),
                default_yield_after: None,
                remote: false,
                state_dir: None,
                own_files: Vec::new(),
            })
            .unwrap(),
        );
        let (input, mut client) = tokio::io::duplex(1 << 16);
        let (reader, writer) = std::io::pipe().unwrap();
        let session = tokio::spawn(serve_transport(
            runtime,
            StdioTransport::with_blocking_output(input, writer),
        ));
        let lines = tokio::task::spawn_blocking(move || {
            let mut r = std::io::BufReader::new(reader);
            (0..3)
                .map(|_| {
                    let mut l = String::new();
                    r.read_line(&mut l).unwrap();
                    l
                })
                .collect::<Vec<_>>()
        });
        let requests = [
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "read_file", "arguments": {"path": "big.txt", "max_bytes": 4_000_000}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        ];
        for r in requests {
            client.write_all(format!("{r}\n").as_bytes()).await.unwrap();
        }
        // Every line parses; the ping may be answered while read_file runs.
        let mut by_id: Vec<Value> = lines
            .await
            .unwrap()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        by_id.sort_by_key(|v| v["id"].as_i64());
        let read = &by_id[1];
        assert_eq!(read["id"], 1);
        let structured = &read["result"]["structuredContent"];
        assert_eq!(structured["content"], text);
        // The text block is a summary line, then the file's text exactly.
        let block = read["result"]["content"][0]["text"].as_str().unwrap();
        let (summary, body) = block.split_once('\n').unwrap();
        assert!(
            summary.starts_with("read_file ") && summary.contains("big.txt: "),
            "{summary}"
        );
        assert_eq!(body, text);
        assert_eq!(by_id[2], json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
        drop(client);
        session.await.unwrap().unwrap();
    }
}
