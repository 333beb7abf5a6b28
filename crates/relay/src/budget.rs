//! The budget of MCP request body bytes in flight: per holder
//! ([`REQUEST_BODY_BYTES_PER_CREDENTIAL`]), in memory in all ([`REQUEST_BODY_BYTES_IN_FLIGHT`])
//! and on disk in all ([`REQUEST_BODY_BYTES_SPILLED_IN_FLIGHT`]).
//!
//! Rules: a body is reserved from its request's headers, after the credential check and before
//! a byte of it is read — its `Content-Length`, or the largest body
//! ([`MCP_REQUEST_BODY_MAX_BYTES`]) when it has none, at most that — and released when its
//! [`BodyPermit`] drops (once the body is parsed or refused).
//! - The holder is the principal the credential stands for (a static token, or an OAuth
//!   account whatever clients it signed in with), so minting credentials does not multiply a
//!   budget. Past the holder's budget: [`Refusal::Credential`] (429).
//! - The relay-wide bounds count what a body can cost where it lives: its first
//!   `memory_cap` bytes in memory (the spill threshold, [`crate::spill`], when bodies spill;
//!   all of it otherwise), the rest on disk. Past either total: [`Refusal::Total`] (503). So a
//!   few holders keeping large bodies open hold their own budgets and a sliver of the
//!   relay-wide ones, not all of them.
//!
//! A refused reservation touches no count.

use std::{collections::HashMap, sync::Arc};

use lock::Lock;

use crate::limits::MCP_REQUEST_BODY_MAX_BYTES;
use crate::limits::{
    REQUEST_BODY_BYTES_IN_FLIGHT, REQUEST_BODY_BYTES_PER_CREDENTIAL,
    REQUEST_BODY_BYTES_SPILLED_IN_FLIGHT, REQUEST_BODY_SPILL_THRESHOLD,
};

/// Why a body could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The holder's budget is taken (429).
    Credential,
    /// A relay-wide total is taken (503).
    Total,
}

#[derive(Debug, Default)]
struct Counts {
    memory: usize,
    spilled: usize,
    by_holder: HashMap<String, usize>,
}

/// Body bytes in flight, per holder and in all, and their bounds.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    counts: Arc<Lock<Counts>>,
    per_holder: usize,
    memory_total: usize,
    spilled_total: usize,
    /// The bytes of one body held in memory at most; the rest is spilled.
    memory_cap: usize,
}

impl BodyBudget {
    /// The relay's budget: the limits' bounds, and bodies past the spill threshold counted on
    /// disk when `spills` (a relay with a spill directory), in memory otherwise.
    pub(crate) fn for_relay(spills: bool) -> Self {
        Self::new(
            REQUEST_BODY_BYTES_PER_CREDENTIAL,
            REQUEST_BODY_BYTES_IN_FLIGHT,
            REQUEST_BODY_BYTES_SPILLED_IN_FLIGHT,
            if spills {
                REQUEST_BODY_SPILL_THRESHOLD
            } else {
                MCP_REQUEST_BODY_MAX_BYTES
            },
        )
    }

    /// A budget of `per_holder` bytes per holder, `memory_total` bytes in memory and
    /// `spilled_total` on disk in all, a body holding at most `memory_cap` in memory.
    pub(crate) fn new(
        per_holder: usize,
        memory_total: usize,
        spilled_total: usize,
        memory_cap: usize,
    ) -> Self {
        Self {
            counts: Arc::default(),
            per_holder,
            memory_total,
            spilled_total,
            memory_cap,
        }
    }

    /// Reserves the body a request announces (`content_length`, `None` when it has none) for
    /// `holder` (the principal's id).
    ///
    /// # Errors
    /// [`Refusal`] when the holder's budget or a relay-wide total would be passed.
    pub(crate) fn reserve(
        &self,
        holder: &str,
        content_length: Option<u64>,
    ) -> Result<BodyPermit, Refusal> {
        let bytes = content_length
            .map_or(MCP_REQUEST_BODY_MAX_BYTES, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            })
            .min(MCP_REQUEST_BODY_MAX_BYTES);
        let memory = bytes.min(self.memory_cap);
        let spilled = bytes - memory;
        let mut c = self.counts.lock();
        let mine = c.by_holder.get(holder).copied().unwrap_or(0);
        if mine + bytes > self.per_holder {
            return Err(Refusal::Credential);
        }
        if c.memory + memory > self.memory_total || c.spilled + spilled > self.spilled_total {
            return Err(Refusal::Total);
        }
        c.memory += memory;
        c.spilled += spilled;
        *c.by_holder.entry(holder.to_owned()).or_insert(0) += bytes;
        Ok(BodyPermit {
            counts: self.counts.clone(),
            holder: holder.to_owned(),
            memory,
            spilled,
        })
    }
}

