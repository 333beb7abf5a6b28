//! The fixture's catalogue: the tools it lists (names and schemas from [`fx`]) and its prompts.

use std::sync::Arc;

use rmcp::{
    ErrorData,
    model::{Prompt, PromptArgument, Tool},
};
use serde_json::{Map, Value};

use super::string_arg;
use crate::fixtures as fx;

// ----- tool catalogue -----

/// Every tool this fixture offers, in a stable order.
pub(super) fn tools() -> Vec<Tool> {
    let empty = || Arc::new(fx::empty_input_schema());
    vec![
        Tool::new(
            fx::TOOL_SIMPLE_TEXT,
            "Returns one simple text block",
            empty(),
        ),
        Tool::new(
            fx::TOOL_IMAGE,
            "Returns one PNG image block (1x1 red pixel)",
            empty(),
        ),
        Tool::new(fx::TOOL_AUDIO, "Returns one audio/wav block", empty()),
        Tool::new(
            fx::TOOL_EMBEDDED_RESOURCE,
            "Returns one embedded text resource",
            empty(),
        ),
        Tool::new(
            fx::TOOL_MULTIPLE_CONTENT,
            "Returns text, image and embedded resource blocks",
            empty(),
        ),
        Tool::new(
            fx::TOOL_LOGGING,
            "Sends three info log notifications ~50 ms apart while it runs",
            empty(),
        ),
        Tool::new(
            fx::TOOL_ERROR,
            "Always fails with a tool error (isError: true)",
            empty(),
        ),
        Tool::new(
            fx::TOOL_PROGRESS,
            "Reports progress 0, 50 and 100 of 100 (~50 ms apart) when the request has a progressToken",
            empty(),
        ),
        Tool::new(
            fx::TOOL_SAMPLING,
            "Asks the client for an LLM completion (sampling/createMessage) and returns its text",
            Arc::new(fx::sampling_input_schema()),
        ),
        Tool::new(
            fx::TOOL_ELICITATION,
            "Asks the user for a username and email (elicitation/create) and returns the answer",
            Arc::new(fx::elicitation_input_schema()),
        ),
        Tool::new(
            fx::TOOL_ELICITATION_DEFAULTS,
            "Elicitation whose fields carry defaults for every primitive type (SEP-1034)",
            empty(),
        ),
        Tool::new(
            fx::TOOL_ELICITATION_ENUMS,
            "Elicitation with the five enum schema variants (SEP-1330)",
            empty(),
        ),
        Tool::new(
            fx::TOOL_JSON_SCHEMA_2020_12,
            "Tool with JSON Schema 2020-12 features ($schema, $defs, additionalProperties) (SEP-1613)",
            Arc::new(fx::json_schema_2020_12_input_schema()),
        ),
        Tool::new(
            fx::TOOL_RECONNECTION,
            "Runs for delayMs (default 500 ms) and then answers; the HTTP front is expected to close \
             the POST SSE stream meanwhile and replay the answer after Last-Event-ID (SEP-1699)",
            Arc::new(fx::reconnection_input_schema()),
        ),
        Tool::new(
            fx::TOOL_LIST_CHANGED,
            "Sends notifications/tools/list_changed: on an initialize session, and to every open \
             subscriptions/listen stream that asked for it (2026-07-28)",
            empty(),
        ),
    ]
}

// ----- prompts -----

/// Every prompt this fixture offers.
pub(super) fn prompts() -> Vec<Prompt> {
    let required = |name: &str, description: &str| {
        PromptArgument::new(name)
            .with_description(description)
            .with_required(true)
    };
    vec![
        Prompt::new(
            fx::PROMPT_SIMPLE,
            Some("A simple prompt without arguments"),
            None,
        )
        .with_title("Simple Test Prompt"),
        Prompt::new(
            fx::PROMPT_WITH_ARGS,
            Some("A prompt with two required arguments"),
            Some(vec![
                required("arg1", "First test argument"),
                required("arg2", "Second test argument"),
            ]),
        )
        .with_title("Prompt With Arguments"),
        Prompt::new(
            fx::PROMPT_EMBEDDED,
            Some("A prompt that embeds a resource"),
            Some(vec![required(
                "resourceUri",
                "URI of the resource to embed",
            )]),
        )
        .with_title("Prompt With Embedded Resource"),
        Prompt::new(
            fx::PROMPT_IMAGE,
            Some("A prompt that includes image content"),
            None,
        )
        .with_title("Prompt With Image"),
    ]
}

/// The required string argument `name` of a prompt, or -32602.
pub(super) fn prompt_arg<'a>(
    args: Option<&'a Map<String, Value>>,
    name: &str,
) -> Result<&'a str, ErrorData> {
    args.and_then(|a| string_arg(a, name)).ok_or_else(|| {
        ErrorData::invalid_params(format!("missing required argument '{name}'"), None)
    })
}
