//! Solicited-node group memberships as the kernel holds them: which group
//! is joined on which membership socket, which joins failed and when each
//! is retried. Pure: [`crate::state::L2State`] says which groups are
//! wanted, this table turns that into [`GroupAction`]s, and the Linux edge
//! carries each out and feeds the result back
//! ([`GroupTable::join_result`], [`GroupTable::leave_result`]).
//!
//! Rules:
//! - a group counts as joined only after its join succeeded, and leaves
//!   its socket's count only after a successful leave (or one the kernel
//!   answers with "not a member");
//! - a socket is closed only when no joined group remains on it, so a
//!   leave never drops another group;
//! - a join refused for want of option memory on a socket that already
//!   holds groups (the kernel charges each membership, 56 bytes on x86_64,
//!   to its socket's option memory, `net.core.optmem_max`, and answers
//!   `ENOMEM` past it for IPv6, `ENOBUFS` for IPv4) marks that socket full and is tried at once on
//!   another socket of the interface, a new one if needed, at most
//!   [`MAX_SOCKETS_PER_INTERFACE`]; the same refusal on an empty socket, or any
//!   other error, is retried later with a per-group jittered backoff
//!   ([`RETRY_FIRST`] doubling to [`RETRY_MAX`], each delay drawn from
//!   75 % to 125 % of its nominal value, never above the cap);
//! - a failed leave keeps the group counted on its socket and is retried
//!   the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

/// First retry of a failed join or leave.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(60);
/// Membership sockets one interface may use.
pub const MAX_SOCKETS_PER_INTERFACE: usize = 64;

/// A group on an interface: index, name, group.
pub type GroupKey = (u32, String, Ipv6Addr);

/// What the edge does next.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupAction {
    /// Join `group` on membership socket `socket` of the interface
    /// (opening it if it is not open).
    Join { key: GroupKey, socket: usize },
    /// Leave `group` on the socket that joined it.
    Leave { key: GroupKey, socket: usize },
    /// Close an interface's membership socket: it holds no group.
    Close { ifindex: u32, socket: usize },
}

/// Why a join failed, as far as the table cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// The socket's option memory is used up (`ENOMEM` for IPv6,
    /// `ENOBUFS` for IPv4).
    NoBuffers,
    /// Anything else (the text is for logs and the handle).
    Other(String),
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::NoBuffers => f.write_str("no buffer space (net.core.optmem_max)"),
            JoinError::Other(e) => f.write_str(e),
        }
    }
}

/// A wanted group that is not joined (or an unwanted one not yet left),
/// waiting for its retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedGroup {
    pub ifindex: u32,
    pub interface: String,
    pub group: Ipv6Addr,
    /// The last error.
    pub error: String,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// When it is tried again.
    pub next_retry: Instant,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// Groups joined on it.
    joined: usize,
    /// The kernel refused a join on it for want of option memory; cleared
    /// by a successful leave from it.
    full: bool,
}

#[derive(Debug, Clone)]
struct Retry {
    error: String,
    attempts: u32,
    next: Instant,
}

/// The membership table.
#[derive(Debug, Clone)]
pub struct GroupTable {
    wanted: BTreeSet<GroupKey>,
    /// Joined groups and their socket.
    joined: BTreeMap<GroupKey, usize>,
    /// Membership sockets by interface index, then slot number.
    slots: BTreeMap<u32, BTreeMap<usize, Slot>>,
    retries: BTreeMap<GroupKey, Retry>,
    /// Failed join attempts so far.
    join_failures: u64,
    /// xorshift64 state for the jitter.
    rng: u64,
}

impl GroupTable {
    /// An empty table; `seed` drives the retry jitter (any value; zero is
    /// replaced).
    pub fn new(seed: u64) -> Self {
        GroupTable {
            wanted: BTreeSet::new(),
            joined: BTreeMap::new(),
            slots: BTreeMap::new(),
            retries: BTreeMap::new(),
            join_failures: 0,
            rng: if seed == 0 {
                0x9e37_79b9_7f4a_7c15
            } else {
                seed
            },
        }
    }

