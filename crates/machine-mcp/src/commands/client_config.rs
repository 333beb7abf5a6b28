//! `machine-mcp client-config`: the entry an MCP client needs to reach this machine, printed or
//! merged into the client's own config file.
//!
//! What each client reads, and where, is in [`Client`]; how a file is edited without losing
//! anything else in it is in [`edit`].

pub(crate) mod edit;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use indexmap::IndexMap;
use serde_json::{Value, json};

use crate::cli::{ClientArg, ClientConfigArgs};

use super::printable;

/// Longest accepted `--name`, in characters.
const NAME_MAX_CHARS: usize = 64;

/// An MCP client whose config file this command knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Codex,
    Vscode,
}

/// How a client's config file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// A JSON object whose member `key` maps server names to entries.
    Json { key: &'static str },
    /// Codex's `config.toml`: tables `[mcp_servers.NAME]`.
    Toml,
}

impl Client {
    const ALL: [Self; 5] = [
        Self::ClaudeDesktop,
        Self::ClaudeCode,
        Self::Cursor,
        Self::Codex,
        Self::Vscode,
    ];

    /// The `--client` value.
    fn id(self) -> &'static str {
        match self {
            Self::ClaudeDesktop => "claude-desktop",
            Self::ClaudeCode => "claude-code",
            Self::Cursor => "cursor",
            Self::Codex => "codex",
            Self::Vscode => "vscode",
        }
    }

    /// The product's name.
    fn label(self) -> &'static str {
        match self {
            Self::ClaudeDesktop => "Claude Desktop",
            Self::ClaudeCode => "Claude Code",
            Self::Cursor => "Cursor",
            Self::Codex => "Codex CLI",
            Self::Vscode => "VS Code",
        }
    }

    fn format(self) -> Format {
        match self {
            Self::Vscode => Format::Json { key: "servers" },
            Self::Codex => Format::Toml,
            _ => Format::Json { key: "mcpServers" },
        }
    }

    /// Whether the client's config file can name a Streamable HTTP server; the others reach
    /// one through `mcp-remote`. (Codex has HTTP support behind options that changed across
    /// releases; a stdio entry works with all of them.)
    fn speaks_http(self) -> bool {
        matches!(self, Self::ClaudeCode | Self::Cursor | Self::Vscode)
    }

    /// The user-scope config file at its standard location for this OS, from the environment:
    /// Claude Desktop and VS Code under the platform's config directory (`$XDG_CONFIG_HOME`,
    /// default `~/.config`, on Linux; `~/Library/Application Support` on macOS; `%APPDATA%` on
    /// Windows); Claude Code `~/.claude.json` (in `$CLAUDE_CONFIG_DIR` when set); Cursor
    /// `~/.cursor/mcp.json`; Codex `$CODEX_HOME/config.toml` (default `~/.codex`).
    fn config_path(self) -> Result<PathBuf> {
        Ok(match self {
            Self::ClaudeDesktop => config_dir()?.join("Claude/claude_desktop_config.json"),
            Self::Vscode => config_dir()?.join("Code/User/mcp.json"),
            Self::ClaudeCode => match env_path("CLAUDE_CONFIG_DIR") {
                Some(d) => d.join(".claude.json"),
                None => home()?.join(".claude.json"),
            },
            Self::Cursor => home()?.join(".cursor/mcp.json"),
            Self::Codex => match env_path("CODEX_HOME") {
                Some(d) => d.join("config.toml"),
                None => home()?.join(".codex/config.toml"),
            },
        })
    }
}

/// A non-empty environment variable as a path.
fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The home directory: `$HOME` (`%USERPROFILE%` on Windows).
fn home() -> Result<PathBuf> {
    env_path("HOME")
        .or_else(|| env_path("USERPROFILE"))
        .context("HOME is not set: pass --config-file")
}

/// Where desktop applications keep their settings on this OS.
fn config_dir() -> Result<PathBuf> {
    if cfg!(target_os = "macos") {
        Ok(home()?.join("Library/Application Support"))
    } else if cfg!(windows) {
        env_path("APPDATA").context("APPDATA is not set: pass --config-file")
    } else {
        match env_path("XDG_CONFIG_HOME") {
            Some(d) => Ok(d),
            None => Ok(home()?.join(".config")),
        }
    }
}

/// The server an entry starts or reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// This binary's `stdio` command.
    Stdio { command: String, args: Vec<String> },
    /// A relay's or `up`'s MCP URL.
    Remote { url: String, token: Option<String> },
}

