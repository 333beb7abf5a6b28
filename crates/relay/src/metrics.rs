//! Prometheus metrics (`GET /metrics`, text exposition format 0.0.4).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Counters and gauges of one relay node.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// MCP sessions alive.
    pub(crate) sessions: AtomicI64,
    /// Client requests relayed and not yet answered.
    pub(crate) inflight: AtomicI64,
    /// Of those, requests whose daemon socket is gone (awaiting the same instance).
    pub(crate) detached: AtomicI64,
    /// Open `subscriptions/listen` streams of MCP 2026-07-28 clients (not in `inflight`).
    pub(crate) subscriptions: AtomicI64,
    /// Daemon sockets handshaking (hello, probe, resume).
    pub(crate) sockets_candidate: AtomicI64,
    /// Daemon sockets that are a bridge's active daemon.
    pub(crate) sockets_ready: AtomicI64,
    /// Verified daemon sockets that replaced another or rebound detached work.
    pub(crate) reconnects: AtomicU64,
    /// Daemon messages that matched no pending request (a lifecycle defect when it grows).
    pub(crate) unmatched: AtomicU64,
    /// HTTP requests answered on MCP endpoints.
    pub(crate) http_requests: AtomicU64,
    /// Store queries made for presented credentials (set when rendered).
    pub(crate) credential_lookups: AtomicU64,
    /// Client connections open.
    pub(crate) connections_open: AtomicI64,
    /// Connections closed at once because a connection cap was reached.
    pub(crate) connections_refused: AtomicI64,
    /// Daemon sockets refused before the upgrade because too many unverified ones were open.
    pub(crate) sockets_refused: AtomicI64,
    /// SSE streams registered (set when the metrics are rendered).
    pub(crate) streams: AtomicI64,
    /// Server messages dropped from a stream's buffer before any client read them.
    pub(crate) stream_dropped: AtomicU64,
    /// Session and stream writes queued for the store or being written (set when rendered).
    pub(crate) store_queued: AtomicI64,
    /// Session and stream writes lost: the store's queue was full or a batch failed (set when
    /// rendered).
    pub(crate) store_dropped: AtomicU64,
    /// Requests sent to a daemon of link revision 4 that it has not confirmed (`accepted`) yet.
    pub(crate) awaiting_acceptance: AtomicI64,
    /// Requests retracted as not delivered: the daemon did not take them in time.
    pub(crate) retracted: AtomicU64,
    /// `accepted` frames for requests already retracted (the delivery estimate failed).
    pub(crate) late_accepted: AtomicU64,
    /// MCP request bodies written to the spill directory as they arrived (`spill`).
    pub(crate) bodies_spilled: AtomicU64,
    /// Bytes of MCP request bodies being received that the relay holds in memory (at most the
    /// spill threshold per body when a spill directory is set).
    pub(crate) body_bytes_in_memory: AtomicI64,
}

impl Metrics {
    /// Adds `d` to a gauge.
    pub(crate) fn add(g: &AtomicI64, d: i64) {
        g.fetch_add(d, Ordering::Relaxed);
    }