    /// The groups that should be joined now (from
    /// [`crate::state::L2State::memberships`]): leaves for joined groups
    /// no longer wanted, joins for wanted ones neither joined nor waiting
    /// for a retry.
    pub fn set_wanted(&mut self, now: Instant, wanted: BTreeSet<GroupKey>) -> Vec<GroupAction> {
        self.wanted = wanted;
        // A retry of something that no longer applies is dropped: a join
        // no longer wanted, a leave of a group wanted again.
        let (wanted, joined) = (&self.wanted, &self.joined);
        self.retries
            .retain(|k, _| wanted.contains(k) != joined.contains_key(k));
        let mut out = Vec::new();
        for (key, socket) in &self.joined {
            if !self.wanted.contains(key) && !self.retries.contains_key(key) {
                out.push(GroupAction::Leave {
                    key: key.clone(),
                    socket: *socket,
                });
            }
        }
        let joins: Vec<GroupKey> = self
            .wanted
            .iter()
            .filter(|k| !self.joined.contains_key(*k) && !self.retries.contains_key(*k))
            .cloned()
            .collect();
        for key in joins {
            out.extend(self.join_action(now, key));
        }
        out
    }

    /// The retries due at `now`.
    pub fn poll(&mut self, now: Instant) -> Vec<GroupAction> {
        let due: Vec<GroupKey> = self
            .retries
            .iter()
            .filter(|(_, r)| r.next <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for key in due {
            match self.joined.get(&key) {
                Some(socket) => out.push(GroupAction::Leave {
                    socket: *socket,
                    key,
                }),
                None => out.extend(self.join_action(now, key)),
            }
        }
        out
    }

    /// When [`poll`](Self::poll) next has something to do.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retries.values().map(|r| r.next).min()
    }

    /// A join on the first socket of the interface with room, or a new
    /// one; none when every socket is full and the interface has its
    /// maximum (then the group waits for its retry, which is scheduled
    /// here).
    fn join_action(&mut self, now: Instant, key: GroupKey) -> Option<GroupAction> {
        let slots = self.slots.entry(key.0).or_default();
        let socket = slots
            .iter()
            .find(|(_, s)| !s.full)
            .map(|(n, _)| *n)
            .or_else(|| (0..MAX_SOCKETS_PER_INTERFACE).find(|n| !slots.contains_key(n)));
        match socket {
            Some(socket) => {
                slots.entry(socket).or_default();
                Some(GroupAction::Join { key, socket })
            }
            None => {
                // Every socket is full: try the least loaded again later
                // (the limit may have been raised meanwhile).
                for s in slots.values_mut() {
                    s.full = false;
                }
                self.schedule_retry(
                    now,
                    key,
                    "every membership socket of the interface is full".into(),
                );
                None
            }
        }
    }

    fn schedule_retry(&mut self, now: Instant, key: GroupKey, error: String) {
        let attempts = self
            .retries
            .get(&key)
            .map_or(1, |r| r.attempts.saturating_add(1));
        let delay = self.jittered(attempts);
        self.retries.insert(
            key,
            Retry {
                error,
                attempts,
                next: now + delay,
            },
        );
    }

