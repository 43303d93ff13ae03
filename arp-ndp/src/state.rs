//! The layer-2 state from memory: the interfaces (already classified),
//! the owned IPs with their allow-lists, the announcer, solicited-node
//! group memberships, and per-IP counters. Pure: the Linux edge feeds it
//! frames, interface lists and `now`, and carries out what it returns.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

use crate::announce::{AnnounceConfig, Announcer, Outgoing};
use crate::interfaces::{AllowedInterfaces, Interface};
use crate::metrics::Metrics;
use crate::packet::solicited_node_multicast;
use crate::responder::{Decision, DropCounters, DropReason, OwnedIps, respond};

/// Counters of one owned IP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpCounters {
    /// ARP requests / neighbour solicitations received for it.
    pub requests_received: u64,
    /// Replies / advertisements sent for it.
    pub responses_sent: u64,
    /// Gratuitous packets sent for it (2 per ARP round, 1 per NA).
    pub gratuitous_sent: u64,
}

/// A solicited-node group to join or leave on an interface.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum MembershipChange {
    /// First owned IPv6 address of this group on this interface.
    Join {
        ifindex: u32,
        interface: String,
        group: Ipv6Addr,
    },
    /// Last owned IPv6 address of this group on this interface went away.
    Leave {
        ifindex: u32,
        interface: String,
        group: Ipv6Addr,
    },
}

/// Key of a membership: interface index, name and group.
type GroupKey = (u32, String, Ipv6Addr);

/// The whole layer-2 state.
#[derive(Debug, Default)]
pub struct L2State {
    interfaces: BTreeMap<String, Interface>,
    owned: OwnedIps,
    announcer: Announcer,
    counters: BTreeMap<IpAddr, IpCounters>,
    drops: DropCounters,
    /// Joined groups and how many owned addresses need each.
    memberships: BTreeMap<GroupKey, usize>,
    /// Who asked for each owned IP, with the allow-list each asked for
    /// (several Services share one IP with `allow-shared-ip`). The IP is
    /// owned while at least one claim remains, on the union of the lists.
    claims: BTreeMap<IpAddr, BTreeMap<String, AllowedInterfaces>>,
    metrics: Option<Metrics>,
}

/// The owner name of [`L2State::own`]: a claim with no name.
const UNNAMED: &str = "";

/// Union of allow-lists: every interface if any list allows every one.
fn union<'a>(lists: impl IntoIterator<Item = &'a AllowedInterfaces>) -> AllowedInterfaces {
    let mut names = BTreeSet::new();
    for l in lists {
        if l.0.is_empty() {
            return AllowedInterfaces::all();
        }
        names.extend(l.0.iter().cloned());
    }
    AllowedInterfaces(names)
}

impl L2State {
    /// Empty state with `cfg` announcement timing.
    pub fn new(cfg: AnnounceConfig) -> Self {
        L2State {
            announcer: Announcer::new(cfg),
            ..Default::default()
        }
    }

    /// Also counts into these Prometheus counters.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Interfaces an owned `ip` is announced and answered on: eligible for
    /// its family and allowed by its list, in name order.
    fn targets(&self, ip: IpAddr, allowed: &AllowedInterfaces) -> Vec<Interface> {
        self.interfaces
            .values()
            .filter(|i| i.serves(ip) && allowed.allows(&i.name))
            .cloned()
            .collect()
    }

    /// Recomputes every owned IP's announcement (bursting only where the
    /// interface set changed) and the group memberships.
    fn resync(&mut self, now: Instant) -> Vec<MembershipChange> {
        let owned: Vec<(IpAddr, AllowedInterfaces)> =
            self.owned.iter().map(|(ip, a)| (*ip, a.clone())).collect();
        for (ip, allowed) in &owned {
            let t = self.targets(*ip, allowed);
            self.announcer.set(now, *ip, &t);
        }
        self.sync_memberships()
    }

