//! `machine-mcp doctor`: fixed checks of what the daemon needs, each one line with its fix.
//!
//! The checks run in a fixed order ([`NAMES`]): the machine ([`local`]: workspace, state
//! directory, git), the relay and the link ([`remote`]: DNS, TCP, TLS, `/healthz`, the clock,
//! the enrollment by a real handshake, a tool call through the relay), then the service and the
//! daemon lock ([`local`]). A check whose prerequisite failed is `skip`, naming it, so one fault
//! reads as one red line. What to check comes from the state directory: the running daemon's
//! record and status report, else the enrollment file, overridden by the flags.

mod local;
mod remote;

use std::{
    io::IsTerminal,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Result;
use daemon::{
    identity::Enrollment,
    instance::{self, Record},
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cli::DoctorArgs;

/// How long the daemon's loopback status endpoint may take to answer.
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);

/// The checks, in the order they are printed.
pub(crate) const NAMES: [&str; 12] = [
    "workspace",
    "state-dir",
    "git",
    "relay-dns",
    "relay-tcp",
    "relay-tls",
    "relay-healthz",
    "relay-clock",
    "enrollment",
    "round-trip",
    "service",
    "lock",
];

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    /// Fine.
    Ok,
    /// Works, but something is off or optional is missing; does not fail the run.
    Warn,
    /// Broken; the run exits 1.
    Fail,
    /// Not checked: a prerequisite failed or what it needs is not known.
    Skip,
}

impl Status {
    /// The four-letter label of the human output.
    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
            Self::Skip => "skip",
        }
    }

    /// The ANSI color of the label on a terminal.
    fn color(self) -> &'static str {
        match self {
            Self::Ok => "\x1b[32m",
            Self::Warn => "\x1b[33m",
            Self::Fail => "\x1b[1;31m",
            Self::Skip => "\x1b[2m",
        }
    }
}

/// One check's result: `fix` is set when it is not `ok` (a skip names its prerequisite in
/// `detail` instead).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    /// One of [`NAMES`].
    pub(crate) name: &'static str,
    /// The outcome.
    pub(crate) status: Status,
    /// What was found.
    pub(crate) detail: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
}

impl Check {
    pub(crate) fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub(crate) fn warn(
        name: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub(crate) fn fail(
        name: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub(crate) fn skip(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Skip,
            detail: detail.into(),
            fix: None,
        }
    }

    /// `None` when every prerequisite passed (ok or warn); else a skip of `name` naming the
    /// first one that failed (or, when that one was skipped, what it names).
    pub(crate) fn gate(name: &'static str, prerequisites: &[&Self]) -> Option<Self> {
        prerequisites.iter().find_map(|p| match p.status {
            Status::Fail => Some(Self::skip(name, format!("skipped: {} failed", p.name))),
            Status::Skip if p.detail.starts_with("skipped: ") => {
                Some(Self::skip(name, p.detail.clone()))
            }
            Status::Skip => Some(Self::skip(name, format!("skipped: {} was skipped", p.name))),
            Status::Ok | Status::Warn => None,
        })
    }
}

/// One line of the human output: label, name and detail aligned, then ` — fix: ...`; colored
/// only when `color`. Text from outside (paths, relay answers) is shown with
/// [`super::printable`].
pub(crate) fn line(c: &Check, color: bool) -> String {
    let width = NAMES.iter().map(|n| n.len()).max().unwrap_or(0);
    let label = format!("{:<4}", c.status.label());
    let label = if color {
        format!("{}{label}\x1b[0m", c.status.color())
    } else {
        label
    };
    let mut out = format!(
        "{label} {:<width$}  {}",
        c.name,
        super::printable(&c.detail)
    );
    if let Some(fix) = &c.fix {
        out.push_str(" — fix: ");
        out.push_str(&super::printable(fix));
    }
    out
}

/// What the checks are about, resolved once from the state directory and the flags.
pub(crate) struct Setup {
    /// The state directory.
    pub(crate) state: PathBuf,
    /// The verified holder of the daemon lock ([`instance::holder`]).
    pub(crate) holder: Result<Option<Record>, String>,
    /// The holder's `/status` report; `None` when none runs or it has no endpoint yet.
    pub(crate) report: Option<Result<Value, String>>,
    /// The daemon subcommand the state belongs to (`up` or `connect`), when known.
    pub(crate) command: Option<String>,
    /// Where the device key and the enrollment live (`STATE/daemon`, `STATE/up/daemon`).
    pub(crate) identity_dir: PathBuf,
    /// `STATE/up`, when the state is `up`'s.
    pub(crate) up_dir: Option<PathBuf>,
    /// The enrollment file.
    pub(crate) enrollment: Result<Option<Enrollment>, String>,
    /// The workspace and where it came from.
    pub(crate) workspace: Result<(PathBuf, &'static str), String>,
    /// The relay.
    pub(crate) relay: Option<url::Url>,
    /// The MCP URL clients use for the bridge.
    pub(crate) mcp_url: Option<String>,
    /// A bearer token for the round trip and where it came from.
    pub(crate) token: Option<(String, String)>,
}

impl Setup {
    /// The link state of the running daemon (`ready`, `backing_off`, ...), from its report.
    pub(crate) fn link(&self) -> Option<&Value> {
        match &self.report {
            Some(Ok(v)) => Some(&v["link"]),
            _ => None,
        }
    }