    /// Renders the Prometheus text format.
    pub(crate) fn render(&self) -> String {
        let g = |a: &AtomicI64| a.load(Ordering::Relaxed);
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: &[(String, i128)]| {
            s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, v) in lines {
                s.push_str(&format!("{name}{labels} {v}\n"));
            }
        };
        metric(
            "machine_mcp_relay_sessions",
            "gauge",
            "MCP sessions alive.",
            &[(String::new(), g(&self.sessions).into())],
        );
        metric(
            "machine_mcp_relay_inflight_requests",
            "gauge",
            "Relayed client requests awaiting a response.",
            &[(String::new(), g(&self.inflight).into())],
        );
        metric(
            "machine_mcp_relay_subscriptions",
            "gauge",
            "Open subscriptions/listen streams (MCP 2026-07-28), not counted as in-flight requests.",
            &[(String::new(), g(&self.subscriptions).into())],
        );
        metric(
            "machine_mcp_relay_requests_awaiting_acceptance",
            "gauge",
            "Relayed requests a daemon (link revision 4) has not confirmed taking yet.",
            &[(String::new(), g(&self.awaiting_acceptance).into())],
        );
        metric(
            "machine_mcp_relay_requests_not_delivered_total",
            "counter",
            "Requests retracted and answered as not delivered: the daemon did not take them in time.",
            &[(String::new(), c(&self.retracted).into())],
        );
        metric(
            "machine_mcp_relay_late_accepted_total",
            "counter",
            "Daemon confirmations (accepted) of requests already retracted as not delivered.",
            &[(String::new(), c(&self.late_accepted).into())],
        );
        metric(
            "machine_mcp_relay_detached_requests",
            "gauge",
            "In-flight requests whose daemon socket is gone, within the reconnect grace.",
            &[(String::new(), g(&self.detached).into())],
        );
        metric(
            "machine_mcp_relay_daemon_sockets",
            "gauge",
            "Daemon WebSocket connections by state.",
            &[
                (
                    "{state=\"candidate\"}".to_owned(),
                    g(&self.sockets_candidate).into(),
                ),
                (
                    "{state=\"ready\"}".to_owned(),
                    g(&self.sockets_ready).into(),
                ),
            ],
        );
        metric(
            "machine_mcp_relay_daemon_reconnects_total",
            "counter",
            "Verified daemon sockets that took over a bridge after another socket.",
            &[(String::new(), c(&self.reconnects).into())],
        );
        metric(
            "machine_mcp_relay_stream_messages_dropped_total",
            "counter",
            "Server messages dropped from a full stream buffer before any client read them.",
            &[(String::new(), c(&self.stream_dropped).into())],
        );
        metric(
            "machine_mcp_relay_unmatched_messages_total",
            "counter",
            "Daemon messages that matched no pending request.",
            &[(String::new(), c(&self.unmatched).into())],
        );
        metric(
            "machine_mcp_relay_http_requests_total",
            "counter",
            "HTTP requests on MCP endpoints.",
            &[(String::new(), c(&self.http_requests).into())],
        );
        metric(
            "machine_mcp_relay_credential_lookups_total",
            "counter",
            "Store queries made for presented credentials (a credential the relay checked before and nothing revoked since costs none).",
            &[(String::new(), c(&self.credential_lookups).into())],
        );
        metric(
            "machine_mcp_relay_streams",
            "gauge",
            "SSE streams registered (open, or finished and kept for replay).",
            &[(String::new(), g(&self.streams).into())],
        );
        metric(
            "machine_mcp_relay_store_queued_writes",
            "gauge",
            "Session and stream writes queued for the relay store or being written.",
            &[(String::new(), g(&self.store_queued).into())],
        );
        metric(
            "machine_mcp_relay_store_dropped_writes_total",
            "counter",
            "Session and stream writes lost (the store's queue was full, or a write failed): not kept for a restart.",
            &[(String::new(), c(&self.store_dropped).into())],
        );
        metric(
            "machine_mcp_relay_request_bodies_spilled_total",
            "counter",
            "MCP request bodies written to the spill directory as they arrived (larger than the spill threshold).",
            &[(String::new(), c(&self.bodies_spilled).into())],
        );
        metric(
            "machine_mcp_relay_request_body_bytes_in_memory",
            "gauge",
            "Bytes of MCP request bodies being received that the relay holds in memory.",
            &[(String::new(), g(&self.body_bytes_in_memory).into())],
        );
        metric(
            "machine_mcp_relay_connections",
            "gauge",
            "Client connections open.",
            &[(String::new(), g(&self.connections_open).into())],
        );
        metric(
            "machine_mcp_relay_connections_refused_total",
            "counter",
            "Connections closed at accept because a connection cap was reached.",
            &[(String::new(), g(&self.connections_refused).into())],
        );
        metric(
            "machine_mcp_relay_daemon_sockets_refused_total",
            "counter",
            "Daemon sockets refused because too many unverified ones were open.",
            &[(String::new(), g(&self.sockets_refused).into())],
        );
        s
    }
}
