//! The fixed names, texts, payloads and schemas that the conformance suite's server scenarios
//! look for (`@modelcontextprotocol/conformance` 0.1.16, `dist/index.js`, one class per scenario).
//!
//! Everything here is data: the handler in [`crate::server`] only wires it to MCP methods.

use serde_json::{Map, Value, json};

/// Name reported in `serverInfo`.
pub(crate) const SERVER_NAME: &str = "conformance-fixture";

/// `logger` field of the `notifications/message` this server sends.
pub(crate) const LOGGER: &str = "conformance-fixture";

/// A 1x1 red RGBA PNG, base64 (the suite's "minimal test image").
pub(crate) const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A minimal valid WAV (PCM, mono, 8 kHz, 16 bit, one silent sample), base64.
pub(crate) const WAV_BASE64: &str =
    "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAAAAA==";

// ----- tools -----

/// `tools-call-simple-text`: returns [`SIMPLE_TEXT`].
pub(crate) const TOOL_SIMPLE_TEXT: &str = "test_simple_text";
/// `tools-call-image`: returns one PNG image block.
pub(crate) const TOOL_IMAGE: &str = "test_image_content";
/// `tools-call-audio`: returns one `audio/wav` block.
pub(crate) const TOOL_AUDIO: &str = "test_audio_content";
/// `tools-call-embedded-resource`: returns one embedded text resource.
pub(crate) const TOOL_EMBEDDED_RESOURCE: &str = "test_embedded_resource";
/// `tools-call-mixed-content`: returns text, image and embedded resource.
pub(crate) const TOOL_MULTIPLE_CONTENT: &str = "test_multiple_content_types";
/// `tools-call-with-logging`: three `notifications/message` at `info`, ~50 ms apart.
pub(crate) const TOOL_LOGGING: &str = "test_tool_with_logging";
/// `tools-call-error`: a tool result with `isError: true`.
pub(crate) const TOOL_ERROR: &str = "test_error_handling";
/// `tools-call-with-progress`: progress 0, 50, 100 of 100, ~50 ms apart.
pub(crate) const TOOL_PROGRESS: &str = "test_tool_with_progress";
/// `tools-call-sampling`: one `sampling/createMessage` to the client.
pub(crate) const TOOL_SAMPLING: &str = "test_sampling";
/// `tools-call-elicitation`: one `elicitation/create` (username, email).
pub(crate) const TOOL_ELICITATION: &str = "test_elicitation";
/// `elicitation-sep1034-defaults`: `elicitation/create` whose fields all carry defaults.
pub(crate) const TOOL_ELICITATION_DEFAULTS: &str = "test_elicitation_sep1034_defaults";
/// `elicitation-sep1330-enums`: `elicitation/create` with the five enum shapes.
pub(crate) const TOOL_ELICITATION_ENUMS: &str = "test_elicitation_sep1330_enums";
/// Pending scenario `json-schema-2020-12`: a tool whose input schema uses 2020-12 keywords.
pub(crate) const TOOL_JSON_SCHEMA_2020_12: &str = "json_schema_2020_12_tool";
/// Pending scenario `server-sse-polling`: a slow tool during which the HTTP front is expected
/// to close the POST SSE stream (the closing itself is HTTP-side, not this server's).
pub(crate) const TOOL_RECONNECTION: &str = "test_reconnection";
/// Interop checks (not a suite scenario): emits `notifications/tools/list_changed` — on a legacy
/// (`initialize`) session as a plain notification, and to every open 2026-07-28
/// `subscriptions/listen` stream that accepted it (spec 2026-07-28 basic/patterns/subscriptions).
pub(crate) const TOOL_LIST_CHANGED: &str = "test_tool_list_changed";

/// Text of [`TOOL_SIMPLE_TEXT`].
pub(crate) const SIMPLE_TEXT: &str = "This is a simple text response for testing.";
/// Text of [`TOOL_ERROR`].
pub(crate) const ERROR_TEXT: &str = "This tool intentionally returns an error for testing";
/// The three log lines of [`TOOL_LOGGING`], in order.
pub(crate) const LOG_LINES: [&str; 3] = [
    "Tool execution started",
    "Tool processing data",
    "Tool execution completed",
];
/// Progress values of [`TOOL_PROGRESS`] (out of [`PROGRESS_TOTAL`]).
pub(crate) const PROGRESS_STEPS: [f64; 3] = [0.0, 50.0, 100.0];
/// `total` of every progress notification.
pub(crate) const PROGRESS_TOTAL: f64 = 100.0;
/// Delay between log lines and between progress notifications.
pub(crate) const STEP_DELAY_MS: u64 = 50;
/// Default run time of [`TOOL_RECONNECTION`] (argument `delayMs` overrides it).
pub(crate) const RECONNECTION_DELAY_MS: u64 = 500;
/// Upper bound for `delayMs` of [`TOOL_RECONNECTION`].
pub(crate) const RECONNECTION_DELAY_MAX_MS: u64 = 30_000;
/// `maxTokens` of the sampling request.
pub(crate) const SAMPLING_MAX_TOKENS: u32 = 100;

