//! The Linux edge: packet sockets, solicited-node memberships, rtnetlink
//! interface descriptions, and the driver that runs the pure core on them.
//! Everything here needs `CAP_NET_RAW` (packet sockets) and acts in the
//! network namespace of the thread that creates it.

pub mod driver;
pub mod membership;
pub mod netlink;
pub mod probe;
pub mod socket;
mod sys;

pub use driver::{
    DriverConfig, DriverError, FailedInterface, GratuitousEvent, GratuitousKind, L2Handle,
    OpenFault, RequestEvent, Stopped, start,
};
pub use membership::Memberships;
pub use netlink::{
    InterfaceWatcher, LinkChange, LinkTable, NetlinkError, Notification, WatchOptions, WatchState,
    classify,
};
pub use probe::{ProbeError, probe};
pub use socket::{PacketSocket, Protocol};
