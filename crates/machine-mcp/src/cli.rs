//! Command-line definitions (the raw arguments; validated in `commands`).

// The doc comments here are clap's help text, shown as written: a bare URL reads best there.
#![allow(rustdoc::bare_urls)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Put a machine's workspace in reach of AI assistants over the Model Context Protocol.
#[derive(Debug, Parser)]
#[command(name = "machine-mcp", version = runtime::version(), about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Log level (on stderr, or in the --log-file): error, warn, info, debug or trace.
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
    /// Write logs to FILE instead of stderr: created owner-only (0600, new directories 0700),
    /// rotated at 10 MiB, the newest 4 older files kept beside it (FILE.1 … FILE.4).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) log_file: Option<PathBuf>,
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
    /// stderr. A small supervisor keeps the connection and runs the server as a worker process:
    /// when the installed binary changes (or on `machine-mcp reload` / SIGHUP) it swaps in the
    /// new one without the client noticing, and it restarts a worker that crashed.
    Stdio(StdioArgs),
    /// Make every running `machine-mcp stdio` of yours (or the one given) start a worker from
    /// the binary now installed: its client stays connected, calls in flight finish on the old
    /// worker. The same as sending SIGHUP to the `machine-mcp stdio` process. For the daemon of
    /// `connect`, use `machine-mcp service reload` (or SIGHUP to it).
    Reload(ReloadArgs),
    /// Run a relay and a daemon in one process on loopback: the one-command start for remote
    /// MCP clients on this machine (Streamable HTTP; OAuth sign-in or a bearer token).
    Up(UpArgs),
    /// Run the daemon: keep this machine connected to a relay and serve the MCP sessions it
    /// carries.
    Connect(ConnectArgs),
    /// Run or administer a relay (bridges, accounts, OAuth clients, tokens).
    #[command(subcommand)]
    Relay(RelayCommand),
    /// Show the daemon running on this state directory: PID, uptime, relay, bridge, link state,
    /// heartbeat, sessions, calls, process sessions and jobs.
    ///
    /// Exit status: 0 a daemon runs and its link to the relay is ready; 1 no daemon runs, or it
    /// is starting, not ready, or does not answer (also when its lock is held but its record
    /// cannot be read: "running unknown"); 2 a usage error; 3 the state directory cannot be
    /// read (a file in its place, or no permission), so whether a daemon runs is unknown.
    Status(StatusArgs),
    /// Check what this machine's daemon needs, one line each with the fix: the workspace, the
    /// state directory's permissions, git, the relay (DNS, TCP, TLS, /healthz, its clock), the
    /// enrollment (by a real handshake), a tool call through the relay, the service and the
    /// daemon lock. Exit status 1 when a check fails.
    Doctor(DoctorArgs),
    /// Managed jobs: submit a plan, list, inspect, read, start a staged one, cancel, prune.
    #[command(subcommand)]
    Job(JobCommand),
    /// Local resources: secrets jobs use by alias, never shown to assistants.
    #[command(subcommand)]
    Resource(ResourceCommand),
    /// Delegations to agent CLIs (the `delegate` tool): list the receipts, drain before an
    /// upgrade, resume.
    #[command(subcommand)]
    Delegation(DelegationCommand),
    /// Print the configuration entry of an MCP client (Claude Desktop, Claude Code, Cursor,
    /// Codex, VS Code) for this machine, or merge it into the client's config file with --write.
    ///
    /// With --write the file is parsed (JSON, or TOML for Codex), only our entry is added or
    /// replaced, a backup FILE.bak-UNIXSECONDS of the old bytes is written first, and the new
    /// file replaces the old one atomically with the same permissions. A file that does not
    /// parse is left untouched: VS Code's mcp.json may hold comments (JSONC), which this command
    /// refuses to edit rather than drop.
    ClientConfig(ClientConfigArgs),
    /// Run the daemon (`connect`) as a user service: a systemd --user unit on Linux, a launchd
    /// agent on macOS.
    #[command(subcommand)]
    Service(ServiceCommand),
    /// Run one managed job (internal; started detached by whoever accepts the job).
    #[command(name = "job-runner", hide = true)]
    JobRunner {
        #[command(flatten)]
        state: StateArgs,
        /// The job id.
        job_id: String,
    },
    /// The watchdog a server starts before its first child (internal; see
    /// `runtime::tools::process::watchdog`).
    #[command(name = WATCHDOG_SUBCOMMAND, hide = true)]
    Watchdog {
        /// The instance prefix of the server's tree tags.
        instance: String,
    },
    /// Print the CLI reference, docs/reference/cli.md (internal; see `cli_reference`).
    #[command(name = crate::cli_reference::SUBCOMMAND, hide = true)]
    CliReference,
}

