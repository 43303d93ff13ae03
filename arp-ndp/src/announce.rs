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

use std::collections::BTreeMap;
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
#[derive(Debug, Clone, Default)]
pub struct Announcer {
    cfg: AnnounceConfig,
    entries: BTreeMap<IpAddr, Entry>,
}

impl Announcer {
    /// An announcer with `cfg` timing.
    pub fn new(cfg: AnnounceConfig) -> Self {
        Announcer {
            cfg,
            entries: BTreeMap::new(),
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
        self.entries.insert(
            ip,
            Entry {
                targets,
                window_end: now + self.cfg.window,
                next: Some(now),
            },
        );
        true
    }

    /// Stops announcing `ip`; returns whether it was announced.
    pub fn remove(&mut self, ip: &IpAddr) -> bool {
        self.entries.remove(ip).is_some()
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
    /// poll sends one round, not a catch-up series.
    pub fn poll(&mut self, now: Instant) -> Vec<Outgoing> {
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

    /// The earliest time [`poll`](Self::poll) has something to send.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.entries.values().filter_map(|e| e.next).min()
    }
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
