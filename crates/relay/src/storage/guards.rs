//! [`MemoryGuards`]: the replay guards and throttles ([`GuardStore`]) kept in this process's
//! memory — counters of failed sign-ins, registrations and client document fetches per key (an
//! account or a client address) within a fixed window (`Throttle`), and the ids of DPoP proofs
//! and client assertions already used (replay protection, RFC 9449 §11.1, RFC 7523 §3;
//! `SeenIds`).
//!
//! Both forget their oldest entries past their capacity, so an attacker cannot grow them without
//! bound; a restart forgets them (what they protect is short-lived). They are node-local: relay
//! nodes that share a store need a [`GuardStore`] that counts across them.

use std::{collections::HashMap, time::Duration};

use lock::Lock;

use futures_util::future::Either;
use tokio::time::Instant;

use crate::limits::{PROOF_IDS_REMEMBERED, SIGN_IN_THROTTLE_ENTRIES, SIGN_IN_WINDOW};

use super::traits::{GuardFuture, GuardStore};

/// Replay guards and throttles in this process's memory: one throttle over
/// [`SIGN_IN_WINDOW`] for every throttled key (keys say what they count: `account …`,
/// `address …`, `register …`, `fetch …`), at most [`SIGN_IN_THROTTLE_ENTRIES`] keys, and the
/// last [`PROOF_IDS_REMEMBERED`] proof ids.
#[derive(Debug)]
pub struct MemoryGuards {
    throttle: Throttle,
    seen: SeenIds,
}

impl Default for MemoryGuards {
    fn default() -> Self {
        Self {
            throttle: Throttle::new(SIGN_IN_WINDOW, SIGN_IN_THROTTLE_ENTRIES),
            seen: SeenIds::new(PROOF_IDS_REMEMBERED),
        }
    }
}

/// An answer known at once: no allocation.
fn now<'a, T>(value: T) -> GuardFuture<'a, T> {
    Either::Left(std::future::ready(value))
}

impl GuardStore for MemoryGuards {
    fn blocked<'a>(&'a self, key: &'a str, limit: u32) -> GuardFuture<'a, Option<Duration>> {
        now(self.throttle.blocked(key, limit))
    }

    fn take<'a>(&'a self, key: &'a str, limit: u32) -> GuardFuture<'a, Result<(), Duration>> {
        now(self.throttle.take(key, limit))
    }

    fn forgive<'a>(&'a self, key: &'a str) -> GuardFuture<'a, ()> {
        self.throttle.forgive(key);
        now(())
    }

    fn record<'a>(&'a self, key: &'a str) -> GuardFuture<'a, ()> {
        self.throttle.record(key);
        now(())
    }

    fn clear<'a>(&'a self, key: &'a str) -> GuardFuture<'a, ()> {
        self.throttle.clear(key);
        now(())
    }

    fn first_use<'a>(&'a self, id: &'a str, ttl: Duration) -> GuardFuture<'a, Seen> {
        now(self.seen.first_use(id, Instant::now() + ttl))
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    count: u32,
}

/// Counts events per key within a fixed window.
#[derive(Debug)]
struct Throttle {
    window: Duration,
    capacity: usize,
    entries: Lock<HashMap<String, Window>>,
}

impl Throttle {
    /// A throttle counting over `window`, remembering at most `capacity` keys.
    fn new(window: Duration, capacity: usize) -> Self {
        Self {
            window,
            capacity,
            entries: Lock::new(HashMap::new()),
        }
    }

    /// When `key` has `limit` events in its current window: how long until the window ends.
    fn blocked(&self, key: &str, limit: u32) -> Option<Duration> {
        let now = Instant::now();
        let entries = self.entries.lock();
        let w = entries.get(key)?;
        let end = w.started + self.window;
        (w.count >= limit && now < end).then(|| end - now)
    }

    /// Counts one event for `key` unless `key` already has `limit` in its window, atomically
    /// (so parallel attempts cannot all pass a check made before any of them counts).
    ///
    /// # Errors
    /// How long until the window ends, when `key` is at its limit.
    fn take(&self, key: &str, limit: u32) -> Result<(), Duration> {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if let Some(w) = entries.get(key) {
            let end = w.started + self.window;
            if w.count >= limit && now < end {
                return Err(end - now);
            }
        }
        self.count_in(&mut entries, key, now);
        Ok(())
    }

    /// Takes back one event of `key` (an attempt that turned out well).
    fn forgive(&self, key: &str) {
        let mut entries = self.entries.lock();
        if let Some(w) = entries.get_mut(key) {
            w.count = w.count.saturating_sub(1);
        }
    }

    /// Counts one event for `key`.
    fn record(&self, key: &str) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        self.count_in(&mut entries, key, now);
    }

