//! The supervisor's stdout: lines from a dedicated thread into file descriptor 1, flushed when
//! no further line is waiting, so a burst leaves in few writes and a single answer at once.

use std::{
    io::{self, Write},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, SyncSender, TrySendError},
    },
    thread::JoinHandle,
};

/// Lines queued for stdout.
const TO_CLIENT_QUEUE: usize = 1024;

/// The writer of the client's stdout.
pub(super) struct ClientOut {
    tx: Option<SyncSender<Vec<u8>>>,
    closed: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ClientOut {
    /// A writer of this process's stdout (the pipe raised to 1 MiB where the system allows).
    ///
    /// # Errors
    /// Duplicating file descriptor 1 failed.
    pub(super) fn stdout() -> io::Result<Self> {
        super::super::writer::widen_stdout_pipe();
        let out = super::super::writer::raw_stdout()?;
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(TO_CLIENT_QUEUE);
        let closed = Arc::new(AtomicBool::new(false));
        let flag = closed.clone();
        let thread = std::thread::Builder::new()
            .name("stdout-writer".into())
            .spawn(move || {
                let mut w = io::BufWriter::with_capacity(64 * 1024, out);
                'lines: while let Ok(mut line) = rx.recv() {
                    loop {
                        line.push(b'\n');
                        if w.write_all(&line).is_err() {
                            break 'lines;
                        }
                        match rx.try_recv() {
                            Ok(next) => line = next,
                            Err(_) => break,
                        }
                    }
                    if w.flush().is_err() {
                        break;
                    }
                }
                flag.store(true, Ordering::Release);
            })?;
        Ok(Self {
            tx: Some(tx),
            closed,
            thread: Some(thread),
        })
    }

    /// Queues `line`; waits (off the loop's thread when needed) while the queue is full.
    pub(super) fn send(&self, line: Vec<u8>) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(line) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(line)) => {
                // The client is not reading: wait for room, as the server itself would.
                let _ = tokio::task::block_in_place(|| tx.send(line));
            }
        }
    }

    /// Whether stdout is gone (the client closed it).
    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Writes what is queued and stops the writer.
    pub(super) async fn finish(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}
