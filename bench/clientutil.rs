//! Shared by the standard-library-only benchmark clients bench/loadgen.rs and bench/streamer.rs,
//! each built with plain `rustc -O` (this file is found as their `mod clientutil;`).

/// utime + stime of this process (all threads), seconds, from /proc/self/stat (10 ms resolution).
pub fn self_cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // f[0] is field 3 (state); utime is field 14, stime field 15. CLK_TCK is 100 on Linux.
    (t(11) + t(12)) / 100.0
}

/// `s` as a JSON string literal, quotes included.
pub fn json_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Starts `argv` with stdin and stdout piped to this process and stderr discarded: an MCP stdio
/// server under test.
pub fn spawn_piped(argv: &[String]) -> std::io::Result<std::process::Child> {
    use std::process::{Command, Stdio};
    Command::new(&argv[0]).args(&argv[1..]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()
}