/// What a client's entry says, before it is put in the client's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A process the client starts (`env` in order; values may hold a token).
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A Streamable HTTP server.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl Entry {
    /// `target` as `client` can reach it: stdio-only clients get `npx -y mcp-remote URL`, with
    /// the header passed as `Authorization:${AUTH_HEADER}` and the value in `env`, as
    /// mcp-remote documents, because Claude Desktop and Cursor on Windows split arguments with
    /// spaces.
    fn new(client: Client, target: &Target) -> Self {
        match target {
            Target::Stdio { command, args } => Self::Stdio {
                command: command.clone(),
                args: args.clone(),
                env: Vec::new(),
            },
            Target::Remote { url, token } if client.speaks_http() => Self::Http {
                url: url.clone(),
                headers: token
                    .iter()
                    .map(|t| ("Authorization".to_owned(), format!("Bearer {t}")))
                    .collect(),
            },
            Target::Remote { url, token } => {
                let mut args = vec!["-y".to_owned(), "mcp-remote".to_owned(), url.clone()];
                // mcp-remote refuses plain http to anything but localhost without it.
                if url.starts_with("http:") {
                    args.push("--allow-http".to_owned());
                }
                let mut env = Vec::new();
                if let Some(t) = token {
                    args.push("--header".to_owned());
                    args.push("Authorization:${AUTH_HEADER}".to_owned());
                    env.push(("AUTH_HEADER".to_owned(), format!("Bearer {t}")));
                }
                Self::Stdio {
                    command: "npx".to_owned(),
                    args,
                    env,
                }
            }
        }
    }

    /// The entry in `client`'s JSON shape, members in the order clients write them.
    fn to_json(&self, client: Client) -> IndexMap<String, Value> {
        let pairs = |v: &[(String, String)]| -> serde_json::Map<String, Value> {
            v.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect()
        };
        match self {
            Self::Stdio { command, args, env } => {
                let mut o = IndexMap::new();
                match client {
                    Client::ClaudeCode | Client::Vscode => {
                        o.insert("type".into(), json!("stdio"));
                    }
                    _ => {}
                }
                o.insert("command".into(), json!(command));
                o.insert("args".into(), json!(args));
                // Claude Code writes `env` on every stdio entry; the others take it when needed.
                if client == Client::ClaudeCode || !env.is_empty() {
                    o.insert("env".into(), Value::Object(pairs(env)));
                }
                o
            }
            Self::Http { url, headers } => {
                let mut o = IndexMap::new();
                if client != Client::Cursor {
                    o.insert("type".into(), json!("http"));
                }
                o.insert("url".into(), json!(url));
                if !headers.is_empty() {
                    o.insert("headers".into(), Value::Object(pairs(headers)));
                }
                o
            }
        }
    }
}

/// Runs `machine-mcp client-config`.
///
/// # Errors
/// A usage problem (`--config-file` with `--client all`, policy flags with `--remote`, a bad
/// `--name`), a workspace that is not a directory, an unknown home directory, and with
/// `--write` every config file that could not be edited (all are tried; the error counts them).
pub(crate) fn run(args: ClientConfigArgs) -> Result<()> {
    check_name(&args.name)?;
    let clients: Vec<Client> = match args.client {
        ClientArg::ClaudeDesktop => vec![Client::ClaudeDesktop],
        ClientArg::ClaudeCode => vec![Client::ClaudeCode],
        ClientArg::Cursor => vec![Client::Cursor],
        ClientArg::Codex => vec![Client::Codex],
        ClientArg::Vscode => vec![Client::Vscode],
        ClientArg::All => Client::ALL.to_vec(),
    };
    if args.config_file.is_some() && clients.len() > 1 {
        bail!("--config-file names one file: use it with a single --client, not `all`");
    }
    let target = target(&args)?;
    let mut failed = 0usize;
    for (i, &client) in clients.iter().enumerate() {
        let path = match &args.config_file {
            Some(p) => Ok(p.clone()),
            None => client.config_path(),
        };
        let entry = Entry::new(client, &target);
        let result = path.and_then(|path| {
            if args.write {
                let o = edit::Options {
                    force: args.force,
                    config_file_given: args.config_file.is_some(),
                };
                write(client, &path, &args.name, &entry, o)
            } else {
                if i > 0 {
                    outln!();
                }
                print_snippet(client, &path, &args.name, &entry)
            }
        });
        if let Err(e) = result {
            if clients.len() == 1 {
                return Err(e);
            }
            failed += 1;
            eprintln!(
                "machine-mcp: {}: {}",
                client.id(),
                printable(&format!("{e:#}"))
            );
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(anyhow!(
            "{n} of {} clients failed (see above)",
            clients.len()
        )),
    }
}

/// Refuses a `--name` that some client would not take as a server name.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.chars().count() <= NAME_MAX_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        bail!(
            "--name {:?}: use 1 to {NAME_MAX_CHARS} letters, digits, '-', '_' or '.'",
            printable(name)
        );
    }
    Ok(())
}

