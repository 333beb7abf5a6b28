//! The supervisor's stdout: whole lines into file descriptor 1 from whichever thread has one
//! (a worker's reader, the client's reader, the control task), one line at a time, each flushed
//! at once. A client that stops reading blocks the writers, which is the backpressure a server
//! without a supervisor has too.

use std::{
    fs::File,
    io::{self, Write},
    sync::atomic::{AtomicBool, Ordering},
};

use lock::Lock;

/// The writer of the client's stdout.
pub(super) struct ClientOut {
    out: Lock<io::BufWriter<File>>,
    closed: AtomicBool,
}

impl ClientOut {
    /// A writer of this process's stdout (the pipe raised to 1 MiB where the system allows).
    ///
    /// # Errors
    /// Duplicating file descriptor 1 failed.
    pub(super) fn stdout() -> io::Result<Self> {
        runtime::pipe::widen(std::os::fd::AsFd::as_fd(&io::stdout()));
        Ok(Self {
            out: Lock::new(io::BufWriter::with_capacity(
                64 * 1024,
                runtime::mcp::stdio::raw_stdout()?,
            )),
            closed: AtomicBool::new(false),
        })
    }

    /// Writes `line` and a `\n` and flushes; after a failed write (the client closed its end)
    /// nothing more is written and [`ClientOut::closed`] says so.
    pub(super) fn send(&self, line: &[u8]) {
        if self.closed() {
            return;
        }
        let mut out = self.out.lock();
        // Through the buffer a line and its `\n` leave in one write (a longer line than the
        // buffer goes out directly, its `\n` with the flush).
        let ok = out.write_all(line).is_ok() && out.write_all(b"\n").is_ok() && out.flush().is_ok();
        if !ok {
            self.closed.store(true, Ordering::Release);
        }
    }

    /// Whether stdout is gone (the client closed it).
    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}
