//! One delegation's run: the agent CLI started through the process engine ([`Proc`]: its own
//! process group, pipes, the prompt on stdin, bounded output), its stdout lines parsed as they
//! come ([`OutputParser`]: the session id is recorded as soon as it is known), and its end —
//! exit, cancellation, the run limit, or the server stopping — recorded in the receipt. The
//! worker capability of the run is revoked when it ends.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{limits::DELEGATION_EVENT_LINE_MAX_BYTES, limits::DELEGATION_OUTPUT_MAX_BYTES};

use super::{
    Manager, Pending, agent_env,
    agents::{self, OutputParser},
    store::{DelegationStatus, DeliveryState},
    workers::Grant,
};
use crate::{
    primitives::text::{cut, lossy},
    tools::process::engine::{Proc, Spawn},
};

/// How often a run looks for a cancellation marker written by another server.
const MARKER_TICK: Duration = Duration::from_millis(500);
/// Chunks of stdout (up to 64 KiB each) the tap holds before the agent's writes wait.
const TAP_CHUNKS: usize = 16;
/// How long stdout is still read once the agent's tree has ended (what the pump read before
/// the end), at most.
const DRAIN_AFTER_END: Duration = Duration::from_secs(2);
/// Bytes of stderr's end shown as the diagnostic of an agent that failed without an error
/// event.
const STDERR_TAIL_BYTES: usize = 2 * 1024;
/// Bytes of an agent's error message kept as a receipt's diagnostic.
const DIAGNOSTIC_MAX_BYTES: usize = 4 * 1024;

/// Splits the agent's stdout into lines for the parser, seeing every byte (the run reads
/// stdout through a tap that holds the agent back rather than drop bytes).
///
/// A line may be far longer than [`DELEGATION_EVENT_LINE_MAX_BYTES`] because of one long text
/// (a final answer of megabytes in one event): every JSON string of a line is kept up to
/// [`STRING_KEEP`] bytes as written and the rest of it dropped, cut between escapes and
/// characters, so the line stays valid JSON and a cut text still decodes to more than
/// [`DELEGATION_OUTPUT_MAX_BYTES`] (the receipt flags it `output_truncated`). A line still
/// longer than the bound once its strings are cut is skipped whole and counted, so the
/// receipt can say so instead of "no final answer".
#[derive(Debug, Default)]
struct Lines {
    partial: Vec<u8>,
    /// The current line is over the bound: skipped up to its end.
    skipping: bool,
    /// Bytes of the current line read so far (kept or not).
    line_bytes: u64,
    in_string: bool,
    escape: Escape,
    /// Bytes of the current string kept.
    string_kept: usize,
    /// The rest of the current string is dropped.
    capping: bool,
    /// Where in `partial` the last escape unit starts, when it is a UTF-16 high surrogate
    /// (`\uD800`-`\uDBFF`): a cut right after it would leave it unpaired, invalid JSON.
    high_surrogate_at: Option<usize>,
    /// Lines skipped whole, and the longest of them in bytes.
    skipped: usize,
    longest_skipped: u64,
}

/// Where a string's escape stands.
#[derive(Debug, Default, Clone, Copy)]
enum Escape {
    #[default]
    None,
    /// After a backslash starting at `start` in the line.
    Backslash { start: usize },
    /// In `\uXXXX`: `left` hex digits to come, `value` so far.
    Hex { start: usize, left: u8, value: u32 },
}

/// Bytes of one JSON string of an event line kept as written: an escape is at most six bytes
/// a decoded byte (`\u0000`), so a string cut here still decodes to more than
/// [`DELEGATION_OUTPUT_MAX_BYTES`] bytes, and the answer is known to be cut.
const STRING_KEEP: usize = 6 * DELEGATION_OUTPUT_MAX_BYTES + 64;

