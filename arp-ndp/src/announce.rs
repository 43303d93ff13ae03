//! The gratuitous announcement scheduler, pure: `now` comes in, frames
//! and the next wakeup go out; there is no clock inside.
//!
//! On taking an IP (or when the interfaces it is announced on change) a
//! round goes out at once, then one every [`AnnounceConfig::interval`]
//! (1.1 s) while the time is within [`AnnounceConfig::window`] (5 s) of the
//! last change: rounds at 0, 1.1, 2.2, 3.3 and 4.4 s. A round is, per
//! interface, an ARP request and an ARP reply (both sender = target = the
//! IP, to broadcast) for IPv4, or one unsolicited NA to ff02::1 (Override
//! set, Solicited clear, target link-layer option) for IPv6.
//!
//! **A re-sync that changes nothing sends nothing and does not extend the
//! window.** MetalLB re-queues the IP on every `SetBalancer` call, so any
//! speaker resync (every config or endpoint event) restarts a 5 s burst for
//! every announced IP; we announce only what changed.
//!
//! After the window, an optional [`AnnounceConfig::periodic`] interval
//! sends one round every period, for switches whose MAC tables age out
//! entries of hosts that never talk.
//!
//! The driver asks for [`Announcer::next_wakeup`] and calls
//! [`Announcer::poll`] after every received frame, so neither walks the
//! owned IPs: the due times are kept ordered beside the per-IP state (a
//! `BTreeSet` of `(due, ip)`), making `next_wakeup` O(log n) and `poll`
//! O(k log n) for k rounds due.

#[cfg(test)]
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::interfaces::Interface;
use crate::packet::{ArpFrame, ArpOp};
use crate::responder::unsolicited_na;

/// Timing of the announcements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnnounceConfig {
    /// Between rounds of a burst (MetalLB: 1100 ms).
    pub interval: Duration,
    /// A burst lasts this long after the last change (MetalLB: 5 s).
    pub window: Duration,
    /// One round every period after the burst; `None` = never.
    pub periodic: Option<Duration>,
}

impl Default for AnnounceConfig {
    fn default() -> Self {
        AnnounceConfig {
            interval: Duration::from_millis(1100),
            window: Duration::from_secs(5),
            periodic: None,
        }
    }
}

/// A frame to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Interface name.
    pub interface: String,
    /// Interface index.
    pub ifindex: u32,
    /// The IP announced.
    pub ip: IpAddr,
    /// The whole Ethernet frame.
    pub frame: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Entry {
    /// Interfaces serving the IP's family, sorted by name.
    targets: Vec<Interface>,
    window_end: Instant,
    next: Option<Instant>,
}

/// Per-IP announcement schedules.
///
/// Invariant: `due` holds exactly one `(next, ip)` for every entry whose
/// `next` is `Some`, and nothing else.
#[derive(Debug, Clone, Default)]
pub struct Announcer {
    cfg: AnnounceConfig,
    entries: BTreeMap<IpAddr, Entry>,
    due: BTreeSet<(Instant, IpAddr)>,
    /// Schedule entries looked at by `next_wakeup` and `poll` (tests
    /// assert neither walks the idle ones).
    #[cfg(test)]
    visited: Cell<usize>,
}

impl Announcer {
    /// An announcer with `cfg` timing.
    pub fn new(cfg: AnnounceConfig) -> Self {
        Announcer {
            cfg,
            ..Default::default()
        }
    }

    /// The timing in use.
    pub fn config(&self) -> &AnnounceConfig {
        &self.cfg
    }

    /// Announces `ip` on `interfaces` (those not serving the IP's family
    /// are ignored). If the IP is new or its interfaces changed, a burst
    /// starts at `now` (the first round is due at once: call
    /// [`poll`](Self::poll)) and `true` is returned; otherwise nothing
    /// happens.
    pub fn set(&mut self, now: Instant, ip: IpAddr, interfaces: &[Interface]) -> bool {
        let mut targets: Vec<Interface> = interfaces
            .iter()
            .filter(|i| i.serves(ip))
            .cloned()
            .collect();
        targets.sort_by(|a, b| a.name.cmp(&b.name));
        targets.dedup_by(|a, b| a.name == b.name);
        if let Some(e) = self.entries.get(&ip)
            && e.targets == targets
        {
            return false;
        }
        let old = self.entries.insert(
            ip,
            Entry {
                targets,
                window_end: now + self.cfg.window,
                next: Some(now),
            },
        );
        if let Some(next) = old.and_then(|e| e.next) {
            self.due.remove(&(next, ip));
        }
        self.due.insert((now, ip));
        true
    }

