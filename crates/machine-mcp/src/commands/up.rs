//! `machine-mcp up`: a relay on loopback and a daemon in one process, enrolled automatically.

use std::{os::unix::fs::OpenOptionsExt, path::Path, sync::Arc, time::Duration};

use anyhow::{Context, Result, bail};
use daemon::{
    identity::{DeviceKey, Enrollment},
    link::{self, LinkConfig},
    sessions::HostedSessions,
    status::LinkStatus,
};
use relay::{RelayConfig, auth::Role, config::AuthMode, storage::Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{cli::UpArgs, limits::UP_STOP_WAIT};

/// The bridge `up` serves.
const BRIDGE: &str = "local";
/// The owner account `up` creates for its bridge.
const OWNER: &str = "owner";
/// How long `up` waits for its own daemon to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) async fn run(args: UpArgs) -> Result<()> {
    daemon::init_tls();
    if !args.listen.ip().is_loopback() {
        bail!(
            "machine-mcp up listens on loopback only ({} is not); for a public relay use `machine-mcp relay serve` and `machine-mcp connect`",
            args.listen
        );
    }
    // Ctrl-C or SIGTERM stops `up` at any point, starting up included.
    let interrupted = CancellationToken::new();
    {
        let t = interrupted.clone();
        let ignore_sigterm = args.ignore_sigterm_for_tests;
        // SIGHUP too (the terminal `up` runs in was closed): a stop, not a silent death.
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("cannot handle SIGHUP")?;
        tokio::spawn(async move {
            tokio::select! {
                () = super::instance::stop_signal(ignore_sigterm) => {}
                _ = hangup.recv() => tracing::info!("SIGHUP (its terminal closed?): stopping as on SIGTERM"),
            }
            if !ignore_sigterm {
                super::exit_on_second_signal();
            }
            t.cancel();
        });
    }
    let root = super::state_dir(&args.state)?;
    // One daemon per state directory, whatever the port: taken before anything in it is touched.
    // A bad workspace is reported before a --takeover stops the daemon that runs.
    super::instance::check_workspace(args.workspace.as_deref())?;
    super::instance::check_listen_for_takeover(&root, args.listen, args.takeover)?;
    // A new state directory is removed again when `up` cannot even listen (a busy port).
    let created = super::instance::Created::before(&root);
    let lock = super::instance::lock(&root, "up", args.takeover, &interrupted).await?;
    let dir = root.join("up");
    let published = args.public_url.is_some();
    let mut public_url: url::Url = match args.public_url {
        Some(u) => u,
        None => format!("http://{}", args.listen)
            .parse()
            .context("bad --listen")?,
    };
    let auth = super::auth_mode(args.auth);
    let mut config = RelayConfig {
        auth,
        timing: super::relay_timing(&args.timing),
        oauth: super::oauth_settings(&args.oauth),
        spill_dir: Some(super::spill_dir(&dir.join("relay.db"))),
        ..RelayConfig::new(args.listen, public_url.clone())
    };
    // Bound before the store is made, so that a busy port leaves nothing behind.
    let listener = match relay::bind(&config).await {
        Ok(l) => l,
        Err(e) => {
            created.undo(lock);
            return Err(e.into());
        }
    };
    let lock = Arc::new(lock);
    let storage = relay::storage::open(&dir.join("relay.db"))
        .await
        .with_context(|| format!("cannot open the relay store in {}", dir.display()))?;
    let bound = listener
        .local_addr()
        .context("cannot read the port the listener got")?;
    // `--listen 127.0.0.1:0` takes any free port: the daemon and the printed URLs use the one
    // the listener got.
    if args.listen.port() == 0 {
        config.listen = bound;
        if !published {
            public_url = format!("http://{bound}")
                .parse()
                .context("bad bound address")?;
            config.public_url = public_url.clone();
        }
    }
    // The daemon always connects to the listener itself; behind a tunnel it signs the public
    // origin, which is the relay's.
    lock.set_listen(bound)?;
    let local_url: url::Url = format!("http://{bound}")
        .parse()
        .context("bad bound address")?;
    // Enroll our own daemon: the bridge, its device key, and (with token auth) an owner token.
    if !storage.bridges().bridge_exists(BRIDGE).await? {
        storage.bridges().add_bridge(BRIDGE, 1).await?;
    }
    let key = Arc::new(DeviceKey::load_or_create(&dir.join("daemon"))?);
    let enrollment = match Enrollment::load(&dir.join("daemon"))? {
        Some(e)
            if storage
                .bridges()
                .device_key(&e.key_id)
                .await?
                .is_some_and(|k| k.public_key == key.public_key()) =>
        {
            e
        }
        _ => {
            let key_id = storage
                .bridges()
                .register_key(BRIDGE, &key.public_key())
                .await?;
            let e = Enrollment {
                relay: public_url.to_string(),
                bridge: BRIDGE.into(),
                key_id,
            };
            e.save(&dir.join("daemon"))?;
            e
        }
    };
    let token = match auth {
        AuthMode::Token | AuthMode::OAuth => Some(owner_token(&storage, &dir).await?),
        AuthMode::None => None,
    };
    // The owner account signs in on the consent page; its password is shown when it is
    // created, and reset with `relay account rotate-password --up`.
    let password = match auth {
        AuthMode::OAuth => super::relay::ensure_owner(&storage, BRIDGE, OWNER).await?,
        _ => None,
    };
    let account = (auth == AuthMode::OAuth).then_some(OWNER);
    let stop = CancellationToken::new();
    let relay_task = tokio::spawn(relay::serve_on(listener, config, storage, stop.clone()));
    // The runtime trims after its calls; the relay half has no call boundaries.
    let _trim = AbortOnDrop(runtime::memory::trim_periodically());

    let (runtime, upstreams) = super::remote_runtime(
        args.workspace,
        &args.policy,
        &args.state,
        &args.timing,
        args.servers.as_deref(),
    )?;
    let (servers, upstreams) = tokio::select! {
        r = daemon::catalog(&runtime, upstreams) => r,
        _ = interrupted.cancelled() => {
            stop.cancel();
            let _ = tokio::time::timeout(UP_STOP_WAIT, relay_task).await;
            return Ok(());
        }
    };
    let names: Vec<String> = servers
        .iter()
        .map(|s| s.name.clone())
        .filter(|n| n != protocol::frame::RUNTIME_SERVER)
        .collect();
    let sessions = HostedSessions::new(runtime.clone(), upstreams);
    let base = public_url.as_str().trim_end_matches('/').to_owned();
    let mcp_url = format!("{base}/b/{BRIDGE}/mcp");
    let link_status = Arc::new(LinkStatus::default());
    let status_stop = CancellationToken::new();
    let _status_guard = status_stop.clone().drop_guard();
    super::instance::serve_status(
        lock.clone(),
        link_status.clone(),
        runtime.clone(),
        sessions.clone(),
        super::instance::Facts {
            command: "up",
            relay: public_url.to_string(),
            bridge: BRIDGE.to_owned(),
            mcp_url: Some(mcp_url.clone()),
        },
        status_stop,
    )
    .await?;
    let (ready_tx, mut ready_rx) = tokio::sync::watch::channel(false);
    let link_config = LinkConfig {
        connect: (local_url != public_url).then(|| local_url.clone()),
        relay: public_url.clone(),
        bridge: enrollment.bridge.clone().into(),
        key_id: enrollment.key_id.clone(),
        key,
        servers,
        timing: super::daemon_timing(&args.timing),
        ready: Some(ready_tx),
        status: link_status,
    };
    let link_stop = stop.clone();
    let mut link_task = tokio::spawn(link::run(link_config, sessions, link_stop));

    let became_ready = tokio::select! {
        r = tokio::time::timeout(READY_TIMEOUT, ready_rx.wait_for(|r| *r)) => r,
        _ = interrupted.cancelled() => {
            stop.cancel();
            let _ = tokio::time::timeout(UP_STOP_WAIT, async {
                let _ = link_task.await;
                let _ = relay_task.await;
            })
            .await;
            runtime.shutdown().await;
            return Ok(());
        }
    };
    if !matches!(became_ready, Ok(Ok(_))) {
        stop.cancel();
        bail!(
            "the daemon did not become ready within {} s (see the log above)",
            READY_TIMEOUT.as_secs()
        );
    }
    let server_urls: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .map(|n| (n.clone(), json!(format!("{base}/b/{BRIDGE}/s/{n}/mcp"))))
        .collect();
    if args.json {
        println!(
            "{}",
            json!({"mcp_url": mcp_url, "servers": server_urls, "token": token,
                   "account": account, "password": password})
        );
    } else {
        print_human(
            &mcp_url,
            &server_urls,
            token.as_deref(),
            account.map(|a| (a, password.as_deref())),
            runtime.workspace().root(),
            runtime.policy().name(),
        );
    }
    let link_ended = tokio::select! {
        _ = interrupted.cancelled() => {
            tracing::info!("shutting down");
            false
        }
        r = &mut link_task => {
            if let Ok(Err(e)) = r {
                tracing::error!(error = %e, "the daemon link stopped");
            }
            true
        }
    };
    stop.cancel();
    // The daemon drains its calls in flight while the relay drains its connections; process
    // sessions end after (a call in flight may be reading one), as in `connect`.
    let drained = async {
        if !link_ended {
            let _ = link_task.await;
        }
        let _ = relay_task.await;
    };
    if tokio::time::timeout(UP_STOP_WAIT, drained).await.is_err() {
        tracing::warn!(
            "still stopping after {} s; exiting anyway",
            UP_STOP_WAIT.as_secs()
        );
    }
    runtime.shutdown().await;
    Ok(())
}

