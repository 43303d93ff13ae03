//! Per-object exponential backoff with jitter.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::failure::Class;

/// How long to wait before retrying after failures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Delay after the first failure; doubled after each further one.
    pub initial: Duration,
    /// Longest delay after transient failures.
    pub max: Duration,
    /// Delay after a [`Class::Permanent`] failure: the same request would
    /// fail again, so it is tried rarely (or when its input changes).
    pub permanent: Duration,
    /// Each delay is drawn uniformly from `[d * (1 - jitter), d]`, so objects
    /// (and daemons) that failed together do not retry together. 0..=1.
    pub jitter: f64,
}

impl Default for Backoff {
    /// 500 ms doubling to 60 s for transient errors, 5 min for permanent ones,
    /// 20 % jitter.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(60),
            permanent: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay before retrying after `failures` (>= 1) consecutive failures,
    /// the last one of `class`, with jitter drawn from `unit` (in `[0, 1)`).
    pub fn delay_with(&self, failures: u32, class: Class, unit: f64) -> Duration {
        let full = match class {
            Class::Permanent => self.permanent.max(self.max),
            // Re-read and decide again at once.
            Class::Conflict | Class::NotFound | Class::Gone => return Duration::ZERO,
            Class::Throttled | Class::Transient | Class::Timeout => {
                let factor = 1u32
                    .checked_shl(failures.saturating_sub(1).min(31))
                    .unwrap_or(u32::MAX);
                self.initial
                    .checked_mul(factor)
                    .unwrap_or(self.max)
                    .min(self.max)
            }
        };
        let jitter = self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0);
        full.mul_f64(1.0 - jitter)
    }

    /// [`Self::delay_with`] with a random draw.
    pub fn delay(&self, failures: u32, class: Class) -> Duration {
        self.delay_with(failures, class, fastrand::f64())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    failures: u32,
    due: Instant,
}

/// Backoff state per object key: failures in a row and when the next attempt
/// is due. Bounded by the number of objects with a failure outstanding.
#[derive(Clone, Debug)]
pub struct Retries<K: Ord> {
    policy: Backoff,
    entries: BTreeMap<K, Entry>,
}

impl<K: Ord + Clone> Retries<K> {
    pub fn new(policy: Backoff) -> Self {
        Self {
            policy,
            entries: BTreeMap::new(),
        }
    }

    /// Records a failure of `key` at `now`: returns the delay until it is due.
    pub fn failed(&mut self, key: K, class: Class, now: Instant) -> Duration {
        self.failed_with(key, class, now, fastrand::f64())
    }

    /// [`Self::failed`] with the jitter draw given (tests).
    pub fn failed_with(&mut self, key: K, class: Class, now: Instant, unit: f64) -> Duration {
        let failures = self.entries.get(&key).map_or(0, |e| e.failures) + 1;
        let delay = self.policy.delay_with(failures, class, unit);
        self.entries.insert(
            key,
            Entry {
                failures,
                due: now + delay,
            },
        );
        delay
    }

    /// `key` succeeded (or is gone): its backoff starts over.
    pub fn succeeded(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// Failures of `key` in a row.
    pub fn failures(&self, key: &K) -> u32 {
        self.entries.get(key).map_or(0, |e| e.failures)
    }

    /// True while `key` waits for its next attempt.
    pub fn waiting(&self, key: &K, now: Instant) -> bool {
        self.entries.get(key).is_some_and(|e| e.due > now)
    }

    /// Keys whose next attempt is due at `now` (they stay recorded until
    /// [`Self::succeeded`], so a further failure backs off further).
    pub fn due(&self, now: Instant) -> Vec<K> {
        self.entries
            .iter()
            .filter(|(_, e)| e.due <= now)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The earliest time an attempt is due after `now`.
    pub fn next_due_after(&self, now: Instant) -> Option<Instant> {
        self.entries
            .values()
            .map(|e| e.due)
            .filter(|d| *d > now)
            .min()
    }

    /// The earliest time an attempt is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.due).min()
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Keys recorded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keeps only the keys `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn transient_failures_double_up_to_the_cap() {
        let b = Backoff::default();
        let got: Vec<Duration> = (1..=10)
            .map(|n| b.delay_with(n, Class::Transient, 0.0))
            .collect();
        assert_eq!(
            got,
            [
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                ms(16000),
                ms(32000),
                ms(60000),
                ms(60000),
                ms(60000)
            ]
        );
        // Huge failure counts do not overflow.
        assert_eq!(b.delay_with(u32::MAX, Class::Timeout, 0.0), ms(60000));
    }

    #[test]
    fn permanent_failures_wait_minutes_from_the_first() {
        let b = Backoff::default();
        assert_eq!(
            b.delay_with(1, Class::Permanent, 0.0),
            Duration::from_secs(300)
        );
        assert_eq!(
            b.delay_with(7, Class::Permanent, 0.0),
            Duration::from_secs(300)
        );
        assert_eq!(b.delay_with(1, Class::Conflict, 0.9), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_in_its_band_and_varies() {
        let b = Backoff::default();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let d = b.delay(3, Class::Transient);
            assert!(d <= ms(2000) && d >= ms(1600), "{d:?}");
            seen.insert(d);
        }
        assert!(
            seen.len() > 50,
            "jitter draws {} distinct delays",
            seen.len()
        );
    }

    #[test]
    fn retries_back_off_per_key() {
        let t0 = Instant::now();
        let mut r = Retries::new(Backoff::default());
        assert_eq!(r.failed_with("a", Class::Transient, t0, 0.0), ms(500));
        assert_eq!(r.failed_with("a", Class::Transient, t0, 0.0), ms(1000));
        assert_eq!(r.failed_with("b", Class::Transient, t0, 0.0), ms(500));
        assert_eq!(r.failures(&"a"), 2);
        assert!(r.due(t0 + ms(499)).is_empty());
        assert_eq!(r.due(t0 + ms(500)), ["b"]);
        assert_eq!(r.due(t0 + ms(1000)), ["a", "b"]);
        assert!(r.waiting(&"a", t0 + ms(999)) && !r.waiting(&"a", t0 + ms(1000)));
        assert_eq!(r.next_due(), Some(t0 + ms(500)));
        assert_eq!(r.next_due_after(t0 + ms(500)), Some(t0 + ms(1000)));
        r.succeeded(&"a");
        assert_eq!(r.failures(&"a"), 0);
        assert_eq!(r.len(), 1);
        r.clear();
        assert!(r.is_empty());
    }
}
