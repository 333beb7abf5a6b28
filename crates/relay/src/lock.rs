//! [`Lock`]: the relay's mutex, which makes poisoning loud instead of silent.
//!
//! A `std::sync::Mutex` is poisoned when a thread panics while holding it. The relay's state
//! behind its locks stays usable after such a panic (every critical section leaves it
//! consistent before anything that can panic, and none calls out), so a poisoned lock is not a
//! reason to drop a message or to pretend a session does not exist: [`Lock::lock`] recovers the
//! data and logs the poisoning at `error` (it is always a bug). Before this type, most lock sites
//! treated a poisoned lock as "skip" (`if let Ok(..)`), which lost messages without a trace.
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
