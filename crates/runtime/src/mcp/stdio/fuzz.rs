//! Fuzz targets for the stdio transport (bolero; see CONTRIBUTING.md "Fuzzing"): the line classifier on
//! arbitrary bytes, and whole sessions — framing, the handshake gate, in-flight ids, the server —
//! on random sequences of lines mixing valid JSON-RPC messages of both eras with broken ones.

use std::{collections::HashMap, sync::Arc, time::Duration};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{
    framing::{Frame, classify},
    serve,
};
use crate::{Runtime, RuntimeConfig};

/// Time each target gets in the test suite (unless `BOLERO_RANDOM_TEST_TIME_MS` or
/// `BOLERO_RANDOM_ITERATIONS` is set).
const SHORT_RUN: Duration = Duration::from_secs(6);

/// A rejected line is answered by exactly one JSON-RPC 2.0 error: one line, with an `id` that
/// is the line's own (when it had a usable one) or null.
fn assert_one_error(raw: &str, line: &[u8]) {
    assert!(!raw.contains('\n'), "{raw:?} spans lines");
    let v: Value = serde_json::from_str(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}"));
    assert_eq!(v["jsonrpc"], "2.0", "{raw}");
    assert!(v["error"]["code"].is_i64(), "{raw}");
    assert!(v["error"]["message"].is_string(), "{raw}");
    let id = &v["id"];
    if !id.is_null() {
        let sent: Value = serde_json::from_slice(line.strip_suffix(b"\r").unwrap_or(line))
            .unwrap_or_else(|e| panic!("{raw}: an id from a line that is not JSON ({e})"));
        assert_eq!(&sent["id"], id, "{raw}");
    }
}

/// Arbitrary bytes (and arbitrary JSON-looking text) never panic the classifier; every rejection
/// is one well-formed error line.
#[test]
fn fuzz_stdio_classify_arbitrary_bytes() {
    bolero::check!()
        .with_type::<(Vec<u8>, String)>()
        .with_test_time(SHORT_RUN)
        .for_each(|(bytes, text)| {
            let shaped =
                format!(r#"{{"jsonrpc":"2.0","id":{text},"method":{text:?},"params":{text}}}"#);
            for line in [bytes.as_slice(), text.as_bytes(), shaped.as_bytes()] {
                for in_session in [false, true] {
                    if let Frame::Reject(raw) = classify(line, in_session) {
                        assert_one_error(&raw, line);
                    }
                }
            }
        });
}

/// Ids a generated message may carry: some repeat (in-flight reuse), some are not usable ids.
const IDS: [&str; 8] = [
    "1",
    "2",
    "\"a\"",
    "1.5",
    "null",
    "true",
    "18446744073709551615",
    "-3",
];

/// One line of a session, chosen by `kind`, with id `IDS[id]`; `extra` is arbitrary text.
fn line(kind: u8, id: u8, extra: &str) -> String {
    let id = IDS[usize::from(id) % IDS.len()];
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    match kind % 20 {
        0 => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"f","version":"1"}}}}}}"#
        ),
        1 => r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        2 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
        3 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#),
        4 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"server/discover","params":{{}}}}"#),
        5 => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"server_info","arguments":{{}}}}}}"#
        ),
        6 => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":{extra:?}}}}}}}"#
        ),
        7 => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":{extra:?},"arguments":{{}}}}}}"#
        ),
        8 => format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
        ),
        9 => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{{meta},"name":"server_info","arguments":{{}}}}}}"#
        ),
        10 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{{meta}}}}}"#),
        11 => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#),
        12 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{extra:?},"params":{{}}}}"#),
        13 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{extra}}}"#),
        14 => format!("[{extra}]"),
        15 => format!(r#"{{"jsonrpc":"1.0","id":{id},"method":"ping"}}"#),
        16 => "   \r".to_owned(),
        17 => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tasks/get","params":{{{meta},"taskId":{extra:?}}}}}"#
        ),
        _ => extra.replace('\n', " "),
    }
}

/// Whole sessions: however the lines are mixed, the server answers each line with at most one
/// message — per id, no more responses than lines that carried it; with a null id (framing
/// errors), no more than lines — every answer is a JSON-RPC 2.0 response on its own line, and
/// the session ends when its input does.
#[test]
fn fuzz_stdio_session_answers_each_line_at_most_once() {
    let session = Session::new();
    bolero::check!()
        .with_type::<(Vec<(u8, u8)>, String, bool)>()
        .with_test_time(SHORT_RUN)
        .for_each(|(kinds, extra, crlf)| session.check(kinds, extra, *crlf));
}

