//! `machine-mcp service ...`: the daemon (`connect`) as a user service, a systemd `--user` unit
//! on Linux or a launchd agent on macOS. `install` records the files it writes in
//! `STATE_DIR/service.json`, and `uninstall` removes those and nothing else.
//!
//! Each state directory has its own service: the default one is `machine-mcp.service` /
//! `dev.machine-bridge.machine-mcp`, any other `machine-mcp-HASH.service` /
//! `dev.machine-bridge.machine-mcp-HASH` (HASH: 8 hex digits of the SHA-256 of its canonical
//! path). A file records its state directory (a comment in the unit, `--state-dir` in the
//! plist's arguments), so `install` never replaces, and `uninstall` never removes, a file of
//! that name that is not this state directory's (unless `install --force`, after a backup).

use std::{
    ffi::OsString,
    io::ErrorKind,
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::job::emit;
use crate::cli::{ServiceArgs, ServiceCommand, ServiceInstallArgs, ServicePlatform, StateArgs};

/// The systemd unit's name for the default state directory.
pub(crate) const SYSTEMD_UNIT: &str = "machine-mcp.service";
/// The launchd agent's label (and, with `.plist`, its file name) for the default state
/// directory.
pub(crate) const LAUNCHD_LABEL: &str = "dev.machine-bridge.machine-mcp";
/// The comment of a unit that names the state directory it was written for.
const UNIT_STATE_MARKER: &str = "# machine-mcp state directory: ";
/// Hex digits of the state directory's hash in a non-default service name.
const NAME_HASH_HEX: usize = 8;
/// Environment variable naming the `systemctl` to run (tests point it at a fake).
pub(crate) const SYSTEMCTL_ENV: &str = "MACHINE_MCP_SYSTEMCTL";
/// Environment variable naming the `launchctl` to run.
pub(crate) const LAUNCHCTL_ENV: &str = "MACHINE_MCP_LAUNCHCTL";
/// The manifest of what `install` wrote, under the state directory.
const MANIFEST: &str = "service.json";
/// The daemon's log file, under the state directory.
const DAEMON_LOG: &str = "logs/daemon.log";
/// Where launchd puts the daemon's stderr (errors before logging starts), under the state
/// directory.
const LAUNCHD_STDERR: &str = "logs/launchd-stderr.log";
/// Seconds systemd waits before restarting a failed daemon.
const RESTART_SEC: u32 = 5;
/// At most [`START_LIMIT_BURST`] starts in this many seconds, then systemd gives up.
const START_LIMIT_INTERVAL_SEC: u32 = 300;
/// See [`START_LIMIT_INTERVAL_SEC`].
const START_LIMIT_BURST: u32 = 5;
/// Seconds a stop waits for the daemon's graceful shutdown before SIGKILL.
const TIMEOUT_STOP_SEC: u32 = 20;
/// Least seconds between two launchd starts of the agent.
const LAUNCHD_THROTTLE_SECS: i64 = 30;

/// Runs one `service` command.
pub(crate) fn run(cmd: ServiceCommand) -> Result<()> {
    match cmd {
        ServiceCommand::Install(args) => install(&args),
        ServiceCommand::Uninstall(args) => uninstall(&args),
        ServiceCommand::Start(args) => control(&args, Verb::Start),
        ServiceCommand::Stop(args) => control(&args, Verb::Stop),
        ServiceCommand::Restart(args) => control(&args, Verb::Restart),
        ServiceCommand::Reload(args) => control(&args, Verb::Reload),
        ServiceCommand::Status(args) => control(&args, Verb::Status),
    }
}

fn say(line: &str) {
    emit(&super::printable(line));
}

fn platform(a: &ServiceArgs) -> ServicePlatform {
    a.platform.unwrap_or(if cfg!(target_os = "macos") {
        ServicePlatform::Launchd
    } else {
        ServicePlatform::Systemd
    })
}

fn platform_name(p: ServicePlatform) -> &'static str {
    match p {
        ServicePlatform::Systemd => "systemd",
        ServicePlatform::Launchd => "launchd",
    }
}

fn home() -> Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .context("HOME is not set: the service's file goes under your home directory")
}

/// The service names of one state directory (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Names {
    /// The systemd unit, e.g. `machine-mcp.service`.
    unit: String,
    /// The launchd label, e.g. `dev.machine-bridge.machine-mcp`.
    label: String,
}