// ----- resources -----

/// `resources-read-text`.
pub(crate) const RES_STATIC_TEXT: &str = "test://static-text";
/// Content of [`RES_STATIC_TEXT`].
pub(crate) const STATIC_TEXT: &str = "This is the content of the static text resource.";
/// `resources-read-binary` (`image/png`, the PNG above).
pub(crate) const RES_STATIC_BINARY: &str = "test://static-binary";
/// `resources-subscribe` / `resources-unsubscribe`.
pub(crate) const RES_WATCHED: &str = "test://watched-resource";
/// `resources-templates-read`: `{id}` is echoed into the JSON body.
pub(crate) const RES_TEMPLATE: &str = "test://template/{id}/data";
/// Prefix and suffix of [`RES_TEMPLATE`].
pub(crate) const RES_TEMPLATE_PREFIX: &str = "test://template/";
/// See [`RES_TEMPLATE_PREFIX`].
pub(crate) const RES_TEMPLATE_SUFFIX: &str = "/data";
/// URI of the resource embedded by [`TOOL_EMBEDDED_RESOURCE`].
pub(crate) const RES_EMBEDDED: &str = "test://embedded-resource";
/// Text of the resource embedded by [`TOOL_EMBEDDED_RESOURCE`].
pub(crate) const EMBEDDED_TEXT: &str = "This is an embedded resource content.";
/// URI of the resource embedded by [`TOOL_MULTIPLE_CONTENT`].
pub(crate) const RES_MIXED: &str = "test://mixed-content-resource";
/// Default interval between `notifications/resources/updated` for a subscribed [`RES_WATCHED`].
pub(crate) const WATCH_INTERVAL_MS: u64 = 3_000;
/// Environment variable overriding [`WATCH_INTERVAL_MS`] (milliseconds; `0` turns updates off).
pub(crate) const WATCH_INTERVAL_ENV: &str = "CONFORMANCE_FIXTURE_WATCH_INTERVAL_MS";
/// Command-line flag that restricts the fixture to the legacy era (`initialize`, up to
/// 2025-11-25): `server/discover` is then answered with -32601, as an old server would.
pub(crate) const LEGACY_ONLY_FLAG: &str = "--legacy-only";
/// How long [`TOOL_LIST_CHANGED`] waits for `subscriptions/listen` streams that were accepted but
/// whose handler has not registered yet (rmcp acknowledges a subscription before it runs the
/// handler, so a client may call the tool in between).
pub(crate) const LISTEN_SETTLE_MS: u64 = 1_000;

/// JSON body of the templated resource for `id`.
pub(crate) fn template_body(id: &str) -> String {
    json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") }).to_string()
}

