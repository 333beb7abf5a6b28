//! One delegation's run: the agent CLI started through the process engine ([`Proc`]: its own
//! process group, pipes, the prompt on stdin, bounded output), its stdout lines parsed as they
//! come ([`OutputParser`]: the session id is recorded as soon as it is known), and its end —
//! exit, cancellation, the run limit, or the server stopping — recorded in the receipt. The
//! worker capability of the run is revoked when it ends.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use protocol::limits::DELEGATION_EVENT_LINE_MAX_BYTES;

use super::{
    Manager, Pending, agent_env,
    agents::{self, OutputParser},
    store::{DelegationStatus, DeliveryState},
    worker::Grant,
};
use crate::{
    primitives::text::{cut, lossy},
    tools::process::engine::{Proc, Spawn, Stream},
};

/// How often a run looks for a cancellation marker written by another server.
const MARKER_TICK: Duration = Duration::from_millis(500);
/// Bytes of stdout read from the stream buffer at a time.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes of stderr's end shown as the diagnostic of an agent that failed without an error
/// event.
const STDERR_TAIL_BYTES: usize = 2 * 1024;
/// Bytes of an agent's error message kept as a receipt's diagnostic.
const DIAGNOSTIC_MAX_BYTES: usize = 4 * 1024;

/// Splits the agent's stdout into lines for the parser, reading the stream from where it left
/// off; a line longer than [`DELEGATION_EVENT_LINE_MAX_BYTES`] (or one whose start the stream
/// buffer no longer holds) is skipped whole.
#[derive(Debug, Default)]
struct Lines {
    offset: u64,
    partial: Vec<u8>,
    skipping: bool,
}

impl Lines {
    /// Feeds every complete line written since the last call.
    fn feed(&mut self, stream: &Stream, parser: &mut OutputParser) {
        loop {
            let Some((start, bytes, dropped)) =
                stream.with(|b| b.read(self.offset, READ_CHUNK, true))
            else {
                return;
            };
            if dropped > 0 {
                self.partial.clear();
                self.skipping = true;
            }
            if bytes.is_empty() {
                return;
            }
            self.offset = start + bytes.len() as u64;
            let mut rest = &bytes[..];
            while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                let (piece, tail) = rest.split_at(nl);
                if !self.skipping
                    && self.partial.len() + piece.len() <= DELEGATION_EVENT_LINE_MAX_BYTES
                {
                    self.partial.extend_from_slice(piece);
                    parser.line(&self.partial);
                }
                self.partial.clear();
                self.skipping = false;
                rest = &tail[1..];
            }
            if !self.skipping {
                if self.partial.len() + rest.len() > DELEGATION_EVENT_LINE_MAX_BYTES {
                    self.partial.clear();
                    self.skipping = true;
                } else {
                    self.partial.extend_from_slice(rest);
                }
            }
        }
    }

    /// The last line, when the output did not end with a line break.
    fn finish(&mut self, parser: &mut OutputParser) {
        if !self.skipping && !self.partial.is_empty() {
            parser.line(&self.partial);
        }
        self.partial.clear();
    }
}

