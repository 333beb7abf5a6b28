//! Reconnect backoff and the outage-warning schedule (DESIGN §5 step 9).

use std::time::Duration;

/// First reconnect delay.
pub const BASE: Duration = Duration::from_secs(1);
/// Longest reconnect delay.
pub const CAP: Duration = Duration::from_secs(15);
/// An outage is reported once it lasts this long.
pub const FIRST_WARNING: Duration = Duration::from_secs(10);
/// Longest spacing between repeated outage warnings.
pub const WARNING_CAP: Duration = Duration::from_secs(15 * 60);

/// The delay before reconnect attempt `attempt` (0-based): `min(1 s·2^attempt, 15 s)` with
/// "equal jitter" — half fixed, half drawn from `jitter` in `[0, 1)` — so it lies in
/// `[delay/2, delay]` and never above the cap.
pub fn delay(attempt: u32, jitter: f64) -> Duration {
    let exp = BASE.saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX));
    let d = exp.min(CAP);
    let j = jitter.clamp(0.0, 1.0);
    d / 2 + d.mul_f64(j / 2.0)
}

/// When outage warnings are due: after [`FIRST_WARNING`], then at doubling intervals up to
/// [`WARNING_CAP`] apart.
#[derive(Debug, Clone)]
pub struct Warnings {
    next: Duration,
    gap: Duration,
}

impl Default for Warnings {
    fn default() -> Self {
        Self {
            next: FIRST_WARNING,
            gap: FIRST_WARNING,
        }
    }
}

impl Warnings {
    /// Whether a warning is due `elapsed` into the outage; advances the schedule when it is.
    pub fn due(&mut self, elapsed: Duration) -> bool {
        if elapsed < self.next {
            return false;
        }
        self.gap = (self.gap * 2).min(WARNING_CAP);
        self.next = elapsed + self.gap;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_delay_stays_within_bounds() {
        for attempt in 0..64 {
            for j in [0.0, 0.25, 0.5, 0.999, 1.0, -3.0, 7.0] {
                let d = delay(attempt, j);
                let full = (BASE * 2u32.saturating_pow(attempt.min(16))).min(CAP);
                assert!(d <= CAP, "attempt {attempt} jitter {j}: {d:?}");
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempt} jitter {j}: {d:?}"
                );
            }
        }
        assert_eq!(delay(0, 0.0), Duration::from_millis(500));
        assert_eq!(delay(10, 1.0), CAP);
    }

    #[test]
    fn warnings_space_out_to_the_cap() {
        let mut w = Warnings::default();
        assert!(!w.due(Duration::from_secs(9)));
        assert!(w.due(Duration::from_secs(10)));
        assert!(!w.due(Duration::from_secs(20)));
        assert!(w.due(Duration::from_secs(30)));
        let mut t = Duration::from_secs(30);
        let mut last = t;
        for _ in 0..20 {
            t += Duration::from_secs(1);
            while !w.due(t) {
                t += Duration::from_secs(1);
            }
            assert!(t - last <= WARNING_CAP + Duration::from_secs(1));
            last = t;
        }
    }
}
