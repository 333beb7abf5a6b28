//! A POST body to the one JSON-RPC message it carries, without letting a large body hold the
//! relay's async workers (measured: 1,000 `initialize` requests of 8 MB from one token, parsed
//! whole on the two workers, took a legitimate client's `ping` p99 through the relay to 88–145
//! ms, and ten 8 MB bodies of small members to 5.4 s and 557 MiB).
//!
//! - A body of at most [`INLINE_PARSE_MAX_BYTES`] is parsed where it arrived (the common case:
//!   parsing it costs microseconds).
//! - A larger one is parsed on tokio's blocking pool, at most [`large_parses`] at once across the
//!   process; a request waits for its turn without holding a worker. The blocking pool's threads
//!   are the ones the CPUs share with the workers, so bounding them leaves CPU to the workers.
//! - An `initialize` larger than [`INITIALIZE_BODY_MAX_BYTES`] is refused from a scan that
//!   builds nothing (its `method` and `id`, the rest skipped), before the message is parsed (or
//!   after it, when a duplicated member keeps the scan from reading it):
//!   a session keeps at most [`SESSION_INITIALIZE_MAX_BYTES`] of it
//!   ([`crate::hub::kept_initialize`]), so such a body is refused whatever it holds.

use std::sync::LazyLock;

use axum::{body::Bytes, http::StatusCode, response::Response};
use serde::Deserialize;
use serde_json::{Value, value::RawValue};
use tokio::sync::Semaphore;

use crate::limits::{
    INITIALIZE_BODY_MAX_BYTES, INLINE_PARSE_MAX_BYTES, SESSION_INITIALIZE_MAX_BYTES,
};
use protocol::{head::Head, jsonrpc, jsonrpc::code};

use super::rpc_error;

/// How many bodies larger than [`INLINE_PARSE_MAX_BYTES`] are parsed at once in this process:
/// half the CPUs tokio's runtime sees (`std::thread::available_parallelism`), at least 1.
pub(crate) fn large_parses() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

static LARGE_PARSES: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(large_parses()));

/// Why a body carries no acceptable message: the response to send (status, JSON-RPC error).
type Refused = Box<Response>;

/// The message of a POST body whose `Content-Type` was checked, with its head (read once, here):
/// a JSON object with `"jsonrpc": "2.0"` and, for a request, a string or integer id
/// ([`Head::check_envelope`]).
///
/// # Errors
/// A response, in this order of checks:
/// - 400, [`code::INVALID_PARAMS`] with the request's id: an `initialize` of more than
///   [`INITIALIZE_BODY_MAX_BYTES`];
/// - 400, [`code::PARSE_ERROR`], id null: not JSON;
/// - 400, [`code::INVALID_REQUEST`], id null: not a JSON-RPC 2.0 message, a batch, or a request
///   whose id is neither a string nor an integer (MCP Basic § Requests: "Requests MUST include a
///   string or integer ID", which "MUST NOT be null").
pub(crate) async fn message(body: Bytes) -> Result<(Head, Value), Refused> {
    if body.len() <= INLINE_PARSE_MAX_BYTES {
        return parse(&body);
    }
    // The semaphore is never closed, so acquiring fails only if it were; then parse anyway.
    let _turn = LARGE_PARSES.acquire().await;
    match tokio::task::spawn_blocking(move || large(&body)).await {
        Ok(parsed) => parsed,
        // The closure does not panic on any input; a join error is a runtime shutting down.
        Err(e) => Err(Box::new(rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::Null,
            code::INTERNAL_ERROR,
            &format!("the relay is shutting down: {e}"),
        ))),
    }
}

/// A body over [`INLINE_PARSE_MAX_BYTES`]: refused at once when it is an oversized `initialize`,
/// parsed otherwise.
fn large(body: &[u8]) -> Result<(Head, Value), Refused> {
    /// What the scan keeps of a message: nothing is built for the other members.
    #[derive(Deserialize)]
    struct Head<'a> {
        jsonrpc: Option<String>,
        method: Option<String>,
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    let too_large = |id: Value| {
        Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_PARAMS,
            &format!(
                "initialize: the request takes {} bytes; an initialize may take at most {INITIALIZE_BODY_MAX_BYTES} (a session keeps at most {SESSION_INITIALIZE_MAX_BYTES} of it)",
                body.len()
            ),
        ))
    };
    if body.len() <= INITIALIZE_BODY_MAX_BYTES {
        return parse(body);
    }
    // A body the scan cannot read (not an object, a duplicate member, not JSON) is left to the
    // parse: its error is the one to report, and what it parsed is checked again below.
    if let Ok(head) = serde_json::from_slice::<Head<'_>>(body)
        && head.jsonrpc.as_deref() == Some(jsonrpc::VERSION)
        && head.method.as_deref() == Some("initialize")
    {
        let id = head
            .id
            .filter(|raw| raw.get().len() <= 256)
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
            .unwrap_or(Value::Null);
        return Err(too_large(id));
    }
    let (head, message) = parse(body)?;
    // A duplicated member makes the scan fail, and the parse keeps the last of each: the
    // message it built is an `initialize` as large as the body.
    if head.is("initialize") {
        return Err(too_large(head.reply_id()));
    }
    Ok((head, message))
}

