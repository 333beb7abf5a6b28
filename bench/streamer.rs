//! Stream reader for the process-session throughput benchmark (bench/processes.py, section 5b):
//! one compiled client that reads the same paced stream through our `read_process`, through
//! desktop-commander's `read_process_output`, and straight from a pipe. Standard library only
//! (`rustc -O bench/streamer.rs`), like bench/loadgen.rs, so the client's own CPU stays small
//! next to the servers' (the Python driver spends about 1.4 ms of CPU per MB of response line
//! just reading it, more than our server spends producing it; BENCHMARKS.md shows both).
//!
//! ```text
//! streamer ours [--credit FIFO] -- SERVER ARGV... -- PRODUCER ARGV...
//! streamer dc   [--credit FIFO] [--deadline S] -- SERVER ARGV... -- PRODUCER ARGV...
//! streamer pipe [--credit FIFO] -- PRODUCER ARGV...
//! ```
//!
//! - `ours`: `start_process` with the producer's argv, then `read_process` (`max_bytes` 1 MiB,
//!   `wait_ms` 5000, `stdout_offset` = the previous `next_offset`) until the process has exited
//!   and everything is read. Fields are taken from the raw response line without decoding its
//!   megabytes of text. The line is `{"jsonrpc":…,"id":…,"result":{"content":[{"type":"text",
//!   "text":M}],"structuredContent":S,"isError":false}}` where M is a summary line
//!   (`read_process ID: running; …` or `…: exited with code N; …`) and then the output, so the
//!   state is read from the head of M; S's keys are sorted and `stdout` is S's last chunk, `{"data":…,"dropped_bytes":…,"next_offset":…,
//!   "offset":…,"total_bytes":…}`, so its numbers are read from the line's last 600 bytes (a
//!   quote inside `data` is escaped, so these keys cannot match inside it). received = the bytes
//!   between offsets.
//! - `dc`: desktop-commander's `start_process` (the producer argv joined into one shell command
//!   line, `timeout_ms` 1), then `read_process_output` with `offset` 0 ("new output since the
//!   last read", `timeout_ms` 5000, `length` 10485 lines ≈ 1 MiB) while the process runs; once it
//!   reports completion, the rest by absolute line offsets. received = intact 100-byte lines ×
//!   100 (it can split a line across two reads). Gives up at `--deadline` seconds (default 40)
//!   and reports what had arrived, with `"unfinished": true`.
//! - `pipe`: reads the producer's stdout itself, 1 MiB per `read`.
//!
//! With `--credit FIFO` the reader writes its stream position and a newline to the FIFO after
//! every read (bench/producer.py paces itself by it). Prints one JSON object: `{"elapsed_ns",
//! "received", "dropped", "calls", "total", "client_cpu_s", "unfinished", "lines_read"}`; the
//! time runs from the start call (or the producer's spawn) to the read that reports the exit with
//! everything read. Any failure exits 1 with a message on stderr.

mod clientutil;

use clientutil::{json_escape, self_cpu, spawn_piped};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

const MIB: usize = 1 << 20;
const LINE_LEN: usize = 100;
/// Linux's O_NONBLOCK (the same value on x86-64 and arm64).
const O_NONBLOCK: i32 = 0o4000;

fn die(msg: impl AsRef<str>) -> ! {
    eprintln!("streamer: {}", msg.as_ref());
    std::process::exit(1);
}

/// The reader's side of the producer's pacing FIFO.
struct Credit(Option<File>);

impl Credit {
    fn open(path: Option<&str>) -> Self {
        // Read-write: opening does not wait for the producer, and the FIFO always has a writer.
        Credit(path.map(|p| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(O_NONBLOCK)
                .open(p)
                .unwrap_or_else(|e| die(format!("opening {p}: {e}")))
        }))
    }

    fn ack(&mut self, position: u64) {
        if let Some(f) = &mut self.0 {
            match f.write_all(format!("{position}\n").as_bytes()) {
                // The producer has not read the older positions yet; it will catch up.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => die(format!("writing the credit FIFO: {e}")),
                Ok(()) => {}
            }
        }
    }
}

