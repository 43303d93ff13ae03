//! Counters of the runtime thread, readable from any thread without a lock.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// 1 µs buckets below this many µs.
const FINE_US: u64 = 2_000;
/// 100 µs buckets from [`FINE_US`] up to this many µs.
const COARSE_US: u64 = 102_000;
const COARSE_STEP_US: u64 = 100;
const BUCKETS: usize = (FINE_US + (COARSE_US - FINE_US) / COARSE_STEP_US + 1) as usize;

/// A lock-free histogram of delays: 1 µs resolution up to 2 ms, 100 µs up to
/// 102 ms, and one bucket above.
#[derive(Debug)]
pub(crate) struct AtomicHistogram {
    buckets: Box<[AtomicU64]>,
}

impl AtomicHistogram {
    pub(crate) fn new() -> AtomicHistogram {
        AtomicHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(crate) fn record_ns(&self, ns: u64) {
        let us = ns / 1_000;
        let index = if us < FINE_US {
            us as usize
        } else if us < COARSE_US {
            (FINE_US + (us - FINE_US) / COARSE_STEP_US) as usize
        } else {
            BUCKETS - 1
        };
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Histogram {
        Histogram {
            counts: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// A copy of a delay histogram (see [`super::BfdHandle::tx_lateness`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
}

impl Histogram {
    /// Upper edge of bucket `i`, µs.
    fn upper_us(i: usize) -> u64 {
        let i = i as u64;
        if i < FINE_US {
            i + 1
        } else {
            FINE_US + (i - FINE_US + 1) * COARSE_STEP_US
        }
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The samples recorded since `earlier` (a snapshot of the same
    /// histogram).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        Histogram {
            counts: self
                .counts
                .iter()
                .zip(&earlier.counts)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
        }
    }

    /// The `q` quantile (0.0-1.0), as the upper edge of its bucket in µs
    /// (`u64::MAX` when it falls above 102 ms); `None` without samples.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(if i == BUCKETS - 1 {
                    u64::MAX
                } else {
                    Self::upper_us(i)
                });
            }
        }
        None
    }

    /// The largest sample's bucket edge, µs.
    pub fn max_us(&self) -> Option<u64> {
        self.quantile_us(1.0)
    }
}

/// Counters of the runtime thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) tid: AtomicI32,
    pub(crate) wakeups: AtomicU64,
    pub(crate) timer_expiries: AtomicU64,
    pub(crate) control_rx: AtomicU64,
    pub(crate) control_tx: AtomicU64,
    pub(crate) rx_unmatched: AtomicU64,
    pub(crate) rx_gated: AtomicU64,
    pub(crate) rx_rate_limited: AtomicU64,
    pub(crate) timer_queue_len: AtomicU64,
    pub(crate) rx_errors: AtomicU64,
    pub(crate) tx_errors: AtomicU64,
    pub(crate) echo_tx: AtomicU64,
    pub(crate) echo_rx: AtomicU64,
    pub(crate) echo_rx_ignored: AtomicU64,
    pub(crate) sessions: AtomicU64,
    pub(crate) tx_lateness: AtomicHistogram,
}

impl Shared {
    pub(crate) fn new() -> Shared {
        Shared {
            tid: AtomicI32::new(0),
            wakeups: AtomicU64::new(0),
            timer_expiries: AtomicU64::new(0),
            control_rx: AtomicU64::new(0),
            control_tx: AtomicU64::new(0),
            rx_unmatched: AtomicU64::new(0),
            rx_gated: AtomicU64::new(0),
            rx_rate_limited: AtomicU64::new(0),
            timer_queue_len: AtomicU64::new(0),
            rx_errors: AtomicU64::new(0),
            tx_errors: AtomicU64::new(0),
            echo_tx: AtomicU64::new(0),
            echo_rx: AtomicU64::new(0),
            echo_rx_ignored: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            tx_lateness: AtomicHistogram::new(),
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RuntimeStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RuntimeStats {
            thread_id: match self.tid.load(Ordering::Relaxed) {
                0 => None,
                tid => Some(tid),
            },
            wakeups: load(&self.wakeups),
            timer_expiries: load(&self.timer_expiries),
            control_rx: load(&self.control_rx),
            control_tx: load(&self.control_tx),
            rx_unmatched: load(&self.rx_unmatched),
            rx_gated: load(&self.rx_gated),
            rx_rate_limited: load(&self.rx_rate_limited),
            timer_queue_len: load(&self.timer_queue_len),
            rx_errors: load(&self.rx_errors),
            tx_errors: load(&self.tx_errors),
            echo_tx: load(&self.echo_tx),
            echo_rx: load(&self.echo_rx),
            echo_rx_ignored: load(&self.echo_rx_ignored),
            sessions: load(&self.sessions),
        }
    }
}

/// Counters of the runtime thread (see [`super::BfdHandle::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// The thread's kernel id (for `/proc/<pid>/task/<tid>/stat`).
    pub thread_id: Option<i32>,
    /// Returns from `epoll_wait`.
    pub wakeups: u64,
    /// Timer expiries delivered to sessions.
    pub timer_expiries: u64,
    /// Control packets received on 3784 / 4784 (before any check).
    pub control_rx: u64,
    /// Control packets sent.
    pub control_tx: u64,
    /// Received control packets that reached no session (malformed,
    /// authenticated, unknown discriminator or path).
    pub rx_unmatched: u64,
    /// Times a busy receiving socket was taken out of the epoll set
    /// ([`super::RX_GATE_NS`]).
    pub rx_gated: u64,
    /// Received control packets dropped because their session already
    /// accepted [`crate::registry::MAX_CONTROL_PER_SECOND`] in the current
    /// second (not counted in `rx_unmatched`).
    pub rx_rate_limited: u64,
    /// Entries in the deadline queue after the last timer pass, live and
    /// stale (at most about two per armed timer).
    pub timer_queue_len: u64,
    /// `recvmsg` errors.
    pub rx_errors: u64,
    /// Failed sends, control and echo (including a socket that could not be
    /// opened, and an echo packet not sent for want of the peer's MAC).
    pub tx_errors: u64,
    /// Echo packets sent (the kernel took them).
    pub echo_tx: u64,
    /// Frames caught on the echo sockets (before any check).
    pub echo_rx: u64,
    /// Of those, the ones that were not the session's own echo back
    /// (another session's on the same address, a wrong TTL or checksum).
    pub echo_rx_ignored: u64,
    /// Sessions.
    pub sessions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_quantiles() {
        let h = AtomicHistogram::new();
        assert_eq!(h.snapshot().quantile_us(0.5), None);
        for us in [0u64, 5, 5, 5, 1_999, 2_000, 50_000, 200_000] {
            h.record_ns(us * 1_000 + 500);
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 8);
        assert_eq!(s.quantile_us(0.0), Some(1));
        assert_eq!(s.quantile_us(0.5), Some(6));
        assert_eq!(s.quantile_us(0.625), Some(2_000));
        assert_eq!(s.quantile_us(0.75), Some(2_100));
        assert_eq!(s.quantile_us(0.875), Some(50_100));
        assert_eq!(s.max_us(), Some(u64::MAX));
        let before = s.clone();
        h.record_ns(10_000);
        let d = h.snapshot().since(&before);
        assert_eq!(d.count(), 1);
        assert_eq!(d.quantile_us(0.99), Some(11));
    }
}
