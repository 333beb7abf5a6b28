//! `conformance-fixture`: a stdio MCP server that offers exactly the tools, resources and prompts
//! the official MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.16) expects in its
//! *server* scenarios — `test_simple_text`, `test_tool_with_progress`, `test_sampling`,
//! `test://static-text`, `test://template/{id}/data`, `test_prompt_with_arguments`, completion,
//! `logging/setLevel`, `resources/subscribe`, … — with the exact texts, payloads and schemas the
//! scenarios check.
//!
//! It is a **test fixture**, not a product: the suite only speaks Streamable HTTP, so this server
//! is put behind an HTTP front (supergateway in development, and later our relay, where it is
//! carried as an upstream server) and the suite then tests that front's whole Streamable HTTP
//! path: POST and GET SSE streams, notifications during a call, and server→client requests
//! (sampling, elicitation).
//!
//! Besides the 30 active scenarios it also serves the two pending ones' server side:
//! `json_schema_2020_12_tool` (JSON Schema 2020-12 keywords kept verbatim) and
//! `test_reconnection` (a slow call during which the HTTP front should close the SSE stream).
//!
//! Protocol: newline-delimited JSON-RPC on stdin/stdout (stdout carries nothing else); logs go to
//! stderr (`RUST_LOG`, default `warn`). `initialize` negotiates protocol versions up to
//! 2025-11-25; 2026-07-28 requests (spec 2026-07-28: `server/discover`, per-request `_meta`,
//! `subscriptions/listen`) are served without `initialize`, unless it is started with
//! `--legacy-only`: then it behaves as a server of the old era (`server/discover` -> -32601),
//! which is what a relay has to bridge for 2026-07-28 clients. The extra tool
//! `test_tool_list_changed` sends `notifications/tools/list_changed` (to the `initialize`
//! session, and to every open `subscriptions/listen` stream).
//! `CONFORMANCE_FIXTURE_WATCH_INTERVAL_MS` (default 3000, `0` = off) paces the
//! `notifications/resources/updated` it sends while `test://watched-resource` is subscribed.

mod fixtures;
mod server;

use std::{process::ExitCode, time::Duration};

use rmcp::{ServiceExt, service::ServerInitializeError, transport::stdio};

use crate::{fixtures as fx, server::ConformanceServer};

fn main() -> ExitCode {
    init_logging();
    let mut legacy_only = false;
    for arg in std::env::args().skip(1) {
        if arg == fx::LEGACY_ONLY_FLAG {
            legacy_only = true;
        } else {
            eprintln!(
                "conformance-fixture: unknown argument {arg:?} (usage: conformance-fixture [{}])",
                fx::LEGACY_ONLY_FLAG
            );
            return ExitCode::from(2);
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .thread_name("conformance-fixture")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("conformance-fixture: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(run(legacy_only));
    rt.shutdown_timeout(Duration::from_millis(200));
    code
}

/// Serves one MCP session on stdin/stdout until the client goes away.
async fn run(legacy_only: bool) -> ExitCode {
    let server = ConformanceServer::new(watch_interval(), legacy_only);
    let running = match server.serve(stdio()).await {
        Ok(running) => running,
        // stdin ended before `initialize`: nothing to serve, not an error.
        Err(ServerInitializeError::ConnectionClosed(_)) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conformance-fixture: session did not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match running.waiting().await {
        Ok(reason) => {
            tracing::info!(?reason, "session ended");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("conformance-fixture: session task failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The watched resource's change interval from the environment (see the crate docs).
fn watch_interval() -> Option<Duration> {
    let ms = match std::env::var(fx::WATCH_INTERVAL_ENV) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) => ms,
            Err(_) => {
                eprintln!(
                    "conformance-fixture: ignoring {}={v:?} (not a number of milliseconds)",
                    fx::WATCH_INTERVAL_ENV
                );
                fx::WATCH_INTERVAL_MS
            }
        },
        Err(_) => fx::WATCH_INTERVAL_MS,
    };
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// Logs to stderr only (stdout is the JSON-RPC channel); `RUST_LOG` overrides the default `warn`.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
