//! Borrowed reads of one member of a parsed message, for a hop that needs one answer about a
//! message it holds as a [`Value`] and has no [`Head`](super::Head) at hand: nothing is cloned
//! and nothing else is read. Each answers as [`Head::of`](super::Head::of) would (the same
//! rules, module docs of `head`), so a peek and a head never disagree; a hop that needs more
//! than one of them reads a head.

use serde_json::Value;

/// The method of `message`, when it has a string `method` ([`Head::method`](super::Head::method)).
pub fn method(message: &Value) -> Option<&str> {
    message.get("method").and_then(Value::as_str)
}

/// Whether `message` has a `method` member, of any type
/// ([`Head::has_method`](super::Head::has_method)).
pub fn has_method(message: &Value) -> bool {
    message.get("method").is_some()
}

/// The id of `message`, when present and not null ([`Head::id`](super::Head::id)).
pub fn id(message: &Value) -> Option<&Value> {
    id_member(message).filter(|i| !i.is_null())
}

/// The `id` member of `message` as it came, `null` included
/// ([`Head::id_member`](super::Head::id_member)).
pub fn id_member(message: &Value) -> Option<&Value> {
    message.get("id")
}

/// Whether `message` answers a request: no `method` member, and a `result` or an `error`
/// ([`Head::is_response`](super::Head::is_response)).
pub fn is_response(message: &Value) -> bool {
    message.as_object().is_some_and(|m| {
        !m.contains_key("method") && (m.contains_key("result") || m.contains_key("error"))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::head::Head;

    fn samples() -> Vec<Value> {
        vec![
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}),
            json!({"jsonrpc": "2.0", "id": "a", "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "method": 7, "id": 2}),
            json!({"jsonrpc": "2.0", "id": 3, "result": {}}),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse"}}),
            json!({"jsonrpc": "2.0", "id": 4}),
            json!({"jsonrpc": "2.0"}),
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
            json!("not a message"),
            Value::Null,
        ]
    }

    #[test]
    fn a_peek_answers_as_the_head_of_the_same_message() {
        for m in samples() {
            let h = Head::of(&m);
            assert_eq!(method(&m), h.method(), "{m}");
            assert_eq!(has_method(&m), h.has_method(), "{m}");
            assert_eq!(id(&m), h.id(), "{m}");
            assert_eq!(id_member(&m), h.id_member(), "{m}");
            assert_eq!(is_response(&m), h.is_response(), "{m}");
        }
    }

    #[test]
    fn a_null_id_is_a_member_but_no_id() {
        let m = json!({"jsonrpc": "2.0", "id": null, "error": {"code": 1, "message": "x"}});
        assert_eq!(id_member(&m), Some(&Value::Null));
        assert_eq!(id(&m), None);
        assert!(is_response(&m));
        let n = json!({"jsonrpc": "2.0", "id": 5, "method": 9});
        assert_eq!(
            method(&n),
            None,
            "a method that is not a string is no method"
        );
        assert!(has_method(&n), "but it is a method member");
        assert!(!is_response(&n));
    }
}
