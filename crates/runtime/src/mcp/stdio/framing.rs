//! Framing of the stdio transport: one input line → one [`Frame`] (a message to deliver, a
//! line to skip, or the JSON-RPC error that answers it), by the rules of the module docs of
//! [`super`]. A line's head is read once, by `protocol::head`, which also decides its era and
//! checks the per-request `_meta` of a 2026-07-28 request. What may be delivered when (the
//! handshake gate, ids in flight) is decided by the reader in [`super`].

use std::io;

use protocol::{
    head::{Carrier, Era, Head, Shape, is_id, meta::check_meta},
    mcp::ALL_VERSIONS,
};
use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

pub(super) fn is_discover(msg: &ClientJsonRpcMessage) -> bool {
    matches!(
        msg,
        rmcp::model::JsonRpcMessage::Request(r)
            if matches!(r.request, rmcp::model::ClientRequest::DiscoverRequest(_))
    )
}

/// What one input line turned out to be.
#[derive(Debug)]
pub(super) enum Frame {
    Skip,
    Deliver(Box<ClientJsonRpcMessage>, Kind),
    Reject(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Initialize,
    PreInitRequest,
    /// A 2026-07-28 request: `server/discover`, or one carrying the per-request `_meta` fields.
    Stateless,
    Request,
    Other,
}

/// Reads one `\n`-terminated line into `buf` (without the `\n`). Returns `None` at end of input,
/// `Some(true)` when the line was longer than `max` (its bytes are discarded).
pub(super) async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<bool>> {
    let mut line = LineAssembly::default();
    loop {
        let chunk = input.fill_buf().await?;
        let (take, result) = line.take(chunk, buf, max);
        input.consume(take);
        if let Some(r) = result {
            return Ok(r);
        }
    }
}

/// One line being read from a buffered input, chunk by chunk: what both the async reader
/// (`read_bounded_line`) and a blocking one (the stdio supervisor's stdin thread) do with a
/// chunk, so both bound a line the same way.
#[derive(Debug, Default)]
pub struct LineAssembly {
    over: bool,
    read_any: bool,
}

impl LineAssembly {
    /// Takes what belongs to the line from `chunk` (empty: end of input) into `buf`, dropping
    /// it once the line is longer than `max`. Returns how many bytes to consume and, when the
    /// line is complete, the outcome: `None` at end of input with nothing read, `Some(true)`
    /// for a line over `max`, `Some(false)` for a line in `buf`.
    pub fn take(
        &mut self,
        chunk: &[u8],
        buf: &mut Vec<u8>,
        max: usize,
    ) -> (usize, Option<Option<bool>>) {
        if chunk.is_empty() {
            return (0, Some(self.read_any.then_some(self.over)));
        }
        self.read_any = true;
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let data = &chunk[..if done { take - 1 } else { take }];
        if !self.over {
            if buf.len() + data.len() > max {
                self.over = true;
                buf.clear();
            } else {
                buf.extend_from_slice(data);
            }
        }
        (take, done.then_some(Some(self.over)))
    }
}

/// What `line` is (module docs of [`super`]). `in_session`: an `initialize` was delivered on
/// this connection, so a request whose `_meta` names a handshake-era version belongs to that
/// session ([`Head::era`]); before it, such a request is of the 2026-07-28 era and refused
/// with the reason. A 2026-07-28 request other than `initialize` and `ping` (which the
/// handshake gate serves) has its `_meta` checked here ([`check_meta`], the versions this
/// server serves listed on an unsupported one).
pub(super) fn classify(line: &[u8], in_session: bool) -> Frame {
    let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
    if trimmed.iter().all(u8::is_ascii_whitespace) {
        return Frame::Skip;
    }
    let value: Value = match serde_json::from_slice(trimmed) {
        Ok(v) => v,
        Err(e) => {
            return Frame::Reject(error_line(
                &Value::Null,
                -32700,
                &format!("parse error: {e}"),
            ));
        }
    };
    let head = Head::of(&value);
    if head.is_batch() {
        return Frame::Reject(error_line(
            &Value::Null,
            -32600,
            "JSON-RPC batches are not supported: send one message per line",
        ));
    }
    if !head.is_object() {
        return Frame::Reject(error_line(
            &Value::Null,
            -32600,
            "a JSON-RPC message must be an object",
        ));
    }
    let id = match head.id_member() {
        Some(v) if is_id(v) => v.clone(),
        Some(_) => {
            return Frame::Reject(error_line(
                &Value::Null,
                -32600,
                "id must be a string or an integer",
            ));
        }
        None => Value::Null,
    };
    if !head.is_json_rpc() {
        return Frame::Reject(error_line(&id, -32600, "jsonrpc must be \"2.0\""));
    }
    if head.params_shape() == Some(Shape::Other) {
        if id.is_null() {
            return Frame::Skip;
        }
        return Frame::Reject(error_line(&id, -32602, "params must be an object"));
    }
    let carrier = Carrier {
        version_header: None,
        in_session,
    };
    let kind = match (head.method(), id.is_null()) {
        (Some("initialize"), false) => Kind::Initialize,
        (Some("ping"), false) => Kind::PreInitRequest,
        (Some(_), false) if head.era(carrier) == Era::Modern => Kind::Stateless,
        (Some(_), false) => Kind::Request,
        _ => Kind::Other,
    };
    if kind == Kind::Stateless
        && let Err(refusal) = check_meta(&head, &ALL_VERSIONS)
    {
        return Frame::Reject(refusal.answer(&id).to_string());
    }
    match crate::mcp::client_message::client_message(&head, value) {
        Ok(msg) => Frame::Deliver(Box::new(msg), kind),
        Err(e) if !id.is_null() => Frame::Reject(error_line(
            &id,
            -32600,
            &format!("not a valid JSON-RPC message: {e}"),
        )),
        Err(e) => {
            tracing::debug!(error = %e, "dropping an invalid notification");
            Frame::Skip
        }
    }
}

pub(super) fn request_id(msg: &ClientJsonRpcMessage) -> Value {
    match msg {
        rmcp::model::JsonRpcMessage::Request(r) => r.id.clone().into_json_value(),
        _ => Value::Null,
    }
}

/// The id a `notifications/cancelled` names, if `msg` is one.
pub(super) fn cancelled_request(msg: &ClientJsonRpcMessage) -> Option<Value> {
    match msg {
        rmcp::model::JsonRpcMessage::Notification(n) => match &n.notification {
            rmcp::model::ClientNotification::CancelledNotification(c) => c
                .params
                .request_id
                .clone()
                .map(rmcp::model::NumberOrString::into_json_value),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    fn reject_code(line: &str) -> (i64, Value) {
        match classify(line.as_bytes(), false) {
            Frame::Reject(raw) => {
                let v: Value = serde_json::from_str(&raw).unwrap();
                (v["error"]["code"].as_i64().unwrap(), v["id"].clone())
            }
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn framing_errors_get_json_rpc_errors() {
        assert_eq!(reject_code("{not json"), (-32700, Value::Null));
        assert_eq!(reject_code("[1,2]"), (-32600, Value::Null));
        assert_eq!(reject_code("42"), (-32600, Value::Null));
        assert_eq!(
            reject_code(r#"{"id":7,"method":"ping"}"#),
            (-32600, json!(7))
        );
        assert_eq!(
            reject_code(r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":[1]}"#),
            (-32602, json!("a"))
        );
        assert_eq!(
            reject_code(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            (-32600, Value::Null)
        );
    }

    #[test]
    fn valid_messages_are_delivered() {
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#, false),
            Frame::Deliver(_, Kind::Initialize)
        ));
        assert!(matches!(
            classify(
                br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                false
            ),
            Frame::Deliver(_, Kind::Other)
        ));
        assert!(matches!(classify(b"   ", false), Frame::Skip));
    }

    /// The per-request `_meta` of a 2026-07-28 request is checked by `protocol::head`'s rules:
    /// the relay and the era bridge refuse the same requests with the same errors.
    #[test]
    fn modern_requests_have_their_meta_checked_by_the_head_rules() {
        let line = |method: &str, meta: Value| {
            json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": {"_meta": meta}})
                .to_string()
        };
        let caps = "io.modelcontextprotocol/clientCapabilities";
        let version = "io.modelcontextprotocol/protocolVersion";
        let good = line("tools/list", json!({version: "2026-07-28", caps: {}}));
        for in_session in [false, true] {
            assert!(matches!(
                classify(good.as_bytes(), in_session),
                Frame::Deliver(_, Kind::Stateless)
            ));
        }
        let refused = |line: &str, in_session: bool| match classify(line.as_bytes(), in_session) {
            Frame::Reject(raw) => serde_json::from_str::<Value>(&raw).unwrap(),
            other => panic!("{line}: {other:?}"),
        };
        // A required field missing, or of the wrong type: -32602.
        for meta in [
            json!({version: "2026-07-28"}),
            json!({version: 2026, caps: {}}),
            json!({version: "2026-07-28", caps: {}, "io.modelcontextprotocol/clientInfo": 1}),
        ] {
            let e = refused(&line("tools/list", meta), false);
            assert_eq!(
                (e["id"].clone(), e["error"]["code"].clone()),
                (json!(3), json!(-32602))
            );
        }
        let e = refused(
            r#"{"jsonrpc":"2.0","id":4,"method":"server/discover"}"#,
            false,
        );
        assert_eq!(e["error"]["code"], -32602, "{e}");
        // A version not served: -32022, naming the versions served.
        let e = refused(
            &line("tools/list", json!({version: "2099-01-01", caps: {}})),
            true,
        );
        assert_eq!(e["error"]["code"], -32022, "{e}");
        assert_eq!(e["error"]["data"]["requested"], "2099-01-01");
        assert_eq!(e["error"]["data"]["supported"], json!(ALL_VERSIONS));
        // A handshake-era version: told to initialize before a session, served inside one.
        let old = line("tools/list", json!({version: "2025-11-25", caps: {}}));
        let e = refused(&old, false);
        assert_eq!(e["error"]["code"], -32022, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("initialize"),
            "{e}"
        );
        assert!(matches!(
            classify(old.as_bytes(), true),
            Frame::Deliver(_, Kind::Request)
        ));
        // `initialize` and `ping` are the handshake gate's, whatever their `_meta`.
        assert!(matches!(
            classify(
                line("ping", json!({version: "2026-07-28"})).as_bytes(),
                false
            ),
            Frame::Deliver(_, Kind::PreInitRequest)
        ));
    }

    #[tokio::test]
    async fn long_lines_are_skipped_whole() {
        let data = format!("{}\n{{\"a\":1}}\n", "x".repeat(100));
        let mut r = BufReader::with_capacity(16, data.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            Some(true)
        );
        buf.clear();
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 50).await.unwrap(),
            Some(false)
        );
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert_eq!(read_bounded_line(&mut r, &mut buf, 50).await.unwrap(), None);
    }
}
