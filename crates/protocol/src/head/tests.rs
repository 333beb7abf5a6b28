//! Unit tests of the head module: how a head is read (from a value, from bytes strictly and
//! lazily), the envelope, the era rules, the `_meta` and mirrored-header checks with their
//! error codes, removed methods, derived discover results and result completion.

use serde_json::{Value, json};

use super::{
    Carrier, EnvelopeError, Era, Head, HeadError, Kind, Shape,
    discover::{DiscoverFrom, discover_from_initialize, lists_modern},
    era::{removed, removed_method, subscription_closed},
    meta::{check_meta, validate},
    mirror::{Headers, ParamHeader, decode_header_value, header_matches, param_headers},
    result::{CacheScope, Completion, Hint, complete, is_cacheable},
    set_id,
};
use crate::{
    jsonrpc::code::{
        HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION,
    },
    mcp::{
        ALL_VERSIONS, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
        META_SERVER_INFO, META_SUBSCRIPTION_ID, MODERN_VERSION,
    },
};

fn head(v: Value) -> Head {
    Head::of(&v)
}

fn meta() -> Value {
    json!({META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {},
           META_CLIENT_INFO: {"name": "t", "version": "0"}})
}

// --- reading a head ---------------------------------------------------------------------------

#[test]
fn kinds_follow_the_members() {
    assert_eq!(head(json!({"id": 1, "method": "m"})).kind(), Kind::Request);
    assert_eq!(
        head(json!({"id": null, "method": "m"})).kind(),
        Kind::Notification
    );
    assert_eq!(head(json!({"method": "m"})).kind(), Kind::Notification);
    assert_eq!(head(json!({"id": 1, "result": {}})).kind(), Kind::Response);
    assert_eq!(head(json!({"id": 1})).kind(), Kind::Response);
    assert_eq!(head(json!({"id": 1, "error": {}})).kind(), Kind::Error);
    assert_eq!(head(json!({"result": {}})).kind(), Kind::Neither);
    // A method that is not a string is no method; an error answering an unreadable message
    // (id null) is still a response to route.
    assert_eq!(head(json!({"id": 1, "method": 5})).kind(), Kind::Response);
    let e = head(json!({"id": null, "error": {"code": -32700}}));
    assert_eq!(e.kind(), Kind::Neither);
    assert!(e.is_response());
    assert_eq!(e.error_code(), Some(-32700));
    assert!(!head(json!({"id": 1, "method": 5, "result": {}})).is_response());
}

#[test]
fn envelopes_are_checked_in_order() {
    // MCP Basic § Messages; batches removed in 2025-06-18.
    assert_eq!(head(json!([1])).check_envelope(), Err(EnvelopeError::Batch));
    assert_eq!(
        head(json!("x")).check_envelope(),
        Err(EnvelopeError::NotJsonRpc)
    );
    assert_eq!(
        head(json!({"jsonrpc": "1.0", "id": 1.5, "method": "m"})).check_envelope(),
        Err(EnvelopeError::NotJsonRpc)
    );
    // MCP Basic § Requests: an id "MUST NOT be null".
    let e = head(json!({"jsonrpc": "2.0", "id": null, "method": "m"})).check_envelope();
    assert_eq!(
        e.unwrap_err().to_string(),
        "a request id is a string or an integer, not null"
    );
    assert!(
        head(json!({"jsonrpc": "2.0", "id": 1.5, "result": {}}))
            .check_envelope()
            .is_ok()
    );
    assert!(
        head(json!({"jsonrpc": "2.0", "id": "a", "method": "m"}))
            .check_envelope()
            .is_ok()
    );
}

