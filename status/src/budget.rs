//! The request budget the writers of a process share, and its fair share
//! between them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A request budget shared by the writers of a process (token bucket:
/// average rate and burst, as client-go's client-side limiter), so a start
/// with thousands of objects does not flood the API server. Every request
/// of a writer (read, list, create, apply, delete) takes a token. Cheap to
/// clone; clones share the budget.
///
/// Writers waiting for a token are served in turn (each writer is one
/// kind): a token goes to a writer only when there are tokens left for
/// every writer that has been waiting longer, so a kind with a bulk to
/// write, or one retrying a failing request, cannot starve the others. An
/// idle writer leaves its share to the others.
#[derive(Clone, Debug)]
pub struct WriteBudget {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    bucket: Mutex<FairBucket>,
    next_writer: AtomicU64,
}

/// One writer's handle on a [`WriteBudget`].
#[derive(Debug)]
pub(crate) struct Share {
    budget: WriteBudget,
    id: u64,
}

impl WriteBudget {
    /// `qps` requests per second on average, bursts of `burst`; `qps <= 0`:
    /// no limit.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            shared: Arc::new(Shared {
                bucket: Mutex::new(FairBucket::new(qps, burst)),
                next_writer: AtomicU64::new(0),
            }),
        }
    }

    /// No limit.
    pub fn unlimited() -> Self {
        Self::new(0.0, 1)
    }

    /// A handle for one more writer.
    pub(crate) fn share(&self) -> Share {
        Share {
            budget: self.clone(),
            id: self.shared.next_writer.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FairBucket> {
        self.shared.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for WriteBudget {
    /// client-go's default: 5 requests per second, bursts of 10.
    fn default() -> Self {
        Self::new(5.0, 10)
    }
}

impl Share {
    /// Takes tokens for this writer at `now` while `take` is called (see
    /// [`Turn::take`]); when done, a writer that was refused none stops
    /// waiting for its turn.
    pub(crate) fn turn(&self, now: Instant) -> Turn<'_> {
        Turn {
            bucket: self.budget.lock(),
            id: self.id,
            now,
            refused: false,
        }
    }

    /// When this writer can have a token (`now` when it can already).
    pub(crate) fn next_available(&self, now: Instant) -> Instant {
        self.budget.lock().next_available(self.id, now)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.budget.lock().leave(self.id);
    }
}

/// A writer taking tokens (the budget is locked meanwhile).
pub(crate) struct Turn<'a> {
    bucket: MutexGuard<'a, FairBucket>,
    id: u64,
    now: Instant,
    refused: bool,
}

impl Turn<'_> {
    /// Takes a token when one is there for this writer.
    pub(crate) fn take(&mut self) -> bool {
        let ok = self.bucket.try_take(self.id, self.now);
        self.refused |= !ok;
        ok
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.refused {
            // It wants no more than it got: no longer waiting.
            self.bucket.leave(self.id);
        }
    }
}

/// A writer refused a token, waiting for its turn.
#[derive(Debug)]
struct Waiter {
    id: u64,
    /// Its last refusal: a writer that stopped asking (dropped, or its
    /// writer loop stopped) gives up its place after a while.
    asked: Instant,
}

/// A token bucket (rate, burst) whose writers waiting for a token are
/// served in the order they were refused. Pure: every method takes `now`.
#[derive(Debug)]
struct FairBucket {
    qps: f64,
    burst: u32,
    tokens: f64,
    last: Option<Instant>,
    /// At most one place per writer.
    waiting: VecDeque<Waiter>,
}

impl FairBucket {
    fn new(qps: f64, burst: u32) -> Self {
        let burst = burst.max(1);
        Self {
            qps,
            burst,
            tokens: f64::from(burst),
            last: None,
            waiting: VecDeque::new(),
        }
    }

