//! Command-line definitions (the raw arguments; validated in `commands`).

// The doc comments here are clap's help text, shown as written: a bare URL reads best there.
#![allow(rustdoc::bare_urls)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Put a machine's workspace in reach of AI assistants over the Model Context Protocol.
#[derive(Debug, Parser)]
#[command(name = "machine-mcp", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Log level on stderr: error, warn, info, debug or trace.
    #[arg(
        long,
        global = true,
        value_name = "LEVEL",
        env = "MACHINE_MCP_LOG_LEVEL",
        default_value = "info"
    )]
    pub(crate) log_level: LogLevel,
    /// Log per-call events (same as --log-level debug). Tool arguments and results are never logged.
    #[arg(short, long, global = true)]
    pub(crate) verbose: bool,
}

/// A log level.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve MCP over stdin/stdout (for Claude Desktop, Claude Code, Cursor, Codex, VS Code).
    ///
    /// Reads newline-delimited JSON-RPC on stdin and writes only JSON-RPC to stdout; logs go to
    /// stderr.
    Stdio(StdioArgs),
    /// Run a relay and a daemon in one process on loopback: the one-command start for remote
    /// MCP clients on this machine (Streamable HTTP with a bearer token).
    Up(UpArgs),
    /// Run the daemon: keep this machine connected to a relay and serve the MCP sessions it
    /// carries.
    Connect(ConnectArgs),
    /// Run or administer a relay (bridges, tokens).
    #[command(subcommand)]
    Relay(RelayCommand),
    /// The watchdog a server starts before its first child (internal; see
    /// `runtime::watchdog`).
    #[command(name = WATCHDOG_SUBCOMMAND, hide = true)]
    Watchdog {
        /// The instance prefix of the server's tree tags.
        instance: String,
    },
}

/// The hidden subcommand that runs the watchdog.
pub(crate) const WATCHDOG_SUBCOMMAND: &str = "internal-watchdog";

/// Options of the state directory.
#[derive(Debug, Args)]
pub(crate) struct StateArgs {
    /// Where keys, enrollment and the relay store live (default: $MACHINE_MCP_STATE_DIR, else
    /// $XDG_STATE_HOME/machine-mcp, else ~/.local/state/machine-mcp).
    #[arg(long, value_name = "DIR", env = "MACHINE_MCP_STATE_DIR")]
    pub(crate) state_dir: Option<PathBuf>,
}

/// Link timing overrides for tests (hidden).
#[derive(Debug, Args, Clone, Copy)]
pub(crate) struct TimingArgs {
    /// Reconnect grace in milliseconds (default 120000).
    #[arg(long, hide = true, value_name = "MS")]
    pub(crate) reconnect_grace_ms: Option<u64>,
    /// Daemon heartbeat interval in milliseconds (default 25000).
    #[arg(long, hide = true, value_name = "MS")]
    pub(crate) heartbeat_ms: Option<u64>,
    /// Relay liveness timeout in milliseconds (default 90000).
    #[arg(long, hide = true, value_name = "MS")]
    pub(crate) liveness_ms: Option<u64>,
    /// Foreground budget of remote process calls in milliseconds (default 25000).
    #[arg(long, hide = true, value_name = "MS")]
    pub(crate) foreground_budget_ms: Option<u64>,
}

/// Arguments of `machine-mcp up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// The directory to expose (default: the current directory).
    #[arg(long, short = 'w', value_name = "DIR", env = "MACHINE_MCP_WORKSPACE")]
    pub(crate) workspace: Option<PathBuf>,
    /// Loopback address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8750")]
    pub(crate) listen: std::net::SocketAddr,
    /// Client authentication: a bearer token (default) or none.
    #[arg(long, value_name = "MODE", default_value = "token")]
    pub(crate) auth: AuthArg,
    /// A Claude Desktop-style `{"mcpServers": {...}}` file of stdio servers to carry too.
    #[arg(long, value_name = "FILE")]
    pub(crate) servers: Option<PathBuf>,
    /// Print one JSON object (mcp_url, servers, token) on stdout once ready, instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) state: StateArgs,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
}

/// Client authentication mode.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum AuthArg {
    /// Static bearer tokens.
    Token,
    /// No authentication (loopback listeners only).
    None,
}

