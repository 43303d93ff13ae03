//! Network lab and test kit for metallb-rs interop and end-to-end tests.
//!
//! Everything the kit creates lives in network namespaces whose names carry a
//! per-run prefix (`mlb<N>-...`, see [`Topology`]); the root namespace only
//! gets the `/run/netns` handles. The L2 switch is a bridge inside its own
//! namespace (`<prefix>-sw`), never in the root namespace.
//!
//! A test that uses namespaces or timing takes the process-wide lock first
//! and checks its tools:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let _serial = testkit::serial()?; // root check, cross-process lock, stale cleanup
//! testkit::preflight()?;            // binaries present, no daemon in the root namespace
//! let lab = testkit::Lab::up(&testkit::LabOptions::default())?;
//! let router = lab.start_router(&testkit::FrrConfig::lab_router())?;
//! # Ok(()) }
//! ```
//!
//! The address and AS plan is in [`plan`] (the prose version is `lab/README.md`).
//! Safety: the kit refuses any address outside the documentation ranges
//! (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) and any
//! route that is not inside them (no default routes).

pub mod apiproxy;
pub mod bird;
pub mod capture;
pub mod cleanup;
pub mod cmd;
pub mod cut;
pub mod frr;
pub mod gobgp;
pub mod help;
pub mod lab;
pub mod lock;
pub mod netns;
pub mod pcap;
pub mod plan;
pub mod preflight;
pub mod process;
pub mod rbac;
pub mod router;
pub mod session_log;
pub mod topology;
pub mod wait;

pub use bird::{Bird, BirdConfig, BirdNeighbor, BirdProtocol, BirdRoute};
pub use capture::Capture;
pub use cleanup::cleanup_stale;
pub use cut::Cut;
pub use frr::{BfdPeer, BfdProfile, BgpNeighbor, BgpRoute, Frr, FrrConfig, FrrDaemon, FrrNeighbor};
pub use gobgp::{Gobgp, GobgpConfig, GobgpNeighbor, GobgpPeer, GobgpRoute};
pub use lab::{L2Router, Lab, LabOptions};
pub use lock::{SerialGuard, serial};
pub use netns::{NeighEntry, Netns};
pub use preflight::{preflight, require_root};
pub use process::{AsyncNsChild, NsChild};
pub use router::{Neighbor, Route, Router, RouterConfig, RouterKind};
pub use topology::{MdbEntry, Topology, TopologySpec};
pub use wait::{WaitTimeout, wait_until, wait_until_async};

/// The kit's result type: errors carry the command, its status and its stderr.
pub type Result<T> = anyhow::Result<T>;

/// IP address family, for helpers that handle both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    pub fn of(addr: std::net::IpAddr) -> Family {
        if addr.is_ipv4() {
            Family::Ipv4
        } else {
            Family::Ipv6
        }
    }
}