/// Reads `\n`-terminated lines into one reused buffer, straight from the pipe (no second
/// buffer to copy each line out of).
struct LineReader {
    src: ChildStdout,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`; `buf[start..scanned]` has no newline.
    start: usize,
    end: usize,
    scanned: usize,
    /// The line [`LineReader::advance`] found last.
    last: (usize, usize),
}

impl LineReader {
    fn new(src: ChildStdout) -> Self {
        LineReader { src, buf: vec![0; 4 * MIB], start: 0, end: 0, scanned: 0, last: (0, 0) }
    }

    /// The line found last (without its newline).
    fn line(&self) -> &[u8] {
        &self.buf[self.last.0..self.last.1]
    }

    /// Finds the next line (see [`LineReader::line`]); false at end of input.
    fn advance(&mut self) -> bool {
        loop {
            if let Some(i) = find_newline(&self.buf[self.scanned..self.end]) {
                self.last = (self.start, self.scanned + i);
                self.start = self.last.1 + 1;
                self.scanned = self.start;
                return true;
            }
            self.scanned = self.end;
            if self.start > 0 {
                // Move the partial line to the front.
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.scanned -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < MIB {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => return false,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => die(format!("reading the response: {e}")),
            }
        }
    }
}

/// The index of the first `\n` in `b`, eight bytes at a time (std has no public memchr).
fn find_newline(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while i + 8 <= b.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        let x = u64::from_le_bytes(w) ^ (ONES * u64::from(b'\n'));
        // A zero byte in x is a newline in b (the classic has-zero-byte test).
        if x.wrapping_sub(ONES) & !x & HIGHS != 0 {
            break;
        }
        i += 8;
    }
    b[i..].iter().position(|&c| c == b'\n').map(|p| i + p)
}

/// One MCP stdio session.
struct Session {
    stdin: ChildStdin,
    stdout: LineReader,
    next_id: u64,
}

impl Session {
    fn start(argv: &[String], protocol: &str) -> Self {
        let mut child = spawn_piped(argv).unwrap_or_else(|e| die(format!("starting {}: {e}", argv[0])));
        let stdin = child.stdin.take().unwrap_or_else(|| die("no stdin"));
        let stdout = child.stdout.take().unwrap_or_else(|| die("no stdout"));
        // The child is reaped when this process exits (it ends when its stdin closes).
        std::mem::forget(child);
        let mut s = Session { stdin, stdout: LineReader::new(stdout), next_id: 1 };
        s.request(
            "initialize",
            &format!(
                r#"{{"protocolVersion":"{protocol}","capabilities":{{}},"clientInfo":{{"name":"machine-bridge-bench","version":"1"}}}}"#
            ),
        );
        s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        s
    }

    fn send(&mut self, msg: &str) {
        let mut m = String::with_capacity(msg.len() + 1);
        m.push_str(msg);
        m.push('\n');
        self.stdin.write_all(m.as_bytes()).unwrap_or_else(|e| die(format!("writing the request: {e}")));
    }

    /// Sends a request and returns its response line (without the newline), skipping
    /// notifications and server requests (a line whose head has `"method"`).
    fn request(&mut self, method: &str, params: &str) -> &[u8] {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#));
        // Servers put the id first (ours: `{"jsonrpc":"2.0","id":N,...`) or last (the TypeScript
        // SDK: `...,"jsonrpc":"2.0","id":N}`).
        let (first, last) = (format!("\"id\":{id},"), format!("\"id\":{id}}}"));
        loop {
            if !self.stdout.advance() {
                die(format!("the server closed stdout during {method}"));
            }
            let line = self.stdout.line();
            let head = String::from_utf8_lossy(&line[..line.len().min(200)]);
            let tail = String::from_utf8_lossy(&line[line.len().saturating_sub(64)..]);
            if (head.contains(&first) || tail.ends_with(&last)) && !head.contains("\"method\"") {
                return self.stdout.line();
            }
        }
    }

    fn call(&mut self, tool: &str, args: &str) -> &[u8] {
        self.request("tools/call", &format!(r#"{{"name":"{tool}","arguments":{args}}}"#))
    }

    /// `call` for a response read as a whole (desktop-commander's).
    fn call_text(&mut self, tool: &str, args: &str) -> &str {
        std::str::from_utf8(self.call(tool, args)).unwrap_or_else(|_| die("a response is not UTF-8"))
    }
}

/// The unsigned integer after the first `"key":` at or after `from`.
fn int_after(line: &str, key: &str, from: usize) -> u64 {
    let pat = format!("\"{key}\":");
    let i = line[from..].find(&pat).unwrap_or_else(|| die(format!("no {key} in {}", &line[..line.len().min(300)])));
    let digits: String = line[from + i + pat.len()..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| die(format!("{key} is not a number")))
}

struct Outcome {
    received: u64,
    dropped: u64,
    calls: u64,
    total: u64,
    unfinished: bool,
    lines_read: u64,
}

fn ours(server: &[String], producer: &[String], credit: &mut Credit) -> Outcome {
    let mut s = Session::start(server, "2025-11-25");
    let argv: Vec<String> = producer.iter().map(|a| json_escape(a)).collect();
    let started = s.call_text("start_process", &format!(r#"{{"argv":[{}]}}"#, argv.join(",")));
    let sid = started
        .split("\"session_id\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| die(format!("start_process: {started}")))
        .to_owned();
    let (mut off, mut received, mut dropped, mut calls) = (0u64, 0u64, 0u64, 0u64);
    loop {
        let args = format!(r#"{{"session_id":"{sid}","stdout_offset":{off},"max_bytes":{MIB},"wait_ms":5000}}"#);
        let line = s.call("read_process", &args);
        calls += 1;
        // Only the line's head and tail are looked at (the client never touches the megabyte
        // between them beyond finding the newline).
        let head = String::from_utf8_lossy(&line[..line.len().min(400)]);
        let tail = String::from_utf8_lossy(&line[line.len().saturating_sub(600)..]);
        if head.contains("\"error\":{") || tail.contains("\"isError\":true") {
            die(format!("read_process: {head}"));
        }
        // The head: the text block's summary line, `read_process ID: running; …` or
        // `read_process ID: exited with code N; …`, before any output. The tail:
        // structuredContent's stdout numbers.
        let summary = head
            .find("\"text\":\"read_process ")
            .map(|i| &head[i..])
            .unwrap_or_else(|| die(format!("no summary line in {head}")));
        let running = summary.contains(": running");
        // stdout is the last chunk (after stderr), its numbers follow its data.
        let j = tail.rfind("\"dropped_bytes\":").unwrap_or_else(|| die(format!("no dropped_bytes in {tail}")));
        let start = int_after(&tail, "offset", j);
        let next = int_after(&tail, "next_offset", j);
        let drop = int_after(&tail, "dropped_bytes", j);
        let total = int_after(&tail, "total_bytes", j);
        received += next - start;
        dropped += drop;
        off = next;
        credit.ack(off);
        if !running && off >= total {
            if !summary.contains(": exited with code 0;") {
                die(format!("the producer did not exit 0: {tail}"));
            }
            return Outcome { received, dropped, calls, total, unfinished: false, lines_read: 0 };
        }
    }
}

/// The number after `prefix` in `text`, and where the number ends.
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let i = text.find(prefix)? + prefix.len();
    text[i..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()
}

/// N of desktop-commander's "[Reading N lines" / "[Reading N new lines" header.
fn dc_lines_read(head: &str) -> Option<u64> {
    number_after(head, "[Reading ")
}

fn dc(server: &[String], producer: &[String], credit: &mut Credit, deadline_s: f64, t0: Instant) -> Outcome {
    let mut s = Session::start(server, "2025-06-18");
    let length = MIB / LINE_LEN;
    let full_line = "a".repeat(LINE_LEN - 1);
    let cmd = json_escape(&producer.join(" "));
    let started = s.call_text("start_process", &format!(r#"{{"command":{cmd},"timeout_ms":1}}"#)).to_owned();
    let pid = number_after(&started, "PID ").unwrap_or_else(|| die(format!("start_process: {}", &started[..started.len().min(300)])));
    let (mut consumed, mut intact, mut calls) = (0u64, 0u64, 0u64);
    loop {
        let args = format!(r#"{{"pid":{pid},"offset":0,"length":{length},"timeout_ms":5000}}"#);
        let line = s.call_text("read_process_output", &args);
        calls += 1;
        if line[line.len().saturating_sub(400)..].contains("Process completed with exit code") {
            break; // this read started over at line 0: drop it, continue by offsets
        }
        let head = &line[..line.len().min(400)];
        let n = dc_lines_read(head).unwrap_or_else(|| die(format!("read_process_output: {head}")));
        consumed += n;
        intact += line.matches(full_line.as_str()).count() as u64;
        credit.ack(consumed * LINE_LEN as u64);
        if t0.elapsed().as_secs_f64() > deadline_s {
            // Its reads slow down as its buffer grows (CPU-bound): report what arrived by then.
            return Outcome { received: intact * LINE_LEN as u64, dropped: 0, calls, total: 0, unfinished: true, lines_read: consumed };
        }
    }
    loop {
        let args = format!(r#"{{"pid":{pid},"offset":{consumed},"length":{length}}}"#);
        let line = s.call_text("read_process_output", &args);
        calls += 1;
        let head = &line[..line.len().min(400)];
        let n = dc_lines_read(head).unwrap_or(0);
        consumed += n;
        intact += line.matches(full_line.as_str()).count() as u64;
        // "… (N remaining)": the number before the word.
        let remaining = head
            .find(" remaining)")
            .map(|e| head[..e].rsplit(|c: char| !c.is_ascii_digit()).next().unwrap_or("").parse::<u64>().unwrap_or(0));
        if n == 0 || remaining.unwrap_or(0) == 0 {
            if !line[line.len().saturating_sub(400)..].contains("exit code 0") {
                eprintln!("streamer: desktop-commander's last read did not say exit code 0");
            }
            return Outcome { received: intact * LINE_LEN as u64, dropped: 0, calls, total: 0, unfinished: false, lines_read: consumed };
        }
    }
}

fn pipe(producer: &[String], credit: &mut Credit) -> Outcome {
    let mut child = Command::new(&producer[0])
        .args(&producer[1..])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| die(format!("starting the producer: {e}")));
    let mut out = child.stdout.take().unwrap_or_else(|| die("no stdout"));
    let mut buf = vec![0u8; MIB];
    let (mut received, mut calls) = (0u64, 0u64);
    loop {
        let n = match out.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => die(format!("reading the pipe: {e}")),
        };
        calls += 1;
        if n == 0 {
            break;
        }
        received += n as u64;
        credit.ack(received);
    }
    let _ = child.wait();
    Outcome { received, dropped: 0, calls, total: 0, unfinished: false, lines_read: 0 }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().cloned().unwrap_or_else(|| die("usage: streamer ours|dc|pipe [--credit FIFO] [--deadline S] -- ..."));
    let (mut credit_path, mut deadline) = (None, 40.0);
    let mut i = 1;
    while i < args.len() && args[i] != "--" {
        match args[i].as_str() {
            "--credit" => credit_path = args.get(i + 1).cloned(),
            "--deadline" => deadline = args.get(i + 1).and_then(|d| d.parse().ok()).unwrap_or_else(|| die("--deadline S")),
            other => die(format!("unknown option {other}")),
        }
        i += 2;
    }
    let groups: Vec<Vec<String>> = args[i.min(args.len())..]
        .split(|a| a == "--")
        .skip(1)
        .map(|g| g.to_vec())
        .collect();
    let (server, producer) = match (mode.as_str(), groups.as_slice()) {
        ("pipe", [p]) if !p.is_empty() => (Vec::new(), p.clone()),
        ("ours" | "dc", [s, p]) if !s.is_empty() && !p.is_empty() => (s.clone(), p.clone()),
        _ => die("usage: streamer ours|dc -- SERVER... -- PRODUCER... | streamer pipe -- PRODUCER..."),
    };
    let mut credit = Credit::open(credit_path.as_deref());
    let producer_total: u64 = producer.iter().find_map(|a| a.parse().ok()).unwrap_or(0);
    let cpu0 = self_cpu();
    let t0 = Instant::now();
    let o = match mode.as_str() {
        "ours" => ours(&server, &producer, &mut credit),
        "dc" => dc(&server, &producer, &mut credit, deadline, t0),
        _ => pipe(&producer, &mut credit),
    };
    let elapsed = t0.elapsed().as_nanos();
    let total = if o.total > 0 { o.total } else { producer_total };
    let dropped = if mode == "ours" { o.dropped } else if o.unfinished { 0 } else { total.saturating_sub(o.received) };
    println!(
        r#"{{"elapsed_ns":{elapsed},"received":{},"dropped":{dropped},"calls":{},"total":{total},"client_cpu_s":{:.3},"unfinished":{},"lines_read":{}}}"#,
        o.received,
        o.calls,
        self_cpu() - cpu0,
        o.unfinished,
        o.lines_read
    );
}