/// The hidden subcommand that runs the watchdog.
pub(crate) const WATCHDOG_SUBCOMMAND: &str = "internal-watchdog";

/// `machine-mcp job ...` (see docs/jobs.md).
#[derive(Debug, Subcommand)]
pub(crate) enum JobCommand {
    /// Validate PLAN.json and start it as a job of the local user (the same checks as
    /// `start_job`); prints the job id.
    Submit {
        /// The plan file (JSON, as `start_job` takes it).
        plan: PathBuf,
        /// Validate and store it without running it (start it with `job start ID`).
        #[arg(long)]
        stage: bool,
        /// The workspace the plan's cwd values are relative to (default: the current
        /// directory).
        #[arg(long, short = 'w', value_name = "DIR", env = "MACHINE_MCP_WORKSPACE")]
        workspace: Option<PathBuf>,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        out: JobOut,
    },
    /// List every job, newest first.
    List {
        #[command(flatten)]
        out: JobOut,
    },
    /// Show a job's plan (secrets of finished jobs are scrubbed) and status.
    Inspect {
        /// The job id.
        job_id: String,
        #[command(flatten)]
        out: JobOut,
    },
    /// Show a job's status and each step's redacted output.
    Read {
        /// The job id.
        job_id: String,
        /// Wait until the job has ended (progress on stderr).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        out: JobOut,
    },
    /// Start a staged job.
    Start {
        /// The job id.
        job_id: String,
        #[command(flatten)]
        out: JobOut,
    },
    /// Cancel a job (its finally steps still run).
    Cancel {
        /// The job id.
        job_id: String,
        #[command(flatten)]
        out: JobOut,
    },
    /// Remove terminal jobs older than 7 days (every terminal job with --all).
    Prune {
        /// Remove every terminal job now.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        out: JobOut,
    },
}

/// `machine-mcp delegation ...` (the `delegate` tool's receipts in STATE_DIR/delegations).
#[derive(Debug, Subcommand)]
pub(crate) enum DelegationCommand {
    /// List every delegation receipt, newest first (unreadable receipt files included).
    List {
        #[command(flatten)]
        out: JobOut,
    },
    /// Stop accepting new delegations on every server of this state directory (`delegate`
    /// answers `unavailable` until `delegation resume`), and show what is still queued or
    /// running on live servers. Exits 0; run it before an upgrade.
    Drain {
        #[command(flatten)]
        out: JobOut,
    },
    /// Accept new delegations again (undoes `delegation drain`).
    Resume {
        #[command(flatten)]
        state: StateArgs,
    },
    /// The MCP server of a delegation worker (internal: an agent that runs a delegation starts
    /// it, with the MACHINE_MCP_DELEGATION_* variables of its run; exit status 2 without them).
    #[command(name = "worker-mcp", hide = true)]
    WorkerMcp,
}

/// Output and state options of the `job` commands.
#[derive(Debug, Args)]
pub(crate) struct JobOut {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) state: StateArgs,
}

/// `machine-mcp resource ...` (see docs/jobs.md).
#[derive(Debug, Subcommand)]
pub(crate) enum ResourceCommand {
    /// Register the file PATH under ALIAS (its SHA-256 is recorded, never its bytes).
    Add {
        /// The alias jobs name it by (pattern `^[a-z][a-z0-9._-]{0,63}$`).
        alias: String,
        /// The file (at most 64 KiB, mode 0600).
        path: PathBuf,
        /// Accept a file that group or others can read.
        #[arg(long)]
        allow_insecure_permissions: bool,
        #[command(flatten)]
        state: StateArgs,
    },
    /// List the registered resources and their state.
    List {
        #[command(flatten)]
        out: JobOut,
    },
    /// Check every registered resource (exit status 1 when one is not usable).
    Check {
        #[command(flatten)]
        out: JobOut,
    },
    /// Forget ALIAS (the file itself is left alone).
    Remove {
        /// The alias.
        alias: String,
        #[command(flatten)]
        state: StateArgs,
    },
}

/// Arguments of `machine-mcp status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print the daemon's status report as one JSON object (`{"running": false}` when none runs).
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) state: StateArgs,
}

