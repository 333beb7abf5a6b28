//! What a tool call answers, as an MCP `CallToolResult`: a success carries `structuredContent`
//! and its readable text (or plain content blocks); a failure is `isError: true` with one text
//! block, the [`ToolError`]'s JSON object with its code first, shorter than
//! [`ERROR_TEXT_MAX_CHARS`], and no `structuredContent` (DESIGN §3 "Results").

use rmcp::model::{CallToolResult, ContentBlock};

use crate::limits::ERROR_TEXT_MAX_CHARS;

use crate::call::{
    catalog::Reply,
    error::{ToolError, ToolResult},
};

/// The result of a call whose handler answered `reply`.
#[must_use]
pub(crate) fn reply_result(reply: ToolResult<Reply>) -> CallToolResult {
    match reply {
        Ok(Reply::Structured { value, text }) => structured_result(value, text),
        Ok(Reply::Content(blocks)) => CallToolResult::success(blocks),
        Err(e) => error_result(&e),
    }
}

/// A successful structured result: `structuredContent` and its readable `text` as the one text
/// block ([`crate::call::text`]), which MCP 2025-11-25 (Server Features › Tools › Structured
/// Content) says a server SHOULD send for clients without structured content support.
#[must_use]
pub(crate) fn structured_result(value: serde_json::Value, text: String) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

/// Renders a [`ToolError`] as an `isError: true` result (no `structuredContent`): one text
/// block, the error's JSON object ([`ToolError::to_json`]) with the code first, shorter than
/// [`ERROR_TEXT_MAX_CHARS`] ([`error_text`]).
#[must_use]
pub fn error_result(e: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error_text(e))])
}

/// The text of an error result: `{"code", "message", "retryable", "side_effects_started",
/// ...details}` in that order, shorter than [`ERROR_TEXT_MAX_CHARS`] (Claude Code cuts error
/// text at about 11,000 characters). A message too long for it is cut (ending in `…`); details
/// that still do not fit are left out, largest first, and `"details_cut": true` says so.
#[must_use]
pub fn error_text(e: &ToolError) -> String {
    use serde_json::Value;
    const FIXED: [&str; 4] = ["code", "message", "retryable", "side_effects_started"];
    /// Room kept for the message when details are many.
    const MESSAGE_MIN: usize = 1_000;
    let json = e.to_json();
    let mut details: Vec<(String, String)> = json
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !FIXED.contains(&k.as_str()))
        .map(|(k, v)| (Value::from(k.as_str()).to_string(), v.to_string()))
        .collect();
    let write = |message: &str, details: &[(String, String)], cut_details: bool| {
        let mut t = format!(
            "{{\"code\":{},\"message\":{},\"retryable\":{},\"side_effects_started\":{}",
            Value::from(e.code().as_str()),
            Value::from(message),
            e.is_retryable(),
            e.side_effects_started()
        );
        for (k, v) in details {
            t.push_str(&format!(",{k}:{v}"));
        }
        if cut_details {
            t.push_str(",\"details_cut\":true");
        }
        t.push('}');
        t
    };
    let full = write(e.message(), &details, false);
    if full.len() < ERROR_TEXT_MAX_CHARS {
        return full;
    }
    let mut cut_details = false;
    let details_len =
        |d: &[(String, String)]| -> usize { d.iter().map(|(k, v)| k.len() + v.len() + 2).sum() };
    while !details.is_empty() && details_len(&details) + MESSAGE_MIN + 200 > ERROR_TEXT_MAX_CHARS {
        let largest = (0..details.len())
            .max_by_key(|&i| details[i].1.len())
            .unwrap_or(0);
        details.remove(largest);
        cut_details = true;
    }
    let mut message = e.message().to_owned();
    loop {
        let t = write(&message, &details, cut_details);
        if t.len() < ERROR_TEXT_MAX_CHARS || message.is_empty() {
            return t;
        }
        // Escaping may make the message longer in JSON than in bytes: cut by the excess.
        let over = t.len() + 1 - ERROR_TEXT_MAX_CHARS;
        let keep = message.len().saturating_sub(over + "…".len());
        message = crate::call::text::cut(message, keep + "…".len(), "…");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_puts_the_code_first_and_stays_under_the_bound() {
        let e = ToolError::conflict("short").detail("bytes_written", 3);
        let t = error_text(&e);
        assert!(
            t.starts_with("{\"code\":\"conflict\",\"message\":\"short\""),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert_eq!(v["bytes_written"], 3);

        let long = "\"quoted\" é\n".repeat(5_000);
        let e = ToolError::invalid(long)
            .detail("path", "p".repeat(20_000))
            .detail("total_lines", 7);
        let t = error_text(&e);
        assert!(t.len() < ERROR_TEXT_MAX_CHARS, "{}", t.len());
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert_eq!(v["code"], "invalid_request");
        assert_eq!(v["details_cut"], true);
        assert_eq!(v["total_lines"], 7, "small details stay");
        assert!(v["message"].as_str().unwrap().ends_with('…'));
    }
}
