//! What a runtime keeps for the job tools ([`JobsState`]), made by the family's entry in the
//! registry.

use crate::tools::family::FamilyState;

use super::engine::store::JobStore;

/// What a runtime keeps for the job tools: the job store of its state directory
/// ([`RuntimeConfig::state_dir`](crate::RuntimeConfig::state_dir); none without one, and the
/// tools answer `unavailable`). Jobs outlive the runtime: nothing is done at shutdown.
#[derive(Debug)]
pub(crate) struct JobsState {
    pub(super) store: Option<JobStore>,
}

impl JobsState {
    pub(super) fn make(config: &crate::RuntimeConfig) -> Box<dyn FamilyState> {
        Box::new(Self {
            store: config.state_dir.as_deref().map(|d| {
                // Never a binary a writer of a guarded workspace could have replaced.
                let exe = crate::programs::own_binary();
                JobStore::new(d, exe)
            }),
        })
    }
}

impl FamilyState for JobsState {}

/// The job store of `runtime`, when it has a state directory: what `machine-mcp` recovers at
/// start and counts in `status`.
pub fn store(runtime: &crate::Runtime) -> Option<&JobStore> {
    runtime.state::<JobsState>()?.store.as_ref()
}