/// Arguments of `machine-mcp doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The workspace to check (default: the running daemon's, else the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
    /// The relay to check (default: the running daemon's, else the enrollment's).
    #[arg(long, value_name = "URL", value_parser = relay_url)]
    pub(crate) relay: Option<url::Url>,
    /// A bearer token for the tool round trip through the relay (default: `up`'s owner token).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "MACHINE_MCP_TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
    /// Print `{"checks": [{"name", "status", "detail", "fix"}], "ok": BOOL}` only.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) state: StateArgs,
}

/// `machine-mcp service ...` (see docs/service.md).
// Parsed once per process; boxing the install arguments would only obscure the clap definitions.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum ServiceCommand {
    /// Install the daemon as a user service that runs `machine-mcp connect` with these
    /// settings (the workspace, servers file and state directory as absolute paths), logging to
    /// STATE_DIR/logs/daemon.log. Enables it at login; start it with `service start`. Running it
    /// again with the same settings changes nothing.
    ///
    /// Linux: ~/.config/systemd/user/machine-mcp.service (or under $XDG_CONFIG_HOME), then
    /// `systemctl --user daemon-reload` and `enable`. macOS:
    /// ~/Library/LaunchAgents/dev.machine-bridge.machine-mcp.plist. What it wrote is recorded in
    /// STATE_DIR/service.json for `service uninstall`.
    // Clap's own usage line in an error lists the flags given as if required (`--workspace`
    // defaults to the current directory).
    #[command(
        override_usage = "machine-mcp service install --relay <URL> [--workspace <DIR>] [--servers <FILE>] [--state-dir <DIR>] [--force] [OPTIONS]"
    )]
    Install(ServiceInstallArgs),
    /// Stop the service and remove the files `service install` wrote (listed in
    /// STATE_DIR/service.json), and nothing else. Jobs it started keep running.
    Uninstall(ServiceArgs),
    /// Start the installed service (`systemctl --user start machine-mcp.service`; launchd:
    /// `launchctl bootstrap`). It takes over a daemon started by hand on the same state
    /// directory.
    Start(ServiceArgs),
    /// Stop the service. Managed jobs it started keep running (they are detached runners).
    Stop(ServiceArgs),
    /// Restart the service, e.g. after `service install` changed it.
    Restart(ServiceArgs),
    /// Make the running service re-read its servers file and the workspace, policy flags and
    /// servers file `service install` last recorded (SIGHUP, through `systemctl --user reload`
    /// or `launchctl kill SIGHUP`): its link and sessions are kept when nothing changed, and
    /// reopened with the new settings when something did.
    Reload(ServiceArgs),
    /// Show the service manager's view of the service (exit status non-zero when it is not
    /// running).
    Status(ServiceArgs),
}

/// Options of every `service` command.
#[derive(Debug, Args)]
pub(crate) struct ServiceArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// The service manager to write for or drive (default: launchd on macOS, else systemd).
    #[arg(long, hide = true, value_name = "MANAGER")]
    pub(crate) platform: Option<ServicePlatform>,
}

/// A service manager.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum ServicePlatform {
    /// systemd's user manager (`systemctl --user`).
    Systemd,
    /// launchd's per-user agents (`launchctl ... gui/UID`).
    Launchd,
}

/// Arguments of `machine-mcp service install`: those of `connect`, less `--enroll` (enroll once
/// by hand first).
#[derive(Debug, Args)]
pub(crate) struct ServiceInstallArgs {
    /// The relay's public URL, e.g. https://relay.example.com.
    #[arg(long, value_name = "URL", env = "MACHINE_MCP_RELAY", value_parser = relay_url)]
    pub(crate) relay: url::Url,
    /// The directory to expose (default: the current directory); stored as an absolute path.
    #[arg(long, short = 'w', value_name = "DIR", env = "MACHINE_MCP_WORKSPACE")]
    pub(crate) workspace: Option<PathBuf>,
    /// A Claude Desktop-style `{"mcpServers": {...}}` file of stdio servers to carry too.
    #[arg(long, value_name = "FILE")]
    pub(crate) servers: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
    #[command(flatten)]
    pub(crate) service: ServiceArgs,
    /// Replace a unit or plist of the same name that this state directory's `service install`
    /// did not write (a hand-written one, or another state directory's); its old content is
    /// kept in FILE.bak-UNIXSECONDS.
    #[arg(long)]
    pub(crate) force: bool,
}

