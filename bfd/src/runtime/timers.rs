//! The runtime's deadline queue: every session's armed timers, earliest
//! first.
//!
//! A session re-arms its detection timer on every received packet. A plain
//! heap with lazy deletion (push on every arm, drop stale entries when they
//! reach the top) then grows by one entry per packet until those stale
//! deadlines come due, a detection time later: unbounded under a flood.
//! Here each (session, timer) has at most one live heap entry: re-arming
//! to a later deadline (the common case) pushes nothing, the entry is moved
//! to the new deadline when it reaches the top; only re-arming earlier
//! pushes, and the heap is rebuilt when stale entries outnumber the live
//! ones.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::session::Timer;

/// Stale entries tolerated beyond the number of armed timers before the
/// heap is rebuilt.
const COMPACT_SLACK: usize = 64;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// The live deadline and how early it may be delivered.
    armed: Option<(u64, u64)>,
    /// The deadline of this timer's current heap entry; never later than
    /// `armed`'s.
    queued: Option<u64>,
}

/// A due (or next) timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Due {
    pub(super) at: u64,
    pub(super) early: u64,
    pub(super) discriminator: u32,
    pub(super) timer: Timer,
}

#[derive(Debug, Default)]
pub(super) struct TimerQueue {
    heap: BinaryHeap<Reverse<(u64, u32, Timer)>>,
    slots: HashMap<(u32, Timer), Slot>,
}

impl TimerQueue {
    /// Arms (or re-arms) a timer; replaces its pending deadline.
    pub(super) fn arm(&mut self, discriminator: u32, timer: Timer, at: u64, early: u64) {
        let slot = self.slots.entry((discriminator, timer)).or_default();
        slot.armed = Some((at, early));
        if slot.queued.is_some_and(|q| q <= at) {
            return; // moved to `at` when its entry reaches the top
        }
        slot.queued = Some(at);
        self.heap.push(Reverse((at, discriminator, timer)));
        if self.heap.len() > 2 * self.slots.len() + COMPACT_SLACK {
            self.compact();
        }
    }

    /// Disarms a timer.
    pub(super) fn cancel(&mut self, discriminator: u32, timer: Timer) {
        let key = (discriminator, timer);
        if let Some(slot) = self.slots.get_mut(&key) {
            slot.armed = None;
            if slot.queued.is_none() {
                self.slots.remove(&key);
            }
        }
    }

    /// Forgets every timer of a session.
    pub(super) fn remove_session(&mut self, discriminator: u32) {
        for timer in Timer::ALL {
            self.slots.remove(&(discriminator, timer));
        }
    }

    /// The earliest armed timer (dropping stale entries on the way).
    pub(super) fn peek(&mut self) -> Option<Due> {
        loop {
            let &Reverse((q, discriminator, timer)) = self.heap.peek()?;
            let key = (discriminator, timer);
            let Some(slot) = self.slots.get_mut(&key) else {
                self.heap.pop(); // its session is gone
                continue;
            };
            if slot.queued != Some(q) {
                self.heap.pop(); // superseded by an earlier entry
                continue;
            }
            match slot.armed {
                None => {
                    self.heap.pop();
                    self.slots.remove(&key);
                }
                Some((at, _)) if at > q => {
                    // Re-armed later since: move the entry.
                    self.heap.pop();
                    slot.queued = Some(at);
                    self.heap.push(Reverse((at, discriminator, timer)));
                }
                Some((at, early)) => {
                    return Some(Due {
                        at,
                        early,
                        discriminator,
                        timer,
                    });
                }
            }
        }
    }

    /// Takes the earliest armed timer out of the queue and disarms it.
    pub(super) fn pop(&mut self) -> Option<Due> {
        let due = self.peek()?;
        self.heap.pop();
        self.slots.remove(&(due.discriminator, due.timer));
        Some(due)
    }

    /// Takes the earliest armed timer's entry out of the heap, leaving the
    /// timer armed; [`TimerQueue::put_back`] queues it again unless it was
    /// re-armed or cancelled meanwhile.
    pub(super) fn set_aside(&mut self) -> Option<Due> {
        let due = self.peek()?;
        self.heap.pop();
        if let Some(slot) = self.slots.get_mut(&(due.discriminator, due.timer)) {
            slot.queued = None;
        }
        Some(due)
    }

    /// See [`TimerQueue::set_aside`].
    pub(super) fn put_back(&mut self, due: &Due) {
        let key = (due.discriminator, due.timer);
        let Some(slot) = self.slots.get_mut(&key) else {
            return; // cancelled, or its session gone
        };
        if slot.queued.is_none() && slot.armed.is_some_and(|(at, _)| at == due.at) {
            slot.queued = Some(due.at);
            self.heap
                .push(Reverse((due.at, due.discriminator, due.timer)));
        }
    }

