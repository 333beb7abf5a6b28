//! `machine-mcp status`: what the daemon on this state directory is doing, read from its
//! loopback status endpoint (`GET /status`, address in `STATE/daemon.json`).

use std::time::Duration;

use anyhow::Result;
use daemon::instance::{self, human_duration};
use serde_json::{Value, json};

use crate::cli::StatusArgs;

/// How long `status` waits for the daemon's answer.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Exit status when no daemon runs, or it runs but its link is not ready or it does not answer.
const EXIT_NOT_READY: i32 = 1;
/// Exit status when the state directory cannot be read, so whether a daemon runs is unknown.
const EXIT_UNREADABLE: i32 = 3;

/// Prints the status; exits [`EXIT_NOT_READY`] (after printing) unless a daemon runs and its
/// link is ready, [`EXIT_UNREADABLE`] when the state directory cannot be read.
///
/// # Errors
/// The state directory cannot be resolved.
pub(crate) fn run(args: &StatusArgs) -> Result<()> {
    let dir = super::state_dir(&args.state)?;
    if let Some(why) = unreadable(&dir) {
        let report = json!({"running": "unknown", "error": why});
        if args.json {
            outln!("{report}");
        } else {
            print_human(&report);
            eprintln!("machine-mcp status: {why}");
        }
        std::process::exit(EXIT_UNREADABLE);
    }
    let (report, problem) = match instance::holder(&dir) {
        Ok(None) => (
            json!({"running": false}),
            Some(format!(
                "no daemon is running on {} (start one with `machine-mcp up` or `machine-mcp connect`, or `machine-mcp service start`)",
                dir.display()
            )),
        ),
        Err(why) => (json!({"running": "unknown", "error": why}), Some(why)),
        Ok(Some(record)) => match record.status_addr {
            None => (
                json!({"running": true, "pid": record.pid, "link": {"state": "starting"}}),
                Some(format!(
                    "{}: it has not opened its status endpoint yet (it is starting)",
                    record.describe()
                )),
            ),
            Some(addr) => match fetch(&format!("http://{addr}/status")) {
                Ok(mut v) => {
                    v["running"] = json!(true);
                    let ready = v["link"]["state"] == "ready";
                    (
                        v,
                        (!ready).then(|| "the link to the relay is not ready".to_owned()),
                    )
                }
                Err(Unanswered::TimedOut) => {
                    let e = format!(
                        "timed out talking to PID {}'s status endpoint at {addr}; it may be stopped (SIGSTOP) or overloaded",
                        record.pid
                    );
                    (
                        json!({"running": true, "pid": record.pid, "error": e}),
                        Some(format!("{}: {e}", record.describe())),
                    )
                }
                Err(Unanswered::Other(e)) => (
                    json!({"running": true, "pid": record.pid, "error": e}),
                    Some(format!(
                        "{} does not answer on its status endpoint {addr}: {e}",
                        record.describe()
                    )),
                ),
            },
        },
    };
    if args.json {
        outln!("{report}");
    } else {
        print_human(&report);
        if let Some(p) = &problem {
            eprintln!("machine-mcp status: {p}");
        }
    }
    if problem.is_some() {
        std::process::exit(EXIT_NOT_READY);
    }
    Ok(())
}

/// Why the state directory `dir` cannot be read (so whether a daemon runs there is unknown):
/// it is a file, or it, its lock or its record cannot be opened. `None` when it can be, or
/// does not exist (then no daemon runs).
fn unreadable(dir: &std::path::Path) -> Option<String> {
    use std::io::ErrorKind;
    let hint = |m: String| {
        m.replace(
            "choose another --state-dir",
            "pass the --state-dir the daemon uses",
        )
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(e) => return Some(hint(daemon::state_io::describe(dir, &e))),
        Ok(m) if !m.is_dir() => {
            let e = std::io::Error::from(ErrorKind::AlreadyExists);
            return Some(hint(daemon::state_io::describe(dir, &e)));
        }
        Ok(_) => {}
    }
    if let Err(e) = std::fs::read_dir(dir) {
        return Some(hint(daemon::state_io::describe(dir, &e)));
    }
    for file in [instance::LOCK_FILE, instance::RECORD_FILE] {
        let path = dir.join(file);
        match std::fs::File::open(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                return Some(hint(daemon::state_io::describe(&path, &e)));
            }
            _ => {}
        }
    }
    None
}

