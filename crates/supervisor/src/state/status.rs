//! What `server_info` shows of the supervisor ([`SupervisorInfo`]) and its state line.

use serde_json::Value;
use tokio::time::Instant;

use crate::limits::WORKER_RESTARTS_MAX;
use runtime::tools::info::{AutomaticSwap, SupervisorInfo};

use super::{Role, Service, State};

impl State {
    pub(crate) fn state_line(&self) -> String {
        match &self.service {
            Service::Serving(_) if self.starting() => {
                "serving; a new worker is starting (a reload)".to_owned()
            }
            Service::Serving(_) => "serving".to_owned(),
            Service::Waiting => match self.recovery.next_at {
                Some(at) => format!(
                    "restarting the worker (attempt {} of {WORKER_RESTARTS_MAX} in {} ms)",
                    self.recovery.attempts + 1,
                    at.saturating_duration_since(Instant::now()).as_millis()
                ),
                None => "starting a worker".to_owned(),
            },
            Service::Failed(reason) => format!("failed: {reason}"),
        }
    }

    pub(crate) fn info(&self) -> SupervisorInfo {
        let active = self.active().and_then(|g| self.workers.get(&g));
        SupervisorInfo {
            pid: std::process::id(),
            worker_pid: active.map(|s| s.worker.pid),
            worker_generation: active.map(|s| s.worker.generation),
            binary: self.config.binary.display().to_string(),
            automatic_swap: AutomaticSwap {
                enabled: self.config.automatic_swap_off.is_none(),
                reason: self.config.automatic_swap_off.clone(),
            },
            binary_version: active.map(|s| s.worker.version.clone()),
            state: self.state_line(),
            reloads: self.reloads,
            recoveries: self.recoveries,
            last_reload: self.last_reload.clone(),
            last_failure: self.last_failure.clone(),
            replaced_workers: self
                .workers
                .values()
                .filter(|s| matches!(s.role, Role::Retired { .. }))
                .map(|s| s.worker.pid)
                .collect(),
        }
    }

    pub(crate) fn status_value(&self) -> Value {
        serde_json::to_value(self.info()).unwrap_or(Value::Null)
    }

    pub(crate) fn status_text(&self) -> String {
        let i = self.info();
        let mut t = format!(
            "supervisor: pid {}, worker pid {}, {} {}, {}, {} reloads, {} recoveries\n",
            i.pid,
            i.worker_pid.map_or("none".to_owned(), |p| p.to_string()),
            i.binary,
            i.binary_version.as_deref().unwrap_or("-"),
            i.state,
            i.reloads,
            i.recoveries
        );
        if let Some(r) = &i.last_reload {
            t.push_str(&format!("last reload: {r}\n"));
        }
        if let Some(r) = &i.automatic_swap.reason {
            t.push_str(&format!("automatic swap off: {r}\n"));
        }
        if let Some(f) = &i.last_failure {
            t.push_str(&format!("last failure: {f}\n"));
        }
        t
    }
}