    /// Whether a daemon runs here and its link is ready.
    pub(crate) fn link_ready(&self) -> bool {
        self.link().is_some_and(|l| l["state"] == "ready")
    }
}

async fn resolve(args: &DoctorArgs) -> Result<Setup> {
    let state = super::state_dir(&args.state)?;
    let holder = instance::holder(&state);
    let report = match &holder {
        Ok(Some(r)) => match r.status_addr {
            Some(addr) => Some(fetch_status(&format!("http://{addr}/status")).await),
            None => None,
        },
        _ => None,
    };
    let report_value = match &report {
        Some(Ok(v)) => Some(v.clone()),
        _ => None,
    };
    let record = match &holder {
        Ok(Some(r)) => Some(r.clone()),
        _ => instance::read_record(&state),
    };
    let command = record.as_ref().map(|r| r.command.clone()).or_else(|| {
        if state.join("daemon/enrollment.json").exists() {
            Some("connect".to_owned())
        } else if state.join("up/daemon/enrollment.json").exists() {
            Some("up".to_owned())
        } else {
            None
        }
    });
    let up_dir = (command.as_deref() == Some("up")).then(|| state.join("up"));
    let identity_dir = match &up_dir {
        Some(up) => up.join("daemon"),
        None => state.join("daemon"),
    };
    let enrollment = Enrollment::load(&identity_dir).map_err(|e| e.to_string());
    let enrolled = enrollment.as_ref().ok().and_then(Option::as_ref);
    let reported = |k: &str| {
        report_value
            .as_ref()
            .and_then(|v| v[k].as_str())
            .map(str::to_owned)
    };
    let workspace = match (&args.workspace, reported("workspace")) {
        (Some(w), _) => Ok((w.clone(), "--workspace")),
        (None, Some(w)) => Ok((PathBuf::from(w), "the running daemon's")),
        (None, None) => super::workspace_or_cwd(None)
            .map(|w| (w, "the current directory"))
            .map_err(|e| format!("{e:#}")),
    };
    let relay = args.relay.clone().or_else(|| {
        reported("relay")
            .or_else(|| enrolled.map(|e| e.relay.clone()))
            .and_then(|r| r.parse().ok())
    });
    let mcp_url = reported("mcp_url")
        .or_else(|| record.as_ref().and_then(|r| r.mcp_url.clone()))
        .or_else(|| {
            let (relay, e) = (relay.as_ref()?, enrolled?);
            Some(format!(
                "{}/b/{}/mcp",
                relay.as_str().trim_end_matches('/'),
                e.bridge
            ))
        });
    let token = match (&args.token, &up_dir) {
        (Some(t), _) => Some((t.trim().to_owned(), "--token".to_owned())),
        (None, Some(up)) => read_token(&up.join("token")),
        (None, None) => None,
    };
    Ok(Setup {
        state,
        holder,
        report,
        command,
        identity_dir,
        up_dir,
        enrollment,
        workspace,
        relay,
        mcp_url,
        token,
    })
}

fn read_token(path: &Path) -> Option<(String, String)> {
    let t = std::fs::read_to_string(path).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| (t.to_owned(), path.display().to_string()))
}

async fn fetch_status(url: &str) -> Result<Value, String> {
    let client = reqwest::Client::builder()
        .timeout(STATUS_TIMEOUT)
        .build()
        .map_err(|e| remote::chain(&e))?;
    let resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| remote::chain(&e))?;
    let text = resp.text().await.map_err(|e| remote::chain(&e))?;
    serde_json::from_str(&text).map_err(|e| format!("unreadable status report: {e}"))
}