/// The server the entries start or reach, from the flags.
fn target(args: &ClientConfigArgs) -> Result<Target> {
    if args.remote {
        if !super::policy_flags(&args.policy, false).is_empty() {
            bail!(
                "policy flags apply to stdio entries; a --remote entry gets the policy of the relay's account or token"
            );
        }
        let url = args
            .url
            .as_ref()
            .context("--remote needs --url, the MCP URL of the relay or `up`")?;
        check_url(url)?;
        return Ok(Target::Remote {
            url: url.as_str().to_owned(),
            token: args.token.as_ref().map(|t| t.0.clone()),
        });
    }
    let exe = std::env::current_exe().context("cannot find the path of this executable")?;
    let command = utf8(&exe, "this executable's path")?;
    let workspace = super::workspace_dir(args.workspace.as_deref())?;
    let mut stdio_args = vec![
        "stdio".to_owned(),
        "--workspace".to_owned(),
        utf8(&workspace, "the workspace path")?,
    ];
    stdio_args.extend(super::policy_flags(&args.policy, false));
    Ok(Target::Stdio {
        command,
        args: stdio_args,
    })
}

/// Refuses a `--url` that is not an MCP URL clients can use: only `https://`, or `http://` to
/// a loopback host (127.0.0.0/8, ::1, localhost), where no network sees the traffic.
fn check_url(url: &url::Url) -> Result<()> {
    let shown = printable(url.as_str());
    let loopback = match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => bail!(
            "--url {shown} has no host: give the MCP URL, e.g. https://relay.example.com/b/laptop/mcp"
        ),
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => {
            let mut https = url.clone();
            let _ = https.set_scheme("https");
            bail!(
                "--url {shown}: plain http is accepted only for a loopback host (127.0.0.1, ::1, localhost), since the token and the traffic would cross the network in clear; use {}",
                printable(https.as_str())
            )
        }
        other => bail!(
            "--url {shown}: an MCP URL is http(s), not {}: e.g. https://relay.example.com/b/laptop/mcp",
            printable(other)
        ),
    }
}

/// `path` as a string (config files are JSON or TOML text).
fn utf8(path: &Path, what: &str) -> Result<String> {
    path.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{what} {} is not valid UTF-8", path.display()))
}

/// Prints `entry` as it goes into `client`'s file at `path`.
fn print_snippet(client: Client, path: &Path, name: &str, entry: &Entry) -> Result<()> {
    outln!(
        "{} — {} (or run with --write):",
        client.label(),
        printable(&path.display().to_string())
    );
    match client.format() {
        Format::Json { key } => {
            // Nested maps, not `json!`, which would sort the entry's members.
            let doc = IndexMap::from([(key, IndexMap::from([(name, entry.to_json(client))]))]);
            let text = serde_json::to_string_pretty(&doc).context("cannot format the entry")?;
            outln!("{text}");
        }
        Format::Toml => print!("{}", edit::toml_snippet(name, entry)),
    }
    Ok(())
}

/// Merges `entry` into `path` and reports what changed on stdout.
fn write(client: Client, path: &Path, name: &str, entry: &Entry, o: edit::Options) -> Result<()> {
    let edited = match client.format() {
        Format::Json { key } => edit::json_file(path, key, name, &entry.to_json(client), o),
        Format::Toml => edit::toml_file(path, name, entry, o),
    }?;
    let file = printable(&edited.file.display().to_string());
    match (&edited.outcome, &edited.backup) {
        (edit::Outcome::Unchanged, _) => {
            outln!(
                "{}: \"{name}\" unchanged in {file} (nothing written)",
                client.id()
            );
        }
        (outcome, Some(backup)) => outln!(
            "{}: {} \"{name}\" in {file} (backup {})",
            client.id(),
            outcome.verb(),
            printable(&backup.display().to_string())
        ),
        (outcome, None) => outln!(
            "{}: {} \"{name}\" in {file} (new file)",
            client.id(),
            outcome.verb()
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_only_clients_reach_a_remote_through_mcp_remote_with_the_token_in_env() {
        let target = Target::Remote {
            url: "https://r.example/mcp".into(),
            token: Some("tok".into()),
        };
        let desktop = Entry::new(Client::ClaudeDesktop, &target).to_json(Client::ClaudeDesktop);
        assert_eq!(
            json!(desktop),
            json!({"command": "npx",
                   "args": ["-y", "mcp-remote", "https://r.example/mcp", "--header", "Authorization:${AUTH_HEADER}"],
                   "env": {"AUTH_HEADER": "Bearer tok"}})
        );
        let code = Entry::new(Client::ClaudeCode, &target).to_json(Client::ClaudeCode);
        let order: Vec<&str> = code.keys().map(String::as_str).collect();
        assert_eq!(order, ["type", "url", "headers"]);
        assert_eq!(
            json!(code),
            json!({"type": "http", "url": "https://r.example/mcp",
                   "headers": {"Authorization": "Bearer tok"}})
        );
    }

    #[test]
    fn names_clients_refuse_are_refused() {
        assert!(check_name("machine").is_ok());
        assert!(check_name("my.box_2-a").is_ok());
        for bad in ["", "a b", "a/b", "é", &"x".repeat(NAME_MAX_CHARS + 1)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
