//! `agents_status`: which agent CLIs `delegate` can use now (never a model call).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

use super::{
    engine::{
        self, AgentReport,
        agents::{self, Agent},
    },
    manager,
};
use crate::{
    Access,
    call::{
        context::CallContext,
        error::ToolResult,
        text::{TextView, cut},
    },
    config::UserConfig,
    tools::{blocking::blocking, info::NoArgs},
};

/// Result of `agents_status`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct AgentsStatus {
    /// Every agent: codex, claude, gemini.
    agents: Vec<AgentReport>,
}

impl TextView for AgentsStatus {
    fn summary(&self) -> String {
        let ready: Vec<&str> = self
            .agents
            .iter()
            .filter(|a| a.status.can_accept_work)
            .map(|a| a.status.agent.name())
            .collect();
        if ready.is_empty() {
            "no agent can accept work now (see each one's reason; agents are enabled in \
             ~/.config/machine-mcp/config.toml [delegation.agents.NAME])"
                .to_owned()
        } else {
            format!("agents that can accept work: {}", ready.join(", "))
        }
    }

    fn body(&self, out: &mut String) {
        for a in &self.agents {
            let s = &a.status;
            out.push_str(&format!(
                "{}: {}{}{}{}{}\n",
                s.agent.name(),
                if s.can_accept_work {
                    "ready"
                } else {
                    "not ready"
                },
                s.version
                    .as_deref()
                    .map(|v| format!(", version {}", cut(v.to_owned(), 200, "…")))
                    .unwrap_or_default(),
                match (s.authenticated, &s.auth_detail) {
                    (Some(true), _) => ", signed in".to_owned(),
                    (Some(false), _) => ", not signed in".to_owned(),
                    (None, Some(d)) => format!(", sign-in unknown ({})", cut(d.clone(), 300, "…")),
                    (None, None) => String::new(),
                },
                a.last_success
                    .as_deref()
                    .map(|t| format!(", last success {t}"))
                    .unwrap_or_default(),
                s.not_ready
                    .as_deref()
                    .map(|r| format!(": {}", cut(r.to_owned(), 1_000, "…")))
                    .unwrap_or_default(),
            ));
        }
    }
}

pub(super) async fn agents_status(
    rt: Arc<Access>,
    _args: NoArgs,
    _cx: CallContext,
) -> ToolResult<AgentsStatus> {
    if let Ok(manager) = manager(&rt).await {
        return Ok(AgentsStatus {
            agents: manager.status().await,
        });
    }
    // Without a state directory: the inspections alone (nothing can be delegated anyway).
    let agents = blocking(|| {
        let config = UserConfig::load().map(|c| c.delegation);
        let path = std::env::var_os("PATH");
        Ok(Agent::ALL
            .into_iter()
            .map(|agent| {
                let mut status = match &config {
                    Ok(c) => agents::inspect(agent, c, path.as_deref()),
                    Err(e) => engine::unusable(agent, &e.to_string()),
                };
                status.can_accept_work = false;
                status.not_ready =
                    Some("delegation needs a state directory, and this server has none".to_owned());
                AgentReport {
                    status,
                    last_success: None,
                }
            })
            .collect())
    })
    .await?;
    Ok(AgentsStatus { agents })
}
