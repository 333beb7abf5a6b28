//! What a runtime keeps for the process tools ([`Processes`]), made by the family's entry in
//! the registry and reached by the handlers through [`Access::state`](crate::Access).

use crate::{
    Access, RuntimeActivity, RuntimeConfig,
    call::error::ToolResult,
    tools::family::{FamilyState, Hook},
};

use super::engine::{env, sessions::Sessions};

/// What a runtime keeps for the process tools: the process sessions of every caller (bounded
/// by [`engine::sessions`]), and the scratch directory of isolated children
/// (`machine-mcp-<pid>` in the system's temporary directory). At shutdown every process
/// session is terminated (SIGTERM, 2 s grace, SIGKILL) and the scratch directory removed.
#[derive(Debug)]
pub(crate) struct Processes {
    sessions: Sessions,
    scratch: env::Scratch,
}

impl Processes {
    pub(super) fn make(_config: &RuntimeConfig) -> Box<dyn FamilyState> {
        let scratch = std::env::temp_dir().join(format!("machine-mcp-{}", std::process::id()));
        Box::new(Self {
            sessions: Sessions::default(),
            scratch: env::Scratch::new(scratch),
        })
    }

    /// The state of `rt`'s runtime.
    ///
    /// # Errors
    /// `internal_error` when the runtime keeps none (the family is not registered).
    pub(crate) fn of(rt: &Access) -> ToolResult<&Self> {
        rt.state::<Self>()
    }

    /// The process sessions.
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The scratch directory of isolated children.
    pub(crate) fn scratch(&self) -> &env::Scratch {
        &self.scratch
    }
}

impl FamilyState for Processes {
    fn shutdown(&self) -> Hook<'_> {
        Box::pin(async move {
            self.sessions.shutdown().await;
            let _ = std::fs::remove_dir_all(self.scratch.root());
        })
    }

    fn activity(&self, activity: &mut RuntimeActivity) {
        activity.running_process_sessions = self.sessions.running();
        activity.kept_process_sessions = self.sessions.kept();
    }
}
