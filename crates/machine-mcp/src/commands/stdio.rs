//! `machine-mcp stdio`: one MCP session over stdin/stdout.

use std::sync::Arc;

use anyhow::{Context, Result};
use runtime::{Runtime, RuntimeConfig};

use crate::cli::StdioArgs;

pub(crate) async fn run(args: StdioArgs) -> Result<()> {
    let workspace = match args.workspace {
        Some(w) => w,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let policy = super::policy(&args.policy);
    let runtime = Runtime::new(RuntimeConfig {
        workspace: workspace.clone(),
        policy,
        default_yield_after: None,
    })
    .with_context(|| {
        format!(
            "workspace {} is not a usable directory",
            workspace.display()
        )
    })?;
    tracing::info!(
        workspace = %runtime.workspace().root().display(),
        policy = runtime.policy().name(),
        "serving MCP over stdio"
    );
    let runtime = Arc::new(runtime);
    let serve = runtime::stdio::serve(runtime.clone(), tokio::io::stdin(), tokio::io::stdout());
    let outcome = tokio::select! {
        r = serve => r.context("stdio session failed"),
        _ = shutdown_signal() => {
            tracing::info!("interrupted; exiting");
            Ok(())
        }
    };
    // Every process session dies with the server.
    runtime.shutdown().await;
    outcome
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
