//! The layer-2 driver of the speaker, without its I/O: from the per-Service
//! decisions ([`crate::decide::l2`]) to claims on the `arp-ndp` responder
//! (owner = the Service key, so an address shared by several Services stays
//! answered until the last one releases it), and what to tell the cluster:
//! ServiceL2Status (only on the owner, interfaces sorted, written only on
//! change), `metallb_speaker_announced{protocol="layer2"}`, the
//! `nodeAssigned` event on each transition into announcing, the Warning
//! `announceFailed` for an address whose interfaces do not exist here.
//!
//! The responder is behind [`L2Ops`], so this is tested without sockets
//! (`tests/node_speaker.rs`); the daemon's implementation is
//! [`crate::l2_edge`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use arp_ndp::interfaces::AllowedInterfaces;

use crate::decide::l2::{Announcement, Interfaces};

/// The responder as the driver sees it.
pub trait L2Ops {
    /// Whether the responder runs (claims made while it does not are not
    /// announced: no status object, no `announceFailed`; the daemon decides
    /// every Service again once it runs).
    fn running(&self) -> bool {
        true
    }
    /// Names of the interfaces of the node that can announce now.
    fn interfaces(&self) -> BTreeSet<String>;
    /// `owner` wants `ip` answered on `allowed`.
    fn claim(&mut self, owner: &str, ip: IpAddr, allowed: AllowedInterfaces);
    /// `owner` no longer wants `ip`.
    fn release(&mut self, owner: &str, ip: IpAddr);
    /// Announces every claimed address again (a new gratuitous burst).
    fn reannounce(&mut self) {}
}

/// No layer-2 responder (BGP-only tests, or before one is started): claims
/// go nowhere, and no interface exists.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoL2;

impl L2Ops for NoL2 {
    fn running(&self) -> bool {
        false
    }
    fn interfaces(&self) -> BTreeSet<String> {
        BTreeSet::new()
    }
    fn claim(&mut self, _: &str, _: IpAddr, _: AllowedInterfaces) {}
    fn release(&mut self, _: &str, _: IpAddr) {}
}

/// What changed for one Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct L2Change {
    /// ServiceL2Status: `Some(Some(interfaces))` to write (sorted; empty:
    /// all), `Some(None)` to delete, `None`: unchanged.
    pub status: Option<Option<Vec<String>>>,
    /// `metallb_speaker_announced{protocol="layer2"}` per address: set (true)
    /// or deleted (false).
    pub metric: Vec<(IpAddr, bool)>,
    /// The Service became announced from this node (`nodeAssigned`).
    pub assigned: bool,
    /// Addresses whose interfaces do not exist here, newly so
    /// (`announceFailed`).
    pub failed: Vec<IpAddr>,
}

#[derive(Clone, Debug, Default)]
struct Held {
    ips: Vec<IpAddr>,
    interfaces: Option<Interfaces>,
    claimed: BTreeMap<IpAddr, AllowedInterfaces>,
    failed: BTreeSet<IpAddr>,
    status: Option<Vec<String>>,
}

/// The layer-2 half of a node's speaker.
pub struct L2Speaker<O: L2Ops> {
    ops: O,
    held: BTreeMap<String, Held>,
}

impl<O: L2Ops> L2Speaker<O> {
    /// A driver over `ops`, announcing nothing.
    pub fn new(ops: O) -> Self {
        Self {
            ops,
            held: BTreeMap::new(),
        }
    }

    /// The responder.
    pub fn ops(&mut self) -> &mut O {
        &mut self.ops
    }

    /// Services announced from here, by key.
    pub fn announced(&self) -> impl Iterator<Item = &str> {
        self.held.keys().map(String::as_str)
    }

    /// The addresses of every Service announced from here: (key, address).
    pub fn announced_ips(&self) -> impl Iterator<Item = (&str, IpAddr)> {
        self.held
            .iter()
            .flat_map(|(k, h)| h.ips.iter().map(move |ip| (k.as_str(), *ip)))
    }

    /// Announces the addresses this node answers for again, when it answers
    /// for any; returns how many. For a speaker that watches this node and
    /// whose heartbeat came back: it may have answered for them meanwhile.
    pub fn reannounce(&mut self) -> usize {
        let n = self.held.values().map(|h| h.claimed.len()).sum();
        if n > 0 {
            self.ops.reannounce();
        }
        n
    }

    /// Services with an address whose interfaces are missing (to retry when
    /// the interfaces change).
    pub fn failing(&self) -> impl Iterator<Item = &str> {
        self.held
            .iter()
            .filter(|(_, h)| !h.failed.is_empty())
            .map(|(k, _)| k.as_str())
    }

    /// Applies the decision for the Service `key`: `Some`: this node
    /// announces it; `None`: it does not (any more).
    pub fn set_service(&mut self, key: &str, now: Option<&Announcement>) -> L2Change {
        let mut change = L2Change::default();
        let Some(a) = now else {
            let Some(h) = self.held.remove(key) else {
                return change;
            };
            for ip in h.claimed.keys() {
                self.ops.release(key, *ip);
            }
            change.metric = h.ips.iter().map(|ip| (*ip, false)).collect();
            if h.status.is_some() {
                change.status = Some(None);
            }
            return change;
        };
        let running = self.ops.running();
        let present = self.ops.interfaces();
        let before = self.held.remove(key);
        change.assigned = before.is_none();
        let mut h = before.unwrap_or_default();
        let allowed = match &a.interfaces {
            Interfaces::All => AllowedInterfaces::all(),
            Interfaces::Only(names) => AllowedInterfaces::only(names.iter().cloned()),
        };
        let usable = match &a.interfaces {
            Interfaces::All => true,
            Interfaces::Only(names) => names.iter().any(|n| present.contains(n)),
        };
        let mut claimed = BTreeMap::new();
        let mut failed = BTreeSet::new();
        for ip in &a.ips {
            if !running {
                // Nothing answers: nothing claimed, nothing failed (said once
                // where the responder fails to start).
            } else if usable {
                if h.claimed.get(ip) != Some(&allowed) {
                    self.ops.claim(key, *ip, allowed.clone());
                }
                claimed.insert(*ip, allowed.clone());
            } else {
                failed.insert(*ip);
            }
        }
        for ip in h.claimed.keys() {
            if !claimed.contains_key(ip) {
                self.ops.release(key, *ip);
            }
        }
        change.failed = failed.difference(&h.failed).copied().collect();
        for ip in &h.ips {
            if !a.ips.contains(ip) {
                change.metric.push((*ip, false));
            }
        }
        for ip in &a.ips {
            if !h.ips.contains(ip) {
                change.metric.push((*ip, true));
            }
        }
        // MetalLB writes the status when at least one address is set.
        let status = (!claimed.is_empty()).then(|| a.interfaces.names());
        if status != h.status {
            change.status = Some(status.clone());
        }
        h.ips = a.ips.clone();
        h.interfaces = Some(a.interfaces.clone());
        h.claimed = claimed;
        h.failed = failed;
        h.status = status;
        self.held.insert(key.to_owned(), h);
        change
    }
}
