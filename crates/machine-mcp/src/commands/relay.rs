//! `machine-mcp relay serve|bridge|account|client|token`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use relay::{
    RelayConfig,
    auth::Role,
    oauth::password,
    storage::{Store, accounts::AccountChange},
};
use tokio_util::sync::CancellationToken;

use crate::cli::{
    AccountArgs, AccountCommand, BridgeCommand, ClientCommand, DeviceCommand, RelayServeArgs,
    StoreArgs, TokenCommand,
};

fn store_path(s: &StoreArgs) -> Result<PathBuf> {
    match &s.store {
        Some(p) => Ok(p.clone()),
        None => Ok(super::state_dir(&s.state)?
            .join(if s.up { "up" } else { "relay" })
            .join("relay.db")),
    }
}

/// The flags that name the store of `s` again (`--up`, `--store PATH`, `--state-dir DIR`), each
/// with a leading space, for the follow-up command lines a command prints: pasted, they reach
/// the same store.
fn store_flags(s: &StoreArgs) -> String {
    let quote = |p: &std::path::Path| {
        let p = p.to_string_lossy();
        shlex::try_quote(&p).map_or_else(|_| p.to_string(), |q| q.into_owned())
    };
    let mut flags = String::new();
    if s.up {
        flags.push_str(" --up");
    }
    if let Some(p) = &s.store {
        flags.push_str(&format!(" --store {}", quote(p)));
    } else if let Some(d) = &s.state.state_dir {
        flags.push_str(&format!(" --state-dir {}", quote(d)));
    }
    flags
}

/// Opens the store, creating it when missing (`relay serve`, `relay bridge add`).
async fn open(s: &StoreArgs) -> Result<Store> {
    let path = store_path(s)?;
    relay::storage::open(&path)
        .await
        .with_context(|| format!("cannot open the relay store {}", path.display()))
}

