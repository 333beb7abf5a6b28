//! `machine-mcp connect`: the daemon.
//!
//! SIGTERM or Ctrl-C stop it gracefully. SIGHUP re-reads what it serves (see [`reload`]): when
//! nothing changed the link is kept; when something did, the link is closed cleanly (calls in
//! flight drain first) and opened again with the new settings. A new binary installed at the
//! path it was started by (noticed on a timer, or at once on SIGHUP) is swapped in once nothing
//! would be lost (see [`upgrade`]).

mod upgrade;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use daemon::{
    ProbedUpstreams,
    identity::{DeviceKey, Enrollment},
    link::{self, LinkConfig},
    servers::UpstreamSpec,
    sessions::HostedSessions,
    status::LinkStatus,
};
use runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, Command, ConnectArgs, PolicyArgs};

pub(crate) async fn run(args: ConnectArgs) -> Result<()> {
    // After a binary swap: what the previous image left running is reaped, not left a zombie.
    upgrade::reap_inherited();
    daemon::init_tls();
    // Ctrl-C or SIGTERM stops the daemon at any point, starting up included.
    let stop = CancellationToken::new();
    let ignore_sigterm = args.ignore_sigterm_for_tests;
    {
        let t = stop.clone();
        tokio::spawn(async move {
            super::instance::stop_signal(ignore_sigterm).await;
            if !ignore_sigterm {
                super::exit_on_second_signal();
            }
            t.cancel();
        });
    }
    // Handled from the start, so that a SIGHUP while starting does not kill the daemon.
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot handle SIGHUP")?;
    // A previous image blocked SIGHUP across its exec (a binary swap); handled now, it may come.
    upgrade::unblock_hangup();
    let root = super::state_dir(&args.state)?;
    // One daemon per state directory: taken before anything in it is touched.
    let dir = root.join("daemon");
    // What would make this daemon fail at once is checked before a --takeover stops the one
    // that runs.
    super::instance::check_workspace(args.workspace.as_deref())?;
    if args.enroll.is_none() && Enrollment::load(&dir)?.is_none() {
        // A daemon that runs here (`up`, which keeps its own enrollment) is what to name first.
        if daemon::instance::is_held(&root)
            && let Some(r) = daemon::instance::read_record(&root)
        {
            if !args.takeover {
                return Err(daemon::instance::LockError::Held {
                    dir: root.clone(),
                    holder: r.describe(),
                }
                .into());
            }
            bail!(
                "`connect` is not enrolled on the state directory {}, where {} runs (its enrollment is its own): \
                 give `connect` its own --state-dir, or enroll it with `--enroll CODE` from `machine-mcp relay bridge add NAME`",
                root.display(),
                r.describe()
            );
        }
        bail!(
            "this machine is not enrolled with a relay yet: on the relay run `machine-mcp relay bridge add NAME`, \
             then here `machine-mcp connect --relay {} --enroll CODE`",
            args.relay
        );
    }
    // A failed enrollment into a new state directory leaves no half-made one behind.
    let created = super::instance::Created::before(&root);
    let lock = super::instance::lock(&root, "connect", args.takeover, &stop).await?;
    let (key, enrollment) = match start(&args, &dir).await {
        Ok(started) => started,
        Err(e) => {
            if args.enroll.is_some() {
                created.undo(lock);
            }
            return Err(e);
        }
    };
    let lock = Arc::new(lock);
    // Started by the service: its command line is the one `service install` recorded. Only then
    // does a SIGHUP read the recorded definition (a daemon started by hand keeps its own flags).
    let own: Option<Vec<String>> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string().ok())
        .collect();
    let from_service =
        own.is_some() && super::service::recorded_daemon_args(&root).ok().flatten() == own;
    let mut served = Served::read(
        args.workspace.clone(),
        args.policy.clone(),
        args.servers.clone(),
    )?;
    let mut runtime: Option<Arc<Runtime>> = None;
    let mut probed: Option<ProbedUpstreams> = None;
    // The workspace is guarded before the watcher's first look (`runtime::programs`): the
    // runtime that registers it is built later.
    if runtime::programs::guards(&super::policy(&args.policy), true)
        && let Ok(ws) = super::workspace_dir(args.workspace.as_deref())
    {
        runtime::programs::guard_workspace(&ws);
    }
    // The binary swap: a watcher of the path this daemon was started by, nudged by SIGHUP.
    let binary_nudge = Arc::new(tokio::sync::Notify::new());
    let (upgrade_tx, mut upgrades) = tokio::sync::mpsc::channel(1);
    tokio::spawn(upgrade::watch(
        supervisor::binary::invoked_path(&std::env::args_os().next().unwrap_or_default()),
        binary_nudge.clone(),
        upgrade_tx,
    ));
    let mut pending: Option<upgrade::Upgrade> = None;
    // When a pending upgrade last said what it waits for.
    let told = lock::Lock::new(None);
    let r = loop {
        let rt = match runtime.take() {
            Some(rt) => rt,
            None => super::build_runtime(
                served.workspace.clone(),
                &served.policy,
                &args.state,
                Some(super::remote_budget(&args.timing)),
                true,
                served.servers.as_deref(),
            )?,
        };
        // Probed before the last link closed when a reload brought them.
        let (infos, upstreams) = match probed.take() {
            Some(p) => p,
            None => tokio::select! {
                p = daemon::probe_upstreams(served.upstreams.clone()) => p,
                () = stop.cancelled() => {
                    tracing::info!("daemon stopped: asked to stop (signal) while starting the upstream servers");
                    rt.shutdown().await;
                    return Ok(());
                }
            },
        };
        let mut servers = vec![daemon::runtime_catalog(&rt)];
        servers.extend(infos);
        let sessions = HostedSessions::new(rt.clone(), upstreams);
        tracing::info!(
            workspace = %rt.workspace().root().display(),
            policy = rt.policy().name(),
            bridge = %enrollment.bridge,
            "daemon starting"
        );
        let link_status = Arc::new(LinkStatus::default());
        let status_stop = CancellationToken::new();
        let status_guard = status_stop.clone().drop_guard();
        super::instance::serve_status(
            lock.clone(),
            link_status.clone(),
            rt.clone(),
            sessions.clone(),
            super::instance::Facts {
                command: "connect",
                relay: args.relay.to_string(),
                bridge: enrollment.bridge.to_string(),
                mcp_url: None,
            },
            status_stop,
        )
        .await?;
        let config = LinkConfig {
            connect: None,
            relay: args.relay.clone(),
            bridge: enrollment.bridge.clone().into(),
            key_id: enrollment.key_id.clone(),
            key: key.clone(),
            servers,
            timing: super::daemon_timing(&args.timing),
            ready: None,
            status: link_status,
        };
        // A reload closes this link only; a stop signal closes it too.
        let link_stop = stop.child_token();
        let link = link::run(config, sessions.clone(), link_stop.clone());
        tokio::pin!(link);
        let mut next: Option<Served> = None;
        // Set once the link is closed for the binary swap.
        let mut swapping = false;
        // While a reload prepares: the new upstream servers start, then calls in flight get a
        // moment to finish; the link serves on meanwhile and closes only after.
        let mut preparing: Option<std::pin::Pin<Box<dyn Future<Output = ProbedUpstreams> + Send>>> =
            None;
        let r = loop {
            let prepared = async {
                match preparing.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            };
            // Nothing would be lost, then the new file checked once more (off the select: the
            // link is served meanwhile).
            let idle = async {
                match &pending {
                    Some(u) => {
                        upgrade::idle(&sessions, &rt, u.noticed, &told).await;
                        upgrade::verify(&u.path).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut link => break r,
                Some(mut u) = upgrades.recv(), if !swapping => {
                    match pending.take() {
                        Some(earlier) => {
                            tracing::info!(
                                binary = %u.path.display(),
                                replaced = %earlier.version,
                                new = %u.version,
                                "another new binary is installed; the pending upgrade is to it"
                            );
                            u.noticed = earlier.noticed;
                        }
                        None => {
                            tracing::info!(
                                binary = %u.path.display(),
                                running = runtime::version(),
                                new = %u.version,
                                "a new binary is installed: the daemon restarts into it once no call, process session or task would be lost"
                            );
                            *told.lock() = None;
                        }
                    }
                    pending = Some(u);
                }
                checked = idle, if !swapping && next.is_none() && !stop.is_cancelled() => {
                    match checked {
                        Ok(version) => {
                            if let Some(u) = pending.as_mut() {
                                u.version = version;
                            }
                            tracing::info!("upgrade: nothing running; closing the link to restart into the new binary");
                            swapping = true;
                            link_stop.cancel();
                        }
                        Err(why) => {
                            tracing::error!(
                                error = %why,
                                "upgrade: the new binary cannot be used; the daemon goes on with this build"
                            );
                            pending = None;
                        }
                    }
                }
                p = prepared => {
                    probed = Some(p);
                    preparing = None;
                    link_stop.cancel();
                }
                _ = hangup.recv(), if next.is_none() && !swapping && !stop.is_cancelled() => {
                    binary_nudge.notify_one();
                    match reload(&root, &args, &served, from_service) {
                        Ok(Some(new)) => {
                            tracing::info!(
                                changed = %served.changes(&new).join(", "),
                                "SIGHUP: the settings changed; the link is reopened with them once the servers have started and calls in flight are done"
                            );
                            preparing = Some(Box::pin(prepare(new.upstreams.clone(), sessions.clone())));
                            next = Some(new);
                        }
                        Ok(None) => tracing::info!("SIGHUP: nothing changed; nothing is restarted"),
                        Err(e) => tracing::error!(
                            error = %format!("{e:#}"),
                            "SIGHUP: cannot reload; the daemon keeps serving what it served"
                        ),
                    }
                }
            }
        };
        drop(status_guard);
        sessions.close_all();
        if swapping && !stop.is_cancelled() && r.is_ok() {
            let holding = upgrade::Holding::now(&sessions, &rt);
            if holding.busy() {
                // Started in the moment before the link closed: the swap waits for it.
                tracing::info!(waiting_for = %holding, "upgrade: work started while the link closed; reconnecting and waiting for it");
                runtime = Some(rt);
                continue;
            }
            let Some(u) = pending.take() else {
                runtime = Some(rt);
                continue;
            };
            rt.shutdown().await;
            let args = upgrade::exec_args(std::env::args_os().skip(1));
            tracing::info!(binary = %u.path.display(), version = %u.version, "upgrade: restarting into the new binary");
            let e = upgrade::exec(&u.path, &args);
            tracing::error!(
                binary = %u.path.display(),
                error = %e,
                "upgrade: cannot start the new binary; the daemon goes on with this build"
            );
            continue;
        }
        match next {
            Some(new) if probed.is_some() && !stop.is_cancelled() && r.is_ok() => {
                // A new servers file is one of the runtime's own files: a runtime that knows it.
                if new.workspace != served.workspace
                    || new.policy_flags() != served.policy_flags()
                    || new.servers != served.servers
                {
                    let ending = rt.activity().running_process_sessions;
                    if ending > 0 {
                        tracing::warn!(
                            process_sessions = ending,
                            "SIGHUP: the workspace, policy or servers file changed: process sessions end (managed jobs keep running)"
                        );
                    }
                    rt.shutdown().await;
                } else {
                    runtime = Some(rt);
                }
                served = new;
            }
            _ => {
                match &r {
                    Ok(()) if stop.is_cancelled() => {
                        tracing::info!("daemon stopped: asked to stop (signal)");
                    }
                    Ok(()) => tracing::info!("daemon stopped"),
                    Err(e) => {
                        tracing::error!(error = %e, "daemon stopping: the relay link failed");
                    }
                }
                rt.shutdown().await;
                break r;
            }
        }
    };
    drop(lock);
    r.context("the relay link stopped")
}

/// How long a reload waits for a moment with no call in flight before it closes the link (the
/// link's own drain then gives what still runs up to 10 s more).
const RELOAD_IDLE_WAIT: Duration = Duration::from_secs(30);

/// A reload's preparation while the link serves on: starts and probes the new upstream servers
/// (each within its probe bound), then waits up to [`RELOAD_IDLE_WAIT`] for no request to be in
/// flight.
async fn prepare(upstreams: Vec<UpstreamSpec>, sessions: Arc<HostedSessions>) -> ProbedUpstreams {
    let probed = daemon::probe_upstreams(upstreams).await;
    let start = tokio::time::Instant::now();
    while sessions.requests_in_flight() > 0 {
        if start.elapsed() >= RELOAD_IDLE_WAIT {
            tracing::warn!(
                in_flight = sessions.requests_in_flight(),
                "SIGHUP: calls still in flight after {} s; reopening the link anyway (they get the stop's drain)",
                RELOAD_IDLE_WAIT.as_secs()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    probed
}

/// What a SIGHUP may change while the link stays up: the workspace, the policy flags and the
/// upstream servers of the servers file.
struct Served {
    workspace: Option<PathBuf>,
    policy: PolicyArgs,
    servers: Option<PathBuf>,
    /// The servers file as read (none without one).
    upstreams: Vec<UpstreamSpec>,
}

impl Served {
    /// Reads the servers file (relative `cwd`s resolve against the workspace, default: the
    /// current directory).
    ///
    /// # Errors
    /// The workspace is not a directory, or the servers file is unreadable or invalid.
    fn read(
        workspace: Option<PathBuf>,
        policy: PolicyArgs,
        servers: Option<PathBuf>,
    ) -> Result<Self> {
        // Canonical, so that the service definition's absolute path equals a relative one.
        let root = super::workspace_dir(workspace.as_deref())?;
        let upstreams = match &servers {
            Some(f) => daemon::servers::load(f, &root).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        };
        Ok(Self {
            workspace: Some(root),
            policy,
            servers,
            upstreams,
        })
    }

    fn policy_flags(&self) -> Vec<String> {
        super::policy_flags(&self.policy, true)
    }

    /// What differs from `new`, each named (with the old and new value for the workspace and
    /// the policy).
    fn changes(&self, new: &Self) -> Vec<String> {
        let mut c = Vec::new();
        let shown = |w: &Option<PathBuf>| {
            w.as_deref()
                .map_or_else(String::new, |w| w.display().to_string())
        };
        if self.workspace != new.workspace {
            c.push(format!(
                "workspace ({} → {})",
                shown(&self.workspace),
                shown(&new.workspace)
            ));
        }
        if self.policy_flags() != new.policy_flags() {
            c.push(format!(
                "policy ({} → {})",
                self.policy_flags().join(" "),
                new.policy_flags().join(" ")
            ));
        }
        if self.servers != new.servers {
            c.push("servers file".to_owned());
        } else if self.upstreams != new.upstreams && self.workspace == new.workspace {
            // (A changed workspace alone changes where relative `cwd`s resolve.)
            c.push("servers".to_owned());
        }
        c
    }
}

/// The service definition `machine-mcp service install` recorded for this state directory:
/// the daemon's arguments after the executable, when there is one.
///
/// # Errors
/// The manifest exists but cannot be read or holds no valid `connect` command line.
fn service_definition(root: &Path) -> Result<Option<ConnectArgs>> {
    use clap::Parser;
    let Some(argv) = super::service::recorded_daemon_args(root)? else {
        return Ok(None);
    };
    let cli = Cli::try_parse_from(std::iter::once("machine-mcp".to_owned()).chain(argv))
        .map_err(|e| {
            // clap's first line is the reason; the usage and help that follow are noise in a log.
            let text = e.to_string();
            anyhow::anyhow!("{}", text.lines().next().unwrap_or_default().trim())
        })
        .context("the service definition's command line does not parse")?;
    match cli.command {
        Command::Connect(a) => Ok(Some(a)),
        _ => bail!("the service definition does not run `connect`"),
    }
}

/// What SIGHUP asks for: the settings as they are now — when this daemon was started by the
/// service (`from_service`), the workspace, policy flags and servers file of the service
/// definition `machine-mcp service install` last recorded for this state directory; else this
/// process's own, which cannot change — and the servers file read again. `None` when they equal
/// `current`.
///
/// Settings a running daemon cannot change (the relay, the state directory, the timing) are
/// left as they are, with a warning naming `machine-mcp service restart`.
///
/// # Errors
/// The service definition or the servers file cannot be read or is invalid; the daemon then
/// keeps what it serves.
fn reload(
    root: &Path,
    args: &ConnectArgs,
    current: &Served,
    from_service: bool,
) -> Result<Option<Served>> {
    let definition = if from_service {
        service_definition(root)?
    } else {
        None
    };
    let new = match definition {
        Some(d) => {
            if d.state
                .state_dir
                .as_deref()
                .map(std::fs::canonicalize)
                .transpose()
                .ok()
                .flatten()
                != std::fs::canonicalize(root).ok()
            {
                tracing::warn!(
                    "SIGHUP: the service definition names another --state-dir; ignored (a daemon keeps its state directory)"
                );
            }
            if d.relay != args.relay {
                tracing::warn!(
                    relay = %d.relay,
                    "SIGHUP: the service definition names another relay; that takes `machine-mcp service restart`"
                );
            }
            Served::read(d.workspace, d.policy, d.servers)?
        }
        None => {
            if from_service {
                tracing::info!(
                    "SIGHUP: the service definition is gone (uninstalled?); re-reading the servers file, the policy stays"
                );
            } else if current.servers.is_none() {
                tracing::info!(
                    "SIGHUP: nothing to re-read: no --servers file, and this daemon was not started by `machine-mcp service` (its policy flags are its command line's)"
                );
                return Ok(None);
            } else {
                tracing::info!(
                    "SIGHUP: re-reading the servers file (this daemon was not started by `machine-mcp service`, so its policy flags are its command line's)"
                );
            }
            Served::read(
                current.workspace.clone(),
                current.policy.clone(),
                current.servers.clone(),
            )?
        }
    };
    super::instance::check_workspace(new.workspace.as_deref())?;
    Ok((!current.changes(&new).is_empty()).then_some(new))
}

/// The device key in `dir` and the enrollment: redeems `--enroll CODE` at the relay (and saves
/// it), else loads the saved one.
///
/// # Errors
/// The key cannot be read or made, the relay refuses the code or cannot be reached, the
/// enrollment cannot be saved, or there is none.
async fn start(args: &ConnectArgs, dir: &std::path::Path) -> Result<(Arc<DeviceKey>, Enrollment)> {
    let key = Arc::new(DeviceKey::load_or_create(dir)?);
    let enrollment = match &args.enroll {
        Some(code) => {
            let (bridge, key_id) =
                link::enroll(&args.relay, code, &key, std::time::Duration::from_secs(30))
                    .await
                    .map_err(anyhow::Error::msg)?;
            let e = Enrollment {
                relay: args.relay.to_string(),
                bridge,
                key_id,
            };
            e.save(dir)?;
            eprintln!("enrolled as bridge {} at {}", e.bridge, e.relay);
            e
        }
        None => match Enrollment::load(dir)? {
            Some(e) => e,
            None => bail!(
                "this machine is not enrolled with a relay yet: on the relay run `machine-mcp relay bridge add NAME`, \
                 then here `machine-mcp connect --relay {} --enroll CODE`",
                args.relay
            ),
        },
    };
    Ok((key, enrollment))
}