#[test]
fn a_head_keeps_what_routing_and_the_era_rules_read() {
    let m = json!({"jsonrpc": "2.0", "id": "r", "method": "tools/call", "params": {
        "name": "read_file", "arguments": {"path": "a"},
        "_meta": {META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {},
            META_CLIENT_INFO: "x", "progressToken": 7, META_SUBSCRIPTION_ID: "s", "other": 1}}});
    let h = head(m);
    assert!(h.is_json_rpc());
    assert_eq!(h.method(), Some("tools/call"));
    assert_eq!(h.tool(), Some("read_file"));
    assert_eq!(h.id(), Some(&json!("r")));
    assert_eq!(h.reply_id(), json!("r"));
    assert_eq!(h.progress_token(), Some(&json!(7)));
    assert_eq!(h.meta().protocol_version(), Some(&json!(MODERN_VERSION)));
    assert_eq!(h.meta().client_capabilities(), Some(Shape::Object));
    assert_eq!(h.meta().client_info(), Some(Shape::Other));
    assert_eq!(h.meta().subscription_id(), Some(&json!("s")));
    let c = head(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 3, "reason": "bye"}}),
    );
    assert_eq!(c.cancelled_request(), Some(&json!(3)));
    assert_eq!(c.cancel_reason(), Some("bye"));
    // `_meta` that is not an object has no fields; `params` that is not one keeps nothing.
    let odd = head(json!({"id": 1, "method": "m", "params": {"_meta": [1], "name": "n"}}));
    assert!(!odd.meta().present());
    assert_eq!(odd.name(), Some(&json!("n")));
    let odd = head(json!({"id": 1, "method": "m", "params": ["name"]}));
    assert_eq!(odd.params_shape(), Some(Shape::Other));
    assert_eq!(odd.name(), None);
}

#[test]
fn bytes_are_read_like_a_full_parse_with_the_last_duplicate_winning() {
    let text =
        br#"{"jsonrpc":"2.0","method":"a","id":1,"params":{"name":"x","_meta":{"progressToken":1}},
        "result":{"big":[1,2,{"k":"v"}]},"method":"tools/call","params":{"name":"y"}}"#;
    let parsed: Value = serde_json::from_slice(text).unwrap();
    let h = Head::parse(text).unwrap();
    assert_eq!(h, Head::of(&parsed));
    assert_eq!(h.method(), Some("tools/call"));
    assert_eq!(h.name(), Some(&json!("y")));
    assert_eq!(
        h.progress_token(),
        None,
        "the second params replaced the first"
    );
    assert_eq!(Head::scan(text), h);
    // Escaped keys are the keys they spell.
    let escaped = br#"{"jsonrpc":"2.0","\u0069d":5,"method":"m"}"#;
    assert_eq!(Head::parse(escaped).unwrap().id(), Some(&json!(5)));
}

#[test]
fn bytes_that_are_not_one_object_have_no_head() {
    assert_eq!(Head::parse(b"[1,2]"), Err(HeadError::Batch));
    assert_eq!(Head::parse(b"42"), Err(HeadError::NotObject));
    assert!(matches!(
        Head::parse(b"{not json"),
        Err(HeadError::Syntax(_))
    ));
    assert!(matches!(
        Head::parse(br#"{"id":1} {"id":2}"#),
        Err(HeadError::Syntax(_))
    ));
    assert!(matches!(Head::parse(b"[1,"), Err(HeadError::Syntax(_))));
    assert_eq!(Head::scan(b"[1,2]"), Head::default());
}

#[test]
fn params_members_are_captured_in_the_same_pass() {
    let text = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_process",
        "arguments":{"session_id":"proc-1","max_bytes":9},"notifications":{"toolsListChanged":true}}}"#;
    let paths: &[&[&str]] = &[
        &["arguments", "session_id"],
        &["notifications"],
        &["arguments", "missing"],
        &["name"],
    ];
    let (h, got) = Head::parse_capturing(text, paths).unwrap();
    assert_eq!(h.tool(), Some("read_process"));
    assert_eq!(
        got,
        vec![
            Some(json!("proc-1")),
            Some(json!({"toolsListChanged": true})),
            None,
            Some(json!("read_process"))
        ]
    );
    // A repeated member replaces what was captured through the first one.
    let again = br#"{"params":{"arguments":{"session_id":"a"},"arguments":{}}}"#;
    let (_, got) = Head::parse_capturing(again, &[&["arguments", "session_id"]]).unwrap();
    assert_eq!(got, vec![None]);
}