    fn limited(&self) -> bool {
        self.qps.is_finite() && self.qps > 0.0
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last
            && now > last
        {
            let add = now.duration_since(last).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + add).min(f64::from(self.burst));
        }
        if self.last.is_none_or(|l| now > l) {
            self.last = Some(now);
        }
        // A writer waits at most `burst` tokens for its turn: one that has
        // not asked for twice that long (and a second) stopped waiting.
        let patience = Duration::from_secs_f64(2.0 * f64::from(self.burst) / self.qps)
            + Duration::from_secs(1);
        self.waiting
            .retain(|w| now.saturating_duration_since(w.asked) <= patience);
    }

    /// Tokens that must stay for the writers waiting ahead of `id` (all of
    /// them when it is not waiting), at most all but one of a burst.
    fn reserved(&self, id: u64) -> f64 {
        let ahead = self
            .waiting
            .iter()
            .position(|w| w.id == id)
            .unwrap_or(self.waiting.len());
        f64::from(u32::try_from(ahead).unwrap_or(u32::MAX).min(self.burst - 1))
    }

    fn try_take(&mut self, id: u64, now: Instant) -> bool {
        if !self.limited() {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 + self.reserved(id) {
            self.tokens -= 1.0;
            self.leave(id);
            return true;
        }
        match self.waiting.iter_mut().find(|w| w.id == id) {
            Some(w) => w.asked = now,
            None => self.waiting.push_back(Waiter { id, asked: now }),
        }
        false
    }

    fn next_available(&mut self, id: u64, now: Instant) -> Instant {
        if !self.limited() {
            return now;
        }
        self.refill(now);
        let need = 1.0 + self.reserved(id);
        if self.tokens >= need {
            return now;
        }
        let wait = (need - self.tokens) / self.qps;
        // Rounded up to the next microsecond, so a wakeup then finds a token.
        now + Duration::from_micros((wait * 1e6).ceil() as u64)
    }

    fn leave(&mut self, id: u64) {
        self.waiting.retain(|w| w.id != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_burst_then_the_steady_rate() {
        let t0 = Instant::now();
        let mut b = FairBucket::new(5.0, 10);
        assert_eq!((0..20).filter(|_| b.try_take(1, t0)).count(), 10);
        assert_eq!(b.next_available(1, t0), t0 + ms(200));
        assert!(!b.try_take(1, t0 + ms(199)));
        assert!(b.try_take(1, t0 + ms(200)));
        assert!(!b.try_take(1, t0 + ms(200)));
        // A long pause refills to the burst, no more.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| b.try_take(1, later)).count(), 10);
    }

    #[test]
    fn writers_waiting_are_served_in_turn() {
        let t0 = Instant::now();
        let mut b = FairBucket::new(10.0, 3);
        // Writer 1 takes the burst and is refused; then writer 2 is.
        assert_eq!((0..5).filter(|_| b.try_take(1, t0)).count(), 3);
        assert!(!b.try_take(2, t0));
        // Writer 1 is first in line: the next token (100 ms) is its own;
        // writer 2 waits for the one after.
        assert_eq!(b.next_available(1, t0), t0 + ms(100));
        assert_eq!(b.next_available(2, t0), t0 + ms(200));
        let t1 = t0 + ms(100);
        assert!(!b.try_take(2, t1), "writer 1's turn");
        assert!(b.try_take(1, t1));
        // Writer 1 asks again: now behind writer 2.
        assert!(!b.try_take(1, t1));
        let t2 = t0 + ms(200);
        assert!(!b.try_take(1, t2), "writer 2's turn");
        assert!(b.try_take(2, t2));
        // With enough tokens for both, neither waits.
        let t3 = t2 + Duration::from_secs(1);
        assert!(b.try_take(1, t3) && b.try_take(2, t3));
    }

    #[test]
    fn a_writer_that_stops_asking_gives_up_its_turn() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = FairBucket::new(1.0, 2);
        assert_eq!((0..3).filter(|_| b.try_take(1, t0)).count(), 2);
        // Writer 1 waits and never asks again; writer 2 keeps asking: one
        // token stays for writer 1 while it may still come back (5 s).
        assert!(!b.try_take(2, t0 + s(1)));
        assert_eq!(b.next_available(2, t0 + s(1)), t0 + s(2));
        assert_eq!((0..3).filter(|_| b.try_take(2, t0 + s(4))).count(), 1);
        assert_eq!((0..3).filter(|_| b.try_take(2, t0 + s(6))).count(), 2);
    }

    #[test]
    fn no_limit() {
        let t0 = Instant::now();
        let mut b = FairBucket::new(0.0, 1);
        assert!((0..10_000).all(|_| b.try_take(1, t0)));
        assert_eq!(b.next_available(1, t0), t0);
    }
}
