//! Logging to stderr with `tracing` (stdout belongs to JSON-RPC).

use tracing_subscriber::EnvFilter;

use crate::cli::{GlobalArgs, LogLevel};

/// Installs the stderr subscriber. rmcp is kept at `error` (`warn` with --verbose) because its debug events
/// carry request arguments and results, which are never logged (CONVENTIONS "Logs").
pub(crate) fn init(g: &GlobalArgs) {
    let level = match (g.verbose, g.log_level) {
        (true, LogLevel::Trace) => "trace",
        (true, _) => "debug",
        (false, LogLevel::Error) => "error",
        (false, LogLevel::Warn) => "warn",
        (false, LogLevel::Info) => "info",
        (false, LogLevel::Debug) => "debug",
        (false, LogLevel::Trace) => "trace",
    };
    // rmcp warns about every JSON-RPC error it answers; that is per-call noise.
    let rmcp = if g.verbose { "warn" } else { "error" };
    let filter = EnvFilter::new(format!("{level},rmcp={rmcp},ignore=warn,globset=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
}