    /// Heap entries, live and stale.
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Rebuilds the heap from the armed timers only.
    fn compact(&mut self) {
        self.slots.retain(|_, slot| slot.armed.is_some());
        let mut entries = Vec::with_capacity(self.slots.len());
        for (&(discriminator, timer), slot) in &mut self.slots {
            if let Some((at, _)) = slot.armed {
                slot.queued = Some(at);
                entries.push(Reverse((at, discriminator, timer)));
            }
        }
        self.heap = BinaryHeap::from(entries);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rng::SplitMix64;

    /// The case: every received packet re-arms the detection timer
    /// a detection time ahead; the queue must not grow with the packets.
    #[test]
    fn rearming_on_every_packet_does_not_grow_the_heap() {
        let mut q = TimerQueue::default();
        let sessions = 100u32;
        for packet in 0..10_000u64 {
            let d = (packet % u64::from(sessions)) as u32 + 1;
            // 30 s detection time, a packet every 10 µs.
            q.arm(d, Timer::Detect, packet * 10_000 + 30_000_000_000, 0);
        }
        assert!(q.len() <= sessions as usize, "heap has {} entries", q.len());
        let first = q.peek().expect("armed");
        assert_eq!(first.discriminator, 1);
        assert_eq!(first.at, 9_900 * 10_000 + 30_000_000_000);
    }

    /// Re-arming earlier, cancelling and removing sessions leave stale
    /// entries; they stay bounded by the number of armed timers.
    #[test]
    fn stale_entries_stay_bounded() {
        let mut q = TimerQueue::default();
        for i in 0..10_000u64 {
            q.arm(1, Timer::Tx, 1_000_000 - i, 0);
            q.arm(2 + (i % 7) as u32, Timer::Detect, 5_000_000 - i, 0);
            q.cancel(2 + (i % 7) as u32, Timer::Detect);
            q.arm(100 + i as u32, Timer::Detect, 9_000_000, 0);
            q.remove_session(100 + i as u32);
        }
        assert!(
            q.len() <= 2 + COMPACT_SLACK + 2,
            "heap has {} entries",
            q.len()
        );
        assert_eq!(q.pop().map(|d| (d.discriminator, d.at)), Some((1, 990_001)));
        assert_eq!(q.pop(), None);
    }

    /// Against a model (a map of armed deadlines): random arms, cancels,
    /// removals and pops deliver the same timers in the same order.
    #[test]
    fn matches_a_model() {
        let mut rng = SplitMix64::new(13);
        let mut q = TimerQueue::default();
        let mut model: BTreeMap<(u32, Timer), (u64, u64)> = BTreeMap::new();
        let mut now = 0u64;
        for _ in 0..200_000 {
            let d = rng.next_u32() % 8 + 1;
            let timer = Timer::ALL[(rng.next_u32() % 4) as usize];
            match rng.next_u32() % 10 {
                0..=5 => {
                    let at = now + u64::from(rng.next_u32() % 1_000);
                    q.arm(d, timer, at, at % 3);
                    model.insert((d, timer), (at, at % 3));
                }
                6 => {
                    q.cancel(d, timer);
                    model.remove(&(d, timer));
                }
                7 => {
                    q.remove_session(d);
                    model.retain(|&(md, _), _| md != d);
                }
                8 => {
                    // Set aside, touched or not, put back.
                    if let Some(due) = q.set_aside() {
                        match rng.next_u32() % 3 {
                            0 => {
                                q.cancel(due.discriminator, due.timer);
                                model.remove(&(due.discriminator, due.timer));
                            }
                            1 => {
                                let at = due.at + 5;
                                q.arm(due.discriminator, due.timer, at, 0);
                                model.insert((due.discriminator, due.timer), (at, 0));
                            }
                            _ => {}
                        }
                        q.put_back(&due);
                    }
                }
                _ => {
                    let want = model
                        .iter()
                        .map(|(&(md, mt), &(at, early))| (at, md, mt, early))
                        .min();
                    let got = q.pop();
                    assert_eq!(got.map(|g| g.at), want.map(|w| w.0), "earliest deadline");
                    if let Some(g) = got {
                        let (at, early) = model.remove(&(g.discriminator, g.timer)).expect("armed");
                        assert_eq!((g.at, g.early), (at, early));
                        now = g.at;
                    }
                }
            }
            assert!(q.len() <= 2 * 32 + COMPACT_SLACK + 1);
        }
    }
}
