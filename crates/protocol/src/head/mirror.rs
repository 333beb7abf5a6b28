//! The headers an MCP 2026-07-28 request mirrors its body in on Streamable HTTP (Basic ›
//! Transports › Streamable HTTP § Standard Request Headers, § Custom Headers from Tool
//! Parameters, § Value Encoding), without HTTP: their names, how a value is decoded (the
//! Base64 sentinel) and when it equals a body value, and the `x-mcp-header` annotations of a
//! tool list (Server › Tools § `x-mcp-header`). The transport reads the header values
//! ([`Headers`]); [`super::meta::validate`] compares them with the body.

use std::collections::HashMap;

use serde_json::Value;

/// Header carrying the protocol version (both eras).
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// Header mirroring the JSON-RPC method (§ Standard Request Headers).
pub const METHOD_HEADER: &str = "mcp-method";
/// Header mirroring `params.name` / `params.uri` / `params.taskId` (§ Standard Request Headers).
pub const NAME_HEADER: &str = "mcp-name";
/// Prefix of the headers mirroring annotated tool arguments (§ Custom Headers from Tool
/// Parameters).
pub const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// The request headers as a transport reads them.
pub trait Headers {
    /// The sole value of header `name` (lower case): `Ok(None)` when absent; `Err(why)` when it
    /// is sent more than once (these headers are singletons: an intermediary could route on the
    /// other copy) or holds characters a header value may not carry.
    ///
    /// # Errors
    /// The reason, as a sentence naming the header.
    fn single(&self, name: &str) -> Result<Option<&str>, String>;

    /// The bytes `text` encodes in standard Base64 (RFC 4648 § 4, padded), `None` when it is not
    /// Base64.
    fn base64(&self, text: &str) -> Option<Vec<u8>>;
}

/// A header value with the Base64 sentinel `=?base64?…?=` decoded (§ Value Encoding) by
/// `base64` (the transport's decoder); `None` when the sentinel wraps something that is not
/// Base64 of UTF-8. Any other value is itself.
pub fn decode_header_value(
    raw: &str,
    base64: impl FnOnce(&str) -> Option<Vec<u8>>,
) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(inner) => String::from_utf8(base64(inner)?).ok(),
        None => Some(raw.to_owned()),
    }
}

/// Whether a header's decoded text equals a body value: strings as they are, booleans as
/// `true`/`false`, numbers numerically (`42.0` equals `42`, § Server Validation); other values
/// never.
pub fn header_matches(decoded: &str, body: &Value) -> bool {
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

/// One `x-mcp-header` annotation of a tool's `inputSchema`: the property path (names through
/// `properties` from the root) and the header name after `Mcp-Param-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// Property names from the schema root.
    pub path: Vec<String>,
    /// The `{name}` of `Mcp-Param-{name}`.
    pub header: String,
}

/// The `x-mcp-header` annotations of every tool in `tools/list` results, by tool name (MCP
/// 2026-07-28 Server › Tools § `x-mcp-header`; only annotations on a `properties` chain count,
/// an empty header name is none). Tools without a string name, and schemas of other shapes, are
/// left out.
pub fn param_headers<'a>(
    lists: impl IntoIterator<Item = &'a Value>,
) -> HashMap<String, Vec<ParamHeader>> {
    fn walk(props: Option<&Value>, path: &mut Vec<String>, out: &mut Vec<ParamHeader>) {
        let Some(Value::Object(props)) = props else {
            return;
        };
        for (name, schema) in props {
            path.push(name.clone());
            if let Some(h) = schema.get("x-mcp-header").and_then(Value::as_str)
                && !h.is_empty()
            {
                out.push(ParamHeader {
                    path: path.clone(),
                    header: h.to_owned(),
                });
            }
            walk(schema.get("properties"), path, out);
            path.pop();
        }
    }
    let mut map = HashMap::new();
    for list in lists {
        for tool in list
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let mut found = Vec::new();
            walk(
                tool.get("inputSchema").and_then(|s| s.get("properties")),
                &mut Vec::new(),
                &mut found,
            );
            if !found.is_empty() {
                map.insert(name.to_owned(), found);
            }
        }
    }
    map
}