    /// Starts a new burst for an announced `ip` on its interfaces, as if it
    /// had just been claimed (the first round at `now`): for an owner whose
    /// peers may have believed another node answers (they saw it down and
    /// come back). Returns whether `ip` is announced.
    pub fn restart(&mut self, now: Instant, ip: &IpAddr) -> bool {
        let Some(e) = self.entries.get_mut(ip) else {
            return false;
        };
        if let Some(next) = e.next {
            self.due.remove(&(next, *ip));
        }
        e.window_end = now + self.cfg.window;
        e.next = Some(now);
        self.due.insert((now, *ip));
        true
    }

    /// Stops announcing `ip`; returns whether it was announced.
    pub fn remove(&mut self, ip: &IpAddr) -> bool {
        let Some(e) = self.entries.remove(ip) else {
            return false;
        };
        if let Some(next) = e.next {
            self.due.remove(&(next, *ip));
        }
        true
    }

    /// Names of the interfaces `ip` is announced on, sorted; `None` if not
    /// announced.
    pub fn announced_on(&self, ip: &IpAddr) -> Option<Vec<&str>> {
        self.entries
            .get(ip)
            .map(|e| e.targets.iter().map(|i| i.name.as_str()).collect())
    }

    /// Whether `ip` is in a burst window at `now`.
    pub fn in_burst(&self, ip: &IpAddr, now: Instant) -> bool {
        self.entries.get(ip).is_some_and(|e| now <= e.window_end)
    }

    /// Emits every round due at `now` and schedules the next ones. A late
    /// poll sends one round, not a catch-up series. Rounds come out in IP
    /// order.
    pub fn poll(&mut self, now: Instant) -> Vec<Outgoing> {
        // Take everything due first, then reschedule: a next time is never
        // looked at again within the same poll (even with a zero period).
        let mut due_ips = Vec::new();
        while let Some(&(next, ip)) = self.due.first() {
            self.visit();
            if next > now {
                break;
            }
            self.due.pop_first();
            due_ips.push(ip);
        }
        due_ips.sort_unstable();
        let mut out = Vec::new();
        for ip in due_ips {
            let Some(e) = self.entries.get_mut(&ip) else {
                debug_assert!(false, "due IP {ip} has no schedule");
                continue;
            };
            for iface in &e.targets {
                round(&mut out, ip, iface);
            }
            let burst_next = now + self.cfg.interval;
            e.next = if burst_next <= e.window_end {
                Some(burst_next)
            } else {
                self.cfg.periodic.map(|p| now + p)
            };
            if let Some(next) = e.next {
                self.due.insert((next, ip));
            }
        }
        out
    }

    /// The earliest time [`poll`](Self::poll) has something to send.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let first = self.due.first().map(|&(next, _)| next);
        if first.is_some() {
            self.visit();
        }
        first
    }

    #[cfg(test)]
    fn visit(&self) {
        self.visited.set(self.visited.get() + 1);
    }

    #[cfg(not(test))]
    #[inline]
    fn visit(&self) {}
}

