//! `machine-mcp status`: what the daemon on this state directory is doing, read from its
//! loopback status endpoint (`GET /status`, address in `STATE/daemon.json`).

use std::time::Duration;

use anyhow::Result;
use daemon::instance::{self, human_duration};
use serde_json::{Value, json};

use crate::cli::StatusArgs;

/// How long `status` waits for the daemon's answer.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Prints the status; exits 1 (after printing) unless a daemon runs and its link is ready.
///
/// # Errors
/// The state directory cannot be resolved.
pub(crate) fn run(args: &StatusArgs) -> Result<()> {
    let dir = super::state_dir(&args.state)?;
    let (report, problem) = match instance::holder(&dir) {
        Ok(None) => (
            json!({"running": false}),
            Some(format!(
                "no daemon is running on {} (start one with `machine-mcp up` or `machine-mcp connect`, or `machine-mcp service start`)",
                dir.display()
            )),
        ),
        Err(why) => (json!({"running": null, "error": why}), Some(why)),
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
                Err(e) => (
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
        println!("{report}");
    } else {
        print_human(&report);
        if let Some(p) = &problem {
            eprintln!("machine-mcp status: {p}");
        }
    }
    if problem.is_some() {
        std::process::exit(1);
    }
    Ok(())
}

fn fetch(url: &str) -> Result<Value, String> {
    let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
    let resp = agent.get(url).call().map_err(|e| e.to_string())?;
    resp.into_json::<Value>().map_err(|e| e.to_string())
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
    let row = |k: &str, v: String| println!("{k:<20} {}", super::printable(&v));
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
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
        ("calls in flight", "calls_in_flight"),
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
