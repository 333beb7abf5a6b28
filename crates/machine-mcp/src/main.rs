//! `machine-mcp`: parse the command line, run one command, map its error to an exit code: 0 on
//! success, 1 on an error (printed to stderr), 2 on a usage error (clap's). A command with
//! documented exit statuses of its own (`status`, `doctor`, `delegation`) exits with them.

mod cli;
mod cli_reference;
mod commands;
mod limits;
mod logging;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    runtime::memory::limit_arenas();
    // A worker started early by its supervisor (`supervisor::prestart`) prepares what has no
    // effect outside it, then waits at its gate; it never writes a byte before the gate opens.
    let gated = supervisor::prestart::is_gated_worker();
    supervisor::prestart::name_worker();
    // A supervised `stdio` starts its first worker now, so that both load at once.
    supervisor::prestart::prestart(&std::env::args_os().skip(1).collect::<Vec<_>>());
    let cli = if gated {
        match cli::Cli::try_parse() {
            Ok(cli) => cli,
            // The supervisor parsed the same arguments and reports the mistake.
            Err(_) => return ExitCode::SUCCESS,
        }
    } else {
        cli::Cli::parse()
    };
    if let cli::Command::Watchdog { instance } = &cli.command {
        // Synchronous and alone: no async runtime, no logging (its stderr is closed).
        runtime::tools::process::watchdog::run(instance);
        return ExitCode::SUCCESS;
    }
    runtime::tools::process::watchdog::enable(cli::WATCHDOG_SUBCOMMAND);
    if let Err(e) = logging::init(&cli.global) {
        if gated {
            // The supervisor set up the same logging and reports the mistake.
            return ExitCode::SUCCESS;
        }
        eprintln!("machine-mcp: {}", commands::printable(&format!("{e:#}")));
        return ExitCode::FAILURE;
    }
    raise_open_file_limit();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("machine-mcp")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("machine-mcp: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if gated && !supervisor::prestart::pass_gate() {
        rt.shutdown_background();
        return ExitCode::SUCCESS;
    }
    let result = rt.block_on(commands::run(cli.command));
    // Blocking work (a search, a file read) must not keep the process alive after the session.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("machine-mcp: {}", commands::printable(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit of open files to the hard limit: a relay holds a socket per client
/// connection and per daemon, and the soft limit (often 1,024) is far below what its connection
/// caps allow. Failure is logged, not fatal.
fn raise_open_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            // Linux refuses more than fs.nr_open (1,048,576 by default) even when the hard
            // limit is unlimited.
            let want = hard.min(1 << 20);
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, want, hard) {
                tracing::debug!(error = %e, soft, hard, "cannot raise the open-file limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "cannot read the open-file limit"),
    }
}
