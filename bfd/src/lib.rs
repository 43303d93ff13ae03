//! Native BFD for metallb-rs: RFC 5880 (asynchronous mode and the echo
//! function), RFC 5881 (single hop), RFC 5883 (multihop), RFC 5882 (client
//! rules). Knows nothing of Kubernetes or BGP: clients acquire sessions and
//! read state changes.
//!
//! What exists is the pure core (Sans-IO: no sockets, no timers, no clock,
//! no OS randomness; time is passed in as `u64` nanoseconds and randomness as
//! seeds):
//!
//! - [`packet`]: the control packet codec with every packet-only reception
//!   check of RFC 5880 §6.8.6 ([`ControlPacket::decode`]; authenticated packets
//!   are parsed structurally and refused), and our echo packet format
//!   ([`EchoPacket`]). Never panics, never allocates.
//! - [`frame`]: the Ethernet / IPv4 / UDP frame of an echo packet (to
//!   ourselves, through the peer's MAC), its checks on return, and the
//!   socket filter that catches it.
//! - [`session`]: the state machine, `Session::handle(Event, now) ->
//!   Vec<Action>`, with the negotiation, Poll/Final, jitter, detection,
//!   passive mode, echo and diagnostics rules documented there.
//! - [`registry`]: sessions by discriminator and by [`SessionKey`], shared by
//!   several clients with merged [`Parameters`], and demultiplexing of
//!   received packets.
//! - [`path`]: [`SessionKey`], ports, source port range and TTL checks of
//!   RFC 5881 / 5883.
//! - [`params`]: [`Parameters`], mirroring MetalLB's `BFDProfile`.
//! - [`rng`]: the seeded generator behind discriminators and jitter.
//!
//!
//! The Linux edge:
//!
//! - [`runtime`]: one dedicated thread owning the registry, the sockets
//!   (3784 / 4784, IPv4 and IPv6; an `AF_PACKET` socket per session running
//!   echo) and a timerfd; [`Bfd::start`] and the
//!   [`BfdHandle`] the speaker uses (acquire / release / set parameters, a
//!   watch per session, an event stream of transitions).
//! - [`metrics`]: MetalLB's `metallb_bfd_*` metrics on a caller's
//!   Prometheus registry, read from the runtime's counters at each scrape.
//!
//! See `README.md` for the echo function, `metallbctl bfd-probe` and the
//! measurements.

pub mod frame;
pub mod metrics;
pub mod packet;
pub mod params;
pub mod path;
pub mod registry;
pub mod rng;
pub mod runtime;
pub mod session;

pub use packet::{ControlPacket, Diagnostic, EchoPacket, PacketError, State};
pub use params::{ParamError, Parameters};
pub use path::{Hop, SessionKey};
pub use registry::{ClientId, Registry, RegistryError, RxDrop, RxMeta};
pub use runtime::{Bfd, BfdEvent, BfdHandle, Config};
pub use session::{Action, Cause, ClientAction, Event, Session, SessionStatus, StateChange, Timer};
