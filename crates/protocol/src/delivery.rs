//! The link's delivery contract as a sans-IO state machine (DESIGN §5, `docs/relay-protocol.md`
//! "Sequence numbers, acknowledgement and resume"): the sender's [`Outbox`] numbers each message
//! of a session, retains it until the receiver acknowledges it and replays what is retained on a
//! resume; the receiver's [`Inbox`] classifies each incoming sequence number as fresh, a
//! duplicate (a replay of something it already took) or out of window.
//!
//! Rules:
//! - Sequence numbers of a session start at 1 and grow by one per message sent.
//! - Acknowledgement is cumulative: `ack(n)` settles every message numbered `n` or less.
//! - The outbox retains at most its byte bound of unacknowledged messages; past it the oldest
//!   are dropped and returned to the caller (it logs them: they can no longer be replayed).
//! - The receiver takes a message only when its number is above the last one it took and at
//!   most [`DAEMON_SEQ_WINDOW`] above it; a gap within the window is taken (the sender's
//!   dropped messages leave one).
//! - The transport between them keeps order (a WebSocket); what arrives out of order is a
//!   replay, and a replay of what was taken is a [`Arrival::Duplicate`].
//!
//! Beside them, [`InFlight`] is the table every hop keeps of the requests it passed on and
//! whose answer has not come back (module [`in_flight`]).
//!
//! No I/O, no clock, no lock: the daemon's hosted sessions and the relay's hub hold these inside
//! their own per-session state.

pub mod in_flight;

use std::collections::VecDeque;

pub use in_flight::{AlreadyInFlight, InFlight};

use crate::limits::DAEMON_SEQ_WINDOW;

/// The sending side of one session: numbered, retained, unacknowledged messages `M`.
#[derive(Debug)]
pub struct Outbox<M> {
    /// The number of the last message pushed (0: none yet).
    last_seq: u64,
    /// Unacknowledged messages, oldest first: (seq, message, size in bytes). Their numbers are
    /// consecutive.
    unacked: VecDeque<(u64, M, usize)>,
    /// Sum of the sizes in `unacked`.
    bytes: usize,
    /// Bound of `bytes`.
    max_bytes: usize,
}

/// What [`Outbox::push`] did: the number the message got, and the numbers of the oldest
/// unacknowledged messages it dropped to stay within the bound (empty when none; the new
/// message itself among them when it alone is larger than the bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The message's sequence number.
    pub seq: u64,
    /// Sequence numbers dropped, oldest first (a contiguous range).
    pub dropped: std::ops::Range<u64>,
}

impl<M> Outbox<M> {
    /// An empty outbox retaining at most `max_bytes` of unacknowledged messages.
    pub const fn new(max_bytes: usize) -> Self {
        Self {
            last_seq: 0,
            unacked: VecDeque::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// Numbers `message` (of `size` bytes, as the caller measures it), retains it, and drops the
    /// oldest retained messages while the retained bytes exceed the bound.
    pub fn push(&mut self, message: M, size: usize) -> Pushed {
        self.last_seq += 1;
        let seq = self.last_seq;
        self.unacked.push_back((seq, message, size));
        self.bytes += size;
        let first_dropped = self.unacked.front().map_or(seq, |(s, ..)| *s);
        while self.bytes > self.max_bytes {
            match self.unacked.pop_front() {
                Some((.., n)) => self.bytes -= n,
                None => break,
            }
        }
        let kept_from = self.unacked.front().map_or(seq + 1, |(s, ..)| *s);
        Pushed {
            seq,
            dropped: first_dropped..kept_from,
        }
    }

    /// The receiver took every message numbered `seq` or less: they are forgotten.
    pub fn ack(&mut self, seq: u64) {
        while self.unacked.front().is_some_and(|(s, ..)| *s <= seq) {
            if let Some((.., n)) = self.unacked.pop_front() {
                self.bytes -= n;
            }
        }
    }

    /// The unacknowledged messages, oldest first, with their numbers: what a resume replays.
    pub fn unacked(&self) -> impl Iterator<Item = (u64, &M)> {
        self.unacked.iter().map(|(s, m, _)| (*s, m))
    }

    /// Unacknowledged messages retained.
    pub fn len(&self) -> usize {
        self.unacked.len()
    }

    /// Whether nothing is retained.
    pub fn is_empty(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Bytes retained (the sum of the sizes given to [`Self::push`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The number of the last message pushed (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }
}

/// How the receiver classifies an incoming sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Above the last taken and within the window: take it (it is now the last taken).
    Fresh,
    /// At or below the last taken: a replay of something taken; drop it (and acknowledge it).
    Duplicate,
    /// More than [`DAEMON_SEQ_WINDOW`] above the last taken: a protocol error.
    OutOfWindow,
}

/// The receiving side of one session: the last sequence number taken.
#[derive(Debug, Default, Clone)]
pub struct Inbox {
    last_seq: u64,
}

impl Inbox {
    /// Nothing taken yet.
    pub const fn new() -> Self {
        Self { last_seq: 0 }
    }

    /// Classifies `seq`, and takes it when it is [`Arrival::Fresh`].
    pub fn receive(&mut self, seq: u64) -> Arrival {
        if seq <= self.last_seq {
            Arrival::Duplicate
        } else if seq - self.last_seq > DAEMON_SEQ_WINDOW {
            Arrival::OutOfWindow
        } else {
            self.last_seq = seq;
            Arrival::Fresh
        }
    }

    /// The last sequence number taken (0: none).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }
}

#[cfg(test)]
mod tests;