/// `p` resolved (symlinks too) when it exists, else made absolute.
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_owned())
}

/// The names of the service of the state directory `state`.
pub(super) fn names(state: &Path) -> Names {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let default = super::state_dir(&StateArgs { state_dir: None }).ok();
    let state = canonical(state);
    if default.is_some_and(|d| canonical(&d) == state) {
        return Names {
            unit: SYSTEMD_UNIT.to_owned(),
            label: LAUNCHD_LABEL.to_owned(),
        };
    }
    let digest = sha2::Sha256::digest(state.as_os_str().as_bytes());
    let tag: String = digest
        .iter()
        .take(NAME_HASH_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    Names {
        unit: format!("machine-mcp-{tag}.service"),
        label: format!("{LAUNCHD_LABEL}-{tag}"),
    }
}

/// Whether `file_name` is one `install` writes for `p` (any state directory).
fn is_our_file_name(p: ServicePlatform, file_name: &str) -> bool {
    let tagged = |rest: &str| {
        rest.len() == NAME_HASH_HEX + 1
            && rest.starts_with('-')
            && rest[1..].chars().all(|c| c.is_ascii_hexdigit())
    };
    let stem = match p {
        ServicePlatform::Systemd => file_name.strip_suffix(".service"),
        ServicePlatform::Launchd => file_name.strip_suffix(".plist"),
    };
    let base = match p {
        ServicePlatform::Systemd => "machine-mcp",
        ServicePlatform::Launchd => LAUNCHD_LABEL,
    };
    stem.and_then(|s| s.strip_prefix(base))
        .is_some_and(|rest| rest.is_empty() || tagged(rest))
}

/// Where the service definition of `p` named `n` lives: `$XDG_CONFIG_HOME/systemd/user/` (an
/// absolute `XDG_CONFIG_HOME` only, per the XDG Base Directory spec; else `~/.config`), or
/// `~/Library/LaunchAgents/`.
pub(super) fn definition_path(p: ServicePlatform, n: &Names) -> Result<PathBuf> {
    Ok(match p {
        ServicePlatform::Systemd => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|d| d.is_absolute());
            let config = match config {
                Some(c) => c,
                None => home()?.join(".config"),
            };
            config.join("systemd/user").join(&n.unit)
        }
        ServicePlatform::Launchd => home()?
            .join("Library/LaunchAgents")
            .join(format!("{}.plist", n.label)),
    })
}

/// The state directory a service file of `p` was written for, from its content: the marker
/// comment of a unit (else the `--state-dir` of a plain `ExecStart`), the `--state-dir` of a
/// plist's arguments. `None` for a file `install` did not write.
fn state_dir_in(p: ServicePlatform, content: &[u8]) -> Option<PathBuf> {
    let after_flag = |words: &[String]| {
        words
            .iter()
            .position(|w| w == "--state-dir")
            .and_then(|i| words.get(i + 1))
            .map(PathBuf::from)
    };
    match p {
        ServicePlatform::Systemd => {
            let text = std::str::from_utf8(content).ok()?;
            if let Some(dir) = text.lines().find_map(|l| l.strip_prefix(UNIT_STATE_MARKER)) {
                return Some(PathBuf::from(dir));
            }
            // Units written before the marker existed.
            if !text.starts_with("# Written by `machine-mcp service install`") {
                return None;
            }
            let exec = text.lines().find_map(|l| l.strip_prefix("ExecStart="))?;
            let words: Vec<String> = exec.split_whitespace().map(str::to_owned).collect();
            after_flag(&words)
        }
        ServicePlatform::Launchd => {
            let v = plist::Value::from_reader(std::io::Cursor::new(content)).ok()?;
            let words: Vec<String> = v
                .as_dictionary()?
                .get("ProgramArguments")?
                .as_array()?
                .iter()
                .filter_map(|a| a.as_string().map(str::to_owned))
                .collect();
            after_flag(&words)
        }
    }
}

/// Whether `content` is a service file written for the state directory `state`.
fn belongs_to(p: ServicePlatform, content: &[u8], state: &Path) -> bool {
    state_dir_in(p, content).is_some_and(|d| canonical(&d) == canonical(state))
}

fn utf8(p: &Path) -> Result<String> {
    p.to_str().map(str::to_owned).with_context(|| {
        format!(
            "{} is not valid UTF-8, which a service definition cannot hold",
            p.display()
        )
    })
}