/// The owner token of `up`'s bridge, kept in `dir/token` (0600) so restarts keep client configs
/// working; a token revoked or missing from the store is replaced.
async fn owner_token(storage: &Store, dir: &Path) -> Result<String> {
    let path = dir.join("token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        let t = t.trim().to_owned();
        if storage
            .accounts()
            .token_by_hash(&relay::auth::sha256_hex(&t))
            .await?
            .is_some()
        {
            return Ok(t);
        }
    }
    let (_, token) = storage
        .accounts()
        .create_token(BRIDGE, Role::Owner, Some("machine-mcp up"))
        .await?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    std::io::Write::write_all(&mut f, token.as_bytes())?;
    Ok(token)
}

fn print_human(
    mcp_url: &str,
    servers: &serde_json::Map<String, serde_json::Value>,
    token: Option<&str>,
    account: Option<(&str, Option<&str>)>,
    workspace: &Path,
    policy: &str,
) {
    let header = match token {
        Some(t) => format!("Authorization: Bearer {t}"),
        None => String::new(),
    };
    println!(
        "machine-mcp is up: workspace {} (policy {policy})",
        workspace.display()
    );
    println!();
    println!("MCP URL (Streamable HTTP): {mcp_url}");
    for (name, url) in servers {
        println!("  upstream {name}: {}", url.as_str().unwrap_or_default());
    }
    if let Some((name, password)) = account {
        println!("Sign-in (OAuth):           account {name}");
        match password {
            Some(p) => println!(
                "                           password {p}\n  (shown once; reset: machine-mcp relay account rotate-password --up)"
            ),
            None => println!(
                "  (password shown when `up` first created it; reset: machine-mcp relay account rotate-password --up)"
            ),
        }
        println!(
            "  Clients that support OAuth (ChatGPT, Claude, VS Code, Cursor, mcp-remote) need only the URL;"
        );
        println!("  they open the relay's consent page, where you sign in once.");
    }
    if let Some(t) = token {
        println!("Bearer token:              {t}");
        println!(
            "  (role owner, for clients that take a pasted token; more: machine-mcp relay token create --up --bridge local --role reviewer)"
        );
    } else {
        println!("No authentication (loopback only).");
    }
    println!();
    println!("Claude Code:");
    if token.is_some() {
        println!("  claude mcp add --transport http machine {mcp_url} --header \"{header}\"");
    } else {
        println!("  claude mcp add --transport http machine {mcp_url}");
    }
    let headers = match token {
        Some(t) => json!({"Authorization": format!("Bearer {t}")}),
        None => json!({}),
    };
    println!();
    println!("Cursor (.cursor/mcp.json):");
    println!(
        "{}",
        pretty(&json!({"mcpServers": {"machine": {"url": mcp_url, "headers": headers}}}))
    );
    println!();
    println!("VS Code (.vscode/mcp.json):");
    println!(
        "{}",
        pretty(
            &json!({"servers": {"machine": {"type": "http", "url": mcp_url, "headers": headers}}})
        )
    );
    println!();
    println!("Any stdio-only client, through mcp-remote:");
    let mut args = vec![json!("-y"), json!("mcp-remote"), json!(mcp_url)];
    if token.is_some() {
        args.push(json!("--header"));
        args.push(json!(header));
    }
    println!(
        "{}",
        pretty(&json!({"mcpServers": {"machine": {"command": "npx", "args": args}}}))
    );
    println!();
    println!("Press Ctrl-C to stop.");
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Aborts a task when dropped (whichever way `up` returns).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