    fn count_in(&self, entries: &mut HashMap<String, Window>, key: &str, now: Instant) {
        if !entries.contains_key(key) && entries.len() >= self.capacity {
            let window = self.window;
            entries.retain(|_, w| now < w.started + window);
            if entries.len() >= self.capacity
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, w)| w.started)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        let w = entries.entry(key.to_owned()).or_insert(Window {
            started: now,
            count: 0,
        });
        if now >= w.started + self.window {
            *w = Window {
                started: now,
                count: 0,
            };
        }
        w.count = w.count.saturating_add(1);
    }

    /// Forgets `key` (a successful sign-in clears its account's failures).
    fn clear(&self, key: &str) {
        self.entries.lock().remove(key);
    }
}

/// Ids seen recently, each until its own expiry.
#[derive(Debug)]
struct SeenIds {
    capacity: usize,
    entries: Lock<HashMap<String, Instant>>,
}

/// What [`GuardStore::first_use`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not seen before; now remembered.
    First,
    /// Seen before: a replay.
    Again,
    /// Too many unexpired ids are remembered to take another one now.
    Full,
}

impl SeenIds {
    /// Remembers at most `capacity` ids.
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Lock::new(HashMap::new()),
        }
    }

    /// Records `id` as used until `until`, unless it was already.
    fn first_use(&self, id: &str, until: Instant) -> Seen {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if let Some(t) = entries.get(id)
            && *t > now
        {
            return Seen::Again;
        }
        if entries.len() >= self.capacity {
            entries.retain(|_, t| *t > now);
            if entries.len() >= self.capacity {
                return Seen::Full;
            }
        }
        entries.insert(id.to_owned(), until);
        Seen::First
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_is_blocked_at_its_limit_until_the_window_ends() {
        let t = Throttle::new(Duration::from_secs(60), 10);
        for _ in 0..3 {
            assert_eq!(t.blocked("a", 3), None);
            t.record("a");
        }
        let left = t.blocked("a", 3).unwrap();
        assert!(left <= Duration::from_secs(60));
        assert_eq!(t.blocked("b", 3), None, "keys are counted apart");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(t.blocked("a", 3), None);
        t.record("a");
        assert_eq!(t.blocked("a", 2), None, "a new window starts at one");
        t.clear("a");
        assert_eq!(t.blocked("a", 1), None);
    }

    #[tokio::test(start_paused = true)]
    async fn take_counts_and_refuses_at_the_limit_and_forgive_gives_one_back() {
        let t = Throttle::new(Duration::from_secs(60), 10);
        assert!(t.take("a", 2).is_ok());
        assert!(t.take("a", 2).is_ok());
        assert!(t.take("a", 2).is_err());
        t.forgive("a");
        assert!(t.take("a", 2).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_throttle_forgets_the_oldest_key_at_capacity() {
        let t = Throttle::new(Duration::from_secs(60), 2);
        t.record("a");
        tokio::time::advance(Duration::from_secs(1)).await;
        t.record("b");
        t.record("c");
        assert_eq!(t.blocked("a", 1), None, "a was forgotten");
        assert!(t.blocked("b", 1).is_some() && t.blocked("c", 1).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn ids_are_refused_again_until_they_expire_and_the_set_is_bounded() {
        let s = SeenIds::new(2);
        let later = Instant::now() + Duration::from_secs(10);
        assert_eq!(s.first_use("x", later), Seen::First);
        assert_eq!(s.first_use("x", later), Seen::Again);
        assert_eq!(s.first_use("y", later), Seen::First);
        assert_eq!(s.first_use("z", later), Seen::Full);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(
            s.first_use("z", Instant::now() + Duration::from_secs(10)),
            Seen::First
        );
        assert_eq!(
            s.first_use("x", Instant::now() + Duration::from_secs(10)),
            Seen::First
        );
    }

    /// The guards in memory answer through the trait at once, without a boxed future, and
    /// count and remember as the throttle and the id set do.
    #[tokio::test(start_paused = true)]
    async fn memory_guards_answer_at_once_through_the_trait() {
        let g = MemoryGuards::default();
        let guards: &dyn GuardStore = &g;
        assert!(matches!(guards.take("k", 1), Either::Left(_)));
        assert!(
            guards.take("k", 1).await.is_err(),
            "counted by the first take"
        );
        guards.forgive("k").await;
        assert_eq!(guards.take("k", 1).await, Ok(()));
        guards.clear("k").await;
        assert_eq!(guards.blocked("k", 1).await, None);
        guards.record("k").await;
        assert!(guards.blocked("k", 1).await.is_some());
        let ttl = Duration::from_secs(10);
        assert!(matches!(guards.first_use("jti", ttl), Either::Left(_)));
        assert_eq!(guards.first_use("jti", ttl).await, Seen::Again);
        tokio::time::advance(ttl + Duration::from_secs(1)).await;
        assert_eq!(guards.first_use("jti", ttl).await, Seen::First);
    }
}
