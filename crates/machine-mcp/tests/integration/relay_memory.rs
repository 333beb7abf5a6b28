//! The relay's memory under a credential holder's abuse: request bodies in flight are bounded per
//! credential and in all (past the budget 429 or 503 with `Retry-After`, before the body is
//! read), large ones are spilled to disk as they arrive, and the memory a burst took is given
//! back after it.

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::oauth::Setup;

/// Resident memory of process `pid`, in KiB (`VmRSS` of `/proc/PID/status`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// What one held connection reported.
enum Event {
    /// The whole body but its last byte was written (the relay read it).
    Held(TcpStream),
    /// The relay answered this status (and `Retry-After` was present).
    Answered(u16, bool),
}

/// Regression: one reviewer token sent 8 MiB minus one byte on each of 128
/// connections and held them; relay memory grew by a gigabyte and stayed. Now bodies in flight
/// are bounded per credential and in all: past the budget the relay answers 429 or 503 with
/// `Retry-After` before reading, and RSS grows by the budget at most, and shrinks after. The
/// bodies it admits are spilled to disk as they arrive, so they hold at most the spill threshold
/// of memory each.
#[test]
fn held_bodies_of_one_credential_are_refused_past_the_budget_and_memory_comes_back() {
    const CONNECTIONS: usize = 32;
    const BODY: usize = 8 * 1024 * 1024 - 1;
    const SPILL_THRESHOLD: usize = 256 * 1024;
    let s = Setup::start(&[]);
    let token = s.relay.token("b", "reviewer");
    let pid = s.relay.proc.child.id();
    let baseline = rss_kib(pid);
    let (tx, rx) = mpsc::channel();
    for _ in 0..CONNECTIONS {
        let (tx, port, token) = (tx.clone(), s.relay.port, token.clone());
        std::thread::spawn(move || {
            let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let head = format!(
                "POST /b/b/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                 Content-Length: {BODY}\r\n\r\n"
            );
            tcp.write_all(head.as_bytes()).unwrap();
            // A refused request is answered without its body being read, so the answer is read
            // while the body is written (it may come before, or instead of, the whole body).
            let (answer_tx, answer_rx) = mpsc::channel();
            let mut reader = tcp.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut answer = [0u8; 4096];
                let n = reader.read(&mut answer).unwrap_or(0);
                let text = String::from_utf8_lossy(&answer[..n]).to_ascii_lowercase();
                let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
                let _ = answer_tx.send(Event::Answered(status, text.contains("retry-after:")));
            });
            let written = tcp.write_all(&vec![b' '; BODY - 1]).is_ok();
            let wait = if written { 3 } else { 60 };
            let event = match answer_rx.recv_timeout(Duration::from_secs(wait)) {
                Ok(answered) => answered,
                Err(_) if written => Event::Held(tcp),
                Err(_) => Event::Answered(0, false),
            };
            let _ = tx.send(event);
        });
    }
    drop(tx);
    let mut held = Vec::new();
    let mut refused = 0;
    for event in rx.iter().take(CONNECTIONS) {
        match event {
            Event::Held(tcp) => held.push(tcp),
            Event::Answered(status, retry_after) => {
                assert!(
                    matches!(status, 429 | 503) && retry_after,
                    "refused with {status}, Retry-After {retry_after}"
                );
                refused += 1;
            }
        }
    }
    let during = rss_kib(pid);
    let grown_mib = during.saturating_sub(baseline) / 1024;
    assert!(
        refused >= CONNECTIONS / 2,
        "{refused} of {CONNECTIONS} refused, {} held; RSS grew {grown_mib} MiB",
        held.len()
    );
    assert!(
        grown_mib < 160,
        "RSS grew {grown_mib} MiB while bodies were held"
    );
    // The held bodies were spilled, as they arrived, to anonymous files in `spill/` beside the
    // store (owner-only, no names in it): each holds at most the 256 KiB threshold in memory.
    assert_eq!(
        s.relay
            .metric("machine_mcp_relay_request_bodies_spilled_total "),
        held.len() as i64
    );
    let in_memory = s
        .relay
        .metric("machine_mcp_relay_request_body_bytes_in_memory ");
    assert!(
        (0..=(SPILL_THRESHOLD * held.len()) as i64).contains(&in_memory),
        "{in_memory} bytes of {} held bodies in memory",
        held.len()
    );
    let spill = s.relay.store.parent().unwrap().join("spill");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&spill).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0);
    // The held connections close; the memory goes back within the periodic trim.
    for tcp in &held {
        let _ = tcp.shutdown(std::net::Shutdown::Both);
    }
    drop(held);
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let after = rss_kib(pid).saturating_sub(baseline) / 1024;
        if after < 64 {
            break;
        }
        assert!(Instant::now() < end, "RSS still {after} MiB above baseline");
        std::thread::sleep(Duration::from_millis(500));
    }
}