fn parse(body: &[u8]) -> Result<(Head, Value), Refused> {
    let message: Value = serde_json::from_slice(body).map_err(|e| {
        Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            code::PARSE_ERROR,
            &format!("parse error: {e}"),
        ))
    })?;
    let head = Head::of(&message);
    head.check_envelope().map_err(|e| {
        Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            code::INVALID_REQUEST,
            &e.to_string(),
        ))
    })?;
    Ok((head, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An 8 MB `initialize` whose `capabilities` hold ~800,000 small members, the body of the
    /// abuse benchmark's `init-wide`.
    fn wide_initialize(method: &str) -> Vec<u8> {
        let mut b = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{{"protocolVersion":"2025-11-25","clientInfo":{{"name":"wide","version":"1"}},"capabilities":{{"#
        )
        .into_bytes();
        let mut i = 0u32;
        while b.len() < 8_000_000 {
            if i > 0 {
                b.push(b',');
            }
            b.extend_from_slice(format!(r#""x{i}":0"#).as_bytes());
            i += 1;
        }
        b.extend_from_slice(b"}}}");
        b
    }

    async fn status_and_body(r: Refused) -> (StatusCode, Value) {
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    /// Regression (the abuse benchmark): a large body was parsed inside the request's
    /// task, so the worker thread ran nothing else until the parse ended. On a runtime with one
    /// thread, a task that only counts its turns got none while an 8 MB body was being parsed;
    /// now the parse runs on the blocking pool and the thread keeps running other tasks.
    #[tokio::test(flavor = "current_thread")]
    async fn a_large_body_is_parsed_off_the_worker_that_received_it() {
        use std::sync::{
            Arc,
            atomic::{AtomicU64, Ordering},
        };
        let turns = Arc::new(AtomicU64::new(0));
        let seen = turns.clone();
        let body = Bytes::from(wide_initialize("tools/call"));
        // Spawned first, so polled first: parsed inline, it ends within that one poll, before
        // the counting task has run at all.
        let parse = tokio::spawn(async move {
            let parsed = message(body).await;
            (parsed, seen.load(Ordering::Relaxed))
        });
        let counting = tokio::spawn(async move {
            loop {
                turns.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        let (parsed, turns_meanwhile) = parse.await.unwrap();
        counting.abort();
        let (_, parsed) = parsed.unwrap();
        assert_eq!(parsed["method"], "tools/call");
        assert!(parsed["params"]["capabilities"].as_object().unwrap().len() > 500_000);
        assert!(
            turns_meanwhile > 0,
            "no other task ran on the runtime's only thread while an 8 MB body was parsed"
        );
    }

    /// An `initialize` over [`INITIALIZE_BODY_MAX_BYTES`] is refused with its id, whatever it
    /// holds; one just under it is parsed (and left to `kept_initialize`'s exact check).
    #[tokio::test]
    async fn an_oversized_initialize_is_refused_from_its_head() {
        let (status, body) = status_and_body(
            message(Bytes::from(wide_initialize("initialize")))
                .await
                .unwrap_err(),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["id"], 7);
        assert_eq!(body["error"]["code"], code::INVALID_PARAMS);
        let why = body["error"]["message"].as_str().unwrap();
        assert!(
            why.contains(&format!("at most {INITIALIZE_BODY_MAX_BYTES}")),
            "{why}"
        );

        let at = |len: usize| {
            let head = r#"{"jsonrpc":"2.0","id":"a","method":"initialize","params":{"protocolVersion":"2025-11-25","_meta":{"pad":""#;
            let pad = "x".repeat(len - head.len() - 4);
            Bytes::from(format!("{head}{pad}\"}}}}}}"))
        };
        let just_over = at(INITIALIZE_BODY_MAX_BYTES + 1);
        assert_eq!(just_over.len(), INITIALIZE_BODY_MAX_BYTES + 1);
        let (_, body) = status_and_body(message(just_over).await.unwrap_err()).await;
        assert_eq!(
            (body["id"].clone(), body["error"]["code"].clone()),
            ("a".into(), code::INVALID_PARAMS.into())
        );
        let (_, at_most) = message(at(INITIALIZE_BODY_MAX_BYTES)).await.unwrap();
        assert_eq!(at_most["method"], "initialize");
    }

    /// A duplicated `id`, `method` or `jsonrpc` member makes the head scan fail, so an 8 MB
    /// `initialize` is parsed; it is refused after the parse too, with the id the message ends up
    /// with (the last one), and opens no session.
    #[tokio::test]
    async fn an_oversized_initialize_with_duplicated_members_is_refused_after_the_parse() {
        let pad = "a".repeat(200_000);
        for head in [
            r#"{"jsonrpc":"2.0","id":5,"id":5,"method":"initialize""#,
            r#"{"jsonrpc":"2.0","id":5,"method":"initialize","method":"initialize""#,
            r#"{"jsonrpc":"2.0","id":5,"method":"ping","method":"initialize""#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":5,"method":"initialize""#,
        ] {
            let body =
                format!(r#"{head},"params":{{"protocolVersion":"2025-06-18","_pad":"{pad}"}}}}"#);
            let (status, reply) =
                status_and_body(message(Bytes::from(body)).await.unwrap_err()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{head}");
            assert_eq!(reply["error"]["code"], code::INVALID_PARAMS, "{head}");
            assert_eq!(reply["id"], 5, "{head}");
        }
    }

    /// A large body that is not JSON, or not JSON-RPC, gets the same errors as a small one.
    #[tokio::test]
    async fn a_large_body_is_refused_as_a_small_one_is() {
        let mut broken = wide_initialize("initialize");
        broken.truncate(broken.len() - 1);
        let (status, body) = status_and_body(message(Bytes::from(broken)).await.unwrap_err()).await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, code::PARSE_ERROR.into())
        );
        let not_rpc = format!(
            r#"{{"jsonrpc":"1.0","method":"initialize","pad":"{}"}}"#,
            "y".repeat(INITIALIZE_BODY_MAX_BYTES)
        );
        let (status, body) =
            status_and_body(message(Bytes::from(not_rpc)).await.unwrap_err()).await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, code::INVALID_REQUEST.into())
        );
    }
}
