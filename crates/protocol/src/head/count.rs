//! Counting head reads, for tests that pin how often a message is read per process hop (built
//! with the `count-reads` feature only, which test builds of other crates enable).
//!
//! The count is per thread: a test on a current-thread runtime counts what its own thread read,
//! whatever other tests run meanwhile.

use std::cell::Cell;

thread_local! {
    static READS: Cell<u64> = const { Cell::new(0) };
}

/// Counts one head read ([`super::Head::of`], [`super::Head::parse`], [`super::Head::scan`]).
pub(super) fn read() {
    READS.with(|r| r.set(r.get() + 1));
}

/// Head reads on this thread so far.
pub fn reads() -> u64 {
    READS.with(Cell::get)
}
