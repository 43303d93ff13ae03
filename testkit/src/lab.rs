//! The default lab topology of the address plan ([`crate::plan`], prose in
//! `lab/README.md`):
//!
//! ```text
//!   node-1 .11   node-2 .12   node-3 .13   router2 .2   client .100
//!       |            |            |            |            |
//!   ====+============+====== <prefix>-br (in <prefix>-sw) ==+====  segment "l2"
//!       |                 192.0.2.0/24, 2001:db8:0:1::/64
//!   router .1 (FRR; forwarding on, redirects off)
//!       | .1 / ::1         segment "routed": 203.0.113.0/25, 2001:db8:0:2::/64
//!   far .2 / ::2 (multihop peers)
//! ```
//!
//! Static routes: `far` reaches the L2 segment and the service pools via the
//! router; every L2 namespace but the router reaches the routed segment via
//! 192.0.2.1 / 2001:db8:0:1::1.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::ensure;

use crate::cut::Cut;
use crate::frr::{Frr, FrrConfig};
use crate::netns::Netns;
use crate::router::{Neighbor, Router, RouterConfig, RouterKind};
use crate::topology::{Topology, TopologySpec};
use crate::{Family, Result, plan};

/// Name of the L2 segment in the lab topology.
pub const L2: &str = "l2";
/// Name of the routed router<->far link in the lab topology.
pub const ROUTED: &str = "routed";

/// Options of the default lab.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Node namespaces `node-1..node-N` (1-99; default 3).
    pub nodes: usize,
    /// The `far` namespace behind the router (default true).
    pub far: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            nodes: plan::NODES,
            far: true,
        }
    }
}

/// The default lab: a [`Topology`] plus helpers named after the plan.
#[derive(Debug)]
pub struct Lab {
    pub topo: Topology,
    nodes: usize,
}

/// Where the plan puts a router of each kind on the L2 segment: FRR is
/// `router` (AS 64512, 192.0.2.1, 2001:db8:0:1::1), BIRD and GoBGP are
/// `router2` (AS 64514, 192.0.2.2, 2001:db8:0:1::2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Router {
    pub kind: RouterKind,
    /// The namespace's short name.
    pub ns: &'static str,
    pub asn: u32,
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
}

impl L2Router {
    pub fn of(kind: RouterKind) -> L2Router {
        match kind {
            RouterKind::Frr => L2Router {
                kind,
                ns: "router",
                asn: plan::ROUTER_AS,
                v4: plan::ROUTER_V4,
                v6: plan::ROUTER_V6,
            },
            RouterKind::Bird | RouterKind::Gobgp => L2Router {
                kind,
                ns: "router2",
                asn: plan::ROUTER2_AS,
                v4: plan::ROUTER2_V4,
                v6: plan::ROUTER2_V6,
            },
        }
    }

    /// Its address of `family` on the L2 segment.
    pub fn addr(&self, family: Family) -> IpAddr {
        match family {
            Family::Ipv4 => self.v4.into(),
            Family::Ipv6 => self.v6.into(),
        }
    }

    /// Its config without neighbors (router id: its IPv4 address).
    pub fn config(&self) -> RouterConfig {
        RouterConfig::new(self.kind, self.ns, self.asn, self.v4)
    }
}

