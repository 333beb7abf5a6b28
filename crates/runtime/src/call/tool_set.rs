//! A set of tools served on its own, without a runtime (no workspace, policy, session or call
//! slots): the delegation worker's MCP server (`machine-mcp delegation worker-mcp`), whose
//! tools forward to the server that runs the delegation. A tool family defines the set
//! ([`ToolSet`], its entries [`ToolDef`]s); the MCP plumbing serves it
//! ([`crate::mcp::stdio::serve_tool_set`]), so that neither names the other.
//!
//! A set's tools are listed as [`ToolSpec`](super::catalog::ToolSpec)s are (schemas generated
//! from the argument and output types, annotations from [`Hints`]); a call of a name the set
//! does not list is a JSON-RPC error (-32602), every other failure an `isError` result.

use std::{future::Future, pin::Pin, sync::Arc};

use rmcp::model::{JsonObject, Tool};
use schemars::JsonSchema;

use super::{
    catalog::{Hints, Reply, definition, input_schema, output_schema},
    error::ToolResult,
};

/// One tool of a [`ToolSet`], as `tools/list` shows it.
#[derive(Debug)]
pub struct ToolDef {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    hints: Hints,
    input_schema: Arc<JsonObject>,
    output_schema: Arc<JsonObject>,
}

impl ToolDef {
    /// A tool taking arguments of type `A` and returning structured output of type `O`.
    pub(crate) fn structured<A: JsonSchema + 'static, O: JsonSchema + 'static>(
        name: &'static str,
        title: &'static str,
        description: &'static str,
        hints: Hints,
    ) -> Self {
        Self {
            name,
            title,
            description,
            hints,
            input_schema: input_schema::<A>(name),
            output_schema: output_schema::<O>(),
        }
    }

    /// The tool's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The MCP `Tool` definition.
    pub fn to_tool(&self) -> Tool {
        definition(
            self.name,
            self.title,
            self.description,
            self.hints,
            &self.input_schema,
            Some(&self.output_schema),
        )
    }
}

/// What a tool set's server says about itself in `initialize` (`serverInfo` is this binary's
/// name and version).
#[derive(Debug, Clone, Copy)]
pub struct About {
    /// `serverInfo.title`.
    pub title: &'static str,
    /// `serverInfo.description`.
    pub description: &'static str,
    /// The server's `instructions`.
    pub instructions: &'static str,
}

/// The future of one call of a [`ToolSet`].
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = ToolResult<Reply>> + Send + 'a>>;

/// Tools served without a runtime (module docs).
pub trait ToolSet: Send + Sync + 'static {
    /// What the server says about itself.
    fn about(&self) -> About;

    /// The tools, in listing order.
    fn tools(&self) -> &[ToolDef];

    /// Runs the tool `name` (one of [`ToolSet::tools`]) with `arguments`.
    fn call<'a>(&'a self, name: &'a str, arguments: JsonObject) -> CallFuture<'a>;
}
