//! The role filter and the size guard: what a restricted role may not call on an upstream
//! server is answered with a tool error, and a server message no relay frame can carry is
//! replaced by an error that says to ask for less.

use serde_json::Value;

use protocol::{
    error_code::ToolErrorCode,
    head::{self, Head},
    jsonrpc::{self, code},
    limits::RELAY_FRAME_MAX_BYTES,
    tool_error::ToolError,
};

use super::Hosted;
use crate::servers;

/// The answer to a client request of `host` (its head) that its role may not make: restricted
/// roles may only call read-only tools of an upstream server (a tool error `policy_denied`).
pub(super) fn denial(host: &Hosted, request: &Head) -> Option<Value> {
    let ro = host.upstream_tools.as_ref()?;
    if !request.is("tools/call") || servers::calls_every_upstream_tool(host.role) {
        return None;
    }
    let tool = request.tool().unwrap_or("");
    if ro.contains(tool) {
        return None;
    }
    let id = request.reply_id();
    let err = ToolError::new(
        ToolErrorCode::PolicyDenied,
        format!(
            "{tool} is not read-only and role {} may only call read-only tools of this server",
            host.role
        ),
    );
    Some(jsonrpc::result(&id, err.call_result()))
}

/// What replaces a server message of `size` bytes that no relay frame can carry: for a
/// `tools/call` result, a tool error (`limit_exceeded`; the call did complete, so its side
/// effects happened) the model can act on by asking for less (MCP 2025-11-25, Tools §Error
/// Handling); for anything else a JSON-RPC internal error (-32603) with the same advice.
pub(super) fn too_large(message: &Value, method: Option<&str>, size: usize) -> Value {
    let id = head::peek::id_member(message)
        .cloned()
        .unwrap_or(Value::Null);
    let advice = format!(
        "the result ({size} bytes) is larger than the relay link carries ({RELAY_FRAME_MAX_BYTES} bytes); \
         ask for less (a smaller max_bytes, a narrower range or path)"
    );
    if method == Some("tools/call") && message.get("result").is_some() {
        let e = ToolError::limit(format!("the call completed, but {advice}")).with_side_effects();
        // Rendered as the runtime renders its own tool errors (rmcp adds `resultType`).
        let result =
            serde_json::to_value(runtime::call::result::error_result(&e)).unwrap_or(Value::Null);
        return jsonrpc::result(&id, result);
    }
    jsonrpc::error(&id, code::INTERNAL_ERROR, &advice, None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_too_large_for_the_link_is_the_runtimes_tool_error_result() {
        let big = json!({"jsonrpc": "2.0", "id": 4, "result": {}});
        let m = too_large(&big, Some("tools/call"), RELAY_FRAME_MAX_BYTES + 1);
        let e = ToolError::limit(format!(
            "the call completed, but the result ({} bytes) is larger than the relay link carries \
             ({RELAY_FRAME_MAX_BYTES} bytes); ask for less (a smaller max_bytes, a narrower range or path)",
            RELAY_FRAME_MAX_BYTES + 1
        ))
        .with_side_effects();
        // The shape rmcp gives the runtime's own tool errors: the tool error's JSON text, and
        // `resultType` besides `isError`.
        let mut expected = e.call_result();
        expected["resultType"] = json!("complete");
        assert_eq!(m["result"], expected);
        let other = too_large(&big, Some("tools/list"), 9);
        assert_eq!(other["error"]["code"], code::INTERNAL_ERROR);
    }
}
