//! `machine-mcp service ...`: the daemon (`connect`) as a user service, a systemd `--user` unit
//! on Linux or a launchd agent on macOS. `install` records the files it writes in
//! `STATE_DIR/service.json`, and `uninstall` removes those and nothing else.

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
use crate::cli::{ServiceArgs, ServiceCommand, ServiceInstallArgs, ServicePlatform};

/// The systemd unit's name.
pub(crate) const SYSTEMD_UNIT: &str = "machine-mcp.service";
/// The launchd agent's label (and, with `.plist`, its file name).
pub(crate) const LAUNCHD_LABEL: &str = "dev.machine-bridge.machine-mcp";
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

/// Where the service definition of `p` lives: `$XDG_CONFIG_HOME/systemd/user/` (an absolute
/// `XDG_CONFIG_HOME` only, per the XDG Base Directory spec; else `~/.config`), or
/// `~/Library/LaunchAgents/`.
fn definition_path(p: ServicePlatform) -> Result<PathBuf> {
    Ok(match p {
        ServicePlatform::Systemd => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|d| d.is_absolute());
            let config = match config {
                Some(c) => c,
                None => home()?.join(".config"),
            };
            config.join("systemd/user").join(SYSTEMD_UNIT)
        }
        ServicePlatform::Launchd => home()?
            .join("Library/LaunchAgents")
            .join(format!("{LAUNCHD_LABEL}.plist")),
    })
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
fn systemd_unit(argv: &[String]) -> String {
    let exec: Vec<String> = argv.iter().map(|a| systemd_word(a)).collect();
    format!(
        "# Written by `machine-mcp service install`; `machine-mcp service uninstall` removes it.
[Unit]
Description=machine-mcp daemon (this machine's workspace over a machine-bridge relay)
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec={START_LIMIT_INTERVAL_SEC}
StartLimitBurst={START_LIMIT_BURST}

[Service]
Type=simple
ExecStart={exec}
Restart=on-failure
RestartSec={RESTART_SEC}
# Only the daemon is signalled: managed jobs are detached runners that outlive it (DESIGN), and
# the daemon ends its own process sessions when it stops.
KillMode=process
TimeoutStopSec={TIMEOUT_STOP_SEC}

[Install]
WantedBy=default.target
",
        exec = exec.join(" ")
    )
}

/// The launchd agent running `argv`, as an XML property list (launchd.plist(5)).
fn launchd_plist(argv: &[String], stderr: &Path) -> Result<Vec<u8>> {
    use plist::{Dictionary, Value as P};
    let mut keep_alive = Dictionary::new();
    keep_alive.insert("SuccessfulExit".into(), P::Boolean(false));
    let mut d = Dictionary::new();
    d.insert("Label".into(), P::String(LAUNCHD_LABEL.into()));
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
    let state = std::path::absolute(super::state_dir(&a.service.state)?)
        .context("cannot make the state directory absolute")?;
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot find this program's own path")?;
    let mut argv = vec![utf8(&exe)?];
    argv.extend(daemon_args(a, &state)?);
    // A manifest that cannot be updated fails the install before anything is written.
    manifest(&state)?;
    for dir in [state.clone(), state.join("logs")] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let content = match p {
        ServicePlatform::Systemd => systemd_unit(&argv).into_bytes(),
        ServicePlatform::Launchd => launchd_plist(&argv, &state.join(LAUNCHD_STDERR))?,
    };
    let path = definition_path(p)?;
    let changed = write_if_changed(&path, &content)?;
    record(&state, p, &path, &argv[1..])?;
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
    if let ServicePlatform::Systemd = p {
        systemctl(&["daemon-reload"])?;
        systemctl(&["enable", SYSTEMD_UNIT])?;
        say(&format!(
            "enabled {SYSTEMD_UNIT}: it starts when you log in"
        ));
    }
    if let Ok(None) = daemon::identity::Enrollment::load(&state.join("daemon")) {
        eprintln!(
            "note: this machine is not enrolled yet, so the service would fail: run `machine-mcp connect --relay {} --enroll CODE` once first",
            a.relay
        );
    }
    if changed {
        say(
            "next: `machine-mcp service start` (or `machine-mcp service restart` if it runs already)",
        );
    } else {
        say("next: `machine-mcp service start` (or `machine-mcp service status`)");
    }
    Ok(())
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

/// The manifest's entries: (platform, path) of each file `install` wrote; `None` when nothing
/// is installed.
pub(crate) fn manifest(state: &Path) -> Result<Option<Vec<(ServicePlatform, PathBuf)>>> {
    let path = state.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let corrupt = || format!("{} is not a service manifest", path.display());
    let v: Value = serde_json::from_str(&text).with_context(corrupt)?;
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
    let files: Vec<Value> = entries
        .iter()
        .map(|(q, f)| Ok(json!({"platform": platform_name(*q), "path": utf8(f)?})))
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

/// The daemon's arguments after the executable as `install` last recorded them in
/// `STATE_DIR/service.json`: the service definition a SIGHUP re-reads. `None` without a manifest,
/// or with one written before the arguments were recorded.
///
/// # Errors
/// The manifest cannot be read or is not valid JSON, or `daemon_args` is not a list of strings.
pub(crate) fn recorded_daemon_args(state: &Path) -> Result<Option<Vec<String>>> {
    let path = state.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let corrupt = || format!("{} is not a service manifest", path.display());
    let v: Value = serde_json::from_str(&text).with_context(corrupt)?;
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
        let ours = match p {
            ServicePlatform::Systemd => SYSTEMD_UNIT.to_owned(),
            ServicePlatform::Launchd => format!("{LAUNCHD_LABEL}.plist"),
        };
        if file.file_name().and_then(|n| n.to_str()) != Some(ours.as_str()) {
            bail!(
                "{} lists {}, which is not a file `service install` writes; nothing was removed",
                state.join(MANIFEST).display(),
                file.display()
            );
        }
    }
    for (p, file) in &entries {
        let stopped = match p {
            ServicePlatform::Systemd => systemctl(&["stop", SYSTEMD_UNIT])
                .and_then(|()| systemctl(&["disable", SYSTEMD_UNIT])),
            ServicePlatform::Launchd => launchctl(&["bootout", &launchd_target()]),
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
    Status,
}

fn control(a: &ServiceArgs, verb: Verb) -> Result<()> {
    let p = platform(a);
    let path = definition_path(p)?;
    if matches!(verb, Verb::Start | Verb::Restart) && !path.exists() {
        bail!(
            "the service is not installed ({} does not exist): run `machine-mcp service install --relay URL` first",
            path.display()
        );
    }
    match (p, verb) {
        (ServicePlatform::Systemd, Verb::Start) => systemctl(&["start", SYSTEMD_UNIT]),
        (ServicePlatform::Systemd, Verb::Stop) => systemctl(&["stop", SYSTEMD_UNIT]),
        (ServicePlatform::Systemd, Verb::Restart) => systemctl(&["restart", SYSTEMD_UNIT]),
        (ServicePlatform::Systemd, Verb::Status) => {
            systemctl(&["status", "--no-pager", SYSTEMD_UNIT])
        }
        (ServicePlatform::Launchd, Verb::Start) => {
            let plist = utf8(&path)?;
            // bootstrap fails for an agent that is loaded already; kickstart starts that one.
            launchctl(&["bootstrap", &launchd_domain(), &plist])
                .or_else(|_| launchctl(&["kickstart", &launchd_target()]))
        }
        (ServicePlatform::Launchd, Verb::Stop) => launchctl(&["bootout", &launchd_target()]),
        (ServicePlatform::Launchd, Verb::Restart) => {
            // bootout + bootstrap re-reads a plist that `install` changed; kickstart would not.
            let _ = launchctl(&["bootout", &launchd_target()]);
            launchctl(&["bootstrap", &launchd_domain(), &utf8(&path)?])
        }
        (ServicePlatform::Launchd, Verb::Status) => launchctl(&["print", &launchd_target()]),
    }
}

/// Whether the installed service of `p` runs now (`systemctl --user is-active`, `launchctl
/// print`), asked quietly: `Ok(false)` when the manager answers no.
///
/// # Errors
/// The manager's program cannot be started; the message names it and the variable that
/// overrides it.
pub(crate) fn is_active(p: ServicePlatform) -> Result<bool> {
    let (env, default, args) = match p {
        ServicePlatform::Systemd => (
            SYSTEMCTL_ENV,
            "systemctl",
            vec![
                "--user".to_owned(),
                "is-active".to_owned(),
                SYSTEMD_UNIT.to_owned(),
            ],
        ),
        ServicePlatform::Launchd => (
            LAUNCHCTL_ENV,
            "launchctl",
            vec!["print".to_owned(), launchd_target()],
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

fn launchd_target() -> String {
    format!("{}/{LAUNCHD_LABEL}", launchd_domain())
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
    if args.contains(&"status") || args.first() == Some(&"print") {
        bail!("the service is not running or not loaded (`{shown}` ended with {code})");
    }
    if default == "systemctl" {
        bail!(
            "`{shown}` failed ({code}): is your systemd user manager running? Check `systemctl --user status`; \
             without a login session (e.g. over ssh) run `loginctl enable-linger $USER` once"
        );
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
        let unit = systemd_unit(&["/bin/m m".into(), "connect".into(), "--takeover".into()]);
        assert!(
            unit.lines()
                .any(|l| l == "ExecStart=\"/bin/m m\" connect --takeover"),
            "{unit}"
        );
    }
}
