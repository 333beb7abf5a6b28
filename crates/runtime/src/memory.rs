//! Giving freed heap memory back to the operating system once the server is idle.
//!
//! glibc's allocator keeps memory freed by a large call (a search's result, a 1 MiB read) in
//! its per-thread arenas, so a server that served one heavy call stays that large while idle
//! (measured: 12 MiB idle → 45–50 MiB after three searches over the Linux tree and ten 1 MiB
//! reads, of which the heap really in use was under 1 MiB). Two measures, both measured on that
//! load: `IdleTrim` calls `malloc_trim(0)` once no tool call has started or run for
//! `IDLE_DELAY` (→ 25 MiB), and [`limit_arenas`] caps glibc at [`MALLOC_ARENAS`] arenas
//! (→ 19 MiB; no measurable change in search time on 2 cores). The relay, which has no call
//! boundaries, uses [`trim_periodically`] instead. Elsewhere (musl, other systems) all of this
//! does nothing.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::sync::Semaphore;

/// How long the server must be idle (no call started, none running) before the trim.
pub const IDLE_DELAY: Duration = Duration::from_secs(1);

/// Schedules one trim after the last call of a burst (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct IdleTrim {
    /// Calls started so far; a change during the delay postpones the trim.
    started: AtomicU64,
    /// A trim task is waiting.
    scheduled: AtomicBool,
}

impl IdleTrim {
    /// Records that a call starts.
    pub(crate) fn call_started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that a call ended: unless a trim task is already waiting, starts one that trims
    /// once `slots` (the call semaphore, `capacity` permits) has been fully free and no call
    /// has started for [`IDLE_DELAY`]. Needs a Tokio runtime.
    pub(crate) fn call_ended(self: &Arc<Self>, slots: &Arc<Semaphore>, capacity: usize) {
        if self.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        let slots = slots.clone();
        tokio::spawn(async move {
            let mut seen = this.started.load(Ordering::Relaxed);
            loop {
                tokio::time::sleep(IDLE_DELAY).await;
                let now = this.started.load(Ordering::Relaxed);
                if now == seen && slots.available_permits() == capacity {
                    break;
                }
                seen = now;
            }
            // Cleared before the trim: a call ending during it schedules the next one.
            this.scheduled.store(false, Ordering::Release);
            let _ = tokio::task::spawn_blocking(trim).await;
        });
    }
}

/// Period of [`trim_periodically`].
pub const TRIM_PERIOD: Duration = Duration::from_secs(10);

/// Trims the heap every [`TRIM_PERIOD`] until the returned task is aborted: for the relay, whose
/// work has no call boundaries (measured: 100 daemons connecting at once left the relay at
/// 118 MiB, 47 MiB after one trim). Needs a Tokio runtime.
pub fn trim_periodically() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut tick = tokio::time::interval(TRIM_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    })
}

/// The most malloc arenas glibc may create (its default is 8 per CPU).
pub const MALLOC_ARENAS: i32 = 2;

/// Caps glibc's malloc arenas at [`MALLOC_ARENAS`] (`mallopt(M_ARENA_MAX)`). Call first thing
/// in `main`, before any other thread exists; later calls still work but leave arenas already
/// created in place.
#[allow(unsafe_code)]
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter under the allocator's own lock; it has
    // no memory-safety preconditions.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
}

/// Returns the free pages of every malloc arena to the system (glibc `malloc_trim(0)`).
///
/// With [`limit_arenas`], one of the workspace's two places of `unsafe` (the lint is `deny`; the
/// other is a terminal child's pre-exec step): neither `libc` nor `nix` has a safe binding of
/// these calls.
#[allow(unsafe_code)]
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists under its arena locks; it
    // has no preconditions and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
