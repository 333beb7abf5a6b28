//! The checks of this machine: the workspace, the state directory's permissions, git, the
//! service and the daemon lock.

use std::{
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::PathBuf,
    process::Command,
};

use daemon::instance::LOCK_FILE;

use super::{Check, Setup};
use crate::{cli::ServicePlatform, commands::service};

/// The workspace is an existing directory this user can list.
pub(super) fn workspace(setup: &Setup) -> Check {
    const NAME: &str = "workspace";
    let (w, from) = match &setup.workspace {
        Ok(w) => w,
        Err(e) => {
            return Check::fail(
                NAME,
                e.clone(),
                "run doctor from a readable directory or pass --workspace DIR",
            );
        }
    };
    let choose = "pass the directory to serve with --workspace DIR (the daemon needs it too: `machine-mcp up --workspace DIR`, `machine-mcp connect --workspace DIR`)";
    match std::fs::metadata(w) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Check::fail(
            NAME,
            format!("{} ({from}) does not exist", w.display()),
            format!("create it (`mkdir -p {}`) or {choose}", w.display()),
        ),
        Err(e) => Check::fail(
            NAME,
            format!("{} ({from}) cannot be read: {e}", w.display()),
            format!("give your user access to it or {choose}"),
        ),
        Ok(m) if !m.is_dir() => Check::fail(
            NAME,
            format!("{} ({from}) is not a directory", w.display()),
            choose,
        ),
        Ok(_) => match std::fs::read_dir(w) {
            Ok(_) => Check::ok(
                NAME,
                format!("{} ({from}) is a readable directory", w.display()),
            ),
            Err(e) => Check::fail(
                NAME,
                format!("{} ({from}) cannot be listed: {e}", w.display()),
                format!("`chmod u+rx {}` or {choose}", w.display()),
            ),
        },
    }
}

/// The state directory, the directory of the device key and the secret files are owner-only
/// and owned by this user.
pub(super) fn state_dir(setup: &Setup) -> Check {
    const NAME: &str = "state-dir";
    let state = &setup.state;
    match std::fs::metadata(state) {
        Ok(m) if m.is_dir() => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::fail(
                NAME,
                format!("{} does not exist", state.display()),
                "start `machine-mcp up`, or enroll with `machine-mcp connect --relay URL --enroll CODE`; or pass the --state-dir they use",
            );
        }
        Ok(_) => {
            return Check::fail(
                NAME,
                format!("{} is a file, not a directory", state.display()),
                "move that file away, or pass another --state-dir",
            );
        }
        Err(e) => {
            // A file in the path, or no access: the message names the path at fault.
            return Check::fail(
                NAME,
                daemon::state_io::describe(state, &e),
                "fix the path it names, or pass another --state-dir",
            );
        }
    }
    let mut dirs: Vec<PathBuf> = vec![state.clone(), setup.identity_dir.clone()];
    dirs.extend(setup.up_dir.clone());
    let mut files = vec![
        setup.identity_dir.join("device-key.pem"),
        setup.identity_dir.join("enrollment.json"),
    ];
    if let Some(up) = &setup.up_dir {
        files.push(up.join("token"));
    }
    let me = nix::unistd::geteuid().as_raw();
    let (mut problems, mut fixes, mut checked) = (Vec::new(), Vec::new(), 0);
    // The secrets live in owner-only subdirectories: an open top directory only shows what
    // it holds, so it is a warning.
    let mut secret_exposed = false;
    for (path, dir) in dirs
        .iter()
        .map(|d| (d, true))
        .chain(files.iter().map(|f| (f, false)))
    {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        checked += 1;
        let mode = meta.permissions().mode() & 0o777;
        if meta.uid() != me {
            secret_exposed = true;
            problems.push(format!(
                "{} is owned by uid {}, not by you (uid {me})",
                path.display(),
                meta.uid()
            ));
            fixes.push(format!("chown {me} {}", path.display()));
        }
        if mode & 0o077 != 0 {
            secret_exposed |= path != state;
            let want = if dir { 0o700 } else { 0o600 };
            problems.push(format!(
                "{} is mode {mode:04o}: {} can read it",
                path.display(),
                if mode & 0o007 != 0 {
                    "every user"
                } else {
                    "its group"
                }
            ));
            fixes.push(format!("chmod {want:o} {}", path.display()));
        }
    }
    if problems.is_empty() {
        Check::ok(
            NAME,
            format!("{}: {checked} entries owner-only", state.display()),
        )
    } else {
        let fix = format!("`{}`", fixes.join(" && "));
        if secret_exposed {
            Check::fail(NAME, problems.join("; "), fix)
        } else {
            Check::warn(NAME, problems.join("; "), fix)
        }
    }
}

