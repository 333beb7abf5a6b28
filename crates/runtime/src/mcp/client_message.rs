//! Client messages read into rmcp's types by what their head already says.
//!
//! rmcp reads a client message by trying its shapes in turn: its message type buffers the
//! message twice to learn whether it is a request, a notification or a response, and its request
//! type tries every method's variant until one reads (`tools/call` is the fourteenth). A
//! transport has read the message's head ([`Head`]) already, so [`client_message`] reads a plain
//! request or notification straight into its variant, and the frequent methods as their own
//! request type. Whatever does not read so takes rmcp's own reading, its checks and its error:
//! the result is the same message either way, only cheaper.

use protocol::head::{Head, Kind};
use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientNotification, ClientRequest, GetTaskRequest,
    JsonRpcMessage, JsonRpcNotification, JsonRpcRequest, ListToolsRequest, ReadResourceRequest,
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;

/// `message` (whose head is `head`) as rmcp's client message. A request, or a notification
/// without an `id` member, that has no `result` or `error` member is read straight into its
/// variant: rmcp's message type would buffer it twice to learn the shape the head already
/// gives, and its request type tries each method's variant in turn. The frequent methods are
/// read as their own request type; a request that does not read so, and any other message,
/// takes rmcp's own checks (and their error).
///
/// # Errors
/// The message is not a valid JSON-RPC 2.0 client message for rmcp (the error says why).
pub fn client_message(
    head: &Head,
    message: Value,
) -> Result<ClientJsonRpcMessage, serde_json::Error> {
    let plain = !head.has_result() && !head.has_error();
    match head.kind() {
        Kind::Request if plain => {
            let known = match head.method() {
                Some("tools/call") => request_as::<CallToolRequest>(&message),
                Some("tools/list") => request_as::<ListToolsRequest>(&message),
                Some("tasks/get") => request_as::<GetTaskRequest>(&message),
                Some("resources/read") => request_as::<ReadResourceRequest>(&message),
                _ => None,
            };
            match known {
                Some(r) => Ok(JsonRpcMessage::Request(r)),
                None => serde_json::from_value::<JsonRpcRequest<ClientRequest>>(message)
                    .map(JsonRpcMessage::Request),
            }
        }
        Kind::Notification if plain && head.id_member().is_none() => {
            serde_json::from_value::<JsonRpcNotification<ClientNotification>>(message)
                .map(JsonRpcMessage::Notification)
        }
        _ => serde_json::from_value(message),
    }
}

/// `message` read as a request of type `R` (one variant of rmcp's client request), or `None`
/// when it does not read as one.
fn request_as<R>(message: &Value) -> Option<JsonRpcRequest<ClientRequest>>
where
    R: DeserializeOwned + Into<ClientRequest>,
{
    let r = JsonRpcRequest::<R>::deserialize(message).ok()?;
    Some(JsonRpcRequest {
        jsonrpc: r.jsonrpc,
        id: r.id,
        request: r.request.into(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(m: Value) -> Result<ClientJsonRpcMessage, serde_json::Error> {
        client_message(&Head::of(&m), m)
    }

    /// What rmcp's own reading makes of `m`, as JSON.
    fn by_rmcp(m: &Value) -> Value {
        let msg: ClientJsonRpcMessage = serde_json::from_value(m.clone()).unwrap();
        serde_json::to_value(msg).unwrap()
    }

    // The frequent methods read as their own type give the message rmcp's reading gives,
    // `_meta` (progress token, 2026-07-28 fields) and task included.
    #[test]
    fn a_request_read_by_its_method_is_the_message_rmcp_reads() {
        let meta = json!({
            "progressToken": "p1",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        for (method, params) in [
            (
                "tools/call",
                json!({"name": "read_file", "arguments": {"path": "a"}, "_meta": meta}),
            ),
            ("tools/call", json!({"name": "x", "task": {"ttl": 1000}})),
            ("tools/list", json!({"cursor": "c", "_meta": meta})),
            ("tasks/get", json!({"taskId": "t1"})),
            ("resources/read", json!({"uri": "file:///a", "_meta": meta})),
            ("ping", json!({})),
            ("prompts/list", json!({})),
        ] {
            let m = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
            let ours = serde_json::to_value(read(m.clone()).unwrap()).unwrap();
            assert_eq!(ours, by_rmcp(&m), "{m}");
        }
        let n = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
        assert_eq!(
            serde_json::to_value(read(n.clone()).unwrap()).unwrap(),
            by_rmcp(&n)
        );
    }

    // Messages rmcp refuses stay refused: a stray `result`, another `jsonrpc`, a request whose
    // params do not fit its method.
    #[test]
    fn what_rmcp_refuses_stays_refused() {
        for m in [
            json!({"jsonrpc": "2.0", "id": 4, "method": "ping", "result": {}}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {}, "error": {"code": 1, "message": "x"}}),
            json!({"jsonrpc": "1.0", "id": 5, "method": "tools/call", "params": {"name": "x"}}),
        ] {
            assert!(read(m.clone()).is_err(), "{m}");
            assert!(
                serde_json::from_value::<ClientJsonRpcMessage>(m.clone()).is_err(),
                "{m}"
            );
        }
        // A tools/call without a name is not a call; rmcp reads it as some other request or
        // refuses it, and so do we.
        let odd =
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"arguments": 1}});
        match serde_json::from_value::<ClientJsonRpcMessage>(odd.clone()) {
            Ok(m) => assert_eq!(
                serde_json::to_value(read(odd).unwrap()).unwrap(),
                serde_json::to_value(m).unwrap()
            ),
            Err(_) => assert!(read(odd).is_err()),
        }
        let response = json!({"jsonrpc": "2.0", "id": 6, "result": {}});
        assert!(matches!(read(response), Ok(JsonRpcMessage::Response(_))));
    }
}
