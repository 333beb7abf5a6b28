//! What routing decided ([`Out`]) and who does it: [`Shared`], the routing state behind one
//! lock that is never held during I/O, the client's stdout, and the probes the control task
//! runs; [`IdleTrim`], when the heap goes back to the system.

use std::{
    sync::{Arc, MutexGuard},
    time::Duration,
};

use lock::Lock;

use tokio::time::Instant;

use protocol::jsonrpc::IdKey;

use crate::{
    binary::{self, FileId},
    message,
    output::ClientOut,
    state::{Purpose, State},
    worker::{Sink, Worker},
};

/// What routing decided; done by [`Shared::run`] after the state's lock is released.
#[derive(Debug)]
pub(crate) enum Out {
    /// A line to the client.
    Client(Vec<u8>),
    /// A line to a worker. When it cannot be written, the request `key` names (still in flight)
    /// is answered `not_sent`.
    Worker {
        worker: Arc<Worker>,
        line: Vec<u8>,
        key: Option<IdKey>,
    },
    /// A `--version` probe of the binary, for a candidate of `Purpose`.
    Probe(Purpose, &'static str),
}

/// The routing state, and the client's stdout, shared by the stdin thread, the workers' reader
/// threads and the control task.
pub(crate) struct Shared {
    pub(crate) state: Lock<State>,
    pub(crate) out: ClientOut,
    /// Lines forwarded so far (either way): the control task trims the heap once it stops
    /// changing ([`IdleTrim`]).
    pub(crate) lines: std::sync::atomic::AtomicU64,
    pub(crate) probes: tokio::sync::mpsc::UnboundedSender<Probe>,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    pub(crate) fn send_client(&self, line: &[u8]) {
        self.out.send(line);
    }

    /// Whether the client's stdout is gone ([`ClientOut::reader_gone`]).
    pub(crate) fn stdout_gone(&self) -> bool {
        self.out.reader_gone()
    }

    /// Does what routing decided, in order, on a thread that must not block on a worker's
    /// stdin (a worker's reader, the control task): lines to workers go to their writer threads.
    pub(crate) fn run(&self, outs: Vec<Out>) {
        self.run_on(outs, false);
    }

    /// [`Shared::run`] on the client's reader thread, which writes to workers itself.
    pub(crate) fn run_here(&self, outs: Vec<Out>) {
        self.run_on(outs, true);
    }

    pub(crate) fn run_on(&self, outs: Vec<Out>, direct: bool) {
        self.lines
            .fetch_add(outs.len() as u64, std::sync::atomic::Ordering::Relaxed);
        for o in outs {
            match o {
                Out::Client(line) => self.send_client(&line),
                Out::Worker { worker, line, .. } if !direct => worker.send_later(line),
                Out::Worker { worker, line, key } => {
                    if !worker.send(&line)
                        && let Some(k) = key
                    {
                        // Answered once: by this, unless the worker's exit already answered it.
                        let lost = self.lock().in_flight.end(&k);
                        if let Some(f) = lost {
                            self.send_client(&message::not_sent(
                                &f.id,
                                "the server worker exited before it took this request",
                                true,
                            ));
                        }
                    }
                }
                Out::Probe(purpose, why) => {
                    let tx = self.probes.clone();
                    let binary = self.lock().program(purpose);
                    self.runtime.spawn(async move {
                        let file = FileId::of(&binary);
                        let result = binary::probe_version(&binary).await;
                        let _ = tx.send(Probe {
                            file,
                            result,
                            purpose,
                            why,
                        });
                    });
                }
            }
        }
    }

    /// Marks the supervisor stopping and closes every worker's input — and when `signalled`
    /// (Ctrl-C, SIGTERM) sends it SIGTERM, as the host's signal would stop a server without a
    /// supervisor. At end of input a worker finishes the calls it runs and answers them, as the
    /// in-process server does; their reader threads forward what they write.
    pub(crate) fn stop_workers(&self, signalled: bool) {
        let workers: Vec<Arc<Worker>> = {
            let mut st = self.lock();
            st.stopping = true;
            st.workers.values().map(|s| s.worker.clone()).collect()
        };
        for w in &workers {
            if signalled {
                w.terminate();
            } else {
                w.close_input();
            }
        }
    }

    /// Resolves once every worker is gone, or at `deadline`.
    pub(crate) async fn workers_gone(&self, deadline: Instant) {
        while !self.lock().workers.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills every worker still there (its process tree is ended by its watchdog).
    pub(crate) fn kill_workers(&self) {
        for s in self.lock().workers.values() {
            s.worker.kill();
        }
    }
}

impl Sink for Shared {
    fn line(&self, generation: u64, line: Vec<u8>) {
        let o = self.lock().worker_line(generation, line);
        self.run(o);
    }

    fn exited(&self, generation: u64, how: String) {
        let o = self.lock().exited(generation, &how);
        self.run(o);
    }
}

/// When to give freed heap back to the system: once no line was forwarded for
/// `runtime::memory::IDLE_DELAY` after some were (the buffers of a megabyte answer stay in glibc's
/// arenas otherwise), as the server does after its calls.
#[derive(Debug, Default)]
pub(crate) struct IdleTrim {
    seen: u64,
    since: Option<Instant>,
}

impl IdleTrim {
    /// Whether to trim now, given the count of lines forwarded so far.
    pub(crate) fn due(&mut self, lines: u64) -> bool {
        if lines != self.seen {
            self.seen = lines;
            self.since = Some(Instant::now());
            return false;
        }
        match self.since {
            Some(t) if t.elapsed() >= runtime::memory::IDLE_DELAY => {
                self.since = None;
                true
            }
            _ => false,
        }
    }
}

/// The result of a version probe of the binary.
#[derive(Debug)]
pub(crate) struct Probe {
    pub(crate) file: Option<FileId>,
    pub(crate) result: Result<String, String>,
    pub(crate) purpose: Purpose,
    pub(crate) why: &'static str,
}