impl Lines {
    /// Feeds `data`, the next bytes of stdout; every line it completes goes to `parser`.
    fn feed(&mut self, mut data: &[u8], parser: &mut OutputParser) {
        while let Some(&b) = data.first() {
            if self.skipping {
                match data.iter().position(|&b| b == b'\n') {
                    None => {
                        self.line_bytes += data.len() as u64;
                        return;
                    }
                    Some(nl) => {
                        self.line_bytes += nl as u64;
                        self.end_line(parser);
                        data = &data[nl + 1..];
                        continue;
                    }
                }
            }
            if b == b'\n' {
                // A raw line break is never inside a valid JSON string: the line ends.
                self.end_line(parser);
                data = &data[1..];
                continue;
            }
            if !self.in_string {
                let n = data
                    .iter()
                    .position(|&b| b == b'"' || b == b'\n')
                    .unwrap_or(data.len());
                self.keep(&data[..n]);
                data = &data[n..];
                if data.first() == Some(&b'"') {
                    self.keep(b"\"");
                    self.in_string = true;
                    self.string_kept = 0;
                    self.capping = false;
                    self.high_surrogate_at = None;
                    self.escape = Escape::None;
                    data = &data[1..];
                }
                continue;
            }
            match self.escape {
                Escape::None if b == b'"' => {
                    self.keep(b"\"");
                    self.in_string = false;
                    data = &data[1..];
                }
                Escape::None if b == b'\\' => {
                    if !self.capping && self.string_kept >= STRING_KEEP {
                        self.start_capping();
                    }
                    let start = self.partial.len();
                    if !self.capping {
                        self.keep(b"\\");
                    }
                    self.escape = Escape::Backslash { start };
                    data = &data[1..];
                }
                Escape::None => {
                    let n = data
                        .iter()
                        .position(|&b| b == b'"' || b == b'\\' || b == b'\n')
                        .unwrap_or(data.len());
                    let run = &data[..n];
                    if !self.capping {
                        let room = STRING_KEEP.saturating_sub(self.string_kept);
                        let mut take = run.len().min(room);
                        // Cut before a character, never inside one.
                        while take > 0 && take < run.len() && run[take] & 0xC0 == 0x80 {
                            take -= 1;
                        }
                        if take > 0 {
                            self.high_surrogate_at = None;
                        }
                        self.keep(&run[..take]);
                        self.string_kept += take;
                        if take < run.len() {
                            self.start_capping();
                        }
                    }
                    data = &data[n..];
                }
                Escape::Backslash { start } => {
                    if !self.capping {
                        self.keep(&[b]);
                    }
                    self.escape = if b == b'u' {
                        Escape::Hex {
                            start,
                            left: 4,
                            value: 0,
                        }
                    } else {
                        self.string_kept += 2;
                        self.high_surrogate_at = None;
                        Escape::None
                    };
                    data = &data[1..];
                }
                Escape::Hex { start, left, value } => {
                    if !self.capping {
                        self.keep(&[b]);
                    }
                    let value = value * 16 + char::from(b).to_digit(16).unwrap_or(0);
                    self.escape = if left > 1 {
                        Escape::Hex {
                            start,
                            left: left - 1,
                            value,
                        }
                    } else {
                        self.string_kept += 6;
                        self.high_surrogate_at =
                            (0xD800..=0xDBFF).contains(&value).then_some(start);
                        Escape::None
                    };
                    data = &data[1..];
                }
            }
        }
    }

    /// Drops the rest of the current string (a high surrogate just kept goes too).
    fn start_capping(&mut self) {
        if let Some(at) = self.high_surrogate_at.take() {
            self.partial.truncate(at);
        }
        self.capping = true;
    }