#[test]
fn a_scan_skips_what_it_does_not_read() {
    let line = br#"{"jsonrpc":"2.0","id":"x","result":{"structuredContent":{"session_id":"p"},"content":[]}}"#;
    let h = Head::scan(line);
    assert_eq!(h.id(), Some(&json!("x")));
    assert!(h.is_response() && !h.has_method());
    let note = br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"s1"}}}"#;
    assert_eq!(
        Head::scan(note).meta().subscription_id(),
        Some(&json!("s1"))
    );
}

#[test]
fn ids_are_written_in_one_place() {
    let mut m = json!({"jsonrpc": "2.0", "id": 1, "method": "m"});
    set_id(&mut m, json!(9));
    assert_eq!(Head::of(&m).id(), Some(&json!(9)));
    let mut not_object = json!([1]);
    set_id(&mut not_object, json!(9));
    assert_eq!(not_object, json!([1]));
}

// --- the era ------------------------------------------------------------------------------------

fn http(version: Option<&str>, in_session: bool) -> Carrier<'_> {
    Carrier {
        version_header: version,
        in_session,
    }
}

/// MCP 2026-07-28 Basic › Versioning § Backward Compatibility with Initialization-Based
/// Versions, rule by rule (module docs of `era`).
#[test]
fn the_era_is_decided_per_message() {
    let session = |v| Era::Session { version: v };
    // 1. `initialize` opens a session unless it names 2026-07-28; it names the version its
    //    session runs.
    let init = head(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}}}));
    assert_eq!(init.era(Carrier::default()), session(Some("2025-06-18")));
    assert_eq!(
        init.era(http(Some("1999-01-01"), false)),
        session(Some("2025-06-18"))
    );
    assert_eq!(init.era(http(Some(MODERN_VERSION), false)), Era::Modern);
    let init_future = head(json!({"id": 1, "method": "initialize",
        "params": {"protocolVersion": "2099-01-01"}}));
    assert_eq!(
        init_future.era(Carrier::default()),
        session(Some("2025-11-25"))
    );
    let init_meta = head(json!({"id": 1, "method": "initialize", "params": {"_meta": meta()}}));
    assert_eq!(init_meta.era(Carrier::default()), Era::Modern);
    // 2. `server/discover` is modern.
    let discover = head(json!({"id": 1, "method": "server/discover"}));
    assert_eq!(discover.era(http(Some("2025-11-25"), true)), Era::Modern);
    // 3. `_meta` naming a version is modern, but a handshake-era version inside a session.
    let modern = head(json!({"id": 1, "method": "tools/list", "params": {"_meta": meta()}}));
    assert_eq!(modern.era(http(None, true)), Era::Modern);
    let old_meta = head(json!({"id": 1, "method": "tools/list",
        "params": {"_meta": {META_PROTOCOL_VERSION: "2025-11-25"}}}));
    assert_eq!(old_meta.era(Carrier::default()), Era::Modern);
    assert_eq!(
        old_meta.era(http(Some("2025-11-25"), true)),
        session(Some("2025-11-25"))
    );
    // 4. A header naming anything but a handshake-era version is modern.
    let plain = head(json!({"id": 1, "method": "tools/list"}));
    assert_eq!(plain.era(http(Some("1999-01-01"), true)), Era::Modern);
    assert_eq!(plain.era(http(Some(""), true)), Era::Modern);
    assert_eq!(
        plain.era(http(Some("2025-03-26"), true)),
        session(Some("2025-03-26"))
    );
    // 5. The rest is session traffic.
    assert_eq!(plain.era(Carrier::default()), session(None));
    // Without headers a client commits to 2026-07-28 with a `_meta` version, not with discover.
    assert!(modern.commits_to_modern());
    assert!(!discover.commits_to_modern());
    assert!(!plain.commits_to_modern());
}

