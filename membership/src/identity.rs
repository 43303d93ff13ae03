//! The identity of a member: node name, the address its UDP socket is
//! bound to, and a generation (the identity's incarnation, renewed when
//! the cluster declared the previous one down). Foca's own incarnation
//! (bumped to refute a suspicion) is separate and travels in its messages.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// Longest node name carried (a DNS subdomain, as Kubernetes node names).
pub const MAX_NAME_LEN: usize = 253;

/// One member's identity. Two identities with the same name are the same
/// node; the higher generation wins ([`foca::Identity::win_addr_conflict`]).
///
/// The name is shared (`Arc<str>`): foca compares members by
/// [`foca::Identity::addr`] (the name) in a scan of all of them for each
/// update it applies, and a `String` there was two allocations per member
/// scanned (at 1,000 members, most of a node's CPU in the simulation).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    pub name: Arc<str>,
    pub addr: SocketAddr,
    pub generation: u64,
}

impl NodeId {
    pub fn new(name: impl Into<Arc<str>>, addr: SocketAddr, generation: u64) -> NodeId {
        NodeId {
            name: name.into(),
            addr,
            generation,
        }
    }

    /// The destination of an announce to a seed whose name is not known
    /// yet (the caller only has a Pod IP): an empty name, which the
    /// receiver's codec reads as its own name for announces only.
    pub fn seed(addr: SocketAddr) -> NodeId {
        NodeId {
            name: Arc::from(""),
            addr,
            generation: 0,
        }
    }

    pub fn is_seed(&self) -> bool {
        self.name.is_empty()
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}#{}", self.name, self.addr, self.generation)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl foca::Identity for NodeId {
    /// The node name: unique in the cluster, stable across restarts.
    type Addr = Arc<str>;

    fn renew(&self) -> Option<Self> {
        Some(NodeId {
            name: self.name.clone(),
            addr: self.addr,
            generation: self.generation.wrapping_add(1),
        })
    }

    fn addr(&self) -> Arc<str> {
        self.name.clone()
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        (self.generation, self.addr) > (adversary.generation, adversary.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foca::Identity;

    #[test]
    fn renewal_wins() {
        let a = NodeId::new("n1", "192.0.2.1:7946".parse().unwrap(), 7);
        let b = a.renew().unwrap();
        assert_eq!(b.generation, 8);
        assert_eq!(a.addr(), b.addr());
        assert!(b.win_addr_conflict(&a));
        assert!(!a.win_addr_conflict(&b));
    }
}
