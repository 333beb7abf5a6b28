//! `machine-mcp delegation ...`: the receipts of the `delegate` tool from the machine's own
//! shell, as the machine's owner (who sees every receipt), through the delegation family's
//! entry point for it (`runtime::tools::delegation::admin`): `drain` reaches the running
//! servers through a marker file (`STATE_DIR/delegations/draining`) that every server checks
//! before it admits a request; `resume` removes it.

use std::path::Path;

use anyhow::{Context, Result};
use runtime::tools::delegation::admin::{self, ReceiptSummary, Receipts, summary_line};
use serde_json::json;

use crate::cli::{DelegationCommand, JobOut};

/// `println!` of text for people, escaped as the `job` commands do.
macro_rules! out {
    ($($arg:tt)*) => { super::job::emit(&super::printable(&format!($($arg)*))) };
}

/// Runs one `delegation` command.
pub(crate) async fn run(cmd: DelegationCommand) -> Result<()> {
    match cmd {
        DelegationCommand::List { out } => list(&out),
        DelegationCommand::Drain { out } => {
            let dir = super::state_dir(&out.state)?;
            let still = drain(&dir)?;
            if out.json {
                return super::job::print_json(&json!({ "draining": true, "unfinished": still }));
            }
            out!("draining: new delegations are refused until `machine-mcp delegation resume`");
            print_unfinished(&still);
            Ok(())
        }
        DelegationCommand::Resume { state } => {
            let dir = super::state_dir(&state)?;
            Receipts::open(&dir).resume().with_context(|| {
                format!("cannot remove the draining marker in {}", dir.display())
            })?;
            out!("delegations are accepted again");
            Ok(())
        }
        DelegationCommand::WorkerMcp => worker_mcp().await,
    }
}

/// `delegation worker-mcp`: serves a worker's MCP on stdio until stdin ends. Without the run's
/// variables it says so and exits 2 (a usage error); when the socket refuses it, 1.
async fn worker_mcp() -> Result<()> {
    let served = match admin::worker_mcp().await {
        Ok(tools) => runtime::mcp::stdio::serve_tool_set(std::sync::Arc::new(tools))
            .await
            .map_err(|e| admin::WorkerMcpError::Protocol(format!("cannot write to stdout: {e}"))),
        Err(e) => Err(e),
    };
    match served {
        Ok(()) => Ok(()),
        Err(e) => {
            eprintln!("machine-mcp: {}", super::printable(&e.to_string()));
            std::process::exit(i32::from(e.exit_code()));
        }
    }
}

/// `delegation list`: every receipt. A state directory (or its `delegations`) that exists and
/// is not a directory is an error; one that does not exist yet holds no delegations, and the
/// text says so (listing never creates it).
fn list(out: &JobOut) -> Result<()> {
    let dir = super::state_dir(&out.state)?;
    let store = Receipts::open(&dir);
    for d in [dir.as_path(), store.root()] {
        if let Ok(m) = std::fs::metadata(d)
            && !m.is_dir()
        {
            anyhow::bail!("{} is not a directory", d.display());
        }
    }
    let missing = !store.root().exists();
    let all = if missing {
        Vec::new()
    } else {
        store
            .list()
            .with_context(|| format!("cannot read the receipts in {}", store.root().display()))?
    };
    if out.json {
        return super::job::print_json(&json!({
            "draining": store.draining(),
            "delegations": all,
        }));
    }
    if store.draining() {
        out!("draining: new delegations are refused (`machine-mcp delegation resume` undoes it)");
    }
    if missing {
        out!("no delegations ({} does not exist)", store.root().display());
    } else if all.is_empty() {
        out!("no delegations");
    }
    for d in &all {
        out!("{}", summary_line(d).trim_end());
    }
    Ok(())
}

/// Writes the draining marker of the state directory `dir` and returns what is still queued or
/// running on live servers (also used by `service stop`).
///
/// # Errors
/// The marker cannot be written (the directory is not writable).
pub(crate) fn drain(dir: &Path) -> Result<Vec<ReceiptSummary>> {
    let store = Receipts::open(dir);
    store.drain().with_context(|| {
        format!(
            "cannot write the draining marker in {}",
            store.root().display()
        )
    })
}

/// Prints the delegations a drain leaves running, one line each, or that none is left.
pub(crate) fn print_unfinished(still: &[ReceiptSummary]) {
    if still.is_empty() {
        out!("no delegation is queued or running");
        return;
    }
    out!(
        "{} delegations are still queued or running (they end with their server; cancel one with \
         the cancel_delegation tool):",
        still.len()
    );
    for d in still {
        out!("{}", summary_line(d).trim_end());
    }
}