/// `git --version`; a missing git only disables the git tools.
pub(super) fn git() -> Check {
    const NAME: &str = "git";
    match version_of_git() {
        Ok(out) if out.status.success() => {
            Check::ok(NAME, String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        Ok(out) => Check::warn(
            NAME,
            format!("`git --version` failed: {}", {
                let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
                if why.is_empty() {
                    out.status.to_string()
                } else {
                    why
                }
            }),
            "reinstall git; until then the git tools are unavailable",
        ),
        Err(e) => Check::warn(
            NAME,
            format!("git is not on PATH ({e}): the git tools are unavailable"),
            "install git (`apt install git`, `dnf install git`, `brew install git`)",
        ),
    }
}

/// How long `git --version` may take.
const GIT_VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `git --version`'s output, killed after [`GIT_VERSION_TIMEOUT`] (a hung `git` on PATH must
/// not hang doctor).
fn version_of_git() -> std::io::Result<std::process::Output> {
    use std::process::Stdio;
    let mut child = Command::new("git")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let end = tokio::time::Instant::now() + GIT_VERSION_TIMEOUT;
    while child.try_wait()?.is_none() {
        if tokio::time::Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(std::process::Output {
                status: std::os::unix::process::ExitStatusExt::from_raw(9),
                stdout: Vec::new(),
                stderr: format!("did not answer within {} s", GIT_VERSION_TIMEOUT.as_secs())
                    .into_bytes(),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output()
}

/// The user service: optional; installed but not running is a warning.
pub(super) fn service(setup: &Setup) -> Check {
    const NAME: &str = "service";
    let entries = match service::manifest(&setup.state) {
        Ok(None) => {
            return Check::ok(
                NAME,
                "not installed (optional: `machine-mcp service install`)",
            );
        }
        Ok(Some(e)) => e,
        Err(e) => {
            return Check::warn(
                NAME,
                format!("{e:#}"),
                "run `machine-mcp service install` again to rewrite it",
            );
        }
    };
    let Some((platform, file)) = entries.first() else {
        return Check::ok(NAME, "not installed (the manifest lists no file)");
    };
    let manager = match platform {
        ServicePlatform::Systemd => "systemd",
        ServicePlatform::Launchd => "launchd",
    };
    if !file.exists() {
        return Check::warn(
            NAME,
            format!("installed for {manager}, but {} is gone", file.display()),
            "`machine-mcp service install` (with the same settings) writes it again",
        );
    }
    match service::is_active(*platform, &setup.state) {
        Ok(true) => Check::ok(
            NAME,
            format!("installed ({manager}, {}) and running", file.display()),
        ),
        Ok(false) => Check::warn(
            NAME,
            format!("installed ({manager}, {}) but not running", file.display()),
            format!(
                "`machine-mcp service start`; if it stops again see {}",
                setup.state.join("logs/daemon.log").display()
            ),
        ),
        Err(e) => Check::warn(
            NAME,
            format!("installed ({manager}), state unknown: {e:#}"),
            "check it with `machine-mcp service status`",
        ),
    }
}

/// Who holds the daemon lock, and whether it answers on its status endpoint.
pub(super) fn lock(setup: &Setup) -> Check {
    const NAME: &str = "lock";
    let lock = setup.state.join(LOCK_FILE);
    let start = start_command(setup.command.as_deref());
    match &setup.holder {
        Ok(None) => Check::warn(
            NAME,
            format!("no daemon is running on {}", setup.state.display()),
            format!("start one: {start} (or `machine-mcp service start`)"),
        ),
        Err(why) => Check::fail(
            NAME,
            format!(
                "{} is held, but not by a verified daemon: {why}",
                lock.display()
            ),
            format!(
                "find the holder with `fuser {}` and stop it, or use another --state-dir",
                lock.display()
            ),
        ),
        Ok(Some(r)) => match &setup.report {
            None => Check::warn(
                NAME,
                format!("{}: starting (no status endpoint yet)", r.describe()),
                "run doctor again in a few seconds; `machine-mcp status` shows its progress",
            ),
            Some(Err(e)) => Check::fail(
                NAME,
                format!(
                    "{} holds it but does not answer on its status endpoint: {e}",
                    r.describe()
                ),
                format!(
                    "replace it with `machine-mcp {} --takeover`, or stop it: `kill {}`",
                    r.command, r.pid
                ),
            ),
            Some(Ok(v)) => Check::ok(
                NAME,
                format!(
                    "{} holds it; link {}",
                    r.describe(),
                    v["link"]["state"]
                        .as_str()
                        .unwrap_or("unknown")
                        .replace('_', " ")
                ),
            ),
        },
    }
}

/// How to start the daemon this state belongs to.
fn start_command(command: Option<&str>) -> &'static str {
    match command {
        Some("up") => "`machine-mcp up`",
        Some("connect") => "`machine-mcp connect --relay URL`",
        _ => "`machine-mcp up` or `machine-mcp connect --relay URL`",
    }
}
