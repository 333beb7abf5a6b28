//! The checks of an MCP 2026-07-28 request before anything runs: its per-request `_meta`
//! (Basic § `_meta`, Per-request protocol fields) and, on Streamable HTTP, the headers that
//! mirror its body (Basic › Transports › Streamable HTTP § Server Validation).
//!
//! In this order (the first failure is the answer):
//! 1. the version: `_meta["io.modelcontextprotocol/protocolVersion"]` present (else `-32602`,
//!    or `-32022` when only a header names an unknown version), a string (`-32602`), mirrored
//!    by exactly one `MCP-Protocol-Version` header (`-32020`), and a 2026-07-28 version
//!    (`-32022` `UnsupportedProtocolVersionError`, `data.supported` listing what the server
//!    reports, `data.requested`; a handshake-era version gets a message saying it needs a
//!    session);
//! 2. `_meta["io.modelcontextprotocol/clientCapabilities"]`, an object (`-32602`), and
//!    `_meta["io.modelcontextprotocol/clientInfo"]`, an object when present (`-32602`);
//! 3. the mirrored headers ([`super::mirror`]): `Mcp-Method` present and equal to the method;
//!    `Mcp-Name` equal to `params.name` (`tools/call`, `prompts/get`), `params.uri`
//!    (`resources/read`) or `params.taskId` (`tasks/get`, `tasks/update`, `tasks/cancel`;
//!    SEP-2663 § Streamable HTTP: Routing Headers), required when the body has it; the
//!    `Mcp-Param-*` headers of a `tools/call` equal to the arguments its tool's `x-mcp-header`
//!    annotations name, present exactly when the argument is — each failure `-32020`
//!    (`HeaderMismatch`).
//!
//! A transport without headers (the link, stdio) checks 1 and 2 with the header parts left out
//! ([`check_meta`]); Streamable HTTP checks all three ([`validate`]).

use std::fmt;

use serde::Serialize;
use serde_json::{Value, json};

use super::{
    Head, Shape,
    mirror::{
        Headers, METHOD_HEADER, NAME_HEADER, PARAM_HEADER_PREFIX, ParamHeader, VERSION_HEADER,
        decode_header_value, header_matches,
    },
};
use crate::{
    jsonrpc::{
        self,
        code::{HEADER_MISMATCH, INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION},
    },
    mcp::{
        ALL_VERSIONS, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, is_modern,
        is_session_era,
    },
};

/// The refusal of a message: the JSON-RPC error to answer it with (the transport adds the id
/// and, on HTTP, the status).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The JSON-RPC error code ([`crate::jsonrpc::code`]).
    pub code: i64,
    /// The error message.
    pub message: String,
    /// The error's `data`, when it has one.
    pub data: Option<Value>,
}

