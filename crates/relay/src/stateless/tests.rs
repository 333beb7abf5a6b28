//! Unit tests of the 2026-07-28 endpoint's pure parts: the era decision, the header and `_meta`
//! checks, removed methods, derived discover results and answer statuses.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use base64::{Engine, engine::general_purpose::STANDARD};
use serde_json::{Value, json};

use protocol::{
    head::{
        self, Head,
        discover::{DiscoverFrom, discover_from_initialize},
    },
    jsonrpc::code::{
        HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION,
    },
    mcp::{
        ALL_VERSIONS, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
        META_SERVER_INFO,
    },
};

use super::{answer::status_of, method_not_allowed, removed_method};
use crate::{
    hub::{ParamHeader, param_headers},
    streamable::accepts_json,
};

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn meta() -> Value {
    json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {},
           META_CLIENT_INFO: {"name": "t", "version": "0"}})
}

fn modern_headers(method: &str) -> Vec<(&'static str, String)> {
    vec![
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", method.to_owned()),
    ]
}

fn h(pairs: &[(&'static str, String)]) -> HeaderMap {
    let v: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    headers(&v)
}

/// Which side of the endpoint serves a message: the session era (any handshake version) or
/// 2026-07-28.
#[derive(Debug, PartialEq)]
enum Era {
    Legacy,
    Modern,
}

/// The era the POST handler decides for `m` under headers `h`.
fn era(h: &HeaderMap, m: &Value) -> Era {
    match super::era(h, &Head::of(m)) {
        head::Era::Modern => Era::Modern,
        head::Era::Session { .. } => Era::Legacy,
    }
}

/// The checks of a modern request `m` under headers `h`.
fn validate(
    h: &HeaderMap,
    m: &Value,
    supported: &[&str],
    annotations: impl Fn(&str) -> Option<Vec<ParamHeader>>,
) -> Result<(), crate::error::HttpError> {
    super::checks::validate(h, &Head::of(m), m, supported, annotations)
}

fn none(_: &str) -> Option<Vec<ParamHeader>> {
    None
}

#[test]
fn the_era_is_decided_per_request() {
    let legacy_call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(era(&HeaderMap::new(), &legacy_call), Era::Legacy);
    assert_eq!(
        era(
            &headers(&[
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-session-id", "a.b")
            ]),
            &legacy_call
        ),
        Era::Legacy
    );
    // `initialize` naming 2026-07-28 (header or `_meta`) is a modern request for a method
    // that era does not have; without either it opens a session as always.
    let init =
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"_meta": meta()}});
    assert_eq!(
        era(&headers(&[("mcp-protocol-version", "2026-07-28")]), &init),
        Era::Modern
    );
    assert_eq!(era(&HeaderMap::new(), &init), Era::Modern);
    let legacy_init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    assert_eq!(era(&HeaderMap::new(), &legacy_init), Era::Legacy);
    assert_eq!(
        era(
            &headers(&[("mcp-protocol-version", "2025-11-25")]),
            &legacy_init
        ),
        Era::Legacy
    );
    assert_eq!(
        era(
            &headers(&[("mcp-protocol-version", "2026-07-28")]),
            &legacy_init
        ),
        Era::Modern
    );
    // An unknown version on `initialize` stays the session era's negotiation.
    assert_eq!(
        era(
            &headers(&[("mcp-protocol-version", "1999-01-01")]),
            &legacy_init
        ),
        Era::Legacy
    );
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover"});
    assert_eq!(era(&HeaderMap::new(), &discover), Era::Modern);
    let modern =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}});
    assert_eq!(era(&HeaderMap::new(), &modern), Era::Modern);
    // A stray session id does not make a modern request legacy.
    assert_eq!(
        era(&headers(&[("mcp-session-id", "a.b")]), &modern),
        Era::Modern
    );
    assert_eq!(
        era(
            &headers(&[("mcp-protocol-version", "2026-07-28")]),
            &legacy_call
        ),
        Era::Modern
    );
    assert_eq!(
        era(
            &headers(&[("mcp-protocol-version", "1999-01-01")]),
            &legacy_call
        ),
        Era::Modern
    );
    // Legacy notifications and responses stay legacy.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        era(&headers(&[("mcp-protocol-version", "2025-06-18")]), &note),
        Era::Legacy
    );
}

