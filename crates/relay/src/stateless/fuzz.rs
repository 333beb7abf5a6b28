//! Fuzz targets for the relay's handling of what an HTTP client controls in an MCP 2026-07-28
//! request: headers (repeated, non-ASCII, Base64-wrapped) and the JSON body (bolero; see CONTRIBUTING.md
//! "Fuzzing").

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use base64::{Engine, engine::general_purpose::STANDARD};
use serde_json::{Value, json};

use protocol::{
    head::{Head, mirror::METHOD_HEADER},
    jsonrpc::code::{HEADER_MISMATCH, INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION},
    mcp::{
        ALL_VERSIONS, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
        MODERN_VERSIONS,
    },
};

use super::{checks::validate, era, headers::decode_header_value};
use crate::{
    hub::{ParamHeader, param_headers},
    streamable::VERSION_HEADER,
};

/// Time each target gets in the test suite (unless `BOLERO_RANDOM_TEST_TIME_MS` or
/// `BOLERO_RANDOM_ITERATIONS` is set).
const SHORT_RUN: Duration = Duration::from_secs(6);

const HEADER_NAMES: [&str; 9] = [
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "mcp-param-a",
    "mcp-param-b",
    "mcp-param-x-y",
    "mcp-session-id",
    "accept",
    "x-other",
];

const HEADER_VALUES: [&str; 14] = [
    "2026-07-28",
    "2025-11-25",
    "2025-03-26",
    "tools/call",
    "tasks/get",
    "resources/read",
    "t",
    "=?base64?dA==?=",
    "=?base64?!!?=",
    "=?base64?/w==?=",
    "42",
    " 42.0 ",
    "true",
    "",
];

const METHODS: [&str; 9] = [
    "tools/call",
    "tasks/get",
    "prompts/get",
    "resources/read",
    "initialize",
    "server/discover",
    "ping",
    "tools/list",
    "notifications/cancelled",
];

/// A value a body field may hold; `extra` is arbitrary text.
fn value(pick: u8, extra: &str) -> Option<Value> {
    Some(match pick % 10 {
        0 => json!("t"),
        1 => json!(42),
        2 => json!(42.0),
        3 => json!(true),
        4 => Value::Null,
        5 => json!({"x": 1}),
        6 => json!("2026-07-28"),
        7 => json!({}),
        8 => json!(extra),
        _ => return None,
    })
}

type Headers = Vec<(u8, u8, Vec<u8>)>;
type Body = (u8, u8, [u8; 4], [u8; 5]);

fn headers(spec: &Headers, extra: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, v, raw) in spec {
        let Ok(name) = HeaderName::from_bytes(
            HEADER_NAMES
                .get(usize::from(*name % 11))
                .map_or(extra.as_bytes(), |n| n.as_bytes()),
        ) else {
            continue;
        };
        // Raw bytes reach `HeaderValue` as a client sends them: obs-text (0x80..) included.
        let value = match HEADER_VALUES.get(usize::from(*v % 16)) {
            Some(text) => HeaderValue::from_static(text),
            None => match HeaderValue::from_bytes(raw) {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        h.append(name, value);
    }
    h
}

fn body((method, id, meta, params): &Body, extra: &str) -> Value {
    let mut m = serde_json::Map::new();
    if let Some(v) = value(meta[0], extra) {
        m.insert(META_PROTOCOL_VERSION.into(), v);
    }
    if meta[1] % 3 != 0 {
        m.insert(
            META_CLIENT_CAPABILITIES.into(),
            value(meta[1], extra).unwrap_or(json!({})),
        );
    }
    if let Some(v) = value(meta[2], extra) {
        m.insert(META_CLIENT_INFO.into(), v);
    }
    let mut p = serde_json::Map::new();
    if meta[3] % 4 != 0 {
        p.insert("_meta".into(), Value::Object(m));
    }
    for (key, pick) in ["name", "taskId", "uri"].iter().zip(params) {
        if let Some(v) = value(*pick, extra) {
            p.insert((*key).into(), v);
        }
    }
    let mut args = serde_json::Map::new();
    if let Some(v) = value(params[3], extra) {
        args.insert("a".into(), v);
    }
    if let Some(v) = value(params[4], extra) {
        args.insert("b".into(), json!({"c": v}));
    }
    p.insert("arguments".into(), Value::Object(args));
    let mut msg = json!({"jsonrpc": "2.0", "params": p});
    if let Some(method) = METHODS.get(usize::from(*method % 10)) {
        msg["method"] = json!(method);
    } else {
        msg["method"] = json!(extra);
    }
    if let Some(id) = value(*id, extra) {
        msg["id"] = id;
    }
    msg
}

/// The sole value of `name` as text, if there is exactly one and it is visible ASCII.
fn sole<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut all = h.get_all(name).iter();
    let first = all.next()?;
    all.next().is_none().then(|| first.to_str().ok()).flatten()
}