/// Runs the checks and prints them; exits 1 (after printing) when one failed.
///
/// # Errors
/// The state directory cannot be resolved.
pub(crate) async fn run(args: DoctorArgs) -> Result<()> {
    daemon::init_tls();
    let setup = resolve(&args).await?;
    let mut checks = vec![
        local::workspace(&setup),
        local::state_dir(&setup),
        local::git(),
    ];
    checks.extend(remote::relay(&setup).await);
    let enrollment = remote::enrollment(&setup, &checks).await;
    let round_trip = remote::round_trip(&setup, &checks, &enrollment).await;
    checks.extend([
        enrollment,
        round_trip,
        local::service(&setup),
        local::lock(&setup),
    ]);
    // The fixes name commands for this state directory: a non-default one is passed on.
    let norm = |p: &std::path::Path| {
        std::fs::canonicalize(p)
            .or_else(|_| std::path::absolute(p))
            .ok()
    };
    let default_state = super::state_dir(&crate::cli::StateArgs { state_dir: None })
        .ok()
        .and_then(|d| norm(&d));
    if norm(&setup.state) != default_state {
        let flag = format!(
            " --state-dir {}",
            shlex::try_quote(&setup.state.to_string_lossy()).unwrap_or_default()
        );
        for c in &mut checks {
            if let Some(f) = &c.fix {
                c.fix = Some(with_state_flag(f, &flag));
            }
        }
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if args.json {
        outln!("{}", json!({"checks": checks, "ok": failed == 0}));
    } else {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        for c in &checks {
            outln!("{}", line(c, color));
        }
        if failed > 0 {
            eprintln!(
                "machine-mcp doctor: {failed} check{} failed",
                if failed == 1 { "" } else { "s" }
            );
        }
    }
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// `fix` with `flag` appended to every command of this machine it quotes (`` `machine-mcp …` ``,
/// not `` `machine-mcp relay …` ``, which runs on the relay with its own store).
fn with_state_flag(fix: &str, flag: &str) -> String {
    let mut out = String::new();
    for (i, part) in fix.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        out.push_str(part);
        let quoted = i % 2 == 1;
        if quoted
            && part.starts_with("machine-mcp ")
            && !part.starts_with("machine-mcp relay ")
            && !part.contains("--state-dir")
        {
            out.push_str(flag);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixes_name_the_state_directory_in_this_machines_commands_only() {
        assert_eq!(
            with_state_flag(
                "`machine-mcp service start`; on the relay `machine-mcp relay bridge add b`, then `machine-mcp connect --relay URL --enroll CODE`",
                " --state-dir /s"
            ),
            "`machine-mcp service start --state-dir /s`; on the relay `machine-mcp relay bridge add b`, then `machine-mcp connect --relay URL --enroll CODE --state-dir /s`"
        );
        assert_eq!(
            with_state_flag("chmod 600 `x`", " --state-dir /s"),
            "chmod 600 `x`"
        );
    }

    #[test]
    fn lines_align_show_the_fix_and_color_only_when_asked() {
        let ok = Check::ok("git", "git version 2.43.0");
        let fail = Check::fail(
            "relay-healthz",
            "GET http://r/healthz → 502",
            "check the proxy",
        );
        assert_eq!(line(&ok, false), "ok   git            git version 2.43.0");
        assert_eq!(
            line(&fail, false),
            "FAIL relay-healthz  GET http://r/healthz → 502 — fix: check the proxy"
        );
        let colored = line(&fail, true);
        assert!(
            colored.starts_with("\x1b[1;31mFAIL\x1b[0m relay-healthz  "),
            "{colored:?}"
        );
        assert!(!line(&fail, false).contains('\x1b'));
        // Text from outside cannot drive the terminal.
        let evil = Check::warn("lock", "pid \x1b]0;x\x07", "none");
        assert!(
            !line(&evil, false).contains('\x1b'),
            "{}",
            line(&evil, false)
        );
    }

    #[test]
    fn a_failed_prerequisite_skips_what_follows_naming_it() {
        let tcp = Check::fail("relay-tcp", "refused", "start it");
        let tls = Check::gate("relay-tls", &[&tcp]).unwrap();
        assert_eq!(tls.status, Status::Skip);
        assert_eq!(tls.detail, "skipped: relay-tcp failed");
        // A skip caused by the failure names the root, not the skip.
        let healthz = Check::gate("relay-healthz", &[&tls]).unwrap();
        assert_eq!(healthz.detail, "skipped: relay-tcp failed");
        let warn = Check::warn("relay-tls", "plain HTTP", "use https");
        assert!(Check::gate("relay-healthz", &[&warn]).is_none());
        let json = serde_json::to_value(&tls).unwrap();
        assert_eq!(
            json,
            json!({"name": "relay-tls", "status": "skip", "detail": "skipped: relay-tcp failed"})
        );
    }
}
