//! Agent inspections (`agents_status`): each agent's discovery, version and sign-in probe,
//! cached for [`DELEGATION_INSPECTION_CACHE`], and its last success among the receipts kept.

use schemars::JsonSchema;
use serde::Serialize;

use crate::limits::DELEGATION_INSPECTION_CACHE;

use super::{
    DRAINING_MESSAGE, Manager,
    agents::{self, Agent, AgentStatus},
    off_thread,
    store::{DelegationStatus, Entry},
    store_error,
};
use crate::config::UserConfig;

/// What `agents_status` reports per agent: the inspection and the last success.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AgentReport {
    /// The inspection (cached up to 30 s).
    #[serde(flatten)]
    pub status: AgentStatus,
    /// RFC 3339 UTC end of its newest `completed` delegation among the receipts kept.
    pub last_success: Option<String>,
}

impl Manager {
    /// Inspects `agent`, reusing an inspection younger than [`DELEGATION_INSPECTION_CACHE`]
    /// made with the same configuration.
    pub async fn inspect(&self, agent: Agent) -> AgentStatus {
        let config = match &self.options.config {
            Some(c) => c.clone(),
            None => match off_thread(|| Ok(UserConfig::load())).await {
                Ok(Ok(c)) => c.delegation,
                Ok(Err(e)) => return unusable(agent, &e.to_string()),
                Err(e) => return unusable(agent, e.message()),
            },
        };
        let cached = self
            .inspections
            .lock()
            .get(&agent)
            .filter(|(at, c, _)| at.elapsed() < DELEGATION_INSPECTION_CACHE && *c == config)
            .map(|(_, _, s)| s.clone());
        if let Some(s) = cached {
            return s;
        }
        let c = config.clone();
        let status = match tokio::task::spawn_blocking(move || {
            let path = std::env::var_os("PATH");
            agents::inspect(agent, &c, path.as_deref())
        })
        .await
        {
            Ok(s) => s,
            Err(e) => return unusable(agent, &format!("the inspection failed: {e}")),
        };
        self.inspections
            .lock()
            .insert(agent, (tokio::time::Instant::now(), config, status.clone()));
        status
    }

    /// Every agent's status (`agents_status`): its inspection and its last success. While
    /// draining no agent can accept work (`not_ready` is [`DRAINING_MESSAGE`]), as `delegate`
    /// refuses.
    pub async fn status(&self) -> Vec<AgentReport> {
        let s = self.store.clone();
        let entries = off_thread(move || {
            let _lock = s.lock().map_err(|e| store_error(&e))?;
            Ok(s.all_settled())
        })
        .await
        .unwrap_or_default();
        let mut out = Vec::new();
        for agent in Agent::ALL {
            let last_success = entries
                .iter()
                .filter_map(|e| match e {
                    Entry::Ok(r)
                        if r.receipt.agent == agent
                            && r.receipt.status == DelegationStatus::Completed =>
                    {
                        r.receipt.ended_at.clone()
                    }
                    _ => None,
                })
                .max();
            let mut status = self.inspect(agent).await;
            if self.store.draining() {
                status.can_accept_work = false;
                status.not_ready = Some(DRAINING_MESSAGE.to_owned());
            }
            out.push(AgentReport {
                status,
                last_success,
            });
        }
        out
    }
}

/// The status of an agent that cannot even be inspected: the user configuration (why) is
/// unusable, so no agent can accept work.
pub fn unusable(agent: Agent, why: &str) -> AgentStatus {
    AgentStatus {
        agent,
        enabled: false,
        available: false,
        executable: None,
        version: None,
        authenticated: None,
        auth_detail: None,
        can_accept_work: false,
        not_ready: Some(format!("the user configuration cannot be used: {why}")),
        program: None,
    }
}