/// The arguments after the executable: `connect --takeover --log-file LOG` and every setting of
/// `a`, paths absolute.
fn daemon_args(a: &ServiceInstallArgs, state: &Path) -> Result<Vec<String>> {
    let workspace = super::workspace_dir(a.workspace.as_deref())?;
    let mut args = vec![
        "connect".to_owned(),
        "--takeover".to_owned(),
        "--log-file".to_owned(),
        utf8(&state.join(DAEMON_LOG))?,
        "--relay".to_owned(),
        a.relay.to_string(),
        "--workspace".to_owned(),
        utf8(&workspace)?,
    ];
    if let Some(s) = &a.servers {
        let s =
            std::fs::canonicalize(s).with_context(|| format!("servers file {}", s.display()))?;
        args.extend(["--servers".to_owned(), utf8(&s)?]);
    }
    args.extend(["--state-dir".to_owned(), utf8(state)?]);
    args.extend(super::policy_flags(&a.policy, true));
    let t = &a.timing;
    for (flag, v) in [
        ("--reconnect-grace-ms", t.reconnect_grace_ms),
        ("--heartbeat-ms", t.heartbeat_ms),
        ("--liveness-ms", t.liveness_ms),
        ("--hello-deadline-ms", t.hello_deadline_ms),
        ("--foreground-budget-ms", t.foreground_budget_ms),
    ] {
        if let Some(v) = v {
            args.extend([flag.to_owned(), v.to_string()]);
        }
    }
    Ok(args)
}

/// One word of a systemd command line (systemd.service(5) "Command lines"): bare when it holds
/// only characters with no meaning there, else double-quoted with C-style escapes; `%` (unit
/// specifiers, systemd.unit(5)) and `$` (variable expansion) are doubled either way.
fn systemd_word(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-=:,+@".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        return arg.to_owned();
    }
    let mut out = String::from("\"");
    for c in arg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `arg` as a POSIX shell word, for showing a command line: bare when it is plain, else
