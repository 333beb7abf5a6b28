//! One module per subcommand; [`run`] dispatches. Shared here: the policy from flags, the state
//! directory, and the runtime for a workspace.

/// `println!` for command output: a reader that went away (`| head`) ends the process with
/// status 0 instead of a panic ([`job::emit`]).
macro_rules! outln {
    () => { $crate::commands::job::emit("") };
    ($($arg:tt)*) => { $crate::commands::job::emit(&format!($($arg)*)) };
}

mod client_config;
mod connect;
mod delegation;
mod doctor;
mod instance;
mod job;
mod relay;
mod service;
mod status;
mod stdio;
mod up;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, Result};
use runtime::{
    Runtime, RuntimeConfig,
    path::{OwnKind, OwnPath},
    policy::{ExecMode, Policy, PolicyOverrides, Profile},
};

use crate::cli::{
    AuthArg, Command, ExecModeArg, OAuthTestArgs, PolicyArgs, ProfileArg, RelayCommand,
    ServicePlatform, StateArgs, TimingArgs,
};

/// Foreground budget of process calls made through the relay: remote hosts cut calls after
/// about 60 s, so a longer command returns a session id instead (DESIGN §3 "Processes").
pub(crate) const REMOTE_FOREGROUND_BUDGET: Duration = Duration::from_secs(25);

/// Runs `command` to completion.
pub(crate) async fn run(command: Command) -> Result<()> {
    match command {
        Command::Stdio(args) => stdio::run(args).await,
        Command::Reload(args) => stdio::reload(&args),
        Command::Up(args) => up::run(args).await,
        Command::Connect(args) => connect::run(args).await,
        Command::Relay(RelayCommand::Serve(args)) => relay::serve(args).await,
        Command::Relay(RelayCommand::Bridge(cmd)) => relay::bridge(cmd).await,
        Command::Relay(RelayCommand::Token(cmd)) => relay::token(cmd).await,
        Command::Relay(RelayCommand::Account(cmd)) => relay::account(cmd).await,
        Command::Relay(RelayCommand::Client(cmd)) => relay::client(cmd).await,
        Command::Relay(RelayCommand::Device(cmd)) => relay::device(cmd).await,
        Command::Status(args) => status::run(&args),
        Command::Doctor(args) => doctor::run(args).await,
        Command::Job(cmd) => job::run(cmd).await,
        Command::Resource(cmd) => job::resource(cmd),
        Command::Delegation(cmd) => delegation::run(cmd).await,
        Command::ClientConfig(args) => client_config::run(args),
        Command::Service(cmd) => service::run(cmd),
        Command::JobRunner { state, job_id } => {
            let dir = state_dir(&state)?;
            runtime::tools::jobs::engine::runner::run(&dir, &job_id)
                .await
                .map_err(anyhow::Error::msg)
        }
        Command::CliReference => {
            outln!("{}", crate::cli_reference::render());
            Ok(())
        }
        // `main` runs it before building the async runtime; kept here for a complete match.
        Command::Watchdog { instance } => {
            runtime::tools::process::watchdog::run(&instance);
            Ok(())
        }
    }
}

/// Whether `c` could drive or mislead a terminal: a control character other than a line break
/// or tab (C0, DEL, C1), or a bidirectional or zero-width format character.
pub(crate) fn unsafe_for_terminals(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}'
        )
}

/// `text` with the characters of [`unsafe_for_terminals`] shown as `\xHH` (ASCII) or
/// `\u{HHHH}`, so what a job or an assistant wrote cannot clear the screen, set the clipboard
/// or the title, or reorder a line.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !unsafe_for_terminals(c) {
            out.push(c);
        } else if c.is_ascii() {
            out.push_str(&format!("\\x{:02x}", u32::from(c)));
        } else {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        }
    }
    out
}

/// The effective policy from the policy flags.
pub(crate) fn policy(p: &PolicyArgs) -> Policy {
    let profile = match p.profile {
        ProfileArg::Full => Profile::Full,
        ProfileArg::Agent => Profile::Agent,
        ProfileArg::Edit => Profile::Edit,
        ProfileArg::Review => Profile::Review,
    };
    Policy::new(
        profile,
        PolicyOverrides {
            exec_mode: p.exec_mode.map(|m| match m {
                ExecModeArg::Off => ExecMode::Off,
                ExecModeArg::Direct => ExecMode::Direct,
                ExecModeArg::Shell => ExecMode::Shell,
            }),
            no_write: p.no_write,
            unrestricted_paths: p.unrestricted_paths,
            absolute_paths: p.absolute_paths,
            full_env: p.full_env,
        },
    )
}