/// Changelog items 2 and 5, SEP-2575; Streamable HTTP § Protocol Version Header: -32601.
#[test]
fn methods_2026_07_28_removed_are_refused_with_what_to_do_instead() {
    for m in ["initialize", "ping", "logging/setLevel"] {
        let r = removed_method(m).unwrap();
        assert_eq!(r.code, METHOD_NOT_FOUND);
        assert!(r.message.starts_with(m), "{}", r.message);
        assert!(removed(m).is_some());
    }
    assert!(removed_method("tools/list").is_none());
    assert_eq!(
        subscription_closed(&json!(4)),
        json!({"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: 4}})
    );
}

// --- `_meta` and mirrored headers ---------------------------------------------------------------

/// Header values of a test request, by lower-case name; a name listed twice is repeated.
struct TestHeaders(Vec<(&'static str, String)>);

impl Headers for TestHeaders {
    fn single(&self, name: &str) -> Result<Option<&str>, String> {
        let mut all = self.0.iter().filter(|(k, _)| *k == name);
        let Some((_, v)) = all.next() else {
            return Ok(None);
        };
        if all.next().is_some() {
            return Err(format!("{name} is sent more than once"));
        }
        Ok(Some(v))
    }

    fn base64(&self, text: &str) -> Option<Vec<u8>> {
        // Enough for the tests: "dA==" is "t".
        (text == "dA==").then(|| b"t".to_vec())
    }
}

fn modern_headers(method: &str) -> TestHeaders {
    TestHeaders(vec![
        ("mcp-protocol-version", MODERN_VERSION.to_owned()),
        ("mcp-method", method.to_owned()),
    ])
}

fn none(_: &str) -> Option<Vec<ParamHeader>> {
    None
}

fn code_of<T>(r: Result<T, super::Refusal>) -> i64 {
    r.err().map_or(0, |e| e.code)
}

/// Basic § `_meta` (per-request protocol fields): -32602 for a missing or malformed field,
/// -32022 (`UnsupportedProtocolVersionError`) for a version not served, listing the supported.
#[test]
fn meta_is_checked_with_its_error_codes() {
    let req = |meta: Value| {
        head(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}))
    };
    let supported = [MODERN_VERSION];
    assert!(check_meta(&req(meta()), &supported).is_ok());
    let missing = check_meta(&head(json!({"id": 1, "method": "tools/list"})), &supported);
    assert_eq!(code_of(missing.clone()), INVALID_PARAMS);
    assert!(
        missing
            .unwrap_err()
            .message
            .contains(META_CLIENT_CAPABILITIES)
    );
    assert_eq!(
        code_of(check_meta(
            &req(json!({META_PROTOCOL_VERSION: 7})),
            &supported
        )),
        INVALID_PARAMS
    );
    let old = check_meta(
        &req(json!({META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}})),
        &supported,
    )
    .unwrap_err();
    assert_eq!(old.code, UNSUPPORTED_PROTOCOL_VERSION);
    assert!(old.message.contains("needs a session"), "{}", old.message);
    assert_eq!(
        old.data.unwrap(),
        json!({"supported": [MODERN_VERSION], "requested": "2025-11-25"})
    );
    assert_eq!(
        code_of(check_meta(
            &req(json!({META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: []})),
            &supported
        )),
        INVALID_PARAMS
    );
    assert_eq!(
        code_of(check_meta(
            &req(
                json!({META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {},
                META_CLIENT_INFO: "me"})
            ),
            &supported
        )),
        INVALID_PARAMS
    );
    // The refusal answers the request's id.
    let r = check_meta(&head(json!({"id": "q", "method": "x"})), &supported).unwrap_err();
    assert_eq!(r.answer(&json!("q"))["error"]["code"], INVALID_PARAMS);
}

/// Streamable HTTP § Server Validation: every mirrored header that is missing, repeated or
/// different is -32020 (`HeaderMismatch`).
#[test]
fn mirrored_headers_are_checked_in_order() {
    let call = |name: Value| {
        head(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "_meta": meta(), "arguments": {"a": 42}}}))
    };
    let ok =
        |h: &TestHeaders, m: &Head| validate(m, h, &ALL_VERSIONS, none, Some(&json!({"a": 42})));
    let mut h = modern_headers("tools/call");
    h.0.push(("mcp-name", "t".into()));
    assert!(ok(&h, &call(json!("t"))).is_ok());
    // The version header: required, equal to `_meta`, single.
    let mut v = TestHeaders(vec![
        ("mcp-method", "tools/call".into()),
        ("mcp-name", "t".into()),
    ]);
    assert_eq!(code_of(ok(&v, &call(json!("t")))), HEADER_MISMATCH);
    v.0.push(("mcp-protocol-version", "2025-11-25".into()));
    assert_eq!(code_of(ok(&v, &call(json!("t")))), HEADER_MISMATCH);
    let mut twice = modern_headers("tools/call");
    twice
        .0
        .push(("mcp-protocol-version", MODERN_VERSION.into()));
    assert_eq!(code_of(ok(&twice, &call(json!("t")))), HEADER_MISMATCH);
    // Only a header naming an unknown version: that version is unsupported.
    let bare = head(json!({"id": 1, "method": "tools/list"}));
    let future = TestHeaders(vec![("mcp-protocol-version", "2099-01-01".into())]);
    assert_eq!(
        code_of(validate(&bare, &future, &ALL_VERSIONS, none, None)),
        UNSUPPORTED_PROTOCOL_VERSION
    );
    // The method and the name.
    assert_eq!(
        code_of(ok(&modern_headers("tools/list"), &call(json!("t")))),
        HEADER_MISMATCH
    );
    assert_eq!(
        code_of(ok(&modern_headers("tools/call"), &call(json!("t")))),
        HEADER_MISMATCH,
        "Mcp-Name is required when the body names a tool"
    );
    let mut b64 = modern_headers("tools/call");
    b64.0.push(("mcp-name", "=?base64?dA==?=".into()));
    assert!(ok(&b64, &call(json!("t"))).is_ok());
    let mut broken = modern_headers("tools/call");
    broken.0.push(("mcp-name", "=?base64?!!?=".into()));
    assert_eq!(code_of(ok(&broken, &call(json!("t")))), HEADER_MISMATCH);
    // SEP-2663 § Streamable HTTP: Routing Headers: tasks name their task.
    let task =
        head(json!({"id": 1, "method": "tasks/get", "params": {"taskId": "t", "_meta": meta()}}));
    assert_eq!(
        code_of(validate(
            &task,
            &modern_headers("tasks/get"),
            &ALL_VERSIONS,
            none,
            None
        )),
        HEADER_MISMATCH
    );
    // § Custom Headers from Tool Parameters.
    let annotated = |tool: &str| {
        (tool == "t").then(|| {
            vec![ParamHeader {
                path: vec!["a".into()],
                header: "A".into(),
            }]
        })
    };
    let args = json!({"a": 42});
    assert_eq!(
        code_of(validate(
            &call(json!("t")),
            &h,
            &ALL_VERSIONS,
            annotated,
            Some(&args)
        )),
        HEADER_MISMATCH
    );
    let mut with_param = TestHeaders(h.0.clone());
    with_param.0.push(("mcp-param-a", " 42.0 ".into()));
    assert!(
        validate(
            &call(json!("t")),
            &with_param,
            &ALL_VERSIONS,
            annotated,
            Some(&args)
        )
        .is_ok()
    );
    assert_eq!(
        code_of(validate(
            &call(json!("t")),
            &with_param,
            &ALL_VERSIONS,
            annotated,
            Some(&json!({}))
        )),
        HEADER_MISMATCH
    );
}

