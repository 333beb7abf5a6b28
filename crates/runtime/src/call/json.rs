//! JSON text for outgoing messages.
//!
//! Every JSON-RPC message this runtime writes is serialized with `sonic-rs`, here or, for `machine-mcp stdio`, straight into stdout by the
//! writer thread in `stdio.rs` (it needs sonic-rs's I/O error kind to tell a closed stdout from a
//! serialization error). sonic-rs's string escaping is SIMD: a large `read_process` answer
//! is mostly two strings of up to 1 MiB each (the text block and `structuredContent`), and escaping them with `serde_json`'s byte loop
//! took more time than everything else the call does (about 2.1 ms against 0.3 ms for a message
//! carrying 1 MiB of output twice, on the benchmark machine). The output is plain RFC 8259 JSON
//! with the same meaning as `serde_json`'s: the tests below parse it back with `serde_json`.
//! Parsing stays on `serde_json`, which the rest of the stack (rmcp, axum) uses.

use serde::Serialize;

/// Serializing failed: a map key that is not a string, or a `Serialize` impl that reported an
/// error. Never happens for `serde_json::Value` or the rmcp message types.
#[derive(Debug, thiserror::Error)]
#[error("serializing JSON: {0}")]
pub struct JsonError(String);

/// `value` as compact JSON text (no whitespace, no trailing newline).
///
/// Strings are escaped as `serde_json` escapes them (`"`, `\`, and control characters; nothing
/// else), and a non-finite float becomes `null` as in `serde_json`.
///
/// # Errors
/// [`JsonError`] when `value`'s `Serialize` impl fails or produces a non-string map key.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, JsonError> {
    sonic_rs::to_string(value).map_err(|e| JsonError(e.to_string()))
}

/// Appends `value` as compact JSON text to `out` (see [`to_string`]). Lets a writer reuse one
/// buffer for every message, so a stream of megabyte results does not fault in fresh pages for
/// each one.
///
/// # Errors
/// As [`to_string`]; `out` may then hold a partial document.
pub fn to_writer<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), JsonError> {
    sonic_rs::to_writer(out, value).map_err(|e| JsonError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn same_as_serde_json(v: &Value) {
        let ours = to_string(v).unwrap();
        let back: Value = serde_json::from_str(&ours).unwrap();
        assert_eq!(&back, v, "{ours}");
    }

    #[test]
    fn strings_with_every_escape_round_trip() {
        let mut s = String::new();
        for c in (0u32..0x80).chain([0x7f, 0xa0, 0x2028, 0x2029, 0xfeff, 0x1f600]) {
            s.push(char::from_u32(c).unwrap());
        }
        // Long runs exercise the SIMD path, short ones the scalar tail.
        let long = format!("{}{s}{}", "a".repeat(100), "b\n".repeat(5000));
        for text in [s.as_str(), long.as_str(), "", "\"", "\\", "\u{0}"] {
            same_as_serde_json(&json!({ "text": text, "k\"\n": [text] }));
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them() {
        // Text equality: parsing back would depend on serde_json's `float_roundtrip` feature.
        let v = json!([
            0,
            -1,
            u64::MAX,
            i64::MIN,
            0.5,
            -1.25e-300,
            1e300,
            f64::MAX,
            f64::MIN_POSITIVE,
            123_456_789.123_456_79
        ]);
        assert_eq!(to_string(&v).unwrap(), serde_json::to_string(&v).unwrap());
    }

    #[test]
    fn non_finite_floats_become_null_like_serde_json() {
        let v = [f64::NAN, f64::INFINITY];
        assert_eq!(to_string(&v).unwrap(), serde_json::to_string(&v).unwrap());
    }

    #[test]
    fn a_tool_result_is_compact_and_parses_back() {
        let v = json!({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "a\tb"}],
            "structuredContent": {"x": null, "y": true, "z": {}}, "isError": false}});
        let text = to_string(&v).unwrap();
        assert!(!text.contains(' ') && !text.contains('\n'), "{text}");
        same_as_serde_json(&v);
    }
}
