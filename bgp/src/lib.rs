//! Native BGP-4 speaker for metallb-rs. Knows nothing of Kubernetes.
//!
//! Built so far, all pure (no sockets, no clocks):
//! - [`wire`]: the codec (framing, OPEN, UPDATE, NOTIFICATION, KEEPALIVE and
//!   ROUTE-REFRESH, capabilities and their negotiation, path attributes, the
//!   one `Notification` error enum, RFC 7606 validation of received UPDATEs,
//!   UPDATE packing);
//! - [`fsm`]: the session state machine (RFC 4271 section 8, connection
//!   collisions, timers, ASN and identifier checks, router ID, closing);
//! - [`rib_out`]: the Adj-RIB-Out of one session (diff, packing, End-of-RIB,
//!   route refresh);
//! - [`state`]: the session state snapshot published per session;
//! - [`metrics`]: MetalLB's `metallb_bgp_*` metrics on a caller's registry.
//!
//! The I/O edge:
//! - [`transport`]: the one module that sets socket options (source
//!   bind, TTL / hop limit, `SO_BINDTODEVICE` for VRFs, connect timeout,
//!   listener sockets) and TCP MD5 (RFC 2385) through `netsys`;
//! - [`listener`]: the listener for peers that dial in, one per local
//!   address shared by every session on it (dispatch by peer address,
//!   per-peer TCP MD5 keys, bind failures as session errors, rebinds);
//! - [`session`]: one tokio task per peer wiring the FSM, the transport,
//!   the Adj-RIB-Out, the state (a `watch`) and the metrics.
//!
//! `metallbctl bgp-probe` drives one [`session::Session`] from the command
//! line: see `bgp/README.md`.

pub mod fsm;
pub mod listener;
pub mod metrics;
pub mod rib_out;
pub mod session;
pub mod state;
pub mod transport;
pub mod wire;