#[test]
fn header_values_compare_as_the_spec_says() {
    let b64 = |t: &str| (t == "dA==").then(|| b"t".to_vec());
    assert_eq!(
        decode_header_value("=?base64?dA==?=", b64).as_deref(),
        Some("t")
    );
    assert_eq!(decode_header_value("plain", b64).as_deref(), Some("plain"));
    assert_eq!(decode_header_value("=?base64?zz?=", b64), None);
    assert!(header_matches("42", &json!(42.0)));
    assert!(header_matches("true", &json!(true)));
    assert!(!header_matches("1", &json!("01")));
    assert!(!header_matches("{}", &json!({})));
    let list = json!({"tools": [{"name": "t", "inputSchema": {"properties": {
        "a": {"x-mcp-header": "A", "properties": {"b": {"x-mcp-header": "B"}}}, "c": {"x-mcp-header": ""}}}}]});
    let found = param_headers([&list]);
    assert_eq!(found["t"].len(), 2);
    assert_eq!(found["t"][1].path, vec!["a".to_owned(), "b".to_owned()]);
}

// --- discover and completion --------------------------------------------------------------------

/// Server › Discover (`DiscoverResult`), derived two ways (module docs of `discover`).
#[test]
fn discover_is_derived_from_initialize_for_the_relay_and_the_era_bridge() {
    let init = json!({"protocolVersion": "2025-06-18",
        "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": false},
            "tasks": {}, "vendor": {}},
        "serverInfo": {"name": "db", "version": "1"}, "instructions": "use it"});
    let relay = discover_from_initialize(&init, DiscoverFrom::RelayCache);
    let bridge = discover_from_initialize(&init, DiscoverFrom::EraBridge);
    assert_eq!(relay["supportedVersions"], json!(ALL_VERSIONS));
    assert_eq!(relay["cacheScope"], "public");
    assert_eq!(
        bridge["supportedVersions"],
        json!([MODERN_VERSION, "2025-06-18"])
    );
    assert_eq!(bridge["cacheScope"], "private");
    for d in [&relay, &bridge] {
        assert_eq!(d["resultType"], "complete");
        assert_eq!(d["ttlMs"], 0);
        assert_eq!(
            d["capabilities"],
            json!({"tools": {"listChanged": true}, "resources": {"listChanged": false}})
        );
        assert_eq!(d["_meta"][META_SERVER_INFO]["name"], "db");
        assert_eq!(d["instructions"], "use it");
        assert!(lists_modern(d));
    }
    assert!(!lists_modern(&json!({"supportedVersions": ["2025-11-25"]})));
    let bare = discover_from_initialize(&json!(null), DiscoverFrom::EraBridge);
    assert_eq!(bare["capabilities"], json!({}));
    assert!(bare.get("_meta").is_none());
}