/// The flags that give the policy `p` to `stdio`, `connect` or `up` (for the command lines
/// `client-config` and `service install` write); `--profile full` only with `with_default_profile`.
pub(crate) fn policy_flags(p: &PolicyArgs, with_default_profile: bool) -> Vec<String> {
    use clap::ValueEnum;
    let name = |v: Option<clap::builder::PossibleValue>| v.map(|v| v.get_name().to_owned());
    let mut flags = Vec::new();
    if (with_default_profile || !matches!(p.profile, ProfileArg::Full))
        && let Some(v) = name(p.profile.to_possible_value())
    {
        flags.extend(["--profile".to_owned(), v]);
    }
    if let Some(v) = name(p.exec_mode.and_then(|m| m.to_possible_value())) {
        flags.extend(["--exec-mode".to_owned(), v]);
    }
    if p.no_write {
        flags.push("--no-write".to_owned());
    }
    for (flag, value) in [
        ("--unrestricted-paths", p.unrestricted_paths),
        ("--absolute-paths", p.absolute_paths),
        ("--full-env", p.full_env),
    ] {
        if let Some(b) = value {
            flags.push(format!("{flag}={b}"));
        }
    }
    flags
}

/// The state directory: the flag, else `$XDG_STATE_HOME/machine-mcp`, else
/// `~/.local/state/machine-mcp`.
pub(crate) fn state_dir(s: &StateArgs) -> Result<PathBuf> {
    if let Some(d) = &s.state_dir {
        return Ok(d.clone());
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("machine-mcp"));
    }
    let home =
        std::env::var_os("HOME").context("neither --state-dir, XDG_STATE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/state/machine-mcp"))
}

/// Where a relay whose store is the file `store` spills large MCP request bodies: `spill/`
/// beside the store (`STATE_DIR/relay/spill`, `STATE_DIR/up/spill`), a directory only the
/// relay's user can read (created 0700, like the store's own).
pub(crate) fn spill_dir(store: &Path) -> PathBuf {
    store
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("spill")
}

/// `workspace`, or the current directory when none was given.
///
/// # Errors
/// The current directory cannot be read.
pub(crate) fn workspace_or_cwd(workspace: Option<&Path>) -> Result<PathBuf> {
    match workspace {
        Some(w) => Ok(w.to_owned()),
        None => std::env::current_dir().context("cannot read the current directory"),
    }
}

/// [`workspace_or_cwd`] as a canonical path, for the command lines written to config files.
///
/// # Errors
/// The current directory cannot be read, or the workspace is not an existing directory.
pub(crate) fn workspace_dir(workspace: Option<&Path>) -> Result<PathBuf> {
    let workspace = workspace_or_cwd(workspace)?;
    std::fs::canonicalize(&workspace)
        .ok()
        .filter(|w| w.is_dir())
        .with_context(|| format!("workspace {} is not a directory", workspace.display()))
}

/// A runtime for `workspace` (default: the current directory) under the policy flags; `remote`
/// when its results travel in relay frames ([`RuntimeConfig::remote`]); `servers`, a daemon's
/// servers file.
///
/// Its tools never reach the server's own files while paths are confined
/// ([`RuntimeConfig::own_files`]): the state directory and the user configuration (the runtime
/// adds those), the servers file, and the service definitions of the state directory.
pub(crate) fn build_runtime(
    workspace: Option<PathBuf>,
    p: &PolicyArgs,
    state: &StateArgs,
    yield_after: Option<Duration>,
    remote: bool,
    servers: Option<&Path>,
) -> Result<Arc<Runtime>> {
    let workspace = workspace_or_cwd(workspace.as_deref())?;
    let state_dir = state_dir(state)?;
    let mut own_files: Vec<OwnPath> = service_definitions(&state_dir)
        .into_iter()
        .map(|f| OwnPath::new(OwnKind::Service, f))
        .collect();
    own_files.extend(servers.map(|f| OwnPath::new(OwnKind::Servers, f)));
    let runtime = Runtime::new(RuntimeConfig {
        workspace: workspace.clone(),
        policy: policy(p),
        default_yield_after: yield_after,
        remote,
        state_dir: Some(state_dir),
        own_files,
    })
    .with_context(|| {
        format!(
            "workspace {} is not a usable directory",
            workspace.display()
        )
    })?;
    // Jobs whose runner died while no server was up are taken care of now.
    if let Some(jobs) = runtime::tools::jobs::store(&runtime) {
        let started = jobs.recover();
        if started > 0 {
            tracing::info!(started, "started runners for jobs whose runner had died");
        }
    }
    Ok(Arc::new(runtime))
}

/// The service definitions of the state directory `state`: where `service install` writes them
/// on each platform (whether or not they exist), and every file its manifest records.
fn service_definitions(state: &Path) -> Vec<PathBuf> {
    let names = service::names(state);
    let written = [ServicePlatform::Systemd, ServicePlatform::Launchd]
        .map(|p| service::definition_path(p, &names));
    let recorded = service::manifest(state).ok().flatten().unwrap_or_default();
    written
        .into_iter()
        .flatten()
        .chain(recorded.into_iter().map(|(_, f)| f))
        .collect()
}