/// One round for `ip` on `iface`.
fn round(out: &mut Vec<Outgoing>, ip: IpAddr, iface: &Interface) {
    let mut push = |frame| {
        out.push(Outgoing {
            interface: iface.name.clone(),
            ifindex: iface.index,
            ip,
            frame,
        })
    };
    match ip {
        IpAddr::V4(v4) => {
            push(ArpFrame::gratuitous(ArpOp::Request, iface.mac, v4).encode());
            push(ArpFrame::gratuitous(ArpOp::Reply, iface.mac, v4).encode());
        }
        IpAddr::V6(v6) => push(unsolicited_na(iface, v6)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::MacAddr;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn iface(name: &str, index: u32, ndp: bool) -> Interface {
        Interface {
            index,
            name: name.to_owned(),
            mac: MacAddr([0x02, 0, 0, 0, 0, index as u8]),
            link_local: Some(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, index as u16)),
            arp: true,
            ndp,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// 2,000 IPv4 and IPv6 documentation addresses.
    fn many_ips() -> Vec<IpAddr> {
        (0..1000u32)
            .map(|i| {
                IpAddr::V4(Ipv4Addr::from(
                    u32::from(Ipv4Addr::new(198, 51, 100, 0)) + i,
                ))
            })
            .chain((0..1000u16).map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, i))))
            .collect()
    }

    #[test]
    fn a_restart_sends_a_new_burst_on_the_same_interfaces() {
        let mut a = Announcer::new(AnnounceConfig::default());
        let eth0 = [iface("eth0", 2, true)];
        let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
        let t0 = Instant::now();
        assert!(!a.restart(t0, &ip), "not announced: nothing to restart");
        assert!(a.set(t0, ip, &eth0));
        // The first burst: rounds at 0, 1.1, 2.2, 3.3 and 4.4 s, then silence.
        let mut rounds = 0;
        let mut now = t0;
        while let Some(at) = a.next_wakeup() {
            now = at;
            assert_eq!(a.poll(now).len(), 2, "request and reply");
            rounds += 1;
        }
        assert_eq!((rounds, now), (5, t0 + ms(4400)));
        assert!(!a.set(t0 + ms(9000), ip, &eth0), "unchanged: no new burst");
        assert_eq!(a.next_wakeup(), None);

        // Restarted at 10 s: a round at once, then the same burst again.
        let t1 = t0 + ms(10_000);
        assert!(a.restart(t1, &ip));
        assert_eq!(a.next_wakeup(), Some(t1));
        let out = a.poll(t1);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|o| o.interface == "eth0" && o.ip == ip));
        assert_eq!(a.next_wakeup(), Some(t1 + ms(1100)));
        assert!(a.in_burst(&ip, t1 + ms(4000)));
        // A restart in the middle of a burst moves it, without a second schedule.
        assert!(a.restart(t1 + ms(500), &ip));
        assert_eq!(a.next_wakeup(), Some(t1 + ms(500)));
        assert_eq!(a.poll(t1 + ms(500)).len(), 2);
        assert_eq!(a.next_wakeup(), Some(t1 + ms(1600)));
        assert!(a.remove(&ip));
        assert!(!a.restart(t1 + ms(600), &ip));
    }

    #[test]
    fn idle_schedules_are_not_walked() {
        for periodic in [None, Some(Duration::from_secs(60))] {
            let mut a = Announcer::new(AnnounceConfig {
                periodic,
                ..AnnounceConfig::default()
            });
            let eth0 = [iface("eth0", 2, true)];
            let t0 = Instant::now();
            let ips = many_ips();
            for ip in &ips {
                assert!(a.set(t0, *ip, &eth0));
            }
            // The first rounds: every IP is due.
            assert_eq!(a.poll(t0).len(), 1000 * 2 + 1000);
            a.visited.set(0);

            // Nothing due: one look at the earliest schedule each.
            assert_eq!(a.next_wakeup(), Some(t0 + ms(1100)));
            assert!(a.poll(t0 + ms(500)).is_empty());
            assert!(a.visited.get() <= 2, "visited {}", a.visited.get());

            // One IP due among 2,000 idle ones.
            let new = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
            a.set(t0 + ms(600), new, &eth0);
            a.visited.set(0);
            assert_eq!(a.next_wakeup(), Some(t0 + ms(600)));
            let out = a.poll(t0 + ms(600));
            assert_eq!(out.len(), 2);
            assert!(out.iter().all(|o| o.ip == new));
            assert_eq!(a.next_wakeup(), Some(t0 + ms(1100)));
            assert!(a.visited.get() <= 4, "visited {}", a.visited.get());

            // Releasing does not walk either, and leaves nothing behind.
            for ip in &ips {
                assert!(a.remove(ip));
            }
            assert!(a.remove(&new));
            assert!(a.due.is_empty());
            assert_eq!(a.next_wakeup(), None);
        }
    }

    /// The scheduler as it was: a linear walk of every schedule on each
    /// `next_wakeup` and `poll`. The oracle for the ordered one.
    struct Linear {
        cfg: AnnounceConfig,
        entries: BTreeMap<IpAddr, Entry>,
    }

    impl Linear {
        fn set(&mut self, now: Instant, ip: IpAddr, interfaces: &[Interface]) -> bool {
            let mut targets: Vec<Interface> = interfaces
                .iter()
                .filter(|i| i.serves(ip))
                .cloned()
                .collect();
            targets.sort_by(|a, b| a.name.cmp(&b.name));
            targets.dedup_by(|a, b| a.name == b.name);
            if let Some(e) = self.entries.get(&ip)
                && e.targets == targets
            {
                return false;
            }
            let window_end = now + self.cfg.window;
            let next = Some(now);
            self.entries.insert(
                ip,
                Entry {
                    targets,
                    window_end,
                    next,
                },
            );
            true
        }

        fn poll(&mut self, now: Instant) -> Vec<Outgoing> {
            let mut out = Vec::new();
            for (ip, e) in &mut self.entries {
                let Some(next) = e.next else { continue };
                if next > now {
                    continue;
                }
                for iface in &e.targets {
                    round(&mut out, *ip, iface);
                }
                let burst_next = now + self.cfg.interval;
                e.next = if burst_next <= e.window_end {
                    Some(burst_next)
                } else {
                    self.cfg.periodic.map(|p| now + p)
                };
            }
            out
        }

        fn next_wakeup(&self) -> Option<Instant> {
            self.entries.values().filter_map(|e| e.next).min()
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// IP index, interface subset (bit mask).
        Set(usize, u8),
        Remove(usize),
        /// Advance the clock by this many ms, then poll.
        Poll(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8usize, 0..8u8).prop_map(|(i, m)| Op::Set(i, m)),
            (0..8usize).prop_map(Op::Remove),
            (0..3000u64).prop_map(Op::Poll),
            Just(Op::Poll(0)),
        ]
    }

    fn config() -> impl Strategy<Value = AnnounceConfig> {
        (
            prop_oneof![Just(1100u64), 1..2000u64],
            prop_oneof![Just(5000u64), 0..8000u64],
            proptest::option::of(0..10_000u64),
        )
            .prop_map(|(interval, window, periodic)| AnnounceConfig {
                interval: ms(interval),
                window: ms(window),
                periodic: periodic.map(ms),
            })
    }

    fn check_invariant(a: &Announcer) {
        let expected: BTreeSet<(Instant, IpAddr)> = a
            .entries
            .iter()
            .filter_map(|(ip, e)| e.next.map(|n| (n, *ip)))
            .collect();
        assert_eq!(a.due, expected);
    }

    proptest! {
        #[test]
        fn ordered_schedule_matches_the_linear_walk(
            cfg in config(),
            ops in proptest::collection::vec(op(), 0..80),
        ) {
            let pool: Vec<IpAddr> = (1..=4u8)
                .map(|i| IpAddr::V4(Ipv4Addr::new(192, 0, 2, i)))
                .chain((1..=4u16).map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i))))
                .collect();
            let ifaces = [iface("eth0", 2, true), iface("eth1", 3, false), iface("eth2", 4, true)];
            let mut a = Announcer::new(cfg);
            let mut model = Linear { cfg, entries: BTreeMap::new() };
            let mut now = Instant::now();
            for op in ops {
                match op {
                    Op::Set(i, mask) => {
                        let chosen: Vec<Interface> = ifaces
                            .iter()
                            .enumerate()
                            .filter(|(b, _)| mask & (1 << b) != 0)
                            .map(|(_, i)| i.clone())
                            .collect();
                        prop_assert_eq!(
                            a.set(now, pool[i], &chosen),
                            model.set(now, pool[i], &chosen)
                        );
                    }
                    Op::Remove(i) => {
                        prop_assert_eq!(
                            a.remove(&pool[i]),
                            model.entries.remove(&pool[i]).is_some()
                        );
                    }
                    Op::Poll(d) => {
                        now += ms(d);
                        prop_assert_eq!(a.poll(now), model.poll(now));
                    }
                }
                check_invariant(&a);
                prop_assert_eq!(a.next_wakeup(), model.next_wakeup());
                for ip in &pool {
                    prop_assert_eq!(a.in_burst(ip, now), model.entries.get(ip).is_some_and(|e| now <= e.window_end));
                }
            }
        }
    }
}
