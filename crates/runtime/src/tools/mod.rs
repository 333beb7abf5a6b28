//! The tool registry: every tool family, in listing order (`FAMILIES`) — the one list from
//! which `tools/list` is derived ([`allowed`]), `tools/call` finds its handler ([`find`]), the
//! runtime makes the families' state (`family::States`) and the server lists resources and
//! prompts (`resource_list`, `prompt_list`, ...).
//!
//! One module per tool family (a folder holding its handlers, its pure `engine` and their tests;
//! `info` is one file); each family's `FAMILY` is its entry (`family::Family`): its catalog entries,
//! built with [`ToolSpec`], its state and the resources or prompts it serves. Nothing outside
//! `tools/` names a family: the runtime and the MCP plumbing reach them through this registry
//! (the tidy test checks `lib.rs` and `mcp/`). `blocking` is how handlers run blocking work;
//! `cursor` is the continuation token of the paged tools.

use std::sync::LazyLock;

use crate::{
    Access,
    call::{
        catalog::ToolSpec,
        error::{ToolError, ToolErrorCode, ToolResult},
    },
    policy::Policy,
};

pub(crate) mod blocking;
pub(crate) mod context;
mod cursor;
pub mod delegation;
mod edit;
pub(crate) mod family;
mod fs;
pub(crate) mod git;
pub mod info;
pub mod jobs;
mod knowledge;
mod patch;
pub mod process;
pub(crate) mod project;
pub mod resources;
mod search;
pub(crate) mod skills;

use family::{Family, PromptEntry, PromptText, ResourceEntry, ResourceTemplate, ResourceText};

/// Every tool family, in listing order.
pub(crate) static FAMILIES: [Family; 14] = [
    info::FAMILY,
    context::FAMILY,
    project::FAMILY,
    skills::FAMILY,
    fs::FAMILY,
    search::FAMILY,
    edit::FAMILY,
    patch::FAMILY,
    process::FAMILY,
    git::FAMILY,
    jobs::FAMILY,
    resources::FAMILY,
    delegation::FAMILY,
    knowledge::FAMILY,
];

static CATALOG: LazyLock<Vec<ToolSpec>> =
    LazyLock::new(|| FAMILIES.iter().flat_map(|f| (f.specs)()).collect());

/// Every tool this build knows, in listing order.
pub fn all() -> &'static [ToolSpec] {
    &CATALOG
}

/// The tool named `name`, if this build has one.
pub fn find(name: &str) -> Option<&'static ToolSpec> {
    CATALOG.iter().find(|t| t.meta().name == name)
}

/// The tools `policy` allows, in listing order.
pub fn allowed(policy: &Policy) -> impl Iterator<Item = &'static ToolSpec> + '_ {
    CATALOG
        .iter()
        .filter(move |t| policy.allows(t.meta().capability))
}

/// Every family's resources for `access`'s caller, in listing order (blocking).
pub(crate) fn resource_list(access: &Access) -> Vec<ResourceEntry> {
    FAMILIES
        .iter()
        .filter_map(|f| f.resources)
        .flat_map(|r| (r.list)(access))
        .collect()
}

/// Every family's resource templates, in listing order.
pub(crate) fn resource_templates() -> impl Iterator<Item = &'static ResourceTemplate> {
    FAMILIES
        .iter()
        .filter_map(|f| f.resources)
        .flat_map(|r| r.templates)
}

/// Reads the resource `uri` for `access`'s caller (blocking): the family whose prefix `uri`
/// starts with reads it.
///
/// # Errors
/// `not_found` for a URI of no family's prefix (the message names the prefixes); what the
/// family's read returns.
pub(crate) fn resource_read(access: &Access, uri: &str) -> ToolResult<ResourceText> {
    let mut served = FAMILIES.iter().filter_map(|f| f.resources);
    match served.clone().find(|r| uri.starts_with(r.prefix)) {
        Some(r) => (r.read)(access, uri),
        None => Err(ToolError::new(
            ToolErrorCode::NotFound,
            format!(
                "{uri}: not a {} resource",
                served
                    .by_ref()
                    .map(|r| r.prefix)
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        )),
    }
}

/// Every family's prompts for `access`'s caller, in listing order (blocking).
pub(crate) fn prompt_list(access: &Access) -> Vec<PromptEntry> {
    FAMILIES
        .iter()
        .filter_map(|f| f.prompts)
        .flat_map(|p| (p.list)(access))
        .collect()
}

/// The prompt `name` for `access`'s caller (blocking): the first family, in listing order,
/// that has one of that name.
///
/// # Errors
/// The first family's `not_found` when none has it (a family's message names what exists);
/// another error of the family that answered it.
pub(crate) fn prompt_get(access: &Access, name: &str) -> ToolResult<PromptText> {
    let mut missing = None;
    for p in FAMILIES.iter().filter_map(|f| f.prompts) {
        match (p.get)(access, name) {
            Err(e) if e.code() == ToolErrorCode::NotFound => {
                missing.get_or_insert(e);
            }
            answer => return answer,
        }
    }
    Err(missing.unwrap_or_else(|| {
        ToolError::new(ToolErrorCode::NotFound, format!("no prompt named {name:?}"))
    }))
}

#[cfg(test)]
mod tests {
    use crate::{limits::RESULT_TEXT_RAISED_MAX_CHARS, limits::TOOL_DESCRIPTION_MAX_CHARS};

    use crate::call::catalog::MAX_RESULT_SIZE_META;

    #[test]
    fn every_family_state_is_found_by_its_type() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::RuntimeConfig {
            workspace: dir.path().into(),
            policy: crate::policy::Policy::profile(crate::policy::Profile::Full),
            default_yield_after: None,
            remote: false,
            state_dir: Some(dir.path().join("state")),
            own_files: Vec::new(),
        };
        let states = super::family::States::new(&super::FAMILIES, &config);
        let kept = super::FAMILIES.iter().filter(|f| f.state.is_some()).count();
        assert_eq!(
            states.iter().count(),
            kept,
            "one state per family that keeps one"
        );
        assert!(states.get::<super::process::Processes>().is_some());
        assert!(states.get::<super::jobs::JobsState>().is_some());
        assert!(states.get::<super::resources::ResourcesState>().is_some());
        assert!(states.get::<super::delegation::DelegationState>().is_some());
    }

    #[test]
    fn every_description_is_shorter_than_hosts_cut_them() {
        for t in super::all() {
            let d = t.meta().description;
            assert!(
                d.len() < TOOL_DESCRIPTION_MAX_CHARS,
                "{}: {} characters",
                t.meta().name,
                d.len()
            );
        }
    }

    #[test]
    fn tools_that_take_larger_requests_declare_it_and_no_other_does() {
        for t in super::all() {
            let tool = t.to_tool();
            let declared = tool
                .meta
                .as_ref()
                .and_then(|m| m.0.get(MAX_RESULT_SIZE_META))
                .and_then(|v| v.as_u64());
            let want = t
                .is_larger_on_request()
                .then_some(RESULT_TEXT_RAISED_MAX_CHARS as u64);
            assert_eq!(declared, want, "{}", t.meta().name);
        }
    }
}
