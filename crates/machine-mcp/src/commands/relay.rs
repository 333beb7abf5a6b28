//! `machine-mcp relay serve|bridge|token`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use relay::{RelayConfig, SqliteStorage, auth::Role, config::AuthMode};
use tokio_util::sync::CancellationToken;

use crate::cli::{AuthArg, BridgeCommand, RelayServeArgs, StoreArgs, TokenCommand};

fn store_path(s: &StoreArgs) -> Result<PathBuf> {
    match &s.store {
        Some(p) => Ok(p.clone()),
        None => Ok(super::state_dir(&s.state)?
            .join(if s.up { "up" } else { "relay" })
            .join("relay.db")),
    }
}

/// Opens the store, creating it when missing (`relay serve`, `relay bridge add`).
async fn open(s: &StoreArgs) -> Result<SqliteStorage> {
    let path = store_path(s)?;
    SqliteStorage::open(&path)
        .await
        .with_context(|| format!("cannot open the relay store {}", path.display()))
}

/// Opens a store that must already exist (the commands that read or change its bridges and
/// tokens), so that a wrong path is an error rather than a new empty store.
///
/// # Errors
/// No store at the path (with a hint at `--up` when the store of `machine-mcp up` exists), or
/// it cannot be opened.
async fn open_existing(s: &StoreArgs) -> Result<SqliteStorage> {
    let path = store_path(s)?;
    if !path.exists() {
        let up_store = super::state_dir(&s.state)
            .map(|d| d.join("up").join("relay.db"))
            .ok()
            .filter(|p| !s.up && s.store.is_none() && p.exists());
        match up_store {
            Some(up) => bail!(
                "there is no relay store at {}; the store of `machine-mcp up` is {}: add --up",
                path.display(),
                up.display()
            ),
            None if s.up => bail!(
                "there is no relay store at {}: `machine-mcp up` has not run with this state \
                 directory yet (pass the same --state-dir as `up`)",
                path.display()
            ),
            None => bail!(
                "there is no relay store at {}; start with `machine-mcp relay bridge add NAME`, \
                 pass --store PATH, or --up for the store of `machine-mcp up`",
                path.display()
            ),
        }
    }
    open(s).await
}

pub(crate) async fn serve(args: RelayServeArgs) -> Result<()> {
    let storage = open(&args.store).await?;
    let defaulted = args.public_url.is_none();
    let mut public_url = match args.public_url {
        Some(u) => u,
        None => format!("http://{}", args.listen)
            .parse()
            .context("bad --listen address")?,
    };
    let mut config = RelayConfig {
        listen: args.listen,
        public_url: public_url.clone(),
        auth: match args.auth {
            AuthArg::Token => AuthMode::Token,
            AuthArg::None => AuthMode::None,
        },
        allowed_origins: args.allowed_origins,
        max_inflight_per_bridge: args.max_inflight.max(1),
        timing: super::relay_timing(&args.timing),
    };
    let listener = relay::bind(&config).await?;
    let bound = listener.local_addr().unwrap_or(config.listen);
    // `--listen HOST:0` takes any free port; the default public URL names the one it got.
    if defaulted && args.listen.port() == 0 {
        public_url = format!("http://{bound}")
            .parse()
            .context("bad bound address")?;
        config.public_url = public_url.clone();
    }
    let bridges = storage.bridges().await.unwrap_or_default();
    eprintln!(
        "machine-mcp relay listening on {bound} (public URL {public_url}); bridges: {}",
        if bridges.is_empty() {
            "none yet (add one with `machine-mcp relay bridge add NAME`)".to_owned()
        } else {
            bridges.join(", ")
        }
    );
    let stop = CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(async move {
        super::shutdown_signal().await;
        tracing::info!("shutting down the relay");
        signal.cancel();
    });
    let trim = runtime::memory::trim_periodically();
    let served = relay::serve_on(listener, config, storage, stop).await;
    trim.abort();
    served?;
    Ok(())
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        bail!("bridge name {name:?} must be 1-64 letters, digits, '-' or '_'");
    }
    Ok(())
}

pub(crate) async fn bridge(cmd: BridgeCommand) -> Result<()> {
    match cmd {
        BridgeCommand::Add {
            name,
            code_ttl_minutes,
            store,
        } => {
            check_name(&name)?;
            let s = open(&store).await?;
            let code = s.add_bridge(&name, code_ttl_minutes.max(1) * 60).await?;
            println!("{code}");
            eprintln!(
                "bridge {name}: enrollment code above, valid for {code_ttl_minutes} min and for one use.\n\
                 On the machine to connect, run:\n  machine-mcp connect --relay <RELAY URL> --enroll {code} --workspace <DIR>\n\
                 Then give a client a token: machine-mcp relay token create --bridge {name} --role operator"
            );
        }
        BridgeCommand::List { store } => {
            let s = open_existing(&store).await?;
            for b in s.bridges().await? {
                println!("{b}");
            }
        }
    }
    Ok(())
}

pub(crate) async fn token(cmd: TokenCommand) -> Result<()> {
    match cmd {
        TokenCommand::Create {
            bridge,
            role,
            label,
            store,
        } => {
            let role = Role::parse(&role).map_err(anyhow::Error::msg)?;
            let s = open_existing(&store).await?;
            let (rec, token) = s.create_token(&bridge, role, label.as_deref()).await?;
            println!("{token}");
            eprintln!(
                "token {} for bridge {} with role {}: shown once above; send it as `Authorization: Bearer <token>`.",
                rec.id,
                rec.bridge,
                rec.role.as_str()
            );
        }
        TokenCommand::List { bridge, store } => {
            let s = open_existing(&store).await?;
            for t in s.tokens(bridge.as_deref()).await? {
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    t.id,
                    t.bridge,
                    t.role.as_str(),
                    if t.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    },
                    t.label.unwrap_or_default()
                );
            }
        }
        TokenCommand::Revoke { id, store } => {
            let s = open_existing(&store).await?;
            s.revoke_token(&id).await?;
            eprintln!("token {id} revoked");
        }
    }
    Ok(())
}