/// Options of the state directory.
#[derive(Debug, Args)]
pub(crate) struct StateArgs {
    /// The state directory: keys, enrollment, the relay store, managed jobs and local resources
    /// (default: $MACHINE_MCP_STATE_DIR, else $XDG_STATE_HOME/machine-mcp, else
    /// ~/.local/state/machine-mcp).
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
    /// Time a daemon socket has to send a verified hello, in milliseconds (default 10000).
    #[arg(long, hide = true, value_name = "MS")]
    pub(crate) hello_deadline_ms: Option<u64>,
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
    /// Loopback address to listen on (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8750")]
    pub(crate) listen: std::net::SocketAddr,
    /// The URL clients use to reach this relay when it is published through a tunnel or reverse
    /// proxy, e.g. https://machine.example.com (default: http://LISTEN). OAuth issuer and
    /// resource URLs are derived from it.
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<url::Url>,
    /// Client authentication: oauth (sign-in on a consent page, and bearer tokens; default),
    /// token (bearer tokens only) or none.
    #[arg(long, value_name = "MODE", default_value = "oauth")]
    pub(crate) auth: AuthArg,
    /// A Claude Desktop-style `{"mcpServers": {...}}` file of stdio servers to carry too.
    #[arg(long, value_name = "FILE")]
    pub(crate) servers: Option<PathBuf>,
    /// Print one JSON object (mcp_url, servers, token, account, password) on stdout once ready,
    /// instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Replace a daemon already running on this state directory: it is verified (PID, start
    /// time, command line), asked to stop (SIGTERM), killed with its process tree after 2 s
    /// without progress (15 s at most), and only then replaced.
    #[arg(long)]
    pub(crate) takeover: bool,
    /// TESTS ONLY: ignore SIGTERM (stop on Ctrl-C/SIGINT only), to test the takeover's SIGKILL.
    #[arg(long, hide = true)]
    pub(crate) ignore_sigterm_for_tests: bool,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) state: StateArgs,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
    #[command(flatten)]
    pub(crate) oauth: OAuthTestArgs,
}

/// OAuth overrides for tests (hidden; see CONTRIBUTING.md "Switches only tests use").
#[derive(Debug, Args, Clone, Copy)]
pub(crate) struct OAuthTestArgs {
    /// Lifetime of OAuth access tokens in seconds (default 900).
    #[arg(long, hide = true, value_name = "SECS")]
    pub(crate) oauth_access_token_ttl_secs: Option<u64>,
    /// Seconds a rotated refresh token may be presented again (default 60).
    #[arg(long, hide = true, value_name = "SECS")]
    pub(crate) oauth_refresh_grace_secs: Option<u64>,
    /// TESTS ONLY: fetch client ID metadata documents over plain http and from loopback and
    /// private addresses (turns the SSRF protection off).
    #[arg(long, hide = true)]
    pub(crate) oauth_insecure_client_documents: bool,
}

/// Client authentication mode.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum AuthArg {
    /// OAuth 2.1: clients sign in on the relay's consent page; static bearer tokens work too.
    Oauth,
    /// Static bearer tokens only (the OAuth endpoints are off).
    Token,
    /// No authentication (loopback listeners only).
    None,
}

/// Arguments of `machine-mcp connect`.
#[derive(Debug, Args)]
pub(crate) struct ConnectArgs {
    /// The relay's public URL, e.g. https://relay.example.com.
    #[arg(long, value_name = "URL", env = "MACHINE_MCP_RELAY", value_parser = relay_url)]
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
    /// Replace a daemon already running on this state directory: it is verified (PID, start
    /// time, command line), asked to stop (SIGTERM), killed with its process tree after 2 s
    /// without progress (15 s at most), and only then replaced.
    #[arg(long)]
    pub(crate) takeover: bool,
    /// TESTS ONLY: ignore SIGTERM (stop on Ctrl-C/SIGINT only), to test the takeover's SIGKILL.
    #[arg(long, hide = true)]
    pub(crate) ignore_sigterm_for_tests: bool,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) state: StateArgs,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
}

