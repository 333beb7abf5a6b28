//! Local resources (`docs/jobs.md`): secrets the user registers by alias on the
//! machine (`machine-mcp resource add`), which jobs use without their bytes or paths ever
//! passing through MCP. The one tool, `list_local_resources`, shows aliases and their state
//! only. The [`engine`] is the registry.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

use crate::{
    Access,
    call::{
        catalog::{Hints, ToolMeta, ToolSpec},
        context::CallContext,
        error::{ToolError, ToolErrorCode, ToolResult},
        text::TextView,
    },
    policy::Capability,
    tools::{
        blocking::blocking,
        family::{Family, FamilyState},
        info::NoArgs,
    },
};

pub mod engine;

use engine::{Registry, Validity};

/// The family's entry in the registry: `list_local_resources` and the registry it reads
/// ([`ResourcesState`]).
pub(crate) const FAMILY: Family = Family {
    specs,
    state: Some(ResourcesState::make),
    resources: None,
    prompts: None,
};

/// What a runtime keeps for local resources: the registry of its state directory
/// ([`RuntimeConfig::state_dir`](crate::RuntimeConfig::state_dir); none without one).
#[derive(Debug)]
pub(crate) struct ResourcesState {
    registry: Option<Registry>,
}

impl ResourcesState {
    fn make(config: &crate::RuntimeConfig) -> Box<dyn FamilyState> {
        Box::new(Self {
            registry: config.state_dir.as_deref().map(Registry::new),
        })
    }
}

impl FamilyState for ResourcesState {}

/// The registry of `rt`'s runtime; `None` without a state directory (the job tools check a
/// plan's resources against it).
///
/// # Errors
/// `internal_error` when the runtime keeps no state for this family.
pub(crate) fn registry(rt: &Access) -> ToolResult<Option<Registry>> {
    Ok(rt.state::<ResourcesState>()?.registry.clone())
}

pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![ToolSpec::structured(
        ToolMeta {
            name: "list_local_resources",
            title: "List local resources",
            description: "List the local resources (secrets the user registered on this \
                          machine with `machine-mcp resource add`) that jobs can use by alias \
                          in env_resources, stdin_resource and {{resource:ALIAS}}: each alias \
                          and its state (ok, missing, changed, insecure_permissions, \
                          unreadable). Never shows paths or contents.",
            capability: Capability::ExecDirect,
            hints: Hints::READ,
        },
        list_local_resources,
    )]
}

/// One resource as callers see it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ResourceView {
    /// The alias.
    alias: String,
    /// Whether jobs can use it now.
    state: Validity,
}

/// Result of `list_local_resources`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ListResources {
    /// Every registered resource, by alias.
    resources: Vec<ResourceView>,
}

impl TextView for ListResources {
    fn summary(&self) -> String {
        let ok = self
            .resources
            .iter()
            .filter(|r| r.state == Validity::Ok)
            .count();
        format!(
            "{} local resources, {ok} usable; register more with `machine-mcp resource add ALIAS PATH` on the machine",
            self.resources.len()
        )
    }

    fn body(&self, out: &mut String) {
        for r in &self.resources {
            out.push_str(&format!("{} {}\n", r.alias, r.state.as_str()));
        }
    }
}

async fn list_local_resources(
    rt: Arc<Access>,
    _args: NoArgs,
    _cx: CallContext,
) -> ToolResult<ListResources> {
    let registry = registry(&rt)?.ok_or_else(|| {
        ToolError::new(
            ToolErrorCode::Unavailable,
            "local resources need a state directory, and this server has none",
        )
    })?;
    blocking(move || {
        let all = registry
            .load()
            .map_err(|e| ToolError::new(ToolErrorCode::ExecutionFailed, e.to_string()))?;
        let resources = all
            .iter()
            .map(|(alias, entry)| ResourceView {
                alias: alias.clone(),
                state: engine::check(entry),
            })
            .collect();
        Ok(ListResources { resources })
    })
    .await
}