impl Refusal {
    /// A refusal with `code` and `message`, no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// With `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The error response to request `id`.
    pub fn answer(&self, id: &Value) -> Value {
        jsonrpc::error(id, self.code, &self.message, self.data.clone())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// Checks the per-request `_meta` of a 2026-07-28 request on a transport without headers (the
/// relay ⇄ daemon link, stdio): steps 1 and 2 of the module docs. `supported` is what the
/// server's `server/discover` reports, listed in an `UnsupportedProtocolVersionError`.
///
/// # Errors
/// The [`Refusal`] of the first rule broken.
pub fn check_meta<S: AsRef<str> + Serialize + fmt::Debug>(
    head: &Head,
    supported: &[S],
) -> Result<(), Refusal> {
    check(head, None, supported, |_| None, None)
}

/// Checks a 2026-07-28 request on Streamable HTTP: its `_meta` and the headers that mirror it
/// (all steps of the module docs). `supported` is what the endpoint's `server/discover`
/// reports; `annotations` gives the `x-mcp-header` annotations of a called tool; `arguments` is
/// the request's `params.arguments`.
///
/// # Errors
/// The [`Refusal`] of the first rule broken.
pub fn validate<S: AsRef<str> + Serialize + fmt::Debug>(
    head: &Head,
    headers: &dyn Headers,
    supported: &[S],
    annotations: impl Fn(&str) -> Option<Vec<ParamHeader>>,
    arguments: Option<&Value>,
) -> Result<(), Refusal> {
    check(head, Some(headers), supported, annotations, arguments)
}

fn check<S: AsRef<str> + Serialize + fmt::Debug>(
    head: &Head,
    headers: Option<&dyn Headers>,
    supported: &[S],
    annotations: impl Fn(&str) -> Option<Vec<ParamHeader>>,
    arguments: Option<&Value>,
) -> Result<(), Refusal> {
    let method = head.method().unwrap_or("");
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
        Refusal::new(UNSUPPORTED_PROTOCOL_VERSION, why)
            .with_data(json!({"supported": supported, "requested": requested}))
    };
    let mismatch = |why: String| Refusal::new(HEADER_MISMATCH, format!("Header mismatch: {why}"));
    let single = |name: &str| match headers {
        Some(h) => h.single(name).map_err(mismatch),
        None => Ok(None),
    };
    let meta = head.meta();
    let header_version = single(VERSION_HEADER)?;
    // 1. The version: named in `_meta`, served, and mirrored by the header.
    let Some(meta_version) = meta.protocol_version() else {
        if let Some(h) = header_version
            && !ALL_VERSIONS.contains(&h)
        {
            return Err(unsupported(h));
        }
        return Err(Refusal::new(
            INVALID_PARAMS,
            format!(
                "Invalid params: an MCP 2026-07-28 request carries params._meta[{META_PROTOCOL_VERSION:?}] and params._meta[{META_CLIENT_CAPABILITIES:?}]"
            ),
        ));
    };
    let Some(meta_version) = meta_version.as_str() else {
        return Err(Refusal::new(
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_PROTOCOL_VERSION:?}] must be a string"),
        ));
    };
    if headers.is_some() {
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
    }
    if !is_modern(meta_version) {
        return Err(unsupported(meta_version));
    }
    // 2. The rest of the required `_meta`.
    if meta.client_capabilities() != Some(Shape::Object) {
        return Err(Refusal::new(
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_CLIENT_CAPABILITIES:?}] (an object) is required"),
        ));
    }
    if meta.client_info() == Some(Shape::Other) {
        return Err(Refusal::new(
            INVALID_PARAMS,
            format!("Invalid params: _meta[{META_CLIENT_INFO:?}] must be an object"),
        ));
    }
    if headers.is_none() {
        return Ok(());
    }
    // 3. The standard headers.
    match single(METHOD_HEADER)? {
        None => return Err(mismatch("the Mcp-Method header is required".into())),
        Some(h) if h != method => {
            return Err(mismatch(format!(
                "Mcp-Method header value {h:?} does not match body value {method:?}"
            )));
        }
        Some(_) => {}
    }
    let base64 = |raw: &str| headers.and_then(|h| decode_header_value(raw, |t| h.base64(t)));
    if let Some(body) = mirrored_name(head) {
        match (single(NAME_HEADER)?, body) {
            (None, Some(_)) => {
                return Err(mismatch(format!(
                    "the Mcp-Name header is required for {method}"
                )));
            }
            (None, None) => {}
            (Some(raw), body) => {
                let decoded = base64(raw)
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
    if let Some(tool) = head.tool()
        && let Some(list) = annotations(tool)
    {
        for a in list {
            let name = format!("{PARAM_HEADER_PREFIX}{}", a.header.to_ascii_lowercase());
            let body = arguments
                .and_then(|args| a.path.iter().try_fold(args, |v, k| v.get(k)))
                .filter(|v| !v.is_null());
            let shown = format!("Mcp-Param-{}", a.header);
            match (single(&name)?, body) {
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
                    let decoded = base64(raw)
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

/// The body value `Mcp-Name` mirrors for the request's method: `Some(value or None when
/// absent)` for the methods that have one, `None` for the others.
fn mirrored_name(head: &Head) -> Option<Option<&Value>> {
    match head.method()? {
        "tools/call" | "prompts/get" => Some(head.name()),
        "resources/read" => Some(head.uri()),
        // SEP-2663 § Streamable HTTP: Routing Headers: the client MUST set Mcp-Name to the
        // taskId, so intermediaries can route to the instance holding the task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some(head.task_id()),
        _ => None,
    }
}
