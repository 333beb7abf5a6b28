//! The headers an MCP 2026-07-28 request mirrors its body in (Basic › Transports › Streamable
//! HTTP § Standard Request Headers, § Custom Headers from Tool Parameters, § Value Encoding):
//! their names, how a value is read (a singleton, visible ASCII, the Base64 sentinel decoded)
//! and when it equals a body value.

use axum::http::HeaderMap;
use base64::{Engine, engine::general_purpose::STANDARD};
use serde_json::Value;

/// Header mirroring the JSON-RPC method (§ Standard Request Headers).
pub(crate) const METHOD_HEADER: &str = "mcp-method";
/// Header mirroring `params.name` / `params.uri` (§ Standard Request Headers).
pub(crate) const NAME_HEADER: &str = "mcp-name";
/// Prefix of the headers mirroring annotated tool arguments (§ Custom Headers from Tool
/// Parameters).
pub(crate) const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// The sole value of header `name`: `Ok(None)` when absent; an error when repeated (these
/// headers are singletons: an intermediary could route on the other copy) or not visible ASCII.
pub(super) fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, String> {
    let mut all = headers.get_all(name).iter();
    let Some(first) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(format!("{name} is sent more than once"));
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| format!("{name} holds characters a header value may not carry"))
}

/// A header value with the Base64 sentinel `=?base64?…?=` decoded (§ Value Encoding); `None`
/// when the sentinel wraps something that is not Base64 of UTF-8.
pub(crate) fn decode_header_value(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(inner) => String::from_utf8(STANDARD.decode(inner).ok()?).ok(),
        None => Some(raw.to_owned()),
    }
}

/// Whether a header's decoded text equals a body value: strings as they are, booleans as
/// `true`/`false`, numbers numerically (`42.0` equals `42`, § Server Validation).
pub(super) fn header_matches(decoded: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => decoded == s,
        Value::Bool(b) => decoded == if *b { "true" } else { "false" },
        Value::Number(n) => decoded
            .trim()
            .parse::<f64>()
            .ok()
            .zip(n.as_f64())
            .is_some_and(|(a, b)| a == b),
        _ => false,
    }
}