/// The `{id}` of a URI matching [`RES_TEMPLATE`], if it matches (one non-empty path segment).
pub(crate) fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix(RES_TEMPLATE_PREFIX)?
        .strip_suffix(RES_TEMPLATE_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

// ----- prompts -----

/// `prompts-get-simple`.
pub(crate) const PROMPT_SIMPLE: &str = "test_simple_prompt";
/// Text of [`PROMPT_SIMPLE`].
pub(crate) const PROMPT_SIMPLE_TEXT: &str = "This is a simple prompt for testing.";
/// `prompts-get-with-args` (`arg1`, `arg2`, both required).
pub(crate) const PROMPT_WITH_ARGS: &str = "test_prompt_with_arguments";
/// `prompts-get-embedded-resource` (`resourceUri`, required).
pub(crate) const PROMPT_EMBEDDED: &str = "test_prompt_with_embedded_resource";
/// Text of the resource embedded by [`PROMPT_EMBEDDED`].
pub(crate) const PROMPT_EMBEDDED_TEXT: &str = "Embedded resource content for testing.";
/// Second message of [`PROMPT_EMBEDDED`].
pub(crate) const PROMPT_EMBEDDED_FOLLOWUP: &str = "Please process the embedded resource above.";
/// `prompts-get-with-image`.
pub(crate) const PROMPT_IMAGE: &str = "test_prompt_with_image";
/// Second message of [`PROMPT_IMAGE`].
pub(crate) const PROMPT_IMAGE_FOLLOWUP: &str = "Please analyze the image above.";

/// Completion candidates for `test_prompt_with_arguments`' `arg1`/`arg2`.
pub(crate) const ARG_CANDIDATES: &[&str] = &["testValue1", "testValue2", "hello", "world"];
/// Completion candidates for the template's `{id}`.
pub(crate) const ID_CANDIDATES: &[&str] = &["1", "2", "3", "42", "123"];
/// Completion candidates for `test_prompt_with_embedded_resource`'s `resourceUri`.
pub(crate) const URI_CANDIDATES: &[&str] = &[
    RES_STATIC_TEXT,
    RES_STATIC_BINARY,
    RES_WATCHED,
    "test://template/123/data",
];

// ----- schemas -----

/// Turns a `json!` object literal into a map (a non-object becomes an empty map).
pub(crate) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Input schema of the tools that take no arguments.
pub(crate) fn empty_input_schema() -> Map<String, Value> {
    object(json!({ "type": "object", "properties": {} }))
}

/// Input schema of [`TOOL_SAMPLING`].
pub(crate) fn sampling_input_schema() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "prompt": { "type": "string", "description": "The prompt to send to the LLM" }
        },
        "required": ["prompt"]
    }))
}

/// Input schema of [`TOOL_ELICITATION`].
pub(crate) fn elicitation_input_schema() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "message": { "type": "string", "description": "The message to show the user" }
        },
        "required": ["message"]
    }))
}

/// Input schema of [`TOOL_RECONNECTION`].
pub(crate) fn reconnection_input_schema() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "delayMs": {
                "type": "integer",
                "minimum": 0,
                "maximum": RECONNECTION_DELAY_MAX_MS,
                "description": "How long the call runs before it answers (default 500 ms)"
            }
        }
    }))
}

/// Input schema of [`TOOL_JSON_SCHEMA_2020_12`], verbatim from the scenario
/// (`$schema`, `$defs` with `address`, `additionalProperties: false`).
pub(crate) fn json_schema_2020_12_input_schema() -> Map<String, Value> {
    object(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {
                    "street": { "type": "string" },
                    "city": { "type": "string" }
                }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" }
        },
        "additionalProperties": false
    }))
}

/// `requestedSchema` of [`TOOL_ELICITATION`] (as the scenario's description gives it).
pub(crate) fn elicitation_requested_schema() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" }
        },
        "required": ["username", "email"]
    }))
}

/// `requestedSchema` of [`TOOL_ELICITATION_DEFAULTS`] (SEP-1034: a default for every primitive type).
pub(crate) fn elicitation_defaults_schema() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        },
        "required": []
    }))
}

/// `requestedSchema` of [`TOOL_ELICITATION_ENUMS`] (SEP-1330: untitled/titled single-select,
/// legacy `enumNames`, untitled/titled multi-select).
pub(crate) fn elicitation_enums_schema() -> Map<String, Value> {
    object(json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    { "const": "value1", "title": "First Option" },
                    { "const": "value2", "title": "Second Option" },
                    { "const": "value3", "title": "Third Option" }
                ]
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" }
                    ]
                }
            }
        },
        "required": []
    }))
}

#[cfg(test)]
mod tests {
    use base64::{Engine, prelude::BASE64_STANDARD};

    use super::*;

    #[test]
    fn png_and_wav_are_well_formed() -> Result<(), base64::DecodeError> {
        let png = BASE64_STANDARD.decode(PNG_BASE64)?;
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        let wav = BASE64_STANDARD.decode(WAV_BASE64)?;
        assert!(wav.starts_with(b"RIFF") && &wav[8..12] == b"WAVE");
        let riff_len = u32::from_le_bytes([wav[4], wav[5], wav[6], wav[7]]) as usize;
        assert_eq!(riff_len + 8, wav.len(), "RIFF length covers the whole file");
        Ok(())
    }

    #[test]
    fn template_ids() {
        assert_eq!(template_id("test://template/123/data"), Some("123"));
        assert_eq!(template_id("test://template//data"), None);
        assert_eq!(template_id("test://template/1/2/data"), None);
        assert_eq!(template_id("test://static-text"), None);
        assert!(template_body("123").contains("Data for ID: 123"));
    }
}