    fn sync_memberships(&mut self) -> Vec<MembershipChange> {
        let mut want: BTreeMap<GroupKey, usize> = BTreeMap::new();
        for (ip, allowed) in self.owned.iter() {
            let IpAddr::V6(v6) = ip else { continue };
            let group = solicited_node_multicast(*v6);
            for i in self.targets(*ip, allowed) {
                *want.entry((i.index, i.name.clone(), group)).or_default() += 1;
            }
        }
        let mut changes = Vec::new();
        for (ifindex, interface, group) in self.memberships.keys() {
            if !want.contains_key(&(*ifindex, interface.clone(), *group)) {
                changes.push(MembershipChange::Leave {
                    ifindex: *ifindex,
                    interface: interface.clone(),
                    group: *group,
                });
            }
        }
        for (ifindex, interface, group) in want.keys() {
            if !self
                .memberships
                .contains_key(&(*ifindex, interface.clone(), *group))
            {
                changes.push(MembershipChange::Join {
                    ifindex: *ifindex,
                    interface: interface.clone(),
                    group: *group,
                });
            }
        }
        self.memberships = want;
        changes
    }

    /// Replaces the interface list (from netlink). IPs gaining an interface
    /// burst on their new set; lost interfaces stop being announced on.
    pub fn set_interfaces(
        &mut self,
        now: Instant,
        interfaces: impl IntoIterator<Item = Interface>,
    ) -> Vec<MembershipChange> {
        self.interfaces = interfaces
            .into_iter()
            .map(|i| (i.name.clone(), i))
            .collect();
        self.resync(now)
    }

    /// Owns `ip` on `allowed` as an unnamed claim (see
    /// [`claim`](Self::claim)). A repeat of the same call changes nothing
    /// and sends nothing.
    pub fn own(
        &mut self,
        now: Instant,
        ip: IpAddr,
        allowed: AllowedInterfaces,
    ) -> Vec<MembershipChange> {
        self.claim(now, UNNAMED, ip, allowed)
    }

    /// Stops owning `ip` whoever claimed it: no more answers or
    /// announcements.
    pub fn disown(&mut self, ip: &IpAddr) -> Vec<MembershipChange> {
        self.claims.remove(ip);
        self.owned.remove(ip);
        self.announcer.remove(ip);
        self.sync_memberships()
    }

    /// `owner` (an opaque name: the speaker uses the Service's
    /// `namespace/name`) wants `ip` announced on `allowed`. The IP is owned
    /// while any claim on it remains, on the union of the claims' lists
    /// (MetalLB's announcer keeps the same reference count per IP for
    /// Services sharing it). A repeat of the same claim, or a claim that
    /// leaves the union unchanged, sends nothing.
    pub fn claim(
        &mut self,
        now: Instant,
        owner: &str,
        ip: IpAddr,
        allowed: AllowedInterfaces,
    ) -> Vec<MembershipChange> {
        let claims = self.claims.entry(ip).or_default();
        claims.insert(owner.to_owned(), allowed);
        let effective = union(claims.values());
        self.apply(now, ip, effective)
    }

    /// Announces every owned address again (a new gratuitous burst, nothing
    /// else changes): the speaker calls it when members it had lost come
    /// back, whose clients may have learnt another node's MAC meanwhile.
    /// Returns how many addresses are announced again.
    pub fn reannounce(&mut self, now: Instant) -> usize {
        let ips: Vec<IpAddr> = self.owned.iter().map(|(ip, _)| *ip).collect();
        ips.iter()
            .filter(|ip| self.announcer.restart(now, ip))
            .count()
    }

    /// `owner` no longer wants `ip`. The IP stays owned, on the union of
    /// the remaining claims' lists, until its last claim is released.
    /// Releasing a claim that does not exist changes nothing.
    pub fn release(&mut self, now: Instant, owner: &str, ip: &IpAddr) -> Vec<MembershipChange> {
        let Some(claims) = self.claims.get_mut(ip) else {
            return Vec::new();
        };
        if claims.remove(owner).is_none() {
            return Vec::new();
        }
        if claims.is_empty() {
            return self.disown(ip);
        }
        let effective = union(claims.values());
        self.apply(now, *ip, effective)
    }

