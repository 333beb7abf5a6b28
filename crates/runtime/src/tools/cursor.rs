//! Opaque continuation tokens (`cursor` / `next_cursor`) of the paged tools: a small JSON
//! object, base64url without padding, that names where the next page starts and what it belongs
//! to. Nothing in one is trusted beyond what the tool re-checks (a path stays confined, a
//! fingerprint must match the query, a file's size and modification time must be unchanged).

use base64::Engine;
use serde_json::Value;

use crate::call::error::{ToolError, ToolResult};

/// `fields` as a cursor.
pub(crate) fn encode(fields: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(fields.to_string())
}

/// The fields of a cursor `tool` returned.
///
/// # Errors
/// `invalid_request` when `s` is not one.
pub(crate) fn decode(s: &str, tool: &str) -> ToolResult<Value> {
    let bad = || ToolError::invalid(format!("cursor is not a next_cursor returned by {tool}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.is_object() { Ok(v) } else { Err(bad()) }
}

/// Field `key` of a decoded cursor as a `u64`.
///
/// # Errors
/// `invalid_request` when it is missing or not a number.
pub(crate) fn u64_field(v: &Value, key: &str, tool: &str) -> ToolResult<u64> {
    v[key].as_u64().ok_or_else(|| {
        ToolError::invalid(format!("cursor is not a next_cursor returned by {tool}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cursor_round_trips_and_garbage_is_refused() {
        let v = json!({"o": 12, "p": "a/b"});
        assert_eq!(decode(&encode(&v), "t").unwrap(), v);
        assert!(decode("not a cursor!", "t").is_err());
        assert!(decode(&encode(&json!(3)), "t").is_err());
    }
}
