//! The checks of an MCP 2026-07-28 request before anything runs ([`validate`]): its per-request
//! `_meta` (Basic § `_meta`) and the headers that mirror its body (Basic › Transports ›
//! Streamable HTTP § Server Validation), in the order of the module docs of `stateless`. The
//! rules are `protocol::head::meta`'s; this file gives them the request's headers and answers a
//! refusal with HTTP 400.

use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use protocol::head::{Head, meta};

use super::headers::HttpHeaders;
use crate::{error::HttpError, hub::ParamHeader};

/// Checks a modern request's `_meta` and headers (see the module docs for the order and the
/// errors). `head` is the head of `message`; `supported` is what the endpoint's
/// `server/discover` reports ([`super::answer::endpoint_versions`]), listed in an
/// `UnsupportedProtocolVersionError`; `annotations` gives the `x-mcp-header` annotations of a
/// called tool.
///
/// # Errors
/// The refusal to send (400), with the request's id.
pub(crate) fn validate<S: AsRef<str> + serde::Serialize + std::fmt::Debug>(
    headers: &HeaderMap,
    head: &Head,
    message: &Value,
    supported: &[S],
    annotations: impl Fn(&str) -> Option<Vec<ParamHeader>>,
) -> Result<(), HttpError> {
    let arguments = message.pointer("/params/arguments");
    meta::validate(
        head,
        &HttpHeaders(headers),
        supported,
        annotations,
        arguments,
    )
    .map_err(|r| {
        let e = HttpError::rpc(StatusCode::BAD_REQUEST, head.reply_id(), r.code, r.message);
        match r.data {
            Some(d) => e.with_data(d),
            None => e,
        }
    })
}