/// Why the status endpoint gave no report.
enum Unanswered {
    /// No answer within [`TIMEOUT`].
    TimedOut,
    /// Any other failure, said once.
    Other(String),
}

fn fetch(url: &str) -> Result<Value, Unanswered> {
    let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
    let timed_out = |e: &(dyn std::error::Error + 'static)| {
        let mut cur = Some(e);
        while let Some(e) = cur {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && matches!(
                    io.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                )
            {
                return true;
            }
            cur = e.source();
        }
        false
    };
    let resp = match agent.get(url).call() {
        Ok(r) => r,
        Err(ureq::Error::Transport(t)) => {
            if timed_out(&t) {
                return Err(Unanswered::TimedOut);
            }
            // The transport error's Display repeats its kind and message; say them once.
            let why = t
                .message()
                .map_or_else(|| t.kind().to_string(), str::to_owned);
            return Err(Unanswered::Other(why));
        }
        Err(e) => return Err(Unanswered::Other(e.to_string())),
    };
    resp.into_json::<Value>().map_err(|e| {
        if timed_out(&e) {
            Unanswered::TimedOut
        } else {
            Unanswered::Other(format!("its answer is not JSON ({e})"))
        }
    })
}

/// `unix_ms` as "N s ago" / "in N s" relative to now.
fn relative(unix_ms: &Value) -> Option<String> {
    let t = unix_ms.as_u64()?;
    let now = protocol::frame::now_unix_ms();
    Some(if t <= now {
        format!("{} ago", human_duration((now - t) / 1000))
    } else {
        format!("in {}", human_duration((t - now).div_ceil(1000)))
    })
}

fn print_human(r: &Value) {
    let row = |k: &str, v: String| outln!("{k:<20} {}", super::printable(&v));
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    if r["running"] == json!("unknown") {
        row("running", "unknown".into());
        row("error", s(&r["error"]));
        return;
    }
    if r["running"] != json!(true) {
        row("running", "no".into());
        return;
    }
    row("running", "yes".into());
    row("pid", s(&r["pid"]));
    if let Some(up) = r["uptime_s"].as_u64() {
        row("uptime", human_duration(up));
    }
    for k in [
        "version",
        "command",
        "relay",
        "bridge",
        "mcp_url",
        "workspace",
        "policy",
    ] {
        if !r[k].is_null() {
            row(k, s(&r[k]));
        }
    }
    let link = &r["link"];
    let mut state = s(&link["state"]).replace('_', " ");
    if let Some(next) = relative(&link["next_attempt_unix_ms"])
        && link["state"] == "backing_off"
    {
        state = format!("{state} (next attempt {next})");
    }
    row("link", state);
    if let Some(h) = relative(&link["last_heartbeat_unix_ms"]) {
        row("last heartbeat", h);
    }
    if let Some(o) = relative(&link["outage_since_unix_ms"]) {
        row("outage since", o);
    }
    if !link["last_error"].is_null() {
        row("last error", s(&link["last_error"]));
    }
    for (label, k) in [
        ("sessions", "sessions"),
        ("calls in flight", "requests_in_flight"),
        ("process sessions", "process_sessions"),
        ("jobs running", "jobs_running"),
    ] {
        if !r[k].is_null() {
            row(label, s(&r[k]));
        }
    }
    if !r["error"].is_null() {
        row("error", s(&r["error"]));
    }
}
