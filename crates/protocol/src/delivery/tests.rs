//! Unit and property tests of the delivery contract. The property tests (bolero, a bounded
//! number of generated cases under `cargo test`) run a sender's [`Outbox`] and a receiver's
//! [`Inbox`] over an ordered channel through arbitrary interleavings of sends, deliveries,
//! acknowledgements, duplicate deliveries of earlier frames and link drops with a resume that
//! replays, and check: nothing acknowledged is ever replayed; nothing unacknowledged is lost
//! while within the bound; the receiver takes each message once, in order.

use std::collections::VecDeque;

use super::*;

#[test]
fn push_numbers_from_one_and_ack_is_cumulative() {
    let mut o = Outbox::new(100);
    assert_eq!(o.push("a", 1).seq, 1);
    assert_eq!(o.push("b", 1).seq, 2);
    assert_eq!(o.push("c", 1).seq, 3);
    o.ack(2);
    assert_eq!(o.unacked().collect::<Vec<_>>(), [(3, &"c")]);
    assert_eq!(o.bytes(), 1);
    o.ack(1);
    assert_eq!(o.len(), 1, "an older ack settles nothing more");
    o.ack(9);
    assert!(o.is_empty());
    assert_eq!(o.push("d", 1).seq, 4, "numbers go on after an ack");
}

#[test]
fn past_the_bound_the_oldest_are_dropped_and_returned() {
    let mut o = Outbox::new(10);
    assert!(o.push(1, 4).dropped.is_empty());
    assert!(o.push(2, 4).dropped.is_empty());
    let p = o.push(3, 4);
    assert_eq!((p.seq, p.dropped), (3, 1..2));
    assert_eq!(o.bytes(), 8);
    let p = o.push(4, 11);
    assert_eq!(
        (p.seq, p.dropped),
        (4, 2..5),
        "a message over the bound alone goes too"
    );
    assert!(o.is_empty());
    assert_eq!(o.bytes(), 0);
}

#[test]
fn the_inbox_takes_fresh_drops_duplicates_and_refuses_past_the_window() {
    let mut i = Inbox::new();
    assert_eq!(i.receive(1), Arrival::Fresh);
    assert_eq!(i.receive(1), Arrival::Duplicate);
    assert_eq!(i.receive(0), Arrival::Duplicate);
    assert_eq!(
        i.receive(5),
        Arrival::Fresh,
        "a gap within the window is taken"
    );
    assert_eq!(i.receive(3), Arrival::Duplicate);
    assert_eq!(i.receive(5 + DAEMON_SEQ_WINDOW + 1), Arrival::OutOfWindow);
    assert_eq!(i.last_seq(), 5, "an out-of-window number is not taken");
    assert_eq!(i.receive(5 + DAEMON_SEQ_WINDOW), Arrival::Fresh);
    assert_eq!(i.receive(u64::MAX), Arrival::OutOfWindow);
}

/// Generated cases per property under `cargo test` (no fuzzing engine): enough to cover the
/// interleavings of a few dozen steps, fast enough to keep the suite quick.
const CASES: usize = 2_000;

/// One step of a run.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The sender emits a message of this size.
    Send(usize),
    /// The channel delivers its oldest frame; the receiver acknowledges its number.
    Deliver,
    /// The sender reads the oldest acknowledgement in flight.
    TakeAck,
    /// A frame the receiver took (the n-th, modulo) arrives again, ahead of the rest.
    Duplicate(usize),
    /// The link drops (frames and acks in flight lost) and a new one resumes: the sender
    /// replays everything unacknowledged, in order.
    Resume,
}

fn steps(raw: &[(u8, u8)]) -> Vec<Step> {
    raw.iter()
        .map(|&(op, arg)| match op % 8 {
            0..=2 => Step::Send(usize::from(arg % 16) + 1),
            3 | 4 => Step::Deliver,
            5 => Step::TakeAck,
            6 => Step::Duplicate(usize::from(arg)),
            _ => Step::Resume,
        })
        .collect()
}

/// The world of one run: sender, ordered channel, receiver, acks in flight.
struct World {
    out: Outbox<u64>,
    inbox: Inbox,
    wire: VecDeque<(u64, u64)>,
    acks: VecDeque<u64>,
    /// Every frame ever put on a wire (for duplicates).
    sent: Vec<(u64, u64)>,
    /// Messages the receiver took, in order.
    taken: Vec<u64>,
    /// Highest acknowledgement the sender read.
    acked: u64,
    /// Sequence numbers the outbox dropped for its bound.
    dropped: Vec<u64>,
    /// The next message's payload (payload = its intended order).
    next: u64,
}