#[test]
fn headers_must_mirror_the_body() {
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "a"}, "_meta": meta()}});
    let mut hs = modern_headers("tools/call");
    hs.push(("mcp-name", "read_file".into()));
    assert!(validate(&h(&hs), &call, &ALL_VERSIONS, none).is_ok());
    // Base64-sentinel names are decoded before comparing.
    let mut enc = modern_headers("tools/call");
    enc.push((
        "mcp-name",
        format!("=?base64?{}?=", STANDARD.encode("read_file")),
    ));
    assert!(validate(&h(&enc), &call, &ALL_VERSIONS, none).is_ok());
    // Mcp-Method differs from the body.
    let mut wrong = modern_headers("tools/list");
    wrong.push(("mcp-name", "read_file".into()));
    let e = validate(&h(&wrong), &call, &ALL_VERSIONS, none).unwrap_err();
    assert_eq!(
        (e.status, e.code, e.id.clone()),
        (StatusCode::BAD_REQUEST, HEADER_MISMATCH, json!(3))
    );
    // Mcp-Name missing, or naming another tool.
    let e = validate(
        &h(&modern_headers("tools/call")),
        &call,
        &ALL_VERSIONS,
        none,
    )
    .unwrap_err();
    assert_eq!(e.code, HEADER_MISMATCH);
    let mut other = modern_headers("tools/call");
    other.push(("mcp-name", "write_file".into()));
    assert_eq!(
        validate(&h(&other), &call, &ALL_VERSIONS, none)
            .unwrap_err()
            .code,
        HEADER_MISMATCH
    );
    // Mcp-Method missing; duplicated.
    let bare = vec![
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-name", "read_file".to_owned()),
    ];
    assert_eq!(
        validate(&h(&bare), &call, &ALL_VERSIONS, none)
            .unwrap_err()
            .code,
        HEADER_MISMATCH
    );
    let mut dup = hs.clone();
    dup.push(("mcp-method", "tools/call".into()));
    assert_eq!(
        validate(&h(&dup), &call, &ALL_VERSIONS, none)
            .unwrap_err()
            .code,
        HEADER_MISMATCH
    );
    // The version header must be there and equal the _meta version.
    let list =
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": meta()}});
    let e = validate(
        &headers(&[("mcp-method", "tools/list")]),
        &list,
        &ALL_VERSIONS,
        none,
    )
    .unwrap_err();
    assert_eq!(
        (e.status, e.code),
        (StatusCode::BAD_REQUEST, HEADER_MISMATCH)
    );
    let e = validate(
        &headers(&[
            ("mcp-method", "tools/list"),
            ("mcp-protocol-version", "2025-11-25"),
        ]),
        &list,
        &ALL_VERSIONS,
        none,
    )
    .unwrap_err();
    assert_eq!(e.code, HEADER_MISMATCH);
}

#[test]
fn task_requests_must_name_their_task_in_mcp_name() {
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": method,
            "params": {"taskId": "t-1", "_meta": meta()}});
        let mut ok = modern_headers(method);
        ok.push(("mcp-name", "t-1".into()));
        assert!(
            validate(&h(&ok), &body, &ALL_VERSIONS, none).is_ok(),
            "{method}"
        );
        let e = validate(&h(&modern_headers(method)), &body, &ALL_VERSIONS, none).unwrap_err();
        assert_eq!(
            (e.status, e.code, e.id.clone()),
            (StatusCode::BAD_REQUEST, HEADER_MISMATCH, json!(9)),
            "{method} without Mcp-Name"
        );
        let mut other = modern_headers(method);
        other.push(("mcp-name", "t-2".into()));
        let e = validate(&h(&other), &body, &ALL_VERSIONS, none).unwrap_err();
        assert_eq!(e.code, HEADER_MISMATCH, "{method} naming another task");
    }
}

#[test]
fn removed_methods_are_refused_as_unknown_in_2026_07_28() {
    for method in ["initialize", "ping"] {
        let e = removed_method(method, &json!(7)).expect(method);
        assert_eq!(
            (e.status, e.code, e.id.clone()),
            (StatusCode::NOT_FOUND, METHOD_NOT_FOUND, json!(7))
        );
        assert!(
            e.message
                .starts_with(&format!("{method} is not part of MCP 2026-07-28")),
            "{}",
            e.message
        );
    }
    assert!(removed_method("tools/list", &json!(1)).is_none());
}

#[test]
fn annotated_arguments_must_be_mirrored_in_param_headers() {
    let list = json!({"tools": [{"name": "deploy", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "opts": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}}}}}]});
    let map = param_headers([&list]);
    let ann = |t: &str| map.get(t).cloned();
    assert_eq!(map["deploy"].len(), 2);
    let call = |args: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "deploy", "arguments": args, "_meta": meta()}})
    };
    let mut base = modern_headers("tools/call");
    base.push(("mcp-name", "deploy".into()));
    let with = |extra: &[(&'static str, &str)]| {
        let mut v = base.clone();
        v.extend(extra.iter().map(|(k, x)| (*k, (*x).to_owned())));
        h(&v)
    };
    let args = json!({"region": "us-west1", "opts": {"n": 42}});
    assert!(
        validate(
            &with(&[("mcp-param-region", "us-west1"), ("mcp-param-n", "42.0")]),
            &call(args.clone()),
            &ALL_VERSIONS,
            ann
        )
        .is_ok()
    );
    assert_eq!(
        validate(
            &with(&[("mcp-param-region", "eu")]),
            &call(args.clone()),
            &ALL_VERSIONS,
            ann
        )
        .unwrap_err()
        .code,
        HEADER_MISMATCH,
        "a missing Mcp-Param-N and a wrong region"
    );
    assert_eq!(
        validate(
            &with(&[("mcp-param-region", "us-west1")]),
            &call(args),
            &ALL_VERSIONS,
            ann
        )
        .unwrap_err()
        .code,
        HEADER_MISMATCH
    );
    assert!(
        validate(&with(&[]), &call(json!({})), &ALL_VERSIONS, ann).is_ok(),
        "absent arguments need no header"
    );
}

