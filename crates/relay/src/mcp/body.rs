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
//!   A body spilled to disk ([`crate::spill`]) is read back whole there, in its turn, and parsed
//!   as one received in memory (so a few at once hold their bytes in memory again); a file
//!   that cannot be read back is a 503 with `Retry-After`, as a body that could not be spilled.
//! - An `initialize` larger than [`INITIALIZE_BODY_MAX_BYTES`] is refused from a scan that
//!   builds nothing (its `method` and `id`, the rest skipped), before the message is parsed (or
//!   after it, when a duplicated member keeps the scan from reading it):
//!   a session keeps at most [`SESSION_INITIALIZE_MAX_BYTES`] of it
//!   ([`crate::hub::kept_initialize`]), so such a body is refused whatever it holds.

use std::sync::LazyLock;

use axum::{http::StatusCode, response::Response};
use serde::Deserialize;
use serde_json::{Value, value::RawValue};
use tokio::sync::Semaphore;

use crate::{
    limits::{INITIALIZE_BODY_MAX_BYTES, INLINE_PARSE_MAX_BYTES, SESSION_INITIALIZE_MAX_BYTES},
    spill::Received,
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
/// - 503 with `Retry-After`: a spilled body whose file cannot be read back;
/// - 400, [`code::INVALID_PARAMS`] with the request's id: an `initialize` of more than
///   [`INITIALIZE_BODY_MAX_BYTES`];
/// - 400, [`code::PARSE_ERROR`], id null: not JSON;
/// - 400, [`code::INVALID_REQUEST`], id null: not a JSON-RPC 2.0 message, a batch, or a request
///   whose id is neither a string nor an integer (MCP Basic § Requests: "Requests MUST include a
///   string or integer ID", which "MUST NOT be null").
pub(crate) async fn message(body: Received) -> Result<(Head, Value), Refused> {
    if let Received::Memory(b) = &body
        && b.len() <= INLINE_PARSE_MAX_BYTES
    {
        return parse(b);
    }
    // The semaphore is never closed, so acquiring fails only if it were; then parse anyway.
    let _turn = LARGE_PARSES.acquire().await;
    let parsed = tokio::task::spawn_blocking(move || match body {
        Received::Memory(b) => large(&b),
        Received::Spilled(s) => match s.read_back() {
            Ok(b) => large(&b),
            Err(e) => {
                tracing::warn!(error = %e, "a spilled MCP request body could not be read back; answered 503");
                Err(Box::new(super::spill_failed()))
            }
        },
    });
    match parsed.await {
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
    use axum::body::Bytes;

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
            let parsed = message(body.into()).await;
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
            message(Bytes::from(wide_initialize("initialize")).into())
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
        let (_, body) = status_and_body(message(just_over.into()).await.unwrap_err()).await;
        assert_eq!(
            (body["id"].clone(), body["error"]["code"].clone()),
            ("a".into(), code::INVALID_PARAMS.into())
        );
        let (_, at_most) = message(at(INITIALIZE_BODY_MAX_BYTES).into()).await.unwrap();
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
                status_and_body(message(Bytes::from(body).into()).await.unwrap_err()).await;
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
        let (status, body) =
            status_and_body(message(Bytes::from(broken).into()).await.unwrap_err()).await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, code::PARSE_ERROR.into())
        );
        let not_rpc = format!(
            r#"{{"jsonrpc":"1.0","method":"initialize","pad":"{}"}}"#,
            "y".repeat(INITIALIZE_BODY_MAX_BYTES)
        );
        let (status, body) =
            status_and_body(message(Bytes::from(not_rpc).into()).await.unwrap_err()).await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, code::INVALID_REQUEST.into())
        );
    }

    /// `bytes` received in 16 KiB chunks by a receiver that spills into a fresh directory
    /// (kept while the body is used), and that receiver's count of spilled bodies.
    async fn spilled(bytes: &[u8]) -> (Received, u64, tempfile::TempDir) {
        use std::sync::{Arc, atomic::Ordering};
        let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
            .chunks(16 * 1024)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::<crate::metrics::Metrics>::default();
        let received = crate::spill::Spill::new(Some(dir.path().join("spill")), metrics.clone())
            .receive(
                axum::body::Body::from_stream(futures_util::stream::iter(chunks)),
                crate::limits::MCP_REQUEST_BODY_MAX_BYTES,
            )
            .await
            .unwrap();
        assert!(matches!(received, Received::Spilled(_)), "not spilled");
        (
            received,
            metrics.bodies_spilled.load(Ordering::Relaxed),
            dir,
        )
    }

    /// A body past the spill threshold, received in chunks into a file, parses to the message
    /// (and head) the same bytes parse to in memory: a file's text in one string, and a wide
    /// object of small members.
    #[tokio::test]
    async fn a_spilled_body_parses_to_the_message_it_parses_to_in_memory() {
        let text = "fn main() {\n    println!(\"a \\\"quoted\\\" line\");\n}\n\t\u{e9}\u{1F600}\n"
            .repeat(20_000);
        let write = serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0", "id": "w1", "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": "a.rs", "content": text}},
        }))
        .unwrap();
        for body in [write, wide_initialize("tools/call")] {
            assert!(body.len() > crate::limits::REQUEST_BODY_SPILL_THRESHOLD);
            let (received, spilled_count, _dir) = spilled(&body).await;
            assert_eq!(spilled_count, 1);
            let (head, from_file) = message(received).await.unwrap();
            let (head_in_memory, in_memory) = message(Bytes::from(body).into()).await.unwrap();
            assert_eq!(from_file, in_memory);
            assert_eq!(format!("{head:?}"), format!("{head_in_memory:?}"));
        }
    }

    /// A spilled body gets the answer the same bytes get in memory: an oversized `initialize`
    /// refused from its head (with its id), a broken body -32700, a body that is not JSON-RPC
    /// -32600.
    #[tokio::test]
    async fn a_spilled_body_is_refused_as_it_is_in_memory() {
        let mut broken = wide_initialize("tools/call");
        broken.truncate(broken.len() - 1);
        let not_rpc = format!(
            r#"{{"jsonrpc":"1.0","method":"tools/call","pad":"{}"}}"#,
            "y".repeat(crate::limits::REQUEST_BODY_SPILL_THRESHOLD)
        )
        .into_bytes();
        for (body, code) in [
            (wide_initialize("initialize"), code::INVALID_PARAMS),
            (broken, code::PARSE_ERROR),
            (not_rpc, code::INVALID_REQUEST),
        ] {
            let (received, _, _dir) = spilled(&body).await;
            let from_file = status_and_body(message(received).await.unwrap_err()).await;
            let in_memory =
                status_and_body(message(Bytes::from(body).into()).await.unwrap_err()).await;
            assert_eq!(from_file, in_memory);
            assert_eq!(
                (from_file.0, from_file.1["error"]["code"].clone()),
                (StatusCode::BAD_REQUEST, code.into())
            );
        }
    }

    /// A spilled body whose file cannot be read back whole is answered 503 with `Retry-After`,
    /// not parsed from what is left.
    #[tokio::test]
    async fn a_spilled_body_that_cannot_be_read_back_is_answered_503() {
        use std::io::{Seek, Write};
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .unwrap();
        file.rewind().unwrap();
        let lost = crate::spill::SpilledBody::of(file, 300_000);
        let refused = message(Received::Spilled(lost)).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            refused
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .unwrap(),
            "1"
        );
    }
}
