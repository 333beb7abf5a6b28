//! The MCP server of a [`ToolSet`]: tools served on their own, without a runtime (the
//! delegation worker's, `machine-mcp delegation worker-mcp`).
//!
//! Rules: `initialize` is rmcp's negotiation, advertising tools only; `serverInfo` is this
//! binary's name and version with the set's title and description, and the set's
//! instructions. `tools/list` lists the set's tools in its order. `tools/call` of a name the
//! set does not list is -32602 (Tools §Error Handling), its message naming the tools; every
//! other call is the set's answer, a failure an `isError` result ([`reply_result`]).

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};

use crate::call::{result::reply_result, tool_set::ToolSet};

/// The rmcp handler of one [`ToolSet`].
#[derive(Clone)]
pub(crate) struct ToolSetServer {
    set: Arc<dyn ToolSet>,
    tools: Arc<Vec<Tool>>,
}

impl ToolSetServer {
    /// A server of `set`.
    pub(crate) fn new(set: Arc<dyn ToolSet>) -> Self {
        let tools = Arc::new(set.tools().iter().map(|t| t.to_tool()).collect());
        Self { set, tools }
    }

    /// The names of the set's tools as a sentence's list (`a, b or c`).
    fn names(&self) -> String {
        let names: Vec<&str> = self.set.tools().iter().map(|t| t.name()).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => "none".to_owned(),
        }
    }
}

impl ServerHandler for ToolSetServer {
    fn get_info(&self) -> ServerConfig {
        let about = self.set.about();
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new(crate::SERVER_NAME, crate::version())
                    .with_title(about.title)
                    .with_description(about.description),
            )
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_instructions(about.instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.set.tools().iter().any(|t| t.name() == name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}: {}", self.names()),
                None,
            ));
        }
        let reply = self
            .set
            .call(&name, request.arguments.unwrap_or_default())
            .await;
        Ok(reply_result(reply).into())
    }
}