/// Arguments of `machine-mcp connect`.
#[derive(Debug, Args)]
pub(crate) struct ConnectArgs {
    /// The relay's public URL, e.g. https://relay.example.com.
    #[arg(long, value_name = "URL", env = "MACHINE_MCP_RELAY")]
    pub(crate) relay: url::Url,
    /// The directory to expose (default: the current directory).
    #[arg(long, short = 'w', value_name = "DIR", env = "MACHINE_MCP_WORKSPACE")]
    pub(crate) workspace: Option<PathBuf>,
    /// Enroll this machine with a one-time code from `machine-mcp relay bridge add NAME`.
    #[arg(long, value_name = "CODE")]
    pub(crate) enroll: Option<String>,
    /// A Claude Desktop-style `{"mcpServers": {...}}` file of stdio servers to carry too.
    #[arg(long, value_name = "FILE")]
    pub(crate) servers: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) state: StateArgs,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
}

/// `machine-mcp relay ...`
#[derive(Debug, Subcommand)]
pub(crate) enum RelayCommand {
    /// Serve the relay: MCP Streamable HTTP for clients, WebSocket for daemons.
    Serve(RelayServeArgs),
    /// Bridges (one per enrolled daemon).
    #[command(subcommand)]
    Bridge(BridgeCommand),
    /// Static bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// Where the relay keeps its store.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The relay's SQLite store (default: STATE_DIR/relay/relay.db).
    #[arg(long, value_name = "PATH", conflicts_with = "up")]
    pub(crate) store: Option<PathBuf>,
    /// Use the store of `machine-mcp up` (STATE_DIR/up/relay.db; its bridge is `local`).
    #[arg(long)]
    pub(crate) up: bool,
    #[command(flatten)]
    pub(crate) state: StateArgs,
}

/// Arguments of `machine-mcp relay serve`.
#[derive(Debug, Args)]
pub(crate) struct RelayServeArgs {
    /// Address to listen on (TLS is expected to end at a reverse proxy in front).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8750")]
    pub(crate) listen: std::net::SocketAddr,
    /// The URL clients and daemons use to reach this relay (default: http://LISTEN).
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<url::Url>,
    /// Client authentication: bearer tokens (default) or none (loopback listeners only).
    #[arg(long, value_name = "MODE", default_value = "token")]
    pub(crate) auth: AuthArg,
    /// Another origin allowed to call the MCP endpoints from a browser (repeatable).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub(crate) allowed_origins: Vec<String>,
    /// Relayed requests in flight per bridge.
    #[arg(long, value_name = "N", default_value_t = protocol::limits::RELAYED_REQUESTS_PER_BRIDGE)]
    pub(crate) max_inflight: usize,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
}

/// `machine-mcp relay bridge ...`
#[derive(Debug, Subcommand)]
pub(crate) enum BridgeCommand {
    /// Create a bridge (if needed) and print a one-time enrollment code for its daemon.
    Add {
        /// Bridge name: letters, digits, '-' and '_'.
        name: String,
        /// Minutes the code stays valid.
        #[arg(long, default_value_t = 60)]
        code_ttl_minutes: i64,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List bridges.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// `machine-mcp relay token ...`
#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Create a bearer token and print it once (only its hash is stored).
    Create {
        /// The bridge it grants.
        #[arg(long)]
        bridge: String,
        /// owner (full), operator (agent), editor (edit) or reviewer (review).
        #[arg(long, default_value = "owner")]
        role: String,
        /// A note to recognise it by.
        #[arg(long)]
        label: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List tokens (never the tokens themselves).
    List {
        /// Only this bridge's.
        #[arg(long)]
        bridge: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a token by its id.
    Revoke {
        /// The token id (tok_...).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Arguments of `machine-mcp stdio`.
#[derive(Debug, Args)]
pub(crate) struct StdioArgs {
    /// The directory to expose (default: the current directory).
    #[arg(long, short = 'w', value_name = "DIR", env = "MACHINE_MCP_WORKSPACE")]
    pub(crate) workspace: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
}

/// Policy flags (see README "Policy").
#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// Starting policy: full (everything), agent (writes + argv processes inside the workspace),
    /// edit (writes, no processes), review (read-only).
    #[arg(long, value_name = "PROFILE", default_value = "full")]
    pub(crate) profile: ProfileArg,
    /// How processes may be started: off, direct (argv, no shell) or shell.
    #[arg(long, value_name = "MODE")]
    pub(crate) exec_mode: Option<ExecModeArg>,
    /// Forbid every file write.
    #[arg(long)]
    pub(crate) no_write: bool,
    /// Allow paths outside the workspace (`--unrestricted-paths=false` confines them).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) unrestricted_paths: Option<bool>,
    /// Return absolute paths instead of workspace-relative ones.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) absolute_paths: Option<bool>,
    /// Give child processes the whole environment instead of an isolated one.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) full_env: Option<bool>,
}

/// A policy profile name.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ProfileArg {
    Full,
    Agent,
    Edit,
    Review,
}

/// An exec mode.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ExecModeArg {
    Off,
    Direct,
    Shell,
}
