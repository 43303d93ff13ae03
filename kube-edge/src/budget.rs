//! A token bucket for API requests: a steady rate with bursts, as client-go's
//! default client-side rate limiter (5 requests per second, bursts of 10).

use std::time::{Duration, Instant};

/// Requests allowed per second, in bursts of up to `burst`. Pure: every
/// method takes `now`.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    qps: f64,
    burst: u32,
    tokens: f64,
    last: Option<Instant>,
}

impl Default for TokenBucket {
    /// client-go's default: 5 requests per second, bursts of 10.
    fn default() -> Self {
        Self::new(5.0, 10)
    }
}

impl TokenBucket {
    /// `qps` requests per second on average, up to `burst` at once (a full
    /// bucket to start with). `qps <= 0` (or not finite) means no limit.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: burst.max(1),
            tokens: f64::from(burst.max(1)),
            last: None,
        }
    }

    /// No limit at all.
    pub fn unlimited() -> Self {
        Self::new(0.0, 1)
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
    }

    /// Takes one token when there is one at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if !self.limited() {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token is there (`now` when one is there already).
    pub fn next_available(&mut self, now: Instant) -> Instant {
        if !self.limited() {
            return now;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            return now;
        }
        let wait = (1.0 - self.tokens) / self.qps;
        // Rounded up to the next microsecond, so a wakeup then finds a token.
        now + Duration::from_micros((wait * 1e6).ceil() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_steady_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::default();
        assert_eq!((0..20).filter(|_| b.try_take(t0)).count(), 10);
        assert_eq!(b.next_available(t0), t0 + Duration::from_millis(200));
        assert!(!b.try_take(t0 + Duration::from_millis(199)));
        assert!(b.try_take(t0 + Duration::from_millis(200)));
        assert!(!b.try_take(t0 + Duration::from_millis(200)));
        // A long pause refills to the burst, no more.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| b.try_take(later)).count(), 10);
        // Time going backwards (another caller's older `now`) takes nothing.
        assert!(!b.try_take(t0));
    }

    #[test]
    fn no_limit() {
        let t0 = Instant::now();
        let mut b = TokenBucket::unlimited();
        assert!((0..10_000).all(|_| b.try_take(t0)));
        assert_eq!(b.next_available(t0), t0);
    }
}