/// single-quoted.
fn shell_word(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-=:,+@%".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// The systemd `--user` unit running `argv`.
fn systemd_unit(argv: &[String], state: &Path) -> String {
    let exec: Vec<String> = argv.iter().map(|a| systemd_word(a)).collect();
    format!(
        "# Written by `machine-mcp service install`; `machine-mcp service uninstall` removes it.
{UNIT_STATE_MARKER}{state}
[Unit]
Description=machine-mcp daemon (this machine's workspace over a machine-bridge relay)
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec={START_LIMIT_INTERVAL_SEC}
StartLimitBurst={START_LIMIT_BURST}

[Service]
Type=simple
ExecStart={exec}
# `machine-mcp service reload`: the daemon re-reads its servers file and this definition's
# settings (as `service install` recorded them), keeping its link when nothing changed.
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec={RESTART_SEC}
# Only the daemon is signalled: managed jobs are detached runners that outlive it (DESIGN), and
# the daemon ends its own process sessions when it stops.
KillMode=process
TimeoutStopSec={TIMEOUT_STOP_SEC}

[Install]
WantedBy=default.target
",
        exec = exec.join(" "),
        state = state.display()
    )
}

/// The launchd agent running `argv`, as an XML property list (launchd.plist(5)).
fn launchd_plist(argv: &[String], label: &str, stderr: &Path) -> Result<Vec<u8>> {
    use plist::{Dictionary, Value as P};
    let mut keep_alive = Dictionary::new();
    keep_alive.insert("SuccessfulExit".into(), P::Boolean(false));
    let mut d = Dictionary::new();
    d.insert("Label".into(), P::String(label.into()));
    d.insert(
        "ProgramArguments".into(),
        P::Array(argv.iter().map(|a| P::String(a.clone())).collect()),
    );
    d.insert("RunAtLoad".into(), P::Boolean(true));
    d.insert("KeepAlive".into(), P::Dictionary(keep_alive));
    d.insert(
        "ThrottleInterval".into(),
        P::Integer(LAUNCHD_THROTTLE_SECS.into()),
    );
    // launchd's KillMode=process: jobs the daemon started outlive it.
    d.insert("AbandonProcessGroup".into(), P::Boolean(true));
    d.insert("StandardErrorPath".into(), P::String(utf8(stderr)?));
    let mut out = Vec::new();
    P::Dictionary(d)
        .to_writer_xml(&mut out)
        .context("cannot write the launchd property list")?;
    out.push(b'\n');
    Ok(out)
}

fn install(a: &ServiceInstallArgs) -> Result<()> {
    let p = platform(&a.service);
    // Canonical (no `..`, symlinks resolved), so that two spellings of one directory write
    // one definition.
    let state = canonical(&super::state_dir(&a.service.state)?);
    let n = names(&state);
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot find this program's own path")?;
    let mut argv = vec![utf8(&exe)?];
    argv.extend(daemon_args(a, &state)?);
    // A manifest that cannot be updated fails the install before anything is written.
    let entries = manifest(&state)?.unwrap_or_default();
    for dir in [state.clone(), state.join("logs")] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let content = match p {
        ServicePlatform::Systemd => systemd_unit(&argv, &state).into_bytes(),
        ServicePlatform::Launchd => launchd_plist(&argv, &n.label, &state.join(LAUNCHD_STDERR))?,
    };
    let path = definition_path(p, &n)?;
    let old = match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut backup = None;
    if let Some(old) = old.as_deref().filter(|o| *o != content.as_slice())
        && let Some(problem) = not_ours(p, &path, old, &state, &entries).or_else(|| {
            recorded_sha256(&state, &path)
                .filter(|h| *h != sha256_hex(old))
                .map(|_| format!("{} was edited since `service install` wrote it (pass --force to replace it; a backup is kept)", path.display()))
        })
    {
        if !a.force {
            bail!("{problem}; nothing was changed");
        }
        backup = Some(write_backup(&path, old)?);
    }
    let old_manifest = std::fs::read(state.join(MANIFEST)).ok();
    let changed = write_if_changed(&path, &content)?;
    let managed = record(&state, p, &path, &argv[1..]).and_then(|()| match p {
        ServicePlatform::Systemd => {
            systemctl(&["daemon-reload"]).and_then(|()| systemctl(&["enable", &n.unit]))
        }
        ServicePlatform::Launchd => Ok(()),
    });
    if let Err(e) = managed {
        let undone = roll_back(
            &path,
            changed.then_some(old.as_deref()),
            &state,
            old_manifest,
        );
        // systemd loaded the unit that was just undone: it reads the restored one again.
        if p == ServicePlatform::Systemd {
            let _ = systemctl(&["daemon-reload"]);
        }
        bail!("{e:#}; {undone}");
    }
    if let Some(b) = &backup {
        say(&format!(
            "{} was not this state directory's: its old content is kept in {}",
            path.display(),
            b.display()
        ));
    }
    if changed {
        say(&format!("wrote {}", path.display()));
    } else {
        say(&format!("unchanged: {}", path.display()));
    }
    say(&format!(
        "recorded in {} (for `machine-mcp service uninstall`)",
        state.join(MANIFEST).display()
    ));
    let shown: Vec<String> = argv.iter().map(|a| shell_word(a)).collect();
    say(&format!("it runs: {}", shown.join(" ")));
    say(&format!("logs: {}", state.join(DAEMON_LOG).display()));
    let state_flag = state_flag(&state, &n);
    match p {
        ServicePlatform::Systemd => say(&format!("enabled {}: it starts when you log in", n.unit)),
        ServicePlatform::Launchd => say(&format!("launchd label: {}", n.label)),
    }
    if let Ok(None) = daemon::identity::Enrollment::load(&state.join("daemon")) {
        eprintln!(
            "note: this machine is not enrolled yet, so the service would fail: run `machine-mcp connect --relay {} --enroll CODE{state_flag}` once first",
            a.relay
        );
    }
    if changed {
        say(&format!(
            "next: `machine-mcp service start{state_flag}` (or, if it runs already, `machine-mcp service reload{state_flag}` to apply these settings without a restart)"
        ));
    } else {
        say(&format!(
            "next: `machine-mcp service start{state_flag}` (or `machine-mcp service status{state_flag}`)"
        ));
    }
    Ok(())
}

/// ` --state-dir STATE` when `state` does not have the default names, for the commands shown.
fn state_flag(state: &Path, n: &Names) -> String {
    if n.unit == SYSTEMD_UNIT {
        String::new()
    } else {
        format!(" --state-dir {}", shell_word(&state.to_string_lossy()))
    }
}

/// Why the existing `path` (holding `old`) must not be replaced by this state directory's
/// install without `--force`: it belongs to another state directory, or it is not recorded in
/// this one's manifest. `None` when it is ours.
fn not_ours(
    p: ServicePlatform,
    path: &Path,
    old: &[u8],
    state: &Path,
    entries: &[(ServicePlatform, PathBuf)],
) -> Option<String> {
    let recorded = entries.iter().any(|(q, f)| *q == p && f == path);
    match state_dir_in(p, old) {
        Some(other) if canonical(&other) != canonical(state) => Some(format!(
            "{} belongs to another state directory, {} (per its content): remove that service with `machine-mcp service uninstall --state-dir {}`, or pass --force to replace it (its content is kept in a backup FILE.bak-UNIXSECONDS)",
            path.display(),
            other.display(),
            shell_word(&other.to_string_lossy())
        )),
        _ if !recorded => Some(format!(
            "{} exists and was not written by `machine-mcp service install` for the state directory {} (it is not in {}): move it away, or pass --force to replace it (its content is kept in a backup FILE.bak-UNIXSECONDS)",
            path.display(),
            state.display(),
            state.join(MANIFEST).display()
        )),
        _ => None,
    }
}

/// Writes `bytes` to a new `FILE.bak-UNIXSECONDS` next to `file` (`-N` appended when taken),
/// as `client-config` does ([`super::client_config::edit::backup_of`]).
fn write_backup(file: &Path, bytes: &[u8]) -> Result<PathBuf> {
    super::client_config::edit::backup_of(file, bytes)
}

/// Undoes an install whose service-manager step failed: `path` gets its old bytes back (or
/// is removed when there were none; `written` is `None` when install did not change it), and
/// the manifest its old bytes (or is removed). What was done, for the error.
fn roll_back(
    path: &Path,
    written: Option<Option<&[u8]>>,
    state: &Path,
    old_manifest: Option<Vec<u8>>,
) -> String {
    let mut done = Vec::new();
    match written {
        None => {}
        Some(Some(old)) => match std::fs::write(path, old) {
            Ok(()) => done.push(format!("restored the previous {}", path.display())),
            Err(e) => done.push(format!("could not restore {} ({e})", path.display())),
        },
        Some(None) => match std::fs::remove_file(path) {
            Ok(()) => done.push(format!("removed {}", path.display())),
            Err(e) => done.push(format!("could not remove {} ({e})", path.display())),
        },
    }
    let m = state.join(MANIFEST);
    let r = match old_manifest {
        Some(bytes) => std::fs::write(&m, bytes),
        None => std::fs::remove_file(&m).or_else(|e| {
            if e.kind() == ErrorKind::NotFound {
                Ok(())
            } else {
                Err(e)
            }
        }),
    };
    if let Err(e) = r {
        done.push(format!("could not restore {} ({e})", m.display()));
    }
    format!(
        "the install was rolled back ({}); fix the service manager and run `machine-mcp service install` again",
        if done.is_empty() {
            "nothing had changed".to_owned()
        } else {
            done.join(", ")
        }
    )
}

/// Writes `content` to `path` (0644, through a temporary file and a rename) unless it holds
/// those bytes already; whether it wrote.
fn write_if_changed(path: &Path, content: &[u8]) -> Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == content) {
        return Ok(false);
    }
    let dir = path.parent().context("the service file has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let written = std::fs::write(&tmp, content)
        .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(true)
}

/// `STATE_DIR/service.json` parsed; `None` when it does not exist.
///
/// # Errors
/// It cannot be read, or is not JSON.
fn manifest_json(state: &Path) -> Result<Option<Value>> {
    let path = state.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .with_context(|| format!("{} is not a service manifest", path.display()))
}

/// The manifest's entries: (platform, path) of each file `install` wrote; `None` when nothing
/// is installed.
pub(crate) fn manifest(state: &Path) -> Result<Option<Vec<(ServicePlatform, PathBuf)>>> {
    let path = state.join(MANIFEST);
    let Some(v) = manifest_json(state)? else {
        return Ok(None);
    };
    let corrupt = || format!("{} is not a service manifest", path.display());
    let mut out = Vec::new();
    for f in v["files"].as_array().with_context(corrupt)? {
        let p = match f["platform"].as_str() {
            Some("systemd") => ServicePlatform::Systemd,
            Some("launchd") => ServicePlatform::Launchd,
            _ => bail!(corrupt()),
        };
        let file = PathBuf::from(f["path"].as_str().with_context(corrupt)?);
        out.push((p, file));
    }
    Ok(Some(out))
}

/// Adds `(p, file)` to the manifest (0600), with the daemon's arguments after the executable
/// (what a SIGHUP makes the daemon re-read: [`recorded_daemon_args`]).
fn record(state: &Path, p: ServicePlatform, file: &Path, daemon_args: &[String]) -> Result<()> {
    let mut entries = manifest(state)?.unwrap_or_default();
    if !entries.iter().any(|(q, f)| *q == p && f == file) {
        entries.push((p, file.to_path_buf()));
    }
    // Each file with the SHA-256 of what install wrote: `uninstall` leaves a file edited since.
    let files: Vec<Value> = entries
        .iter()
        .map(|(q, f)| {
            let mut entry = json!({"platform": platform_name(*q), "path": utf8(f)?});
            if let Ok(content) = std::fs::read(f) {
                entry["sha256"] = json!(sha256_hex(&content));
            }
            Ok(entry)
        })
        .collect::<Result<_>>()?;
    let text =
        serde_json::to_string_pretty(&json!({"files": files, "daemon_args": daemon_args}))? + "\n";
    let path = state.join(MANIFEST);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(&path, text)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)))
        .with_context(|| format!("cannot write {}", path.display()))
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The SHA-256 `install` recorded for `file` in the manifest (none in a manifest written before
/// hashes were recorded).
fn recorded_sha256(state: &Path, file: &Path) -> Option<String> {
    let v = manifest_json(state).ok()??;
    v["files"]
        .as_array()?
        .iter()
        .find(|f| f["path"].as_str() == file.to_str())
        .and_then(|f| f["sha256"].as_str().map(str::to_owned))
}

/// The daemon's arguments after the executable as `install` last recorded them in
/// `STATE_DIR/service.json`: the service definition a SIGHUP re-reads. `None` without a manifest,
/// or with one written before the arguments were recorded.
///
/// # Errors
/// The manifest cannot be read or is not valid JSON, or `daemon_args` is not a list of strings.
pub(crate) fn recorded_daemon_args(state: &Path) -> Result<Option<Vec<String>>> {
    let path = state.join(MANIFEST);
    let Some(v) = manifest_json(state)? else {
        return Ok(None);
    };
    let corrupt = || format!("{} is not a service manifest", path.display());
    match v.get("daemon_args") {
        None => Ok(None),
        Some(a) => serde_json::from_value(a.clone())
            .map(Some)
            .with_context(corrupt),
    }
}

fn uninstall(a: &ServiceArgs) -> Result<()> {
    let state = super::state_dir(&a.state)?;
    let Some(entries) = manifest(&state)? else {
        say(&format!(
            "nothing installed: there is no {} (pass the --state-dir `service install` was given)",
            state.join(MANIFEST).display()
        ));
        return Ok(());
    };
    for (p, file) in &entries {
        // Only a file of ours by name: a manifest edited by hand cannot make this delete others.
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !is_our_file_name(*p, name) {
            bail!(
                "{} lists {}, which is not a file `service install` writes; nothing was removed",
                state.join(MANIFEST).display(),
                file.display()
            );
        }
    }
    for (p, file) in &entries {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        match std::fs::read(file) {
            Ok(content) if !belongs_to(*p, &content, &state) => {
                say(&format!(
                    "left {} in place: it is no longer this state directory's service (it was replaced or edited; see its content)",
                    file.display()
                ));
                continue;
            }
            Ok(content)
                if recorded_sha256(&state, file).is_some_and(|h| h != sha256_hex(&content)) =>
            {
                say(&format!(
                    "left {} in place: it was edited since `service install` wrote it (stop the service and remove the file yourself, or run `service install --force` and `uninstall` again)",
                    file.display()
                ));
                continue;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                say(&format!("already gone: {}", file.display()));
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
        }
        let stopped = match p {
            ServicePlatform::Systemd => {
                systemctl(&["stop", name]).and_then(|()| systemctl(&["disable", name]))
            }
            ServicePlatform::Launchd => {
                let label = name.strip_suffix(".plist").unwrap_or(name);
                launchctl(&["bootout", &launchd_target(label)])
            }
        };
        if let Err(e) = stopped {
            eprintln!("note: could not stop the service (removing it anyway): {e:#}");
        }
        match std::fs::remove_file(file) {
            Ok(()) => say(&format!("removed {}", file.display())),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                say(&format!("already gone: {}", file.display()));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", file.display())),
        }
        if *p == ServicePlatform::Systemd
            && let Err(e) = systemctl(&["daemon-reload"])
        {
            eprintln!("note: {e:#}");
        }
    }
    let m = state.join(MANIFEST);
    std::fs::remove_file(&m).with_context(|| format!("cannot remove {}", m.display()))?;
    say(&format!("removed {}", m.display()));
    say("the daemon's logs and state are kept; managed jobs it started keep running");
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Verb {
    Start,
    Stop,
    Restart,
    Reload,
    Status,
}

fn control(a: &ServiceArgs, verb: Verb) -> Result<()> {
    let p = platform(a);
    let state = std::path::absolute(super::state_dir(&a.state)?)
        .context("cannot make the state directory absolute")?;
    let n = names(&state);
    let path = definition_path(p, &n)?;
    let flag = state_flag(&state, &n);
    if !path.exists() {
        bail!(
            "the service of the state directory {} is not installed ({} does not exist): run `machine-mcp service install --relay URL{flag}` first",
            state.display(),
            path.display()
        );
    }
    if matches!(verb, Verb::Stop) {
        // Delegations end with the daemon: refuse new ones first and say what still runs.
        match super::delegation::drain(&state) {
            Ok(still) => {
                say(
                    "draining delegations: new ones are refused until `machine-mcp delegation resume`",
                );
                super::delegation::print_unfinished(&still);
            }
            Err(e) => say(&format!("warning: delegations not drained: {e:#}")),
        }
    }
    let unit = n.unit.as_str();
    let target = launchd_target(&n.label);
    let (done, result) = match (p, verb) {
        (ServicePlatform::Systemd, Verb::Start) => ("started", systemctl(&["start", unit])),
        (ServicePlatform::Systemd, Verb::Stop) => ("stopped", systemctl(&["stop", unit])),
        (ServicePlatform::Systemd, Verb::Restart) => ("restarted", systemctl(&["restart", unit])),
        // ExecReload sends the daemon SIGHUP: it re-reads what `install` recorded.
        (ServicePlatform::Systemd, Verb::Reload) => {
            ("asked to reload", systemctl(&["reload", unit]))
        }
        (ServicePlatform::Systemd, Verb::Status) => {
            ("", systemctl(&["status", "--no-pager", unit]))
        }
        (ServicePlatform::Launchd, Verb::Start) => {
            let plist = utf8(&path)?;
            // bootstrap fails for an agent that is loaded already; kickstart starts that one.
            (
                "started",
                launchctl(&["bootstrap", &launchd_domain(), &plist])
                    .or_else(|_| launchctl(&["kickstart", &target])),
            )
        }
        (ServicePlatform::Launchd, Verb::Stop) => ("stopped", launchctl(&["bootout", &target])),
        (ServicePlatform::Launchd, Verb::Restart) => {
            // bootout + bootstrap re-reads a plist that `install` changed; kickstart would not.
            let _ = launchctl(&["bootout", &target]);
            (
                "restarted",
                launchctl(&["bootstrap", &launchd_domain(), &utf8(&path)?]),
            )
        }
        (ServicePlatform::Launchd, Verb::Reload) => {
            ("asked to reload", launchctl(&["kill", "SIGHUP", &target]))
        }
        (ServicePlatform::Launchd, Verb::Status) => ("", launchctl(&["print", &target])),
    };
    result?;
    if !done.is_empty() {
        let name = match p {
            ServicePlatform::Systemd => unit,
            ServicePlatform::Launchd => n.label.as_str(),
        };
        let next = if matches!(verb, Verb::Stop) {
            String::new()
        } else {
            format!("; see `machine-mcp status{flag}`")
        };
        say(&format!("{done} {name}{next}"));
    }
    Ok(())
}

/// Whether the installed service of `p` for the state directory `state` runs now (`systemctl --user is-active`, `launchctl
/// print`), asked quietly: `Ok(false)` when the manager answers no.
///
/// # Errors
/// The manager's program cannot be started; the message names it and the variable that
/// overrides it.
pub(crate) fn is_active(p: ServicePlatform, state: &Path) -> Result<bool> {
    let n = names(state);
    let (env, default, args) = match p {
        ServicePlatform::Systemd => (
            SYSTEMCTL_ENV,
            "systemctl",
            vec!["--user".to_owned(), "is-active".to_owned(), n.unit.clone()],
        ),
        ServicePlatform::Launchd => (
            LAUNCHCTL_ENV,
            "launchctl",
            vec!["print".to_owned(), launchd_target(&n.label)],
        ),
    };
    let program = std::env::var_os(env)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| OsString::from(default));
    let status = Command::new(&program)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| {
            format!(
                "`{default}` is not available ({}; set {env} to use another)",
                PathBuf::from(&program).display()
            )
        })?;
    Ok(status.success())
}

fn launchd_domain() -> String {
    format!("gui/{}", nix::unistd::getuid())
}

fn launchd_target(label: &str) -> String {
    format!("{}/{label}", launchd_domain())
}

/// What to check when `systemctl --user` fails: the user manager, and lingering without a
/// login session (one hint for every command).
fn user_manager_hint() -> &'static str {
    "is your systemd user manager running? Check `systemctl --user status`; without a login session (e.g. over ssh) run `loginctl enable-linger $USER` once"
}