/// A reservation of body bytes, released when dropped.
#[derive(Debug)]
pub(crate) struct BodyPermit {
    counts: Arc<Lock<Counts>>,
    holder: String,
    memory: usize,
    spilled: usize,
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        c.memory = c.memory.saturating_sub(self.memory);
        c.spilled = c.spilled.saturating_sub(self.spilled);
        if let Some(n) = c.by_holder.get_mut(&self.holder) {
            *n = n.saturating_sub(self.memory + self.spilled);
            if *n == 0 {
                c.by_holder.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_bounded_per_holder_and_in_all_and_given_back() {
        let b = BodyBudget::new(
            10 * MCP_REQUEST_BODY_MAX_BYTES / 4,
            4 * MCP_REQUEST_BODY_MAX_BYTES,
            usize::MAX,
            MCP_REQUEST_BODY_MAX_BYTES,
        );
        let big = Some(MCP_REQUEST_BODY_MAX_BYTES as u64);
        let a1 = b.reserve("a", big).unwrap();
        let _a2 = b.reserve("a", None).unwrap();
        assert_eq!(b.reserve("a", big).unwrap_err(), Refusal::Credential);
        let _small = b.reserve("a", Some(1000)).unwrap();
        let _c1 = b.reserve("c", big).unwrap();
        assert_eq!(b.reserve("d", Some(u64::MAX)).unwrap_err(), Refusal::Total);
        drop(a1);
        assert!(
            b.reserve("d", big).is_ok(),
            "released bytes are reserved again"
        );
    }

    /// Four holders each holding four bodies of unknown length (the most their budgets take).
    fn four_holders_at_their_budget(b: &BodyBudget) -> Vec<BodyPermit> {
        let mut held = Vec::new();
        for holder in ["a", "b", "c", "d"] {
            for _ in 0..4 {
                held.push(b.reserve(holder, None).unwrap());
            }
            assert_eq!(b.reserve(holder, None).unwrap_err(), Refusal::Credential);
        }
        held
    }

    /// Regression: four holders each keeping four chunked bodies open (a few bytes sent) took
    /// the whole relay-wide budget, and every other POST on every bridge got 503. With bodies
    /// spilled past the threshold, they hold their own budgets and a sliver of the totals.
    #[test]
    fn a_few_holders_keeping_large_bodies_open_leave_the_relay_to_others() {
        let b = BodyBudget::for_relay(true);
        let _held = four_holders_at_their_budget(&b);
        assert!(
            b.reserve("e", Some(300)).is_ok(),
            "a small call of another holder"
        );
        assert!(
            b.reserve("e", None).is_ok(),
            "a large body of another holder"
        );
    }

    /// The disk total bounds what many holders spill together; memory stays within its own.
    #[test]
    fn spilled_bytes_are_bounded_in_all() {
        let cap = REQUEST_BODY_SPILL_THRESHOLD;
        let b = BodyBudget::new(
            usize::MAX,
            64 * cap,
            2 * (MCP_REQUEST_BODY_MAX_BYTES - cap),
            cap,
        );
        let _x = b.reserve("x", None).unwrap();
        let _y = b.reserve("y", None).unwrap();
        assert_eq!(b.reserve("z", None).unwrap_err(), Refusal::Total);
        assert!(b.reserve("z", Some(cap as u64)).is_ok(), "in memory only");
    }

    /// Without a spill directory every byte counts in memory, as before bodies spilled.
    #[test]
    fn without_spilling_a_body_counts_whole_in_memory() {
        let b = BodyBudget::for_relay(false);
        let _held = four_holders_at_their_budget(&b);
        assert_eq!(b.reserve("e", Some(300)).unwrap_err(), Refusal::Total);
    }
}
