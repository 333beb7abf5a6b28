//! `machine-mcp connect`: the daemon.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use daemon::{
    identity::{DeviceKey, Enrollment},
    link::{self, LinkConfig},
    sessions::HostedSessions,
};
use tokio_util::sync::CancellationToken;

use crate::cli::ConnectArgs;

pub(crate) async fn run(args: ConnectArgs) -> Result<()> {
    daemon::init_tls();
    // Ctrl-C or SIGTERM stops the daemon at any point, starting up included.
    let stop = CancellationToken::new();
    {
        let t = stop.clone();
        tokio::spawn(async move {
            super::shutdown_signal().await;
            t.cancel();
        });
    }
    let dir = super::state_dir(&args.state)?.join("daemon");
    let key = Arc::new(DeviceKey::load_or_create(&dir)?);
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
            e.save(&dir)?;
            eprintln!("enrolled as bridge {} at {}", e.bridge, e.relay);
            e
        }
        None => match Enrollment::load(&dir)? {
            Some(e) => e,
            None => bail!(
                "this machine is not enrolled with a relay yet: on the relay run `machine-mcp relay bridge add NAME`, \
                 then here `machine-mcp connect --relay {} --enroll CODE`",
                args.relay
            ),
        },
    };
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
    let config = LinkConfig {
        connect: None,
        relay: args.relay,
        bridge: enrollment.bridge.into(),
        key_id: enrollment.key_id,
        key,
        servers,
        timing: super::daemon_timing(&args.timing),
        ready: None,
    };
    let r = link::run(config, sessions, stop).await;
    runtime.shutdown().await;
    r.context("the relay link stopped")
}