/// `machine-mcp relay ...`
// Parsed once per process; boxing the serve arguments would only obscure the clap definitions.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum RelayCommand {
    /// Serve the relay: MCP Streamable HTTP for clients, WebSocket for daemons.
    Serve(RelayServeArgs),
    /// Bridges (one per enrolled daemon).
    #[command(subcommand)]
    Bridge(BridgeCommand),
    /// Device keys of enrolled daemons.
    #[command(subcommand)]
    Device(DeviceCommand),
    /// Accounts that sign in on the consent page (OAuth).
    #[command(subcommand)]
    Account(AccountCommand),
    /// OAuth clients (registered or identified by a metadata document) and their grants.
    #[command(subcommand)]
    Client(ClientCommand),
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
    /// Client authentication: oauth (sign-in on a consent page, and bearer tokens; default),
    /// token (bearer tokens only) or none (loopback listeners only).
    #[arg(long, value_name = "MODE", default_value = "oauth")]
    pub(crate) auth: AuthArg,
    /// Another origin allowed to call the MCP endpoints from a browser (repeatable).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub(crate) allowed_origins: Vec<String>,
    /// Relayed requests in flight per bridge.
    #[arg(long, value_name = "N", default_value_t = protocol::limits::RELAYED_REQUESTS_PER_BRIDGE)]
    pub(crate) max_inflight: usize,
    /// Client connections open at once; past it the oldest connection that has not sent a
    /// complete request head is closed to admit a new one, else the new one is closed at accept.
    #[arg(long, value_name = "N", default_value_t = protocol::limits::RELAY_CONNECTIONS_MAX)]
    pub(crate) max_connections: usize,
    /// Client connections open at once from one address, an IPv6 peer counting per /64
    /// (loopback peers, e.g. a reverse proxy on this host, count only against --max-connections).
    #[arg(long, value_name = "N", default_value_t = protocol::limits::RELAY_CONNECTIONS_PER_ADDRESS)]
    pub(crate) max_connections_per_address: usize,
    /// Serve GET /metrics (and /healthz) on this separate address, e.g. 127.0.0.1:9750, and not
    /// on the main listener (default: on the main listener, to loopback requests only).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<std::net::SocketAddr>,
    /// A reverse proxy whose X-Forwarded-For is believed (its last entry is the client address
    /// for the sign-in limits): an address or ADDR/PREFIX, repeatable, e.g. 127.0.0.1 for a proxy
    /// on this host. Other peers' forwarded headers are ignored.
    #[arg(long = "trusted-proxy", value_name = "ADDR[/PREFIX]")]
    pub(crate) trusted_proxies: Vec<relay::config::TrustedProxy>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
    #[command(flatten)]
    pub(crate) oauth: OAuthTestArgs,
}

