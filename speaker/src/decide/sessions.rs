//! Which BGPPeers run a session on this node, and with what settings
//! (speaker.md section 2.1 and 2.4).
//!
//! A session is kept across configuration changes while its
//! [`SessionSpec::bgp`] is equal: every field there is one the session
//! negotiates or uses on its sockets (addresses, port, ASNs, timers, router
//! ID, password, multihop, VRF, graceful restart, families). Fields outside
//! it (node selectors, the BFD profile, the BGPPeer's other metadata) never
//! reset a session: a BFD profile change re-parameterises BFD (a Poll
//! sequence) and a node selector change only starts or stops the session.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use bgp::fsm::PeerAs;
use bgp::session::PeerConfig;
use bgp::wire::Family;
use config::{Config, Peer, PeerAsn};

use super::NodeFacts;

/// Graceful restart time offered (FRR's default, seconds).
pub const GRACEFUL_RESTART_TIME: u16 = 120;

/// One session this node runs.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSpec {
    /// The BGPPeer's name.
    pub name: String,
    /// The bgp crate's settings: a change here resets the session.
    pub bgp: PeerConfig,
    /// BFD, when the peer names a profile.
    pub bfd: Option<BfdSpec>,
    /// `enableGracefulRestart`: SIGTERM leaves the routes to the router as
    /// stale instead of a Cease.
    pub graceful_restart: bool,
}

/// BFD settings of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BfdSpec {
    /// The BFDProfile's name.
    pub profile: String,
    /// Its parameters.
    pub params: bfd::Parameters,
    /// Multihop (`ebgpMultiHop`) or single hop.
    pub multihop: bool,
}

/// A BGPPeer selected for this node that cannot run here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The BGPPeer's name.
    pub peer: String,
    /// Why.
    pub why: String,
}

/// The sessions of this node by BGPPeer name: peers whose node selectors
/// match the own node (none means all), and those left out with a reason
/// (e.g. unnumbered peering, not supported yet).
pub fn sessions(
    config: &Config,
    node: &NodeFacts,
) -> (BTreeMap<String, SessionSpec>, Vec<Skipped>) {
    let mut out = BTreeMap::new();
    let mut skipped = Vec::new();
    for peer in &config.peers {
        if !peer.node_selectors.is_empty() && !peer.selects_node(&node.labels) {
            continue;
        }
        match spec(config, peer, &node.name) {
            Ok(s) => {
                out.insert(peer.name.clone(), s);
            }
            Err(why) => skipped.push(Skipped {
                peer: peer.name.clone(),
                why,
            }),
        }
    }
    (out, skipped)
}

fn spec(config: &Config, peer: &Peer, node: &str) -> Result<SessionSpec, String> {
    let Some(address) = peer.address else {
        return Err(format!(
            "interface {:?} (unnumbered BGP) is not supported yet",
            peer.interface.as_deref().unwrap_or_default()
        ));
    };
    let peer_as = match peer.asn {
        PeerAsn::Fixed(a) => PeerAs::Fixed(a),
        PeerAsn::Internal => PeerAs::Internal,
        PeerAsn::External => PeerAs::External,
    };
    let mut fsm = bgp::fsm::Config::new(peer.my_asn, peer_as, node);
    fsm.local_as = peer.local_asn;
    fsm.router_id = match peer.router_id {
        Some(IpAddr::V4(v4)) => Some(v4),
        _ => None,
    };
    let secs = |d: std::time::Duration| u16::try_from(d.as_secs()).unwrap_or(u16::MAX);
    if peer.timers_configured {
        fsm.hold_time = Some(secs(peer.hold_time));
        fsm.keepalive_time = Some(secs(peer.keepalive_time));
    }
    fsm.connect_time = peer.connect_time.map(secs).filter(|s| *s > 0);
    fsm.families = if peer.dual_stack_address_family {
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    } else if address.is_ipv4() {
        vec![Family::IPV4_UNICAST]
    } else {
        vec![Family::IPV6_UNICAST]
    };
    if peer.enable_graceful_restart {
        // The R bit says this speaker has (re)started; the session clears
        // it after its first Established.
        fsm.enable_graceful_restart(GRACEFUL_RESTART_TIME, true, true);
    }
    let mut bgp = PeerConfig::new(fsm, SocketAddr::new(address, peer.port));
    bgp.source = peer.source_address;
    bgp.ebgp_multihop = peer.ebgp_multihop;
    bgp.password = peer.password.as_ref().map(|p| p.expose().to_owned());
    bgp.vrf = peer.vrf.clone();
    let bfd = match &peer.bfd_profile {
        None => None,
        Some(name) => {
            let p = config
                .bfd_profiles
                .get(name)
                .ok_or_else(|| format!("BFD profile {name:?} does not exist"))?;
            Some(BfdSpec {
                profile: name.clone(),
                params: bfd::Parameters {
                    receive_interval_ms: p.receive_interval_ms,
                    transmit_interval_ms: p.transmit_interval_ms,
                    detect_multiplier: p.detect_multiplier,
                    echo_interval_ms: p.echo_interval_ms,
                    echo_mode: p.echo_mode,
                    passive_mode: p.passive_mode,
                    minimum_ttl: p.minimum_ttl,
                },
                multihop: peer.ebgp_multihop,
            })
        }
    };
    Ok(SessionSpec {
        name: peer.name.clone(),
        bgp,
        bfd,
        graceful_restart: peer.enable_graceful_restart,
    })
}
