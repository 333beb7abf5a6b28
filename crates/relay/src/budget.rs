//! The budget of MCP request body bytes in flight: per credential
//! ([`REQUEST_BODY_BYTES_PER_CREDENTIAL`]) and in all ([`REQUEST_BODY_BYTES_IN_FLIGHT`]).
//!
//! Rules: a body is reserved from its request's headers, after the credential check and before
//! a byte of it is read — its `Content-Length`, or the largest body
//! ([`MCP_REQUEST_BODY_MAX_BYTES`]) when it has none, at most that — and released when its
//! [`BodyPermit`] drops (once the body is parsed or refused). A reservation that would pass the
//! credential's budget is refused ([`Refusal::Credential`], 429), one that would pass the total
//! ([`Refusal::Total`], 503); neither touches the counts. So one credential holding many
//! connections open with large bodies holds at most its budget, and all credentials together
//! at most the total: in memory, or on disk for the bodies spilled past the spill threshold
//! ([`crate::spill`]), which count the same.

use std::{collections::HashMap, sync::Arc};

use lock::Lock;

use crate::limits::MCP_REQUEST_BODY_MAX_BYTES;
use crate::limits::{REQUEST_BODY_BYTES_IN_FLIGHT, REQUEST_BODY_BYTES_PER_CREDENTIAL};

/// Why a body could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The credential's budget is taken (429).
    Credential,
    /// The relay's total is taken (503).
    Total,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_credential: HashMap<String, usize>,
}

/// Body bytes in flight, per credential and in all, and their bounds.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    counts: Arc<Lock<Counts>>,
    per_credential: usize,
    total: usize,
}

impl Default for BodyBudget {
    fn default() -> Self {
        Self::new(
            REQUEST_BODY_BYTES_PER_CREDENTIAL,
            REQUEST_BODY_BYTES_IN_FLIGHT,
        )
    }
}

/// A reservation of body bytes, released when dropped.
#[derive(Debug)]
pub(crate) struct BodyPermit {
    counts: Arc<Lock<Counts>>,
    credential: String,
    bytes: usize,
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        c.total = c.total.saturating_sub(self.bytes);
        if let Some(n) = c.by_credential.get_mut(&self.credential) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                c.by_credential.remove(&self.credential);
            }
        }
    }
}

impl BodyBudget {
    /// A budget of `per_credential` bytes per credential and `total` in all.
    pub(crate) fn new(per_credential: usize, total: usize) -> Self {
        Self {
            counts: Arc::default(),
            per_credential,
            total,
        }
    }

    /// Reserves the body a request announces (`content_length`, `None` when it has none) for
    /// `credential`.
    ///
    /// # Errors
    /// [`Refusal`] when the credential's budget or the total would be passed.
    pub(crate) fn reserve(
        &self,
        credential: &str,
        content_length: Option<u64>,
    ) -> Result<BodyPermit, Refusal> {
        let bytes = content_length
            .map_or(MCP_REQUEST_BODY_MAX_BYTES, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            })
            .min(MCP_REQUEST_BODY_MAX_BYTES);
        let mut c = self.counts.lock();
        let mine = c.by_credential.get(credential).copied().unwrap_or(0);
        if mine + bytes > self.per_credential {
            return Err(Refusal::Credential);
        }
        if c.total + bytes > self.total {
            return Err(Refusal::Total);
        }
        c.total += bytes;
        *c.by_credential.entry(credential.to_owned()).or_insert(0) += bytes;
        Ok(BodyPermit {
            counts: self.counts.clone(),
            credential: credential.to_owned(),
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_bounded_per_credential_and_in_all_and_given_back() {
        let b = BodyBudget::new(
            10 * MCP_REQUEST_BODY_MAX_BYTES / 4,
            4 * MCP_REQUEST_BODY_MAX_BYTES,
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
}
