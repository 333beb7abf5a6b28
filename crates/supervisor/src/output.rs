//! The supervisor's stdout: whole lines into file descriptor 1 from whichever thread has one
//! (a worker's reader, the client's reader, the control task), one line at a time, each flushed
//! at once. A client that stops reading blocks the writers, which is the backpressure a server
//! without a supervisor has too. A client that closed its end is seen by the first write that
//! fails, or by [`ClientOut::reader_gone`] without a write (the control task asks on its tick):
//! a write can succeed while another process briefly holds a copy of the closed end, so the
//! failed write alone may never come.

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

    /// Whether the reading end of stdout is closed, asked without writing
    /// ([`runtime::mcp::stdio::stdout_reader_gone`]); if so, [`ClientOut::closed`] says so from
    /// now on.
    pub(super) fn reader_gone(&self) -> bool {
        if self.closed() {
            return true;
        }
        let gone = runtime::mcp::stdio::stdout_reader_gone();
        if gone {
            self.closed.store(true, Ordering::Release);
        }
        gone
    }
}
