//! The checks of an MCP 2026-07-28 request before anything runs ([`validate`]): its per-request
//! `_meta` (Basic § `_meta`) and the headers that mirror its body (Basic › Transports ›
//! Streamable HTTP § Server Validation), in the order of the module docs of `stateless`.

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use protocol::{
    jsonrpc::code::{HEADER_MISMATCH, INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION},
    mcp::{
        ALL_VERSIONS, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, is_modern,
        is_session_era,
    },
};

use super::headers::{
    METHOD_HEADER, NAME_HEADER, PARAM_HEADER_PREFIX, decode_header_value, header_matches,
    single_header,
};
use crate::{error::HttpError, hub::ParamHeader, streamable::VERSION_HEADER};

/// Checks a modern request's `_meta` and headers (see the module docs for the order and the
/// errors). `supported` is what the endpoint's `server/discover` reports ([`endpoint_versions`]),
/// listed in an `UnsupportedProtocolVersionError`; `annotations` gives the `x-mcp-header`
/// annotations of a called tool.
///
/// # Errors
/// The refusal to send, with the request's id.
pub(crate) fn validate<S: AsRef<str> + serde::Serialize + std::fmt::Debug>(
    headers: &HeaderMap,
    message: &Value,
    supported: &[S],
    annotations: impl Fn(&str) -> Option<Vec<ParamHeader>>,
) -> Result<(), HttpError> {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let bad =
        |status: StatusCode, code: i64, msg: String| HttpError::rpc(status, id.clone(), code, msg);
    let unsupported = |requested: &str| {
        // A handshake-era version is served, but only inside a session.
        let why = if is_session_era(requested) {
            format!(
                "Protocol version {requested:?} needs a session: send initialize first (without \
                 _meta), or name 2026-07-28 to be served without one; this server supports \
                 {supported:?}"
            )
        } else {
            format!(
                "Unsupported protocol version {requested:?}; this server supports {supported:?}"
            )
        };
        bad(StatusCode::BAD_REQUEST, UNSUPPORTED_PROTOCOL_VERSION, why)
            .with_data(json!({"supported": supported, "requested": requested}))
    };
    let mismatch = |why: String| {
        bad(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            format!("Header mismatch: {why}"),
        )
    };
    let params = message.get("params");
    let meta = params.and_then(|p| p.get("_meta"));
    let header_version = single_header(headers, VERSION_HEADER).map_err(mismatch)?;
    // 1. The version: named in `_meta`, served, and mirrored by the header.
    let Some(meta_version) = meta.and_then(|m| m.get(META_PROTOCOL_VERSION)) else {
        if let Some(h) = header_version
            && !ALL_VERSIONS.contains(&h)
        {
            return Err(unsupported(h));
        }
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!(
                "Invalid params: an MCP 2026-07-28 request carries params._meta[{META_PROTOCOL_VERSION:?}] and params._meta[{META_CLIENT_CAPABILITIES:?}]"
            ),
        ));
    };
    let Some(meta_version) = meta_version.as_str() else {
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_PROTOCOL_VERSION:?}] must be a string"),
        ));
    };
    match header_version {
        None => {
            return Err(mismatch(format!(
                "the MCP-Protocol-Version header is required (the request's _meta names {meta_version})"
            )));
        }
        Some(h) if h != meta_version => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version header {h:?} does not match _meta protocolVersion {meta_version:?}"
            )));
        }
        Some(_) => {}
    }
    if !is_modern(meta_version) {
        return Err(unsupported(meta_version));
    }
    // 2. The rest of the required `_meta`.
    if !meta
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .is_some_and(Value::is_object)
    {
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_CLIENT_CAPABILITIES:?}] (an object) is required"),
        ));
    }
    if meta
        .and_then(|m| m.get(META_CLIENT_INFO))
        .is_some_and(|i| !i.is_object())
    {
        return Err(bad(
            StatusCode::BAD_REQUEST,
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_CLIENT_INFO:?}] must be an object"),
        ));
    }
    // 3. The standard headers.
    match single_header(headers, METHOD_HEADER).map_err(mismatch)? {
        None => return Err(mismatch("the Mcp-Method header is required".into())),
        Some(h) if h != method => {
            return Err(mismatch(format!(
                "Mcp-Method header value {h:?} does not match body value {method:?}"
            )));
        }
        Some(_) => {}
    }
    let (name_key, required) = match method {
        "tools/call" | "prompts/get" => (Some("name"), true),
        "resources/read" => (Some("uri"), true),
        // SEP-2663 § Streamable HTTP: Routing Headers: the client MUST set Mcp-Name to the
        // taskId, so intermediaries can route to the instance holding the task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => (Some("taskId"), true),
        _ => (None, false),
    };
    if let Some(key) = name_key {
        let body = params.and_then(|p| p.get(key));
        match (single_header(headers, NAME_HEADER).map_err(mismatch)?, body) {
            (None, Some(_)) if required => {
                return Err(mismatch(format!(
                    "the Mcp-Name header is required for {method}"
                )));
            }
            (None, _) => {}
            (Some(raw), body) => {
                let decoded = decode_header_value(raw)
                    .ok_or_else(|| mismatch("Mcp-Name header is not valid Base64".into()))?;
                if !body.is_some_and(|b| header_matches(&decoded, b)) {
                    return Err(mismatch(format!(
                        "Mcp-Name header value {decoded:?} does not match body value {}",
                        body.map_or("(absent)".to_owned(), Value::to_string)
                    )));
                }
            }
        }
    }
    if method == "tools/call"
        && let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str)
        && let Some(list) = annotations(tool)
    {
        let args = params.and_then(|p| p.get("arguments"));
        for a in list {
            let name = format!("{PARAM_HEADER_PREFIX}{}", a.header.to_ascii_lowercase());
            let body = args
                .and_then(|args| a.path.iter().try_fold(args, |v, k| v.get(k)))
                .filter(|v| !v.is_null());
            let shown = format!("Mcp-Param-{}", a.header);
            match (single_header(headers, &name).map_err(mismatch)?, body) {
                (None, None) => {}
                (Some(_), None) => {
                    return Err(mismatch(format!(
                        "{shown} is sent but arguments.{} is absent",
                        a.path.join(".")
                    )));
                }
                (None, Some(_)) => {
                    return Err(mismatch(format!(
                        "{shown} is required: arguments.{} is present",
                        a.path.join(".")
                    )));
                }
                (Some(raw), Some(body)) => {
                    let decoded = decode_header_value(raw)
                        .ok_or_else(|| mismatch(format!("{shown} is not valid Base64")))?;
                    if !header_matches(&decoded, body) {
                        return Err(mismatch(format!(
                            "{shown} header value {decoded:?} does not match body value {body}"
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}
