//! Unit tests of the fixture's handler and catalogue.

use super::*;
use crate::fixtures::object;

/// The elicitation schemas must survive rmcp's typed `ElicitationSchema` unchanged: the
/// SEP-1034/SEP-1330 scenarios check every keyword (defaults, enumNames, oneOf, anyOf).
#[test]
fn elicitation_schemas_round_trip_verbatim() -> Result<(), serde_json::Error> {
    for schema in [
        fx::elicitation_requested_schema(),
        fx::elicitation_defaults_schema(),
        fx::elicitation_enums_schema(),
    ] {
        let typed = ElicitationSchema::from_json_schema(schema.clone())?;
        assert_eq!(serde_json::to_value(&typed)?, Value::Object(schema));
    }
    Ok(())
}

#[test]
fn every_tool_has_a_description_and_object_schema() {
    let tools = tools();
    assert_eq!(tools.len(), 15);
    let names: BTreeSet<_> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names.len(), tools.len(), "tool names are unique");
    for tool in &tools {
        assert!(tool.description.as_deref().is_some_and(|d| !d.is_empty()));
        assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
    }
}

#[test]
fn json_schema_2020_12_tool_keeps_its_keywords() -> Result<(), serde_json::Error> {
    let tool = tools()
        .into_iter()
        .find(|t| t.name == fx::TOOL_JSON_SCHEMA_2020_12);
    let listed = serde_json::to_value(ListToolsResult::with_all_items(tool.into_iter().collect()))?;
    let schema = &listed["tools"][0]["inputSchema"];
    assert_eq!(
        schema["$schema"],
        json!("https://json-schema.org/draft/2020-12/schema")
    );
    assert!(schema["$defs"]["address"].is_object());
    assert_eq!(schema["additionalProperties"], json!(false));
    Ok(())
}

#[test]
fn severities_are_ordered() {
    let levels = [
        LoggingLevel::Debug,
        LoggingLevel::Info,
        LoggingLevel::Notice,
        LoggingLevel::Warning,
        LoggingLevel::Error,
        LoggingLevel::Critical,
        LoggingLevel::Alert,
        LoggingLevel::Emergency,
    ];
    for pair in levels.windows(2) {
        assert!(severity(pair[0]) < severity(pair[1]));
    }
}

#[test]
fn object_helper() {
    assert!(object(json!([1])).is_empty());
    assert_eq!(object(json!({"a": 1})).len(), 1);
}
