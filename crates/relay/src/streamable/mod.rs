//! MCP Streamable HTTP as both eras write it on the wire (MCP 2025-11-25 and 2026-07-28 Basic ›
//! Transports › Streamable HTTP): the header names they share, the `Accept` negotiation, and the
//! SSE framing of a response ([`sse`]).
//!
//! The session era's endpoint (`crate::mcp`) and the 2026-07-28 one (`crate::stateless`) both
//! build on this module; it imports nothing of either, nor of the routing state.

pub(crate) mod sse;

use axum::http::{HeaderMap, header};

/// Header carrying the session id.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the negotiated protocol version.
pub(crate) const VERSION_HEADER: &str = "mcp-protocol-version";

/// Whether the client's `Accept` admits `text/event-stream` (not with `q=0`).
pub(crate) fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|part| {
            let mut it = part.split(';');
            let mime = it.next().unwrap_or("").trim();
            let q_zero = it.any(|p| matches!(p.trim().strip_prefix("q="), Some(q) if q.trim().parse::<f32>().is_ok_and(|q| q == 0.0)));
            mime.eq_ignore_ascii_case("text/event-stream") && !q_zero
        })
}

/// Whether the client's `Accept` admits `application/json` (absent `Accept` admits anything).
pub(crate) fn accepts_json(headers: &HeaderMap) -> bool {
    let mut any = false;
    let ok = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|part| {
            any = true;
            let mut it = part.split(';');
            let mime = it.next().unwrap_or("").trim().to_ascii_lowercase();
            let q_zero = it.any(|p| {
                matches!(p.trim().strip_prefix("q="), Some(q) if q.trim().parse::<f32>().is_ok_and(|q| q == 0.0))
            });
            matches!(mime.as_str(), "application/json" | "application/*" | "*/*") && !q_zero
        });
    ok || !any
}
