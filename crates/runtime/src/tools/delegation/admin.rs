//! The delegations of a state directory as its owner manages them from outside a server: the
//! one entry point of `machine-mcp delegation list|drain|resume|worker-mcp` and of `service
//! stop`'s drain. `drain` reaches the running servers through a marker file
//! (`STATE_DIR/delegations/draining`) that every server checks before it admits a request;
//! `resume` removes it. The owner sees every receipt.

use std::{io, path::Path};

use super::engine::{self, store::Store};

pub use super::{
    engine::ReceiptSummary,
    list::summary_line,
    worker_mcp::{WorkerMcpError, WorkerTools, connect as worker_mcp},
};

/// The delegation receipts of one state directory (`STATE_DIR/delegations`).
#[derive(Debug, Clone)]
pub struct Receipts {
    store: Store,
}

impl Receipts {
    /// The receipts of the state directory `state_dir` (nothing is read or created yet).
    pub fn open(state_dir: &Path) -> Self {
        Self {
            store: Store::new(state_dir),
        }
    }

    /// Where they are kept (`STATE_DIR/delegations`).
    pub fn root(&self) -> &Path {
        self.store.root()
    }

    /// Whether new delegations are refused (`drain` in effect).
    pub fn draining(&self) -> bool {
        self.store.draining()
    }

    /// Every receipt, newest first, unreadable receipt files included.
    ///
    /// # Errors
    /// The directory cannot be read.
    pub fn list(&self) -> io::Result<Vec<ReceiptSummary>> {
        engine::list_store(&self.store)
    }

    /// Stops accepting new delegations on every server of the state directory (`delegate`
    /// answers `unavailable` until [`Receipts::resume`]) and returns what is still queued or
    /// running on live servers.
    ///
    /// # Errors
    /// The marker cannot be written (the directory is not writable).
    pub fn drain(&self) -> io::Result<Vec<ReceiptSummary>> {
        self.store.set_draining(true)?;
        Ok(engine::unfinished(&self.store))
    }

    /// Accepts new delegations again (undoes [`Receipts::drain`]).
    ///
    /// # Errors
    /// The marker cannot be removed.
    pub fn resume(&self) -> io::Result<()> {
        self.store.set_draining(false)
    }
}