    /// `RETRY_FIRST * 2^(attempts-1)` capped at `RETRY_MAX`, times a
    /// factor from 0.75 to 1.25, capped again.
    fn jittered(&mut self, attempts: u32) -> Duration {
        let nominal = RETRY_FIRST
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(16))
            .min(RETRY_MAX);
        // xorshift64
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        let permille = 750 + (x % 501) as u32; // 750..=1250
        (nominal * permille / 1000).min(RETRY_MAX)
    }

    /// Called just before the edge carries out `action`: a join issued to
    /// a socket that has since been found full goes to the socket a join
    /// issued now would use (so a batch of joins does not fail one by one
    /// on the same full socket). Other actions are returned unchanged; a
    /// join whose group is no longer wanted, or already joined, is dropped.
    pub fn retarget(&mut self, now: Instant, action: GroupAction) -> Option<GroupAction> {
        let GroupAction::Join { key, socket } = action else {
            return Some(action);
        };
        if !self.wanted.contains(&key) || self.joined.contains_key(&key) {
            return None;
        }
        let full = self
            .slots
            .get(&key.0)
            .and_then(|s| s.get(&socket))
            .is_some_and(|s| s.full);
        if full {
            self.join_action(now, key)
        } else {
            Some(GroupAction::Join { key, socket })
        }
    }

    /// The result of a [`GroupAction::Join`], at `now`. Follow-up actions
    /// (a join on another socket after `ENOBUFS`, closing a socket left
    /// empty by a failure) are returned.
    pub fn join_result(
        &mut self,
        now: Instant,
        key: &GroupKey,
        socket: usize,
        result: Result<(), JoinError>,
    ) -> Vec<GroupAction> {
        let mut out = Vec::new();
        match result {
            Ok(()) => {
                self.retries.remove(key);
                self.joined.insert(key.clone(), socket);
                self.slots
                    .entry(key.0)
                    .or_default()
                    .entry(socket)
                    .or_default()
                    .joined += 1;
                if !self.wanted.contains(key) {
                    // No longer wanted meanwhile: leave again.
                    out.push(GroupAction::Leave {
                        key: key.clone(),
                        socket,
                    });
                }
            }
            Err(e) => {
                self.join_failures += 1;
                let slots = self.slots.entry(key.0).or_default();
                let empty = slots.get(&socket).is_none_or(|s| s.joined == 0);
                if empty {
                    slots.remove(&socket);
                    out.push(GroupAction::Close {
                        ifindex: key.0,
                        socket,
                    });
                }
                match e {
                    JoinError::NoBuffers if !empty => {
                        if let Some(s) = slots.get_mut(&socket) {
                            s.full = true;
                        }
                        if self.wanted.contains(key) {
                            out.extend(self.join_action(now, key.clone()));
                        }
                    }
                    e => {
                        if self.wanted.contains(key) {
                            self.schedule_retry(now, key.clone(), e.to_string());
                        }
                    }
                }
            }
        }
        out
    }

    /// The result of a [`GroupAction::Leave`]: `Ok` also when the kernel
    /// says the group was not joined or the interface is gone (nothing is
    /// held either way). A socket left with no group is closed.
    pub fn leave_result(
        &mut self,
        now: Instant,
        key: &GroupKey,
        socket: usize,
        result: Result<(), String>,
    ) -> Vec<GroupAction> {
        match result {
            Ok(()) => {
                self.retries.remove(key);
                if self.joined.remove(key).is_none() {
                    return Vec::new();
                }
                let slots = self.slots.entry(key.0).or_default();
                let mut out = Vec::new();
                if let Some(s) = slots.get_mut(&socket) {
                    s.joined = s.joined.saturating_sub(1);
                    s.full = false;
                    if s.joined == 0 {
                        slots.remove(&socket);
                        out.push(GroupAction::Close {
                            ifindex: key.0,
                            socket,
                        });
                    }
                }
                if self.wanted.contains(key) {
                    // Wanted again meanwhile.
                    out.extend(self.join_action(now, key.clone()));
                }
                out
            }
            Err(e) => {
                self.schedule_retry(now, key.clone(), e);
                Vec::new()
            }
        }
    }

    /// The interface went away: the kernel dropped its memberships with
    /// it; its sockets are closed by the edge.
    pub fn forget_interface(&mut self, ifindex: u32) {
        self.joined.retain(|k, _| k.0 != ifindex);
        self.retries.retain(|k, _| k.0 != ifindex);
        self.slots.remove(&ifindex);
    }

    /// Joined groups, as `(ifindex, name, group)` with their socket.
    pub fn joined(&self) -> &BTreeMap<GroupKey, usize> {
        &self.joined
    }

    /// Groups on `ifindex`'s socket `socket`.
    pub fn socket_load(&self, ifindex: u32, socket: usize) -> usize {
        self.slots
            .get(&ifindex)
            .and_then(|s| s.get(&socket))
            .map_or(0, |s| s.joined)
    }

    /// Wanted groups not joined, and unwanted ones not yet left, waiting
    /// for a retry.
    pub fn failed(&self) -> Vec<FailedGroup> {
        self.retries
            .iter()
            .map(|((ifindex, interface, group), r)| FailedGroup {
                ifindex: *ifindex,
                interface: interface.clone(),
                group: *group,
                error: r.error.clone(),
                attempts: r.attempts,
                next_retry: r.next,
            })
            .collect()
    }

    /// Failed join attempts so far (each refusal moved to another socket
    /// counts too).
    pub fn join_failures(&self) -> u64 {
        self.join_failures
    }
}
