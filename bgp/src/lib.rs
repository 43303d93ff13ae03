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
//! Not built yet (see the bgp crate issue): the transport and session driver
//! (sockets, TCP MD5, TTL, listener) and `metallbctl bgp-probe`.

pub mod fsm;
pub mod metrics;
pub mod rib_out;
pub mod state;
pub mod wire;
