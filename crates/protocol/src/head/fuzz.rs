//! Property tests of head reading (bolero; see CONTRIBUTING.md "Fuzzing"): no input makes a
//! reader panic, and on every message a full parse accepts, the byte readers agree with
//! [`Head::of`] of that parse — duplicated members, escaped keys and odd types included.

use std::time::Duration;

use serde_json::Value;

use super::{Carrier, Head, HeadError, meta::check_meta};
use crate::mcp::ALL_VERSIONS;

/// Time each target gets in the test suite (unless `BOLERO_RANDOM_TEST_TIME_MS` or
/// `BOLERO_RANDOM_ITERATIONS` is set).
const SHORT_RUN: Duration = Duration::from_secs(4);

/// The paths the supervisor captures, and a few more.
const PATHS: &[&[&str]] = &[
    &["arguments", "session_id"],
    &["notifications"],
    &["notifications", "toolsListChanged"],
    &["name"],
    &["x"],
];

/// Top-level keys a generated message may use (spelled escaped sometimes).
const KEYS: [&str; 10] = [
    "jsonrpc", "method", "id", "params", "result", "error", "\\u0069d", "other", "\\\"", "code",
];

/// `params` keys a generated message may use.
const PARAM_KEYS: [&str; 12] = [
    "name",
    "uri",
    "taskId",
    "requestId",
    "reason",
    "protocolVersion",
    "_meta",
    "arguments",
    "notifications",
    "x",
    "\\u005fmeta",
    "other",
];

/// `_meta` keys a generated message may use.
const META_KEYS: [&str; 7] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/subscriptionId",
    "progressToken",
    "other",
    "io.modelcontextprotocol/protocolVersion",
];

/// A JSON value as text: scalars, strings with escapes, small containers, or `extra`.
fn scalar(pick: u8, extra: &str) -> String {
    match pick % 14 {
        0 => "\"2.0\"".into(),
        1 => "\"tools/call\"".into(),
        2 => "\"2026-07-28\"".into(),
        3 => "7".into(),
        4 => "-3.5e2".into(),
        5 => "null".into(),
        6 => "true".into(),
        7 => "{}".into(),
        8 => "[1,{\"a\":[]}]".into(),
        9 => "\"a\\\"b\\u00e9\\n\"".into(),
        10 => "18446744073709551615".into(),
        11 => "{\"code\":-32601,\"message\":\"m\"}".into(),
        12 => serde_json::to_string(extra).unwrap_or_default(),
        _ => "\"2025-11-25\"".into(),
    }
}

/// One member pick: `(key pick, value pick, nested picks)`.
type Pick = (u8, u8, Vec<(u8, u8)>);

/// One object's text from member picks.
fn object(keys: &[&str], members: &[Pick], extra: &str, depth: u8) -> String {
    let mut out = String::from("{");
    for (i, (k, v, nested)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let key = keys[usize::from(*k) % keys.len()];
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        let value = match (key, depth) {
            ("params", 0) => object(&PARAM_KEYS, &wrap(nested), extra, 1),
            ("_meta" | "\\u005fmeta", 1) => object(&META_KEYS, &wrap(nested), extra, 2),
            ("arguments" | "notifications", 1) => object(
                &["session_id", "toolsListChanged", "other"],
                &wrap(nested),
                extra,
                2,
            ),
            _ => scalar(*v, extra),
        };
        out.push_str(&value);
    }
    out.push('}');
    out
}

fn wrap(nested: &[(u8, u8)]) -> Vec<Pick> {
    nested
        .iter()
        .map(|(k, v)| (*k, *v, nested.iter().rev().take(3).copied().collect()))
        .collect()
}

fn pointer<'v>(v: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter()
        .try_fold(v.get("params")?, |v, k| v.as_object()?.get(*k))
}

/// No bytes make a reader panic; bytes a full parse accepts are read alike by all three
/// readers (the strict one refuses exactly what is not one JSON object).
#[test]
fn fuzz_head_readers_never_panic_and_agree_with_a_full_parse() {
    bolero::check!()
        .with_type::<Vec<u8>>()
        .with_test_time(SHORT_RUN)
        .for_each(|bytes| {
            let strict = Head::parse_capturing(bytes, PATHS);
            let lazy = Head::scan(bytes);
            if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
                match &v {
                    Value::Object(_) => {
                        let (h, _) = strict.unwrap();
                        assert_eq!(h, Head::of(&v));
                        assert_eq!(lazy, h);
                    }
                    Value::Array(_) => assert_eq!(strict.unwrap_err(), HeadError::Batch),
                    _ => assert_eq!(strict.unwrap_err(), HeadError::NotObject),
                }
            }
        });
}

/// Generated messages (members repeated, escaped keys, every type in every place): the strict
/// and the lazy reader agree with [`Head::of`] of a full parse, the captures with a lookup in
/// it, and the checks built on a head give one answer whichever reader made it.
#[test]
fn fuzz_head_of_generated_messages_agrees_with_a_full_parse() {
    type Input = (Vec<(u8, u8, Vec<(u8, u8)>)>, String);
    bolero::check!()
        .with_type::<Input>()
        .with_test_time(SHORT_RUN)
        .for_each(|(members, extra)| {
            let text = object(&KEYS, members, extra, 0);
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            let of = Head::of(&v);
            let (parsed, captured) = Head::parse_capturing(text.as_bytes(), PATHS)
                .unwrap_or_else(|e| panic!("{e}: {text}"));
            assert_eq!(parsed, of, "{text}");
            assert_eq!(Head::scan(text.as_bytes()), of, "{text}");
            for (path, got) in PATHS.iter().zip(&captured) {
                assert_eq!(got.as_ref(), pointer(&v, path), "{path:?} in {text}");
            }
            assert_eq!(
                parsed.era(Carrier::default()),
                of.era(Carrier::default()),
                "{text}"
            );
            assert_eq!(
                check_meta(&parsed, &ALL_VERSIONS),
                check_meta(&of, &ALL_VERSIONS),
                "{text}"
            );
            assert_eq!(parsed.check_envelope(), of.check_envelope(), "{text}");
        });
}
