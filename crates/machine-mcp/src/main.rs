//! `machine-mcp`: parse the command line, run one command, map its error to an exit code.

mod cli;
mod commands;
mod logging;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    runtime::memory::limit_arenas();
    let cli = cli::Cli::parse();
    if let cli::Command::Watchdog { instance } = &cli.command {
        // Synchronous and alone: no async runtime, no logging (its stderr is closed).
        runtime::watchdog::run(instance);
        return ExitCode::SUCCESS;
    }
    runtime::watchdog::enable(cli::WATCHDOG_SUBCOMMAND);
    logging::init(&cli.global);
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
    let result = rt.block_on(commands::run(cli.command));
    // Blocking work (a search, a file read) must not keep the process alive after the session.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("machine-mcp: {e:#}");
            ExitCode::FAILURE
        }
    }
}
