//! A coalescing queue of change signals: a set of keys plus an "everything"
//! flag, and a wake-up. Never a channel: a key signalled twice before the
//! consumer looks is one key, and past a bound the set collapses into the
//! flag instead of growing, so a burst of events (a re-list of 50,000
//! Services, a flapping watch) costs bounded memory and one pass.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The default bound on the keys held before they collapse into
/// [`Batch::All`].
pub const DEFAULT_KEY_BOUND: usize = 10_000;

/// What a consumer has to process, taken at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Batch {
    /// Everything (a re-list, too many keys, or a kind signalled as a whole).
    All,
    /// These keys, each once, in sorted order.
    Keys(Vec<String>),
}

/// A coalescing change queue; clones share one queue. Meant for one consumer
/// ([`Changes::next`]); any number of producers.
#[derive(Clone, Debug)]
pub struct Changes {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    wake: Notify,
    bound: usize,
}

#[derive(Debug, Default)]
struct State {
    keys: BTreeSet<String>,
    all: bool,
    collapsed: u64,
}

impl Changes {
    /// An empty queue that holds at most `bound` keys (at least 1) before
    /// collapsing into [`Batch::All`].
    pub fn new(bound: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                wake: Notify::new(),
                bound: bound.max(1),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a set and a flag, both valid.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Signals one key. Ignored while [`Batch::All`] is pending; a key that
    /// would pass the bound turns the pending keys into [`Batch::All`].
    pub fn key(&self, key: impl Into<String>) {
        let mut s = self.state();
        if s.all {
            return;
        }
        let key = key.into();
        if s.keys.len() >= self.inner.bound && !s.keys.contains(&key) {
            s.keys = BTreeSet::new();
            s.all = true;
            s.collapsed += 1;
        } else {
            s.keys.insert(key);
        }
        drop(s);
        self.inner.wake.notify_one();
    }

    /// Signals everything (the pending keys are dropped: all includes them).
    pub fn all(&self) {
        let mut s = self.state();
        s.all = true;
        s.keys = BTreeSet::new();
        drop(s);
        self.inner.wake.notify_one();
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        let s = self.state();
        !s.all && s.keys.is_empty()
    }

    /// The number of pending keys (0 while [`Batch::All`] is pending).
    pub fn pending_keys(&self) -> usize {
        self.state().keys.len()
    }

    /// How often the key set passed the bound and collapsed into
    /// [`Batch::All`].
    pub fn collapsed(&self) -> u64 {
        self.state().collapsed
    }

    /// Takes what is pending, if anything, leaving the queue empty.
    pub fn take(&self) -> Option<Batch> {
        let mut s = self.state();
        if s.all {
            s.all = false;
            return Some(Batch::All);
        }
        if s.keys.is_empty() {
            return None;
        }
        Some(Batch::Keys(
            std::mem::take(&mut s.keys).into_iter().collect(),
        ))
    }

    /// Waits until something is pending and takes it.
    pub async fn next(&self) -> Batch {
        loop {
            // A signal between `take` and the wait leaves a permit in the
            // Notify, so it is not lost.
            if let Some(b) = self.take() {
                return b;
            }
            self.inner.wake.notified().await;
        }
    }
}

impl Default for Changes {
    fn default() -> Self {
        Self::new(DEFAULT_KEY_BOUND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn keys(v: &[&str]) -> Batch {
        Batch::Keys(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn keys_coalesce_and_come_out_sorted_once() {
        let q = Changes::new(10);
        assert_eq!(q.take(), None);
        assert!(q.is_empty());
        q.key("ns/b");
        q.key("ns/a");
        q.key("ns/b");
        assert_eq!(q.pending_keys(), 2);
        assert_eq!(q.take(), Some(keys(&["ns/a", "ns/b"])));
        assert_eq!(q.take(), None);
    }

    #[test]
    fn all_swallows_keys_before_and_after_until_taken() {
        let q = Changes::new(10);
        q.key("ns/a");
        q.all();
        q.key("ns/b");
        assert_eq!(q.pending_keys(), 0);
        assert_eq!(q.take(), Some(Batch::All));
        assert_eq!(q.take(), None);
        q.key("ns/c");
        assert_eq!(q.take(), Some(keys(&["ns/c"])));
    }

    #[test]
    fn passing_the_bound_collapses_into_all() {
        let q = Changes::new(3);
        for k in ["a", "b", "c"] {
            q.key(k);
        }
        // A repeated key does not grow the set.
        q.key("a");
        assert_eq!(q.pending_keys(), 3);
        assert_eq!(q.collapsed(), 0);
        q.key("d");
        assert_eq!(q.pending_keys(), 0);
        assert_eq!(q.collapsed(), 1);
        assert_eq!(q.take(), Some(Batch::All));
        assert_eq!(q.take(), None);
    }

    #[test]
    fn a_burst_of_a_hundred_thousand_keys_holds_at_most_the_bound() {
        let q = Changes::new(DEFAULT_KEY_BOUND);
        let mut most = 0;
        for i in 0..100_000 {
            q.key(format!("ns/svc-{i}"));
            most = most.max(q.pending_keys());
        }
        assert_eq!(most, DEFAULT_KEY_BOUND);
        assert_eq!(q.take(), Some(Batch::All));
    }

    #[tokio::test]
    async fn next_wakes_on_a_signal_sent_before_or_while_waiting() {
        let q = Changes::new(10);
        q.key("early");
        assert_eq!(q.next().await, keys(&["early"]));

        let producer = q.clone();
        let waiter = tokio::spawn(async move { q.next().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        producer.key("late");
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
        assert_eq!(got, keys(&["late"]));
    }

    #[tokio::test]
    async fn a_taken_signal_leaves_no_spurious_empty_batch() {
        // The permit of a signal already taken by `take` makes `next` loop
        // once and wait again, never return an empty batch.
        let q = Changes::new(10);
        q.key("x");
        assert_eq!(q.take(), Some(keys(&["x"])));
        let r = tokio::time::timeout(Duration::from_millis(50), q.next()).await;
        assert!(r.is_err(), "next returned {r:?} with nothing pending");
    }
}