/// `machine-mcp relay bridge ...`
#[derive(Debug, Subcommand)]
pub(crate) enum BridgeCommand {
    /// Create a bridge (if needed) and print a one-time enrollment code for its daemon; a new
    /// bridge also gets its first owner account, whose password is printed once (on stderr).
    Add {
        /// Bridge name: letters, digits, '-' and '_'.
        name: String,
        /// Minutes the code stays valid: 1 to 525600 (a year).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(i64).range(1..=525_600))]
        code_ttl_minutes: i64,
        /// Name of the first owner account.
        #[arg(long, value_name = "ACCOUNT", default_value = "owner")]
        owner: String,
        /// Keep the bridge's other device keys when the code is redeemed (a second machine);
        /// by default enrolling replaces them, and a daemon holding one is disconnected.
        #[arg(long)]
        keep_existing: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List bridges.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Remove a bridge and everything it holds (device keys, tokens, accounts, grants); its
    /// daemon is disconnected.
    Remove {
        /// The bridge.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// `machine-mcp relay device ...`
#[derive(Debug, Subcommand)]
pub(crate) enum DeviceCommand {
    /// List device keys (id, bridge, registered, state).
    List {
        /// Only this bridge's.
        #[arg(long)]
        bridge: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a device key: its daemon is disconnected at once and cannot connect again.
    Revoke {
        /// The key id (key_...).
        key_id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Which account of which bridge.
#[derive(Debug, Args)]
pub(crate) struct AccountArgs {
    /// The bridge (default: `local` with --up, else the store's only bridge).
    #[arg(long)]
    pub(crate) bridge: Option<String>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// `machine-mcp relay account ...`
#[derive(Debug, Subcommand)]
pub(crate) enum AccountCommand {
    /// Create an account and print its password once (generated unless --password-stdin).
    Add {
        /// Account name: letters, digits, '.', '_', '-' or '@'.
        name: String,
        /// owner (full), operator (agent), editor (edit) or reviewer (review).
        #[arg(long, default_value = "owner")]
        role: String,
        /// Read the password from the first line of stdin instead of generating one.
        #[arg(long)]
        password_stdin: bool,
        #[command(flatten)]
        at: AccountArgs,
    },
    /// List accounts (name, bridge, role, state).
    List {
        #[command(flatten)]
        at: AccountArgs,
    },
    /// Change an account's role; its tokens stop working at once.
    Role {
        /// The account.
        name: String,
        /// The new role.
        role: String,
        #[command(flatten)]
        at: AccountArgs,
    },
    /// Disable an account: it cannot sign in and its tokens stop working at once.
    Disable {
        /// The account.
        name: String,
        #[command(flatten)]
        at: AccountArgs,
    },
    /// Enable a disabled account (its old tokens stay revoked).
    Enable {
        /// The account.
        name: String,
        #[command(flatten)]
        at: AccountArgs,
    },
    /// Set a new password (printed once, generated unless --password-stdin); the account's
    /// tokens stop working at once.
    RotatePassword {
        /// The account.
        #[arg(default_value = "owner")]
        name: String,
        /// Read the password from the first line of stdin instead of generating one.
        #[arg(long)]
        password_stdin: bool,
        #[command(flatten)]
        at: AccountArgs,
    },
    /// Remove an account and its grants.
    Remove {
        /// The account.
        name: String,
        #[command(flatten)]
        at: AccountArgs,
    },
}

/// `machine-mcp relay client ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// List OAuth clients: id, kind, name, live grants, bridges, state.
    List {
        /// Only clients holding grants of this bridge.
        #[arg(long)]
        bridge: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a client: every grant and token it holds stops working at once, and it cannot
    /// sign in again on this relay.
    Revoke {
        /// The client id (mbc_... or the URL of its metadata document).
        client_id: String,
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

/// Arguments of `machine-mcp reload`.
#[derive(Debug, Args)]
pub(crate) struct ReloadArgs {
    /// Reload only the `machine-mcp stdio` with this process id.
    #[arg(long, value_name = "PID")]
    pub(crate) pid: Option<u32>,
}

/// Arguments of `machine-mcp stdio`.
#[derive(Debug, Args)]
pub(crate) struct StdioArgs {
    /// The directory to expose (default: the current directory).
    #[arg(long, short = 'w', value_name = "DIR", env = "MACHINE_MCP_WORKSPACE")]
    pub(crate) workspace: Option<PathBuf>,
    /// Serve in this process, without the supervisor: no upgrade without a restart of the
    /// client and no restart after a crash, one process less (for measurements, or a host
    /// that supervises its servers itself).
    #[arg(long)]
    pub(crate) no_supervisor: bool,
    /// The supervisor's worker (internal: started by `machine-mcp stdio` itself).
    #[arg(long, hide = true, conflicts_with = "no_supervisor")]
    pub(crate) worker: bool,
    /// A worker started before its supervisor checked its arguments; it waits for a line on
    /// stdin before it runs its command (internal: `supervisor::prestart`).
    #[arg(long = "worker-gate", hide = true, requires = "worker")]
    pub(crate) _worker_gate: bool,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) state: StateArgs,
}

/// An MCP client whose configuration `client-config` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ClientArg {
    /// Claude Desktop (`claude_desktop_config.json`; stdio servers only).
    ClaudeDesktop,
    /// Claude Code (user scope, `~/.claude.json`).
    ClaudeCode,
    /// Cursor (`~/.cursor/mcp.json`).
    Cursor,
    /// Codex CLI (`$CODEX_HOME/config.toml`, default `~/.codex/config.toml`).
    Codex,
    /// VS Code (the user `mcp.json`).
    Vscode,
    /// Every client above.
    All,
}

/// A bearer token from the command line: `Debug` shows only that one was given.
#[derive(Clone)]
pub(crate) struct TokenArg(pub(crate) String);

impl std::fmt::Debug for TokenArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenArg(<redacted>)")
    }
}

impl std::str::FromStr for TokenArg {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

/// Arguments of `machine-mcp client-config`.
#[derive(Debug, Args)]
pub(crate) struct ClientConfigArgs {
    /// The client: claude-desktop, claude-code, cursor, codex, vscode or all.
    #[arg(long, value_name = "CLIENT")]
    pub(crate) client: ClientArg,
    /// Merge the entry into the client's config file instead of printing it (this is about
    /// the config file; the server's own write access is the policy flag --no-write below).
    #[arg(long)]
    pub(crate) write: bool,
    /// With --write: replace an entry of that --name that is not a machine-mcp entry (a server
    /// of your own); without it such an entry is refused.
    #[arg(long, requires = "write")]
    pub(crate) force: bool,
    /// The entry's name in the client's server list.
    #[arg(long, value_name = "NAME", default_value = "machine")]
    pub(crate) name: String,
    /// The config file to print for or edit, instead of the client's standard location (only
    /// with a single --client).
    #[arg(long, value_name = "FILE")]
    pub(crate) config_file: Option<PathBuf>,
    /// An entry for a running relay or `up` (Streamable HTTP at --url) instead of a stdio
    /// server on this machine; stdio-only clients (Claude Desktop, Codex) reach it through
    /// `npx -y mcp-remote`.
    #[arg(long, requires = "url")]
    pub(crate) remote: bool,
    /// The MCP URL of the relay or `up`, e.g. https://relay.example.com/b/laptop/mcp or
    /// http://127.0.0.1:8750/b/local/mcp (with --remote; http only for a loopback host).
    #[arg(long, value_name = "URL", requires = "remote")]
    pub(crate) url: Option<url::Url>,
    /// A bearer token the client sends as `Authorization: Bearer TOKEN` (with --remote; without
    /// it, clients that support OAuth sign in on the relay's consent page). It is written into
    /// the config file in clear, as these clients expect.
    #[arg(long, value_name = "TOKEN", requires = "remote")]
    pub(crate) token: Option<TokenArg>,
    /// The directory the stdio server exposes (default: the current directory).
    #[arg(long, short = 'w', value_name = "DIR", env = "MACHINE_MCP_WORKSPACE")]
    pub(crate) workspace: Option<PathBuf>,
    // Under their own heading: `--no-write` is the server's policy, `--write` this command's.
    #[command(
        flatten,
        next_help_heading = "Policy of the stdio server the entry starts"
    )]
    pub(crate) policy: PolicyArgs,
}

/// Policy flags (see docs/policy.md).
#[derive(Debug, Clone, Args)]
pub(crate) struct PolicyArgs {
    /// Starting policy: full (everything), agent (file tools confined to the workspace, writes,
    /// programs from an argv, which run with your rights and an isolated environment), edit
    /// (confined file tools and writes, no programs), review (confined, read-only). See
    /// docs/policy.md.
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

/// Parses `--relay`: an `https://` or `http://` URL with a host. A value without a scheme
/// that looks like `HOST[:PORT][/PATH]` (`relay.example.com`, or `localhost:8750`, which would
/// parse as the scheme `localhost`) is refused with the `https://` form to use instead; any
/// other value is refused as not a URL.
fn relay_url(s: &str) -> Result<url::Url, String> {
    let bare = s.trim_start_matches('/');
    let not_a_url = || "not a URL: give the relay's URL, e.g. https://relay.example.com".to_owned();
    let suggest = || {
        if looks_like_host(bare) {
            format!(
                "the relay URL needs a scheme: did you mean https://{bare}? (http:// for a relay on loopback)"
            )
        } else {
            not_a_url()
        }
    };
    match url::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "https" | "http") && u.has_host() => Ok(u),
        Ok(u) if matches!(u.scheme(), "https" | "http") => Err("the relay URL has no host".into()),
        Ok(u) if !looks_like_host(bare) => Err(format!(
            "the relay URL must be https:// (or http:// for a relay on loopback), not {}:",
            u.scheme()
        )),
        Ok(_) | Err(url::ParseError::RelativeUrlWithoutBase) => Err(suggest()),
        Err(_) => Err(not_a_url()),
    }
}

/// Whether `s` reads as `HOST[:PORT][/PATH]`: a host of letters, digits, `-` and `.` (or a
/// bracketed IPv6 address), an optional numeric port, and a path without spaces.
fn looks_like_host(s: &str) -> bool {
    let (authority, path) = s.split_once('/').unwrap_or((s, ""));
    let (host_ok, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, tail)) => (
                !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':'),
                tail,
            ),
            None => return false,
        },
        None => {
            let (host, tail) = authority
                .find(':')
                .map_or((authority, ""), |i| authority.split_at(i));
            let ok = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            (ok, tail)
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    host_ok && port_ok && !path.chars().any(char::is_whitespace)
}