/// Opens a store that must already exist (the commands that read or change its bridges and
/// tokens), so that a wrong path is an error rather than a new empty store.
///
/// # Errors
/// No store at the path (with a hint at `--up` when the store of `machine-mcp up` exists), or
/// it cannot be opened.
async fn open_existing(s: &StoreArgs) -> Result<Store> {
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
    let spill_dir = Some(super::spill_dir(&store_path(&args.store)?));
    let defaulted = args.public_url.is_none();
    let mut public_url = match args.public_url {
        Some(u) => u,
        None => format!("http://{}", args.listen)
            .parse()
            .context("bad --listen address")?,
    };
    let mut config = RelayConfig {
        auth: super::auth_mode(args.auth),
        allowed_origins: args.allowed_origins,
        max_inflight_per_bridge: args.max_inflight.max(1),
        timing: super::relay_timing(&args.timing),
        oauth: super::oauth_settings(&args.oauth),
        connections: relay::server::ConnectionLimits {
            total: args.max_connections.max(1),
            per_address: args.max_connections_per_address.max(1),
        },
        metrics_listen: args.metrics_listen,
        trusted_proxies: args.trusted_proxies,
        spill_dir,
        ..RelayConfig::new(args.listen, public_url.clone())
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
    let bridges = storage.bridges().bridges().await.unwrap_or_default();
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
        super::exit_on_second_signal();
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
            owner,
            keep_existing,
            store,
        } => {
            check_name(&name)?;
            relay::storage::accounts::check_account_name(&owner).map_err(anyhow::Error::msg)?;
            let s = open(&store).await?;
            let had_keys = s
                .bridges()
                .device_keys(Some(&name))
                .await?
                .iter()
                .any(|k| k.revoked_at.is_none());
            let code = s
                .bridges()
                .add_bridge_code(&name, code_ttl_minutes * 60, keep_existing)
                .await?;
            let first_owner = ensure_owner(&s, &name, &owner).await?;
            let again = store_flags(&store);
            // `connect` has no store: with --up its relay is the one `machine-mcp up` serves.
            let relay_url = if store.up {
                "<the URL of `machine-mcp up`, e.g. http://127.0.0.1:8750>"
            } else {
                "<RELAY URL>"
            };
            outln!("{code}");
            eprintln!(
                "bridge {name}: enrollment code above, valid for {code_ttl_minutes} min and for one machine.\n\
                 On the machine to connect, run:\n  machine-mcp connect --relay {relay_url} --enroll {code} --workspace <DIR>"
            );
            if had_keys && !keep_existing {
                eprintln!(
                    "Redeeming it replaces the bridge's current device key (its daemon is disconnected); \
                     for a second machine use --keep-existing instead."
                );
            }
            match first_owner {
                Some(pw) => eprintln!(
                    "Owner account of bridge {name}: {owner}, password: {pw}\n  \
                     (shown once; sign in with it on the relay's consent page when a client adds the MCP URL;\n  \
                     reset it with: machine-mcp relay account rotate-password{again} --bridge {name} {owner})"
                ),
                None => eprintln!(
                    "Bridge {name} already has accounts (machine-mcp relay account list{again} --bridge {name})."
                ),
            }
            eprintln!(
                "Clients that take a pasted token instead: machine-mcp relay token create{again} --bridge {name} --role operator"
            );
        }
        BridgeCommand::List { store } => {
            let s = open_existing(&store).await?;
            outln!("BRIDGE");
            for b in s.bridges().bridges().await? {
                outln!("{b}");
            }
        }
        BridgeCommand::Remove { name, store } => {
            let s = open_existing(&store).await?;
            s.bridges().remove_bridge(&name).await?;
            eprintln!(
                "bridge {name} removed with its device keys, tokens, accounts and grants; a running relay disconnects its daemon within a second"
            );
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
            let (rec, token) = s
                .accounts()
                .create_token(&bridge, role, label.as_deref())
                .await?;
            outln!("{token}");
            eprintln!(
                "token {} for bridge {} with role {}: shown once above; send it as `Authorization: Bearer <token>`.",
                rec.id,
                rec.bridge,
                rec.role.as_str()
            );
        }
        TokenCommand::List { bridge, store } => {
            let s = open_existing(&store).await?;
            outln!("ID\tBRIDGE\tROLE\tSTATE\tLABEL");
            for t in s.accounts().tokens(bridge.as_deref()).await? {
                outln!(
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
            s.accounts().revoke_token(&id).await?;
            eprintln!("token {id} revoked");
        }
    }
    Ok(())
}

/// Creates the first owner account `owner` of `bridge` when the bridge has none, and returns its
/// generated password (shown once); `None` when the bridge has accounts already.
///
/// # Errors
/// The store fails, or the password cannot be hashed.
pub(crate) async fn ensure_owner(s: &Store, bridge: &str, owner: &str) -> Result<Option<String>> {
    if s.accounts().account_count(bridge).await? > 0 {
        return Ok(None);
    }
    let pw = password::generate();
    let hash = hash_password(pw.clone()).await?;
    s.accounts()
        .create_account(bridge, owner, Role::Owner, &hash)
        .await?;
    Ok(Some(pw))
}

/// Hashes a password off the async threads.
async fn hash_password(pw: String) -> Result<String> {
    tokio::task::spawn_blocking(move || password::hash(&pw))
        .await
        .context("the password hashing task failed")?
        .map_err(anyhow::Error::msg)
}

/// The password for `add`/`rotate-password`: the first line of stdin, or a generated one
/// (returned to be printed).
fn new_password(from_stdin: bool) -> Result<(String, bool)> {
    if !from_stdin {
        return Ok((password::generate(), true));
    }
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    let pw = line.trim_end_matches(['\r', '\n']).to_owned();
    if pw.chars().filter(|c| !c.is_whitespace()).count() < protocol::limits::PASSWORD_MIN_CHARS {
        bail!(
            "the password needs at least {} characters that are not spaces",
            protocol::limits::PASSWORD_MIN_CHARS
        );
    }
    Ok((pw, false))
}

/// The bridge an account command is about: `--bridge`, else `local` with `--up`, else the
/// store's only bridge.
async fn bridge_of(s: &Store, at: &AccountArgs) -> Result<String> {
    if let Some(b) = &at.bridge {
        if !s.bridges().bridge_exists(b).await? {
            bail!("no bridge {b} (machine-mcp relay bridge list)");
        }
        return Ok(b.clone());
    }
    if at.store.up {
        return Ok("local".into());
    }
    let bridges = s.bridges().bridges().await?;
    match bridges.as_slice() {
        [only] => Ok(only.clone()),
        [] => bail!(
            "the store has no bridges yet; create one with `machine-mcp relay bridge add NAME`"
        ),
        many => bail!(
            "the store has several bridges ({}); pass --bridge NAME",
            many.join(", ")
        ),
    }
}

fn state(disabled: bool) -> &'static str {
    if disabled { "disabled" } else { "active" }
}