/// `era` and `validate` never panic on any headers and body, and `validate` keeps its promises:
/// it accepts only a request whose single `MCP-Protocol-Version` is 2026-07-28 and equals its
/// `_meta` version, with capabilities in `_meta` and a single `Mcp-Method` equal to the body's
/// method; it refuses with 400 and one of its three codes, answering the request's id.
#[test]
fn fuzz_relay_validate_headers_and_body() {
    type Input = (Headers, Body, String, String);
    bolero::check!()
        .with_type::<Input>()
        .with_test_time(SHORT_RUN)
        .for_each(|(spec, b, extra, annotation)| {
            let h = headers(spec, extra);
            let msg = body(b, extra);
            let head = Head::of(&msg);
            let _ = era(&h, &head);
            let annotations = |tool: &str| {
                (tool == "t").then(|| {
                    vec![
                        ParamHeader {
                            path: vec!["a".into()],
                            header: "A".into(),
                        },
                        ParamHeader {
                            path: vec!["b".into(), "c".into()],
                            header: annotation.clone(),
                        },
                    ]
                })
            };
            match validate(&h, &head, &msg, &ALL_VERSIONS, annotations) {
                Ok(()) => {
                    let meta = &msg["params"]["_meta"];
                    let version = sole(&h, VERSION_HEADER);
                    assert!(
                        version.is_some_and(|v| MODERN_VERSIONS.contains(&v)),
                        "{h:?} {msg}"
                    );
                    assert_eq!(meta[META_PROTOCOL_VERSION].as_str(), version, "{h:?} {msg}");
                    assert!(meta[META_CLIENT_CAPABILITIES].is_object(), "{h:?} {msg}");
                    assert_eq!(
                        sole(&h, METHOD_HEADER),
                        Some(msg["method"].as_str().unwrap_or("")),
                        "{h:?} {msg}"
                    );
                }
                Err(e) => {
                    assert_eq!(e.status, StatusCode::BAD_REQUEST, "{e:?}");
                    assert!(
                        [
                            HEADER_MISMATCH,
                            INVALID_PARAMS,
                            UNSUPPORTED_PROTOCOL_VERSION
                        ]
                        .contains(&e.code),
                        "{e:?}"
                    );
                    assert_eq!(e.id, msg.get("id").cloned().unwrap_or(Value::Null));
                }
            }
        });
}

/// Base64-wrapped header values decode to exactly what was wrapped; any other text decodes to
/// itself or, inside a broken sentinel, to nothing — never a panic.
#[test]
fn fuzz_relay_header_value_decoding() {
    bolero::check!()
        .with_type::<(String, Vec<u8>)>()
        .with_test_time(SHORT_RUN)
        .for_each(|(text, bytes)| {
            let wrapped = format!("=?base64?{}?=", STANDARD.encode(text));
            assert_eq!(
                decode_header_value(&wrapped).as_deref(),
                Some(text.as_str())
            );
            if !text.starts_with("=?base64?") {
                assert_eq!(decode_header_value(text).as_deref(), Some(text.as_str()));
            }
            let raw = String::from_utf8_lossy(bytes);
            let _ = decode_header_value(&raw);
            let _ = decode_header_value(&format!("=?base64?{raw}?="));
        });
}

/// `x-mcp-header` annotations nested at any depth in a tool's `inputSchema` are all found with
/// their property paths, whatever the names; schemas of other shapes are ignored, not a panic.
#[test]
fn fuzz_relay_param_header_annotations() {
    bolero::check!()
        .with_type::<(Vec<(String, String)>, String, u8)>()
        .with_test_time(SHORT_RUN)
        .for_each(|(chain, tool, junk)| {
            // One chain of nested properties, each level annotated with its header.
            let mut schema = json!({});
            for (name, header) in chain.iter().rev() {
                let mut level = json!({"type": "object", "x-mcp-header": header});
                if schema.as_object().is_some_and(|o| !o.is_empty()) {
                    level["properties"] = schema;
                }
                schema = json!({ name: level });
            }
            let list = json!({"tools": [
                {"name": tool, "inputSchema": {"type": "object", "properties": schema}},
                {"name": "junk", "inputSchema": value(*junk, tool)},
                {"inputSchema": {"properties": {"p": {"x-mcp-header": "P"}}}},
                value(*junk, tool),
            ]});
            let found = param_headers([&list]);
            let expected: Vec<ParamHeader> = chain
                .iter()
                .enumerate()
                .filter(|(_, (_, header))| !header.is_empty())
                .map(|(depth, (_, header))| ParamHeader {
                    path: chain[..=depth].iter().map(|(n, _)| n.clone()).collect(),
                    header: header.clone(),
                })
                .collect();
            assert_eq!(
                found.get(tool.as_str()).cloned().unwrap_or_default(),
                expected,
                "{list}"
            );
        });
}