impl Lab {
    /// The topology spec of the default lab.
    pub fn spec(opts: &LabOptions) -> TopologySpec {
        let nodes = opts.nodes.clamp(1, 99);
        let mut spec = TopologySpec::new("lab")
            .router("router")
            .namespace("router2");
        let mut members: Vec<(String, Vec<String>)> = vec![
            (
                "router".into(),
                vec![
                    format!("{}/{}", plan::ROUTER_V4, plan::L2_V4_PREFIX_LEN),
                    format!("{}/{}", plan::ROUTER_V6, plan::L2_V6_PREFIX_LEN),
                ],
            ),
            (
                "router2".into(),
                vec![
                    format!("{}/{}", plan::ROUTER2_V4, plan::L2_V4_PREFIX_LEN),
                    format!("{}/{}", plan::ROUTER2_V6, plan::L2_V6_PREFIX_LEN),
                ],
            ),
        ];
        for n in 1..=nodes {
            spec = spec.namespace(&plan::node_name(n));
            members.push((
                plan::node_name(n),
                vec![
                    format!("{}/{}", plan::node_v4(n), plan::L2_V4_PREFIX_LEN),
                    format!("{}/{}", plan::node_v6(n), plan::L2_V6_PREFIX_LEN),
                ],
            ));
        }
        spec = spec.namespace("client");
        members.push((
            "client".into(),
            vec![
                format!("{}/{}", plan::CLIENT_V4, plan::L2_V4_PREFIX_LEN),
                format!("{}/{}", plan::CLIENT_V6, plan::L2_V6_PREFIX_LEN),
            ],
        ));
        let addr_refs: Vec<Vec<&str>> = members
            .iter()
            .map(|(_, a)| a.iter().map(String::as_str).collect())
            .collect();
        let member_refs: Vec<(&str, &[&str])> = members
            .iter()
            .zip(&addr_refs)
            .map(|((n, _), a)| (n.as_str(), a.as_slice()))
            .collect();
        spec = spec.segment(L2, &member_refs);
        if opts.far {
            let r4 = format!("{}/{}", plan::ROUTER_ROUTED_V4, plan::ROUTED_V4_PREFIX_LEN);
            let r6 = format!("{}/{}", plan::ROUTER_ROUTED_V6, plan::ROUTED_V6_PREFIX_LEN);
            let f4 = format!("{}/{}", plan::FAR_V4, plan::ROUTED_V4_PREFIX_LEN);
            let f6 = format!("{}/{}", plan::FAR_V6, plan::ROUTED_V6_PREFIX_LEN);
            spec = spec.namespace("far").link(
                ROUTED,
                ("router", &[r4.as_str(), r6.as_str()]),
                ("far", &[f4.as_str(), f6.as_str()]),
            );
            let gw4 = plan::ROUTER_ROUTED_V4.to_string();
            let gw6 = plan::ROUTER_ROUTED_V6.to_string();
            for dst in [plan::L2_V4, plan::POOL_V4] {
                spec = spec.route("far", dst, &gw4);
            }
            for dst in [plan::L2_V6, plan::POOL_V6] {
                spec = spec.route("far", dst, &gw6);
            }
            let l2gw4 = plan::ROUTER_V4.to_string();
            let l2gw6 = plan::ROUTER_V6.to_string();
            let mut l2_members: Vec<String> = vec!["router2".into(), "client".into()];
            l2_members.extend((1..=nodes).map(plan::node_name));
            for ns in &l2_members {
                spec = spec
                    .route(ns, plan::ROUTED_V4, &l2gw4)
                    .route(ns, plan::ROUTED_V6, &l2gw6);
            }
        }
        spec
    }

    /// Creates the default lab topology (no daemons yet).
    pub fn up(opts: &LabOptions) -> Result<Lab> {
        let topo = Lab::spec(opts).create()?;
        Ok(Lab {
            topo,
            nodes: opts.nodes.clamp(1, 99),
        })
    }

    pub fn ns(&self, short: &str) -> &Netns {
        self.topo.ns(short)
    }

    /// Namespace of node `n` (1-based).
    pub fn node(&self, n: usize) -> &Netns {
        assert!(
            (1..=self.nodes).contains(&n),
            "the lab has nodes 1..={}",
            self.nodes
        );
        self.topo.ns(&plan::node_name(n))
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    pub fn router(&self) -> &Netns {
        self.topo.ns("router")
    }

    pub fn router2(&self) -> &Netns {
        self.topo.ns("router2")
    }

    pub fn client(&self) -> &Netns {
        self.topo.ns("client")
    }

    pub fn far(&self) -> &Netns {
        self.topo.ns("far")
    }

    /// The interface of `ns` on the L2 segment.
    pub fn l2_iface(&self, ns: &str) -> &str {
        self.topo.iface(ns, L2)
    }

    /// The interface of `ns` (`router` or `far`) on the routed segment.
    pub fn routed_iface(&self, ns: &str) -> &str {
        self.topo.iface(ns, ROUTED)
    }

    /// Starts FRR in `router` with `config`.
    pub fn start_router(&self, config: &FrrConfig) -> Result<Frr> {
        Frr::start(self.router(), config)
    }

    /// Starts BIRD or GoBGP in `router2` (AS 64514, router-id 192.0.2.2)
    /// peering with `peers` (address, AS) and announcing `announce`.
    pub fn start_router2(
        &self,
        kind: RouterKind,
        peers: &[(IpAddr, u32)],
        announce: &[&str],
    ) -> Result<Router> {
        ensure!(
            kind != RouterKind::Frr,
            "router2 runs BIRD or GoBGP; FRR is `router` (start_router)"
        );
        let mut c = L2Router::of(kind).config();
        for (addr, asn) in peers {
            c = c.neighbor(Neighbor::new(*addr, *asn));
        }
        for p in announce {
            c = c.announce(p);
        }
        self.start_l2_router(&c)
    }

    /// Starts `config` where the plan puts its kind of router on the L2
    /// segment ([`L2Router`]).
    pub fn start_l2_router(&self, config: &RouterConfig) -> Result<Router> {
        Router::start(self.ns(L2Router::of(config.kind).ns), config)
    }

    /// Silently cuts `ns`'s cable at the switch (see
    /// [`Topology::cut_switch_port`]).
    pub fn cut_cable(&self, ns: &str) -> Result<Cut> {
        self.topo.cut_switch_port(L2, ns)
    }

    /// Tears the lab down (also done on drop).
    pub fn destroy(self) -> Result<()> {
        self.topo.destroy()
    }
}
