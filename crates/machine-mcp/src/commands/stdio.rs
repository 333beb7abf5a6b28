//! `machine-mcp stdio`: one MCP session over stdin/stdout.

use anyhow::{Context, Result};

use crate::cli::StdioArgs;

pub(crate) async fn run(args: StdioArgs) -> Result<()> {
    let runtime = super::build_runtime(args.workspace, &args.policy, &args.state, None, false)?;
    tracing::info!(
        workspace = %runtime.workspace().root().display(),
        policy = runtime.policy().name(),
        "serving MCP over stdio"
    );
    let serve = runtime::mcp::stdio::serve_process_stdio(runtime.clone());
    let outcome = tokio::select! {
        r = serve => r.context("stdio session failed"),
        _ = super::shutdown_signal() => {
            tracing::info!("interrupted; exiting");
            Ok(())
        }
    };
    // Every process session dies with the server.
    runtime.shutdown().await;
    outcome
}
