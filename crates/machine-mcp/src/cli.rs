//! Command-line definitions (the raw arguments; validated in `commands`).

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