/// Basic § Result types; Server › Utilities › Caching.
#[test]
fn results_are_completed_as_the_completion_says() {
    assert!(is_cacheable("tools/list") && !is_cacheable("tools/call"));
    let mut r = json!({"tools": []});
    complete(&mut r, &Completion::live("tools/list"));
    assert_eq!(
        r,
        json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
    );
    let mut r = json!({"content": []});
    complete(&mut r, &Completion::live("tools/call"));
    assert_eq!(r, json!({"content": [], "resultType": "complete"}));
    // A task stays a task; hints the server gave are kept when filling, replaced when set.
    let mut r = json!({"resultType": "task", "ttlMs": 5, "cacheScope": "public"});
    complete(&mut r, &Completion::live("tools/list"));
    assert_eq!(
        r,
        json!({"resultType": "task", "ttlMs": 5, "cacheScope": "public"})
    );
    let info = json!({"name": "s"});
    complete(
        &mut r,
        &Completion {
            ttl_ms: Hint::Set(0),
            scope: Hint::Set(CacheScope::Private),
            server_info: Some(&info),
        },
    );
    assert_eq!(r["ttlMs"], 0);
    assert_eq!(r["cacheScope"], "private");
    assert_eq!(r["_meta"][META_SERVER_INFO], info);
    let mut not_object = json!([1]);
    complete(&mut not_object, &Completion::PLAIN);
    assert_eq!(not_object, json!([1]));
}
