//! Rewriting a message on its way from one peer to another, where what it names must change
//! (the daemon's era bridge carries 2026-07-28 requests to a handshake-era child over one
//! pooled connection, so ids and progress tokens are renumbered there and restored on the way
//! back). Reading what to rewrite is a [`Head`](super::Head)'s job; writing it is this file's,
//! so no other code edits a message's members by hand. The id itself is written by
//! [`super::set_id`].
//!
//! Rules:
//! - Each operation changes only the member it names and leaves a message of another shape
//!   (not an object, `params` or `_meta` not an object) as it is.
//! - A progress token lives in a request's `params._meta.progressToken` (MCP Basic › Utilities ›
//!   Progress) and in a `notifications/progress`'s `params.progressToken`; an operation that
//!   replaces one returns what it replaced, for the way back.
//! - The per-request fields of MCP 2026-07-28 are the `_meta` keys under
//!   [`META_PREFIX`] (Basic § `_meta`); a handshake-era server is not sent them, and a `_meta`
//!   left empty goes too.

use serde_json::{Map, Value};

use crate::mcp::META_PREFIX;

/// The `_meta` member of a progress token.
const PROGRESS_TOKEN: &str = "progressToken";

/// `params._meta` of `message`, when `params` and `_meta` are objects.
fn meta_mut(message: &mut Value) -> Option<&mut Map<String, Value>> {
    message
        .as_object_mut()?
        .get_mut("params")?
        .as_object_mut()?
        .get_mut("_meta")?
        .as_object_mut()
}

/// Replaces the progress token of request `message` (`params._meta.progressToken`) by `token`,
/// when it has one; returns the token it had. Nothing else of `_meta` changes.
pub fn replace_progress_token(message: &mut Value, token: Value) -> Option<Value> {
    let slot = meta_mut(message)?.get_mut(PROGRESS_TOKEN)?;
    Some(std::mem::replace(slot, token))
}

/// Removes the MCP 2026-07-28 per-request `_meta` keys of request `message` (those under
/// [`META_PREFIX`]; `_meta` itself when nothing is left) and replaces its progress token by
/// `token`, when it has one; returns the token it had.
pub fn strip_modern_meta(message: &mut Value, token: Value) -> Option<Value> {
    let params = message
        .as_object_mut()?
        .get_mut("params")?
        .as_object_mut()?;
    let meta = params.get_mut("_meta")?.as_object_mut()?;
    meta.retain(|k, _| !k.starts_with(META_PREFIX));
    let original = meta
        .get_mut(PROGRESS_TOKEN)
        .map(|slot| std::mem::replace(slot, token));
    if meta.is_empty() {
        params.remove("_meta");
    }
    original
}

/// Sets the token a `notifications/progress` reports on (`params.progressToken`) to `token`,
/// when `params` is an object.
pub fn set_progress_of(message: &mut Value, token: Value) {
    if let Some(params) = message
        .as_object_mut()
        .and_then(|m| m.get_mut("params"))
        .and_then(Value::as_object_mut)
    {
        params.insert(PROGRESS_TOKEN.to_owned(), token);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        head::Head,
        mcp::{META_CLIENT_INFO, META_PROTOCOL_VERSION, MODERN_VERSION},
    };

    #[test]
    fn a_progress_token_is_replaced_and_the_rest_of_meta_kept() {
        let meta = json!({META_PROTOCOL_VERSION: MODERN_VERSION, "progressToken": 7, "x": 1});
        let mut m = json!({"id": 1, "method": "tasks/get", "params": {"_meta": meta}});
        assert_eq!(
            replace_progress_token(&mut m, json!("mb-3")),
            Some(json!(7))
        );
        assert_eq!(
            m["params"]["_meta"],
            json!({META_PROTOCOL_VERSION: MODERN_VERSION, "progressToken": "mb-3", "x": 1})
        );
        assert_eq!(Head::of(&m).progress_token(), Some(&json!("mb-3")));
        // No token: nothing is added.
        let mut m = json!({"id": 1, "method": "x", "params": {"_meta": {"x": 1}}});
        assert_eq!(replace_progress_token(&mut m, json!("t")), None);
        assert_eq!(m["params"]["_meta"], json!({"x": 1}));
    }

    #[test]
    fn modern_meta_keys_are_stripped_and_an_empty_meta_goes() {
        let mut m = json!({"id": 1, "method": "tools/call", "params": {"name": "x", "_meta": {
            META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_INFO: {},
            "progressToken": 7, "other": true}}});
        assert_eq!(strip_modern_meta(&mut m, json!("mb-3")), Some(json!(7)));
        assert_eq!(
            m["params"]["_meta"],
            json!({"progressToken": "mb-3", "other": true})
        );
        let mut m = json!({"id": 1, "method": "tools/list",
            "params": {"_meta": {META_PROTOCOL_VERSION: MODERN_VERSION}}});
        assert_eq!(strip_modern_meta(&mut m, json!("t")), None);
        assert_eq!(m["params"], json!({}));
    }

    #[test]
    fn a_progress_notification_gets_its_token_back() {
        let mut n = json!({"method": "notifications/progress",
            "params": {"progressToken": "mb-3", "progress": 1}});
        set_progress_of(&mut n, json!(7));
        assert_eq!(n["params"], json!({"progressToken": 7, "progress": 1}));
        assert_eq!(Head::of(&n).progress_of(), Some(&json!(7)));
    }

    #[test]
    fn messages_of_other_shapes_are_left_alone() {
        for shape in [
            json!([1]),
            json!({"id": 1}),
            json!({"id": 1, "params": [1]}),
            json!({"id": 1, "params": {"_meta": "x"}}),
        ] {
            let mut m = shape.clone();
            assert_eq!(replace_progress_token(&mut m, json!(1)), None);
            assert_eq!(strip_modern_meta(&mut m, json!(1)), None);
            assert_eq!(m, shape);
        }
        let mut m = json!({"method": "notifications/progress", "params": "x"});
        set_progress_of(&mut m, json!(1));
        assert_eq!(m["params"], "x");
    }
}
