//! [`Lock`]: the relay's mutex, which makes poisoning loud instead of silent.
//!
//! A `std::sync::Mutex` is poisoned when a thread panics while holding it. That is always a bug,
//! but not a reason to drop a message, to answer as if a session did not exist, or to stop
//! serving every other session: [`Lock::lock`] recovers the data as the panicking holder left it
//! and logs the poisoning at `error`. (Before this type most lock sites treated a poisoned lock as
//! "skip", `if let Ok(..)`, and lost messages without a trace.) The critical sections are short
//! and call no user code, so what a panic can leave behind is one half-updated session or bridge,
//! which its own later requests then see.
//!
//! Not `parking_lot`: the standard mutex with this one policy needs no new dependency. No lock is
//! held across `.await` (clippy `await_holding_lock` is denied workspace-wide).

use std::sync::{Mutex, MutexGuard};

/// A mutex whose [`lock`](Self::lock) always succeeds; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Lock<T> {
    inner: Mutex<T>,
}

impl<T> Lock<T> {
    /// A lock holding `value`.
    pub(crate) fn new(value: T) -> Self {
        Self {
            inner: Mutex::new(value),
        }
    }

    /// Locks, waiting for other holders. A lock poisoned by a panicking holder is recovered
    /// with its data, and the poisoning logged at `error`.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.inner.lock().unwrap_or_else(|poisoned| {
            tracing::error!(
                lock = std::any::type_name::<T>(),
                "a relay lock was poisoned by a panic while held; continuing with its data"
            );
            self.inner.clear_poison();
            poisoned.into_inner()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_keeps_its_data() {
        let l = std::sync::Arc::new(Lock::new(vec![1]));
        let l2 = l.clone();
        let _ = std::thread::spawn(move || {
            let mut g = l2.lock();
            g.push(2);
            panic!("poison it");
        })
        .join();
        assert_eq!(*l.lock(), [1, 2]);
        l.lock().push(3);
        assert_eq!(*l.lock(), [1, 2, 3]);
    }
}