#[test]
fn required_meta_and_versions_are_checked() {
    let no_meta = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let e = validate(
        &h(&modern_headers("tools/list")),
        &no_meta,
        &ALL_VERSIONS,
        none,
    )
    .unwrap_err();
    assert_eq!(
        (e.status, e.code),
        (StatusCode::BAD_REQUEST, INVALID_PARAMS)
    );
    let no_caps = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}}});
    let e = validate(
        &h(&modern_headers("tools/list")),
        &no_caps,
        &ALL_VERSIONS,
        none,
    )
    .unwrap_err();
    assert_eq!(
        (e.status, e.code),
        (StatusCode::BAD_REQUEST, INVALID_PARAMS)
    );
    let future = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {META_PROTOCOL_VERSION: "2099-01-01", META_CLIENT_CAPABILITIES: {}}}});
    let hs = headers(&[
        ("mcp-protocol-version", "2099-01-01"),
        ("mcp-method", "tools/list"),
    ]);
    let e = validate(&hs, &future, &ALL_VERSIONS, none).unwrap_err();
    assert_eq!(
        (e.status, e.code),
        (StatusCode::BAD_REQUEST, UNSUPPORTED_PROTOCOL_VERSION)
    );
    let data = e.data.unwrap();
    assert_eq!(data["requested"], "2099-01-01");
    assert_eq!(data["supported"], json!(ALL_VERSIONS));
    // An unknown version header without _meta is the same modern error.
    let e = validate(&hs, &no_meta, &ALL_VERSIONS, none).unwrap_err();
    assert_eq!(e.code, UNSUPPORTED_PROTOCOL_VERSION);
    // The versions listed are the endpoint's own (what its server/discover reports).
    let e = validate(&hs, &future, &["2026-07-28", "2025-11-25"], none).unwrap_err();
    assert_eq!(
        e.data.unwrap()["supported"],
        json!(["2026-07-28", "2025-11-25"])
    );
}

#[test]
fn a_discover_result_is_derived_from_an_initialize_result() {
    let init = json!({"protocolVersion": "2025-11-25",
        "capabilities": {"tools": {"listChanged": true}, "tasks": {"list": {}}, "logging": {}},
        "serverInfo": {"name": "machine-mcp", "version": "1.2.3"}, "instructions": "Use it well."});
    let d = discover_from_initialize(&init, DiscoverFrom::RelayCache);
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["supportedVersions"], json!(ALL_VERSIONS));
    assert_eq!(
        d["capabilities"],
        json!({"tools": {"listChanged": true}, "logging": {}})
    );
    assert_eq!(d["_meta"][META_SERVER_INFO]["name"], "machine-mcp");
    assert_eq!(d["instructions"], "Use it well.");
    assert_eq!(d["ttlMs"], 0);
    assert_eq!(d["cacheScope"], "public");
}

#[test]
fn accept_headers_decide_whether_a_json_body_may_be_sent() {
    assert!(accepts_json(&HeaderMap::new()));
    assert!(accepts_json(&headers(&[(
        "accept",
        "application/json, text/event-stream"
    )])));
    assert!(accepts_json(&headers(&[("accept", "*/*")])));
    assert!(!accepts_json(&headers(&[("accept", "text/event-stream")])));
    assert!(!accepts_json(&headers(&[(
        "accept",
        "text/event-stream, application/json;q=0"
    )])));
    assert!(method_not_allowed(&headers(&[("mcp-protocol-version", "2026-07-28")])).is_some());
    assert!(method_not_allowed(&headers(&[("mcp-protocol-version", "2025-11-25")])).is_none());
}

#[test]
fn answer_statuses_follow_the_error_codes() {
    let err = |c: i64| json!({"jsonrpc": "2.0", "id": 1, "error": {"code": c, "message": "x"}});
    assert_eq!(status_of(&err(HEADER_MISMATCH)), StatusCode::BAD_REQUEST);
    assert_eq!(
        status_of(&err(UNSUPPORTED_PROTOCOL_VERSION)),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(status_of(&err(METHOD_NOT_FOUND)), StatusCode::NOT_FOUND);
    assert_eq!(status_of(&err(-32000)), StatusCode::OK);
    assert_eq!(
        status_of(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        StatusCode::OK
    );
}