    /// Appends to the line; past the bound the line is skipped.
    fn keep(&mut self, bytes: &[u8]) {
        self.line_bytes += bytes.len() as u64;
        if self.skipping {
            return;
        }
        if self.partial.len() + bytes.len() > DELEGATION_EVENT_LINE_MAX_BYTES {
            self.partial = Vec::new();
            self.skipping = true;
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }

    /// The current line ended: parsed, or counted as skipped.
    fn end_line(&mut self, parser: &mut OutputParser) {
        if self.skipping {
            self.skipped += 1;
            self.longest_skipped = self.longest_skipped.max(self.line_bytes);
        } else if !self.partial.is_empty() {
            parser.line(&self.partial);
        }
        self.partial.clear();
        self.skipping = false;
        self.line_bytes = 0;
        self.in_string = false;
        self.escape = Escape::None;
        self.capping = false;
        self.high_surrogate_at = None;
    }

    /// The output ended: its last line, when it did not end with a line break.
    fn finish(&mut self, parser: &mut OutputParser) {
        if self.skipping || !self.partial.is_empty() {
            self.end_line(parser);
        }
    }

    /// What to say about skipped lines, when there were any.
    fn skipped_note(&self) -> Option<String> {
        (self.skipped > 0).then(|| {
            format!(
                "{} line(s) of its JSON output (the longest {} bytes) were too long to read \
                 (over {} bytes with long texts cut) and were not read; its final answer may \
                 have been in one",
                self.skipped, self.longest_skipped, DELEGATION_EVENT_LINE_MAX_BYTES
            )
        })
    }
}

/// Most bytes of a cancellation marker's text read ([`cancel_note`]).
const CANCEL_NOTE_MAX_BYTES: u64 = 1024;

/// The text of the cancellation marker `marker`, when it has one: why the run is cancelled
/// (`Manager::cancel_descendants` writes "cancelled with its ancestor <id>: …"; a marker of
/// `cancel_delegation` through another server is empty). Control characters are dropped.
fn cancel_note(marker: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(marker)
        .ok()?
        .take(CANCEL_NOTE_MAX_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    let text: String = lossy(&bytes).chars().filter(|c| !c.is_control()).collect();
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
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
                environment: p.environment.clone(),
            }),
            Some(w.worker_mcp()),
        ),
        None => (Vec::new(), None),
    };
    let (tap, mut out) = tokio::sync::mpsc::channel(TAP_CHUNKS);
    let spawned = agent_env(p.agent, &p.environment, extra).and_then(|env| {
        let spawn = Spawn {
            argv: agents::command(p.agent, &p.executable, worker_mcp.as_ref()),
            cwd: p.directory.clone(),
            env,
            pty: None,
        };
        Proc::spawn_tapped(&spawn, Some(p.prompt.into_bytes()), tap)
    });
    let proc = match spawned {
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
    let mut out_open = true;
    let mut exit = proc.exit_watch();
    let deadline = tokio::time::Instant::now() + m.run_limit();
    let mut tick = tokio::time::interval(MARKER_TICK);
    let mut session_recorded = false;
    let stopped: Option<(&'static str, String)> = loop {
        if !session_recorded && let Some(sid) = parser.session_id() {
            session_recorded = true;
            let sid = sid.to_owned();
            m.update(&id, move |r| r.session_id = Some(sid)).await;
        }
        if exit.borrow_and_update().is_some() {
            break None;
        }
        tokio::select! {
            chunk = out.recv(), if out_open => match chunk {
                Some(chunk) => lines.feed(&chunk, &mut parser),
                None => out_open = false,
            },
            _ = exit.changed() => {}
            () = token.cancelled() => {
                break Some(if m.closing.is_cancelled() {
                    ("server_stopped", "the server stopped and ended the agent before it \
                     answered; what it changed so far stays; it is not re-run".to_owned())
                } else {
                    ("cancelled", cancel_note(&marker).unwrap_or_else(|| "cancelled: the \
                     agent's process tree was terminated; what it changed so far stays"
                        .to_owned()))
                });
            }
            () = tokio::time::sleep_until(deadline) => {
                break Some(("timeout", format!(
                    "the run limit of {} s passed: the agent's process tree was terminated",
                    m.run_limit().as_secs()
                )));
            }
            _ = tick.tick() => {
                let note = cancel_note(&marker);
                // Taking the marker away tells the server that wrote it that the
                // cancellation was taken up (`Manager::cancel_pending`).
                if std::fs::remove_file(&marker).is_ok() {
                    break Some(("cancelled", note.unwrap_or_else(|| "cancelled (through \
                     another server): the agent's process tree was terminated; what it \
                     changed so far stays".to_owned())));
                }
            }
        }
    };
    // Stdout is read while the tree ends (the tap would hold it back), then what the pump
    // still has, briefly.
    let status = {
        let end = async {
            if stopped.is_some() {
                proc.terminate(false).await
            } else {
                proc.wait().await
            }
        };
        tokio::pin!(end);
        loop {
            tokio::select! {
                status = &mut end => break status,
                chunk = out.recv(), if out_open => match chunk {
                    Some(chunk) => lines.feed(&chunk, &mut parser),
                    None => out_open = false,
                },
            }
        }
    };
    let drain_until = tokio::time::Instant::now() + DRAIN_AFTER_END;
    while out_open {
        match tokio::time::timeout_at(drain_until, out.recv()).await {
            Ok(Some(chunk)) => lines.feed(&chunk, &mut parser),
            _ => out_open = false,
        }
    }
    drop(out);
    lines.finish(&mut parser);
    let skipped_note = lines.skipped_note();
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
            // The parser keeps at most the bound: whether it cut is its to say.
            r.output_truncated |= parsed.answer_truncated;
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
                    .or_else(|| (!stderr_tail.is_empty()).then_some(stderr_tail));
                let why = match (skipped_note, why) {
                    (Some(note), Some(why)) => format!("{note}; {why}"),
                    (Some(note), None) => note,
                    (None, Some(why)) => why,
                    (None, None) => "it gave no final answer".to_owned(),
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::delegation::engine::agents::Agent;

    fn answer_line(text: &str) -> Vec<u8> {
        let event = serde_json::json!({"type": "item.completed",
            "item": {"type": "agent_message", "text": text}});
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        line
    }

    /// Feeds `bytes` in chunks of `chunk` and returns what the parser made of it.
    fn parse(bytes: &[u8], chunk: usize) -> (agents::Parsed, Lines) {
        let mut parser = OutputParser::new(Agent::Codex);
        let mut lines = Lines::default();
        for c in bytes.chunks(chunk) {
            lines.feed(c, &mut parser);
        }
        lines.finish(&mut parser);
        (parser.finish(), lines)
    }

    #[test]
    fn small_lines_split_anywhere_parse_whole() {
        let mut out = b"{\"type\":\"thread.started\",\"thread_id\":\"t\\\"1\"}\n".to_vec();
        out.extend(answer_line("a \"quoted\" \\ answer é\n2"));
        for chunk in [1, 2, 3, 7, 64, out.len()] {
            let (p, _) = parse(&out, chunk);
            assert_eq!(p.session_id.as_deref(), Some("t\"1"), "chunk {chunk}");
            assert_eq!(p.answer.as_deref(), Some("a \"quoted\" \\ answer é\n2"));
            assert!(!p.answer_truncated);
        }
    }

    #[test]
    fn a_text_too_long_for_a_line_is_cut_and_known_to_be_cut() {
        // Escaped surrogate pairs, 12 bytes a character: the cut falls after a high surrogate
        // for one of the two prefixes, which must not be kept unpaired.
        for prefix in ["", "x", "xyzxyz"] {
            let text = format!("{prefix}{}", "😀".repeat(400_000));
            let line = serde_json::to_string(&text)
                .unwrap()
                .chars()
                .flat_map(|c| {
                    if c as u32 > 0xFFFF {
                        let mut b = [0u16; 2];
                        c.encode_utf16(&mut b)
                            .iter()
                            .map(|u| format!("\\u{u:04x}"))
                            .collect::<Vec<_>>()
                    } else {
                        vec![c.to_string()]
                    }
                })
                .collect::<String>();
            let line = format!(
                "{{\"type\":\"item.completed\",\"item\":{{\"type\":\"agent_message\",\"text\":{line}}}}}\n"
            );
            assert!(line.len() > DELEGATION_EVENT_LINE_MAX_BYTES);
            for chunk in [7_777, 65_536] {
                let (p, lines) = parse(line.as_bytes(), chunk);
                let answer = p.answer.expect("an answer");
                assert!(p.answer_truncated, "{prefix:?}");
                assert!(
                    answer.starts_with(prefix) && answer.len() > DELEGATION_OUTPUT_MAX_BYTES - 4
                );
                assert!(answer[prefix.len()..].chars().all(|c| c == '😀'));
                assert_eq!(lines.skipped, 0);
            }
        }
    }

    #[test]
    fn a_line_too_long_without_long_texts_is_skipped_and_counted() {
        let mut out = b"{\"pad\":[".to_vec();
        out.extend(b"0,".repeat(DELEGATION_EVENT_LINE_MAX_BYTES / 2 + 10));
        out.extend(b"0]}\n");
        let long = out.len() as u64 - 1;
        out.extend(answer_line("after"));
        let (p, lines) = parse(&out, 65_536);
        assert_eq!(p.answer.as_deref(), Some("after"));
        assert_eq!((lines.skipped, lines.longest_skipped), (1, long));
        assert!(lines.skipped_note().unwrap().contains(&long.to_string()));
    }
}
