//! [`Lock`]: the workspace's mutex, and its one lock-poisoning policy: poisoning is loud, never
//! silent.
//!
//! A `std::sync::Mutex` is poisoned when a thread panics while holding it. That is always a bug,
//! but not a reason to drop a message, to answer as if a session did not exist, or to stop
//! serving everything else: [`Lock::lock`] recovers the data as the panicking holder left it,
//! clears the poison and logs the poisoning at `error` (once per poisoning). The critical sections
//! of this workspace are short and call no user code, so what a panic can leave behind is one
//! half-updated entry, which its own later users then see.
//!
//! Rules:
//! - Every `std::sync::Mutex` of the relay, the daemon and the runtime is a [`Lock`]; a lock
//!   result is never skipped (`if let Ok(..) = m.lock()`, `.lock().ok()`) nor recovered without a
//!   trace (the tidy test forbids both outside this crate).
//! - No lock is held across `.await` (clippy `await_holding_lock` is denied workspace-wide).
//!
//! Its own crate because every crate of the workspace needs it and `protocol` (which every crate
//! depends on) is the wire contract, serde only; this one depends on `tracing` only. Not
//! `parking_lot`: the standard mutex with this one policy needs no new dependency.

use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// A mutex whose [`lock`](Self::lock) always succeeds; see the crate docs.
#[derive(Debug, Default)]
pub struct Lock<T> {
    inner: Mutex<T>,
}

impl<T> Lock<T> {
    /// A lock holding `value`.
    pub const fn new(value: T) -> Self {
        Self {
            inner: Mutex::new(value),
        }
    }

    /// Locks, waiting for other holders. A lock poisoned by a panicking holder is recovered
    /// with its data, and the poisoning logged at `error`.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| self.recover(poisoned))
    }

    /// Locks when no one holds the lock, else `None` (without waiting). A poisoned lock is
    /// recovered as [`lock`](Self::lock) recovers it.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.inner.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(poisoned)) => Some(self.recover(poisoned)),
        }
    }

    /// The policy: log the poisoning at `error`, clear it, go on with the data.
    fn recover<'a>(&'a self, poisoned: PoisonError<MutexGuard<'a, T>>) -> MutexGuard<'a, T> {
        log_poisoned::<T>();
        self.inner.clear_poison();
        poisoned.into_inner()
    }

    /// The value, the lock consumed; a poisoned lock's data as [`lock`](Self::lock) would give
    /// it.
    pub fn into_inner(self) -> T {
        self.inner.into_inner().unwrap_or_else(|poisoned| {
            log_poisoned::<T>();
            poisoned.into_inner()
        })
    }
}

fn log_poisoned<T>() {
    tracing::error!(
        lock = std::any::type_name::<T>(),
        "a lock was poisoned by a panic while held; continuing with its data"
    );
}

impl<T> From<T> for Lock<T> {
    fn from(value: T) -> Self {
        Self::new(value)
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
        assert!(
            !l.inner.is_poisoned(),
            "the poison is cleared once recovered"
        );
    }

    #[test]
    fn try_lock_recovers_a_poisoned_lock_and_is_none_while_held() {
        let l = std::sync::Arc::new(Lock::new(1));
        let l2 = l.clone();
        let _ = std::thread::spawn(move || {
            *l2.lock() = 2;
            panic!("poison it");
        })
        .join();
        assert_eq!(l.try_lock().map(|g| *g), Some(2));
        let held = l.lock();
        assert!(l.try_lock().is_none());
        drop(held);
        assert_eq!(Lock::new(vec![3]).into_inner(), [3]);
    }
}