pub(crate) async fn account(cmd: AccountCommand) -> Result<()> {
    match cmd {
        AccountCommand::Add {
            name,
            role,
            password_stdin,
            at,
        } => {
            let role = Role::parse(&role).map_err(anyhow::Error::msg)?;
            let s = open_existing(&at.store).await?;
            let bridge = bridge_of(&s, &at).await?;
            let (pw, generated) = new_password(password_stdin)?;
            let hash = hash_password(pw.clone()).await?;
            let a = s
                .accounts()
                .create_account(&bridge, &name, role, &hash)
                .await?;
            if generated {
                outln!("{pw}");
            }
            eprintln!(
                "account {} of bridge {} with role {}{}",
                a.name,
                a.bridge,
                a.role,
                if generated {
                    ": password shown once above"
                } else {
                    ""
                }
            );
        }
        AccountCommand::List { at } => {
            let s = open_existing(&at.store).await?;
            let bridge = match &at.bridge {
                Some(b) => Some(b.clone()),
                None if at.store.up => Some("local".to_owned()),
                None => None,
            };
            outln!("NAME\tBRIDGE\tROLE\tSTATE");
            for a in s.accounts().accounts(bridge.as_deref()).await? {
                outln!(
                    "{}\t{}\t{}\t{}",
                    a.name,
                    a.bridge,
                    a.role,
                    state(a.disabled)
                );
            }
        }
        AccountCommand::Role { name, role, at } => {
            let role = Role::parse(&role).map_err(anyhow::Error::msg)?;
            let s = open_existing(&at.store).await?;
            let bridge = bridge_of(&s, &at).await?;
            let a = s
                .accounts()
                .update_account(&bridge, &name, AccountChange::Role(role))
                .await?;
            eprintln!(
                "account {} of bridge {} now has role {}; its tokens were revoked (clients sign in again)",
                a.name, a.bridge, a.role
            );
        }
        AccountCommand::Disable { name, at } => {
            let s = open_existing(&at.store).await?;
            let bridge = bridge_of(&s, &at).await?;
            s.accounts()
                .update_account(&bridge, &name, AccountChange::Disable)
                .await?;
            eprintln!("account {name} of bridge {bridge} disabled; its tokens were revoked");
        }
        AccountCommand::Enable { name, at } => {
            let s = open_existing(&at.store).await?;
            let bridge = bridge_of(&s, &at).await?;
            s.accounts()
                .update_account(&bridge, &name, AccountChange::Enable)
                .await?;
            eprintln!("account {name} of bridge {bridge} enabled (clients sign in again)");
        }
        AccountCommand::RotatePassword {
            name,
            password_stdin,
            at,
        } => {
            let s = open_existing(&at.store).await?;
            let bridge = bridge_of(&s, &at).await?;
            if s.accounts().account(&bridge, &name).await?.is_none() {
                bail!("bridge {bridge} has no account {name} (machine-mcp relay account list)");
            }
            let (pw, generated) = new_password(password_stdin)?;
            let hash = hash_password(pw.clone()).await?;
            s.accounts()
                .update_account(&bridge, &name, AccountChange::Password(hash))
                .await?;
            if generated {
                outln!("{pw}");
            }
            eprintln!(
                "account {name} of bridge {bridge}: new password{}; its tokens were revoked",
                if generated {
                    " shown once above"
                } else {
                    " set"
                }
            );
        }
        AccountCommand::Remove { name, at } => {
            let s = open_existing(&at.store).await?;
            let bridge = bridge_of(&s, &at).await?;
            s.accounts().remove_account(&bridge, &name).await?;
            eprintln!("account {name} of bridge {bridge} removed, with its grants");
        }
    }
    Ok(())
}

pub(crate) async fn client(cmd: ClientCommand) -> Result<()> {
    match cmd {
        ClientCommand::List { bridge, store } => {
            let s = open_existing(&store).await?;
            outln!("CLIENT_ID\tKIND\tSTATE\tGRANTS\tBRIDGES\tNAME");
            for c in s.oauth().clients(bridge.as_deref()).await? {
                let name = serde_json::from_str::<serde_json::Value>(&c.record.metadata)
                    .ok()
                    .and_then(|m| {
                        m.get("client_name")
                            .and_then(|n| n.as_str())
                            .map(str::to_owned)
                    })
                    .unwrap_or_default();
                outln!(
                    "{}\t{}\t{}\t{} grants\t{}\t{}",
                    c.record.client_id,
                    c.record.kind.as_str(),
                    if c.record.revoked {
                        "revoked"
                    } else {
                        "active"
                    },
                    c.active_grants,
                    if c.bridges.is_empty() {
                        "-".to_owned()
                    } else {
                        c.bridges.join(",")
                    },
                    name
                );
            }
        }
        ClientCommand::Revoke { client_id, store } => {
            let s = open_existing(&store).await?;
            let ended = s.oauth().revoke_client(&client_id).await?;
            eprintln!("client {client_id} revoked; {ended} grants ended");
        }
    }
    Ok(())
}

pub(crate) async fn device(cmd: DeviceCommand) -> Result<()> {
    match cmd {
        DeviceCommand::List { bridge, store } => {
            let s = open_existing(&store).await?;
            outln!("KEY_ID\tBRIDGE\tREGISTERED\tSTATE");
            for k in s.bridges().device_keys(bridge.as_deref()).await? {
                outln!(
                    "{}\t{}\t{}\t{}",
                    k.key_id,
                    k.bridge,
                    k.created_at,
                    if k.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    }
                );
            }
        }
        DeviceCommand::Revoke { key_id, store } => {
            let s = open_existing(&store).await?;
            s.bridges().revoke_device_key(&key_id).await?;
            eprintln!(
                "device key {key_id} revoked; a running relay disconnects its daemon within a second"
            );
        }
    }
    Ok(())
}