    /// Releases every claim of `owner` (a Service deleted, or no longer
    /// announced from this node).
    pub fn release_owner(&mut self, now: Instant, owner: &str) -> Vec<MembershipChange> {
        let ips: Vec<IpAddr> = self
            .claims
            .iter()
            .filter(|(_, c)| c.contains_key(owner))
            .map(|(ip, _)| *ip)
            .collect();
        let mut changes = Vec::new();
        for ip in ips {
            changes.extend(self.release(now, owner, &ip));
        }
        changes
    }

    /// The owners claiming `ip`, sorted (the unnamed claim of
    /// [`own`](Self::own) shows as `""`).
    pub fn owners(&self, ip: &IpAddr) -> Vec<String> {
        self.claims
            .get(ip)
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Owns `ip` on `allowed` (the union of its claims).
    fn apply(
        &mut self,
        now: Instant,
        ip: IpAddr,
        allowed: AllowedInterfaces,
    ) -> Vec<MembershipChange> {
        if self.owned.get(&ip) == Some(&allowed) {
            return Vec::new();
        }
        self.owned.insert(ip, allowed.clone());
        self.counters.entry(ip).or_default();
        let t = self.targets(ip, &allowed);
        self.announcer.set(now, ip, &t);
        self.sync_memberships()
    }

    /// Decides about a frame received on interface `ifname`, counting it.
    pub fn handle_frame(&mut self, ifname: &str, frame: &[u8]) -> Decision {
        let decision = match self.interfaces.get(ifname) {
            Some(iface) => respond(&self.owned, iface, frame),
            None => Decision::Drop {
                reason: DropReason::InterfaceNotEligible,
                ip: None,
            },
        };
        match &decision {
            Decision::Reply { ip, .. } => {
                self.count_request(*ip);
                if let Some(c) = self.counters.get_mut(ip) {
                    c.responses_sent += 1;
                }
                if let Some(m) = &self.metrics {
                    m.response_sent(*ip);
                }
            }
            Decision::Drop { reason, ip } => {
                self.drops.record(*reason);
                if let Some(ip) = ip
                    && self.owned.contains(ip)
                {
                    self.count_request(*ip);
                }
            }
        }
        decision
    }

    fn count_request(&mut self, ip: IpAddr) {
        if let Some(c) = self.counters.get_mut(&ip) {
            c.requests_received += 1;
        }
        if let Some(m) = &self.metrics {
            m.request_received(ip);
        }
    }

    /// Gratuitous frames due at `now`, counted.
    pub fn poll(&mut self, now: Instant) -> Vec<Outgoing> {
        let out = self.announcer.poll(now);
        for o in &out {
            if let Some(c) = self.counters.get_mut(&o.ip) {
                c.gratuitous_sent += 1;
            }
            if let Some(m) = &self.metrics {
                m.gratuitous_sent(o.ip, 1);
            }
        }
        out
    }

    /// When [`poll`](Self::poll) next has something to send.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.announcer.next_wakeup()
    }

    /// Interfaces `ip` is announced on, sorted by name (a stable order for
    /// ServiceL2Status, unlike MetalLB's set iteration). Empty if not owned
    /// or no interface qualifies.
    pub fn announced_on(&self, ip: &IpAddr) -> Vec<String> {
        self.announcer
            .announced_on(ip)
            .map(|v| v.into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Counters of `ip` (kept after it is disowned, like the metrics).
    pub fn counters(&self, ip: &IpAddr) -> IpCounters {
        self.counters.get(ip).copied().unwrap_or_default()
    }

    /// Drop counters by reason.
    pub fn drops(&self) -> &DropCounters {
        &self.drops
    }

    /// The owned IPs.
    pub fn owned(&self) -> &OwnedIps {
        &self.owned
    }

    /// The current interfaces.
    pub fn interfaces(&self) -> impl Iterator<Item = &Interface> {
        self.interfaces.values()
    }

    /// Solicited-node groups currently wanted, as `(ifindex, name, group)`.
    pub fn memberships(&self) -> BTreeSet<(u32, String, Ipv6Addr)> {
        self.memberships.keys().cloned().collect()
    }
}