/// The runtime a daemon serves (`connect`, `up`): [`build_runtime`] with the remote foreground
/// budget and the read cap of relay frames, and the upstream servers of `--servers FILE` (none without it).
///
/// # Errors
/// What [`build_runtime`] returns, and an unreadable or invalid servers file.
pub(crate) fn remote_runtime(
    workspace: Option<PathBuf>,
    p: &PolicyArgs,
    state: &StateArgs,
    t: &TimingArgs,
    servers: Option<&Path>,
) -> Result<(Arc<Runtime>, Vec<daemon::servers::UpstreamSpec>)> {
    let runtime = build_runtime(workspace, p, state, Some(remote_budget(t)), true, servers)?;
    let upstreams = match servers {
        Some(f) => {
            daemon::servers::load(f, runtime.workspace().root()).map_err(anyhow::Error::msg)?
        }
        None => Vec::new(),
    };
    Ok((runtime, upstreams))
}

/// The foreground budget of remote process calls, with the hidden test override applied.
pub(crate) fn remote_budget(t: &TimingArgs) -> Duration {
    t.foreground_budget_ms
        .map_or(REMOTE_FOREGROUND_BUDGET, Duration::from_millis)
}

/// The relay's authentication mode for `--auth`.
pub(crate) fn auth_mode(a: AuthArg) -> ::relay::config::AuthMode {
    use ::relay::config::AuthMode;
    match a {
        AuthArg::Oauth => AuthMode::OAuth,
        AuthArg::Token => AuthMode::Token,
        AuthArg::None => AuthMode::None,
    }
}

/// OAuth settings with the hidden test overrides applied.
pub(crate) fn oauth_settings(o: &OAuthTestArgs) -> ::relay::oauth::OAuthSettings {
    let mut s = ::relay::oauth::OAuthSettings::default();
    if let Some(secs) = o.oauth_access_token_ttl_secs {
        s.access_token_lifetime = Duration::from_secs(secs.max(1));
    }
    if let Some(secs) = o.oauth_refresh_grace_secs {
        s.refresh_reuse_grace = Duration::from_secs(secs);
    }
    if o.oauth_insecure_client_documents {
        tracing::warn!(
            "--oauth-insecure-client-documents is on: client metadata documents are fetched over http and from private addresses (tests only)"
        );
        s.insecure_client_documents = true;
    }
    s
}

/// Relay timing with the hidden test overrides applied.
pub(crate) fn relay_timing(t: &TimingArgs) -> ::relay::config::RelayTiming {
    let mut timing = ::relay::config::RelayTiming::default();
    if let Some(ms) = t.reconnect_grace_ms {
        timing.reconnect_grace = Duration::from_millis(ms);
    }
    if let Some(ms) = t.hello_deadline_ms {
        timing.hello_deadline = Duration::from_millis(ms);
    }
    if let Some(ms) = t.liveness_ms {
        timing.liveness_timeout = Duration::from_millis(ms);
    }
    timing
}

/// Daemon link timing with the hidden test overrides applied.
pub(crate) fn daemon_timing(t: &TimingArgs) -> daemon::link::LinkTiming {
    let mut timing = daemon::link::LinkTiming::default();
    if let Some(ms) = t.reconnect_grace_ms {
        timing.grace = Duration::from_millis(ms);
    }
    if let Some(ms) = t.heartbeat_ms {
        timing.heartbeat = Duration::from_millis(ms);
        timing.silence = Duration::from_millis(ms * 3);
    }
    timing
}

/// After the first stop signal was taken: a second Ctrl-C or SIGTERM ends the process at once
/// ([`exit_at_once`]), whatever is still draining. One that comes within
/// [`STOP_SIGNAL_REPEAT_WINDOW`](protocol::limits::STOP_SIGNAL_REPEAT_WINDOW) of the first is
/// the first delivered twice and is ignored.
pub(crate) fn exit_on_second_signal() {
    let first = tokio::time::Instant::now();
    tokio::spawn(async move {
        loop {
            shutdown_signal().await;
            if first.elapsed() >= protocol::limits::STOP_SIGNAL_REPEAT_WINDOW {
                exit_at_once();
            }
            tracing::debug!("the first stop signal delivered again; still stopping");
        }
    });
}

/// Ends the process at once on a second stop signal, with exit status 130 (a process ended by
/// SIGINT, as shells report it), whatever is still draining.
pub(crate) fn exit_at_once() -> ! {
    eprintln!("machine-mcp: a second stop signal; exiting at once");
    std::process::exit(130);
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spill directory is `spill/` beside the store, also for a store named without a
    /// directory (`--store relay.db`: the current one).
    #[test]
    fn the_spill_directory_is_beside_the_store() {
        assert_eq!(
            spill_dir(Path::new("/s/relay/relay.db")),
            Path::new("/s/relay/spill")
        );
        assert_eq!(spill_dir(Path::new("relay.db")), Path::new("./spill"));
    }
}