/// Runs `systemctl --user ARGS` (the program of `$MACHINE_MCP_SYSTEMCTL`, else `systemctl`),
/// its output shown as it is.
///
/// # Errors
/// The program cannot be started, or it exits non-zero; each message says what to do.
fn systemctl(args: &[&str]) -> Result<()> {
    let mut full = vec!["--user"];
    full.extend_from_slice(args);
    manage(SYSTEMCTL_ENV, "systemctl", &full)
}

/// Runs `launchctl ARGS` (the program of `$MACHINE_MCP_LAUNCHCTL`, else `launchctl`).
///
/// # Errors
/// As [`systemctl`].
fn launchctl(args: &[&str]) -> Result<()> {
    manage(LAUNCHCTL_ENV, "launchctl", args)
}

fn manage(env: &str, default: &str, args: &[&str]) -> Result<()> {
    let program = std::env::var_os(env)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| OsString::from(default));
    let shown = format!("{default} {}", args.join(" "));
    let status = match Command::new(&program).args(args).status() {
        Ok(s) => s,
        Err(e) => bail!(
            "`{default}` is not available ({}: {e}): `machine-mcp service` needs {}; without it, run `machine-mcp connect` under your own supervisor",
            PathBuf::from(&program).display(),
            if default == "systemctl" {
                "systemd's user manager (systemctl --user)"
            } else {
                "launchd (macOS)"
            }
        ),
    };
    if status.success() {
        return Ok(());
    }
    let code = status
        .code()
        .map_or_else(|| "a signal".to_owned(), |c| format!("exit status {c}"));
    if args.first() == Some(&"print") {
        bail!("the service is not loaded (`{shown}` ended with {code})");
    }
    // systemctl status: 3 not running, 4 no such unit (systemctl(1) "Exit status").
    if args.contains(&"status") && matches!(status.code(), Some(3 | 4)) {
        bail!("the service is not running or not loaded (`{shown}` ended with {code})");
    }
    if default == "systemctl" {
        bail!("`{shown}` failed ({code}): {}", user_manager_hint());
    }
    bail!("`{shown}` failed ({code})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_words_quote_what_systemd_would_interpret() {
        assert_eq!(systemd_word("/usr/bin/machine-mcp"), "/usr/bin/machine-mcp");
        assert_eq!(systemd_word("--full-env=true"), "--full-env=true");
        assert_eq!(systemd_word("/home/a b/ws"), "\"/home/a b/ws\"");
        assert_eq!(systemd_word(""), "\"\"");
        assert_eq!(systemd_word("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(systemd_word("100%$HOME"), "\"100%%$$HOME\"");
        assert_eq!(systemd_word("a;b\nc"), "\"a;b\\x0ac\"");
        assert_eq!(systemd_word("'x'"), "\"'x'\"");
    }

    #[test]
    fn shell_words_are_single_quoted_when_needed() {
        assert_eq!(shell_word("--profile"), "--profile");
        assert_eq!(shell_word("/a b/it's"), "'/a b/it'\\''s'");
    }

    #[test]
    fn the_unit_runs_exactly_the_argv() {
        let unit = systemd_unit(
            &["/bin/m m".into(), "connect".into(), "--takeover".into()],
            Path::new("/s"),
        );
        assert!(
            unit.lines()
                .any(|l| l == "ExecStart=\"/bin/m m\" connect --takeover"),
            "{unit}"
        );
    }
}