impl World {
    fn new(max_bytes: usize) -> Self {
        Self {
            out: Outbox::new(max_bytes),
            inbox: Inbox::new(),
            wire: VecDeque::new(),
            acks: VecDeque::new(),
            sent: Vec::new(),
            taken: Vec::new(),
            acked: 0,
            dropped: Vec::new(),
            next: 1,
        }
    }

    fn step(&mut self, step: Step) {
        match step {
            Step::Send(size) => {
                let p = self.out.push(self.next, size);
                assert_eq!(p.seq, self.next, "numbers are consecutive from 1");
                self.dropped.extend(p.dropped.clone());
                self.wire.push_back((p.seq, self.next));
                self.sent.push((p.seq, self.next));
                self.next += 1;
            }
            Step::Deliver => {
                if let Some((seq, m)) = self.wire.pop_front() {
                    match self.inbox.receive(seq) {
                        Arrival::Fresh => self.taken.push(m),
                        Arrival::Duplicate => {}
                        Arrival::OutOfWindow => panic!("seq {seq} out of window"),
                    }
                    self.acks.push_back(seq);
                }
            }
            Step::TakeAck => {
                if let Some(seq) = self.acks.pop_front() {
                    self.out.ack(seq);
                    self.acked = self.acked.max(seq);
                }
            }
            Step::Duplicate(n) => {
                // A copy of a frame the receiver already took (the order-keeping transport
                // reorders nothing else), arriving ahead of everything in flight.
                let taken: Vec<(u64, u64)> = self
                    .sent
                    .iter()
                    .copied()
                    .filter(|(s, _)| *s <= self.inbox.last_seq())
                    .collect();
                if !taken.is_empty() {
                    self.wire.push_front(taken[n % taken.len()]);
                }
            }
            Step::Resume => {
                self.wire.clear();
                self.acks.clear();
                for (seq, m) in self.out.unacked() {
                    assert!(seq > self.acked, "acknowledged message {seq} replayed");
                    self.wire.push_back((seq, *m));
                }
                self.sent.extend(self.wire.iter().copied());
            }
        }
        self.check();
    }

    /// What holds after every step.
    fn check(&self) {
        // Taken once each, in order: strictly increasing payloads (payload order = seq order).
        assert!(
            self.taken.windows(2).all(|w| w[0] < w[1]),
            "{:?}",
            self.taken
        );
        // Retained: exactly the messages neither acknowledged nor dropped, in order.
        let retained: Vec<u64> = self.out.unacked().map(|(s, _)| s).collect();
        let expected: Vec<u64> = (self.acked + 1..self.next)
            .filter(|s| !self.dropped.contains(s))
            .collect();
        assert_eq!(
            retained, expected,
            "unacknowledged messages lost or kept past their ack"
        );
        assert!(self.out.bytes() <= self.out.max_bytes, "the bound holds");
    }

    /// Drains everything: resume once, deliver all, read all acks.
    fn settle(&mut self) {
        self.step(Step::Resume);
        while !self.wire.is_empty() {
            self.step(Step::Deliver);
        }
        while !self.acks.is_empty() {
            self.step(Step::TakeAck);
        }
    }
}

#[test]
fn within_the_bound_every_message_is_taken_once_in_order_and_nothing_acked_is_replayed() {
    bolero::check!()
        .with_type::<Vec<(u8, u8)>>()
        .with_iterations(CASES)
        .for_each(|raw| {
            let mut w = World::new(usize::MAX);
            for step in steps(raw) {
                w.step(step);
            }
            w.settle();
            let all: Vec<u64> = (1..w.next).collect();
            assert_eq!(w.taken, all, "each message taken once, in order, none lost");
            assert!(w.out.is_empty(), "all acknowledged once taken");
            assert!(w.dropped.is_empty());
        });
}

#[test]
fn past_the_bound_only_the_oldest_are_dropped_and_the_rest_still_arrive_in_order() {
    bolero::check!()
        .with_type::<Vec<(u8, u8)>>()
        .with_iterations(CASES)
        .for_each(|raw| {
            let mut w = World::new(40);
            for step in steps(raw) {
                w.step(step);
            }
            w.settle();
            // Taken: every message but some of the dropped ones, in order.
            for m in 1..w.next {
                assert!(
                    w.taken.contains(&m) || w.dropped.contains(&m),
                    "message {m} lost though never dropped"
                );
            }
            assert!(w.out.is_empty());
        });
}