/// Runs `p` to its end and records it. `token` is this run's cancellation (a child of the
/// manager's closing token: when that fired, the server is stopping).
pub(super) async fn run(m: &Manager, p: Pending, token: CancellationToken) {
    let id = p.request_id.clone();
    let marker = m.store.cancel_marker(&id);
    let stopped_before = |m: &Manager| {
        if m.closing.is_cancelled() {
            (
                "server_stopped",
                "the server stopped before the agent started; nothing ran".to_owned(),
            )
        } else {
            (
                "cancelled",
                "cancelled before the agent started; nothing ran".to_owned(),
            )
        }
    };
    if token.is_cancelled() || marker.exists() {
        let (code, message) = stopped_before(m);
        let _ = std::fs::remove_file(&marker);
        m.update(&id, move |r| {
            r.end(
                DelegationStatus::Failed,
                DeliveryState::NotSent,
                Some((code, message)),
            )
        })
        .await;
        return;
    }
    let worker = m.worker().cloned();
    let (extra, worker_mcp) = match &worker {
        Some(w) => (
            w.grant(Grant {
                request_id: id.clone(),
                root_request_id: p.root_request_id.clone(),
                depth: p.depth,
                project_dir: p.directory.clone(),
                owner: p.owner.clone(),
            }),
            Some(w.worker_mcp()),
        ),
        None => (Vec::new(), None),
    };
    let spawn = Spawn {
        argv: agents::command(p.agent, &p.executable, worker_mcp.as_ref()),
        cwd: p.directory.clone(),
        env: agent_env(extra),
        pty: None,
    };
    let proc = match Proc::spawn(&spawn, Some(p.prompt.into_bytes()), false) {
        Ok(proc) => proc,
        Err(e) => {
            if let Some(w) = &worker {
                w.revoke(&id);
            }
            let message = format!("{} could not be started: {e}", p.executable.display());
            m.update(&id, move |r| {
                r.end(
                    DelegationStatus::Failed,
                    DeliveryState::NotSent,
                    Some(("spawn_failed", message)),
                )
            })
            .await;
            return;
        }
    };
    m.update(&id, |r| r.delivery_state = DeliveryState::Sent)
        .await;

    let mut parser = OutputParser::new(p.agent);
    let mut lines = Lines::default();
    let mut out = proc.stdout.subscribe();
    let mut exit = proc.exit_watch();
    let deadline = tokio::time::Instant::now() + m.run_limit();
    let mut tick = tokio::time::interval(MARKER_TICK);
    let mut session_recorded = false;
    let stopped: Option<(&'static str, String)> = loop {
        out.borrow_and_update();
        lines.feed(&proc.stdout, &mut parser);
        if !session_recorded && let Some(sid) = parser.session_id() {
            session_recorded = true;
            let sid = sid.to_owned();
            m.update(&id, move |r| r.session_id = Some(sid)).await;
        }
        if exit.borrow_and_update().is_some() {
            break None;
        }
        tokio::select! {
            _ = out.changed() => {}
            _ = exit.changed() => {}
            () = token.cancelled() => {
                break Some(if m.closing.is_cancelled() {
                    ("server_stopped", "the server stopped and ended the agent before it \
                     answered; what it changed so far stays; it is not re-run".to_owned())
                } else {
                    ("cancelled", "cancelled: the agent's process tree was terminated; what \
                     it changed so far stays".to_owned())
                });
            }
            () = tokio::time::sleep_until(deadline) => {
                break Some(("timeout", format!(
                    "the run limit of {} s passed: the agent's process tree was terminated",
                    m.run_limit().as_secs()
                )));
            }
            _ = tick.tick() => {
                if marker.exists() {
                    break Some(("cancelled", "cancelled (through another server): the \
                     agent's process tree was terminated; what it changed so far stays"
                        .to_owned()));
                }
            }
        }
    };
    let status = if stopped.is_some() {
        proc.terminate(false).await
    } else {
        proc.wait().await
    };
    lines.feed(&proc.stdout, &mut parser);
    lines.finish(&mut parser);
    if let Some(w) = &worker {
        w.revoke(&id);
    }
    let _ = std::fs::remove_file(&marker);
    let parsed = parser.finish();
    let stderr_tail = proc
        .stderr
        .with(|b| b.last_bytes(STDERR_TAIL_BYTES))
        .map(|b| lossy(&b).trim().to_owned())
        .unwrap_or_default();
    m.update(&id, move |r| {
        r.session_id = parsed.session_id.or(r.session_id.take());
        r.exit_code = status.code;
        if let Some(answer) = parsed.answer.clone() {
            r.set_output(answer);
        }
        match stopped {
            Some((code, message)) => r.end(
                DelegationStatus::Failed,
                DeliveryState::Sent,
                Some((code, message)),
            ),
            None if status.code == Some(0) && parsed.answer.is_some() => {
                r.end(DelegationStatus::Completed, DeliveryState::Sent, None)
            }
            None => {
                let how = match (status.code, status.signal_name()) {
                    (Some(c), _) => format!("exited with code {c}"),
                    (None, Some(s)) => format!("was ended by {s}"),
                    (None, None) => "ended".to_owned(),
                };
                let why = parsed
                    .error
                    .or_else(|| (!stderr_tail.is_empty()).then_some(stderr_tail))
                    .unwrap_or_else(|| "it gave no final answer".to_owned());
                let why = cut(why, DIAGNOSTIC_MAX_BYTES, " […]");
                r.end(
                    DelegationStatus::Failed,
                    DeliveryState::Sent,
                    Some(("agent_failed", format!("the agent {how}: {why}"))),
                );
            }
        }
    })
    .await;
}