/// Regression (seed 179420986288260913856880147025871634004): `extra` with a newline splits a
/// generated line in two, and each part is a line the server answers. The check counted the
/// generated lines (8) instead of the lines sent (9) and failed on a correct server.
#[test]
fn a_generated_line_with_a_newline_is_counted_as_the_lines_it_sends() {
    let kinds = [
        (0, 0),
        (212, 152),
        (205, 143),
        (101, 186),
        (139, 114),
        (233, 190),
        (238, 117),
        (36, 164),
        (34, 108),
    ];
    Session::new().check(&kinds, "\n\0\0\0\0\0\0\0", true);
}

/// A runtime (review profile, a workspace with one file) that sessions are served from.
struct Session {
    _dir: tempfile::TempDir,
    runtime: Arc<Runtime>,
    rt: tokio::runtime::Runtime,
}

impl Session {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "text\n").unwrap();
        let runtime = Arc::new(
            Runtime::new(RuntimeConfig {
                workspace: dir.path().into(),
                policy: crate::policy::Policy::profile(crate::policy::Profile::Review),
                default_yield_after: None,
                remote: false,
                state_dir: None,
                own_files: Vec::new(),
            })
            .unwrap(),
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Self {
            _dir: dir,
            runtime,
            rt,
        }
    }

    /// Serves the lines `kinds` make (see [`line`]) as one session and checks its answers.
    fn check(&self, kinds: &[(u8, u8)], extra: &str, crlf: bool) {
        let mut input = String::new();
        for &(k, id) in kinds {
            input.push_str(&line(k, id, extra));
            input.push_str(if crlf { "\r\n" } else { "\n" });
        }
        let output = self.serve(&input);
        // What the server reads are the input's lines, not the generated ones: `extra` may hold
        // a newline that splits a generated line.
        let mut sent: HashMap<String, usize> = HashMap::new();
        let mut non_blank = 0;
        for l in input.split('\n') {
            if l.bytes().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            non_blank += 1;
            let id = serde_json::from_str::<Value>(l.trim_end_matches('\r'))
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(Value::Null);
            *sent.entry(id.to_string()).or_default() += 1;
        }
        let mut answered: HashMap<String, usize> = HashMap::new();
        let mut total = 0;
        for a in output.lines() {
            let v: Value = serde_json::from_str(a)
                .unwrap_or_else(|e| panic!("{a:?} is not JSON ({e}); input:\n{input}"));
            assert_eq!(v["jsonrpc"], "2.0", "{a}");
            assert!(
                v.get("result").is_some() != v.get("error").is_some() && v.get("method").is_none(),
                "not a response: {a}\ninput:\n{input}"
            );
            total += 1;
            let id = v.get("id").cloned().unwrap_or(Value::Null);
            *answered.entry(id.to_string()).or_default() += 1;
        }
        assert!(
            total <= non_blank,
            "{total} answers to {non_blank} lines:\n{input}\n{output}"
        );
        for (id, n) in &answered {
            let limit = if id == "null" {
                non_blank
            } else {
                sent.get(id).copied().unwrap_or(0)
            };
            assert!(
                *n <= limit,
                "{n} answers with id {id} to {limit} lines:\n{input}\n{output}"
            );
        }
    }

    /// Writes `input` to a fresh session and returns all it answered until it ended.
    fn serve(&self, input: &str) -> String {
        self.rt.block_on(async {
            let (client, server_end) = tokio::io::duplex(1 << 16);
            let (read, write) = tokio::io::split(server_end);
            let session = tokio::spawn(serve(self.runtime.clone(), read, write));
            let (mut from_server, mut to_server) = tokio::io::split(client);
            let bytes = input.as_bytes().to_vec();
            let writer = tokio::spawn(async move {
                // The server may stop reading when its answers are not read: ignore that.
                let _ = to_server.write_all(&bytes).await;
                let _ = to_server.shutdown().await;
            });
            let mut out = String::new();
            tokio::time::timeout(
                Duration::from_secs(20),
                from_server.read_to_string(&mut out),
            )
            .await
            .unwrap_or_else(|_| panic!("the session did not end with its input: {input}"))
            .unwrap();
            writer.await.unwrap();
            session.await.unwrap().unwrap();
            out
        })
    }
}
