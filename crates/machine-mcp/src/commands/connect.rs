//! `machine-mcp connect`: the daemon.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use daemon::{
    identity::{DeviceKey, Enrollment},
    link::{self, LinkConfig},
    sessions::HostedSessions,
    status::LinkStatus,
};
use tokio_util::sync::CancellationToken;

use crate::cli::ConnectArgs;

pub(crate) async fn run(args: ConnectArgs) -> Result<()> {
    daemon::init_tls();
    // Ctrl-C or SIGTERM stops the daemon at any point, starting up included.
    let stop = CancellationToken::new();
    let ignore_sigterm = args.ignore_sigterm_for_tests;
    {
        let t = stop.clone();
        tokio::spawn(async move {
            super::instance::stop_signal(ignore_sigterm).await;
            t.cancel();
        });
    }
    let root = super::state_dir(&args.state)?;
    // One daemon per state directory: taken before anything in it is touched.
    let dir = root.join("daemon");
    // What would make this daemon fail at once is checked before a --takeover stops the one
    // that runs.
    super::instance::check_workspace(args.workspace.as_deref())?;
    if args.enroll.is_none() && Enrollment::load(&dir)?.is_none() {
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
    let (runtime, upstreams) = super::remote_runtime(
        args.workspace,
        &args.policy,
        &args.state,
        &args.timing,
        args.servers.as_deref(),
    )?;
    let (servers, upstreams) = tokio::select! {
        r = daemon::catalog(&runtime, upstreams) => r,
        _ = stop.cancelled() => return Ok(()),
    };
    let sessions = HostedSessions::new(runtime.clone(), upstreams);
    tracing::info!(
        workspace = %runtime.workspace().root().display(),
        policy = runtime.policy().name(),
        bridge = %enrollment.bridge,
        "daemon starting"
    );
    let link_status = Arc::new(LinkStatus::default());
    let status_stop = CancellationToken::new();
    let _status_guard = status_stop.clone().drop_guard();
    super::instance::serve_status(
        lock.clone(),
        link_status.clone(),
        runtime.clone(),
        sessions.clone(),
        super::instance::Facts {
            command: "connect",
            relay: args.relay.to_string(),
            bridge: enrollment.bridge.clone(),
            mcp_url: None,
        },
        status_stop,
    )
    .await?;
    let config = LinkConfig {
        connect: None,
        relay: args.relay,
        bridge: enrollment.bridge.into(),
        key_id: enrollment.key_id,
        key,
        servers,
        timing: super::daemon_timing(&args.timing),
        ready: None,
        status: link_status,
    };
    let r = link::run(config, sessions, stop.clone()).await;
    match &r {
        Ok(()) if stop.is_cancelled() => tracing::info!("daemon stopped: asked to stop (signal)"),
        Ok(()) => tracing::info!("daemon stopped"),
        Err(e) => tracing::error!(error = %e, "daemon stopping: the relay link failed"),
    }
    runtime.shutdown().await;
    drop(lock);
    r.context("the relay link stopped")
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
