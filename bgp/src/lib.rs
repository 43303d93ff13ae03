//! Native BGP-4 speaker for metallb-rs. Knows nothing of Kubernetes.
//!
//! Built so far: [`wire`], the pure codec (framing, OPEN, UPDATE,
//! NOTIFICATION, KEEPALIVE and ROUTE-REFRESH messages, capabilities and
//! their negotiation, path attributes, the one `Notification` error enum,
//! RFC 7606 validation of received UPDATEs, and UPDATE packing for the
//! Adj-RIB-Out).
//!
//! Not built yet (see the bgp crate issue): the session state machine, the
//! transport (sockets, TCP MD5, TTL), the Adj-RIB-Out, session state and
//! metrics, and `metallbctl bgp-probe`.

pub mod wire;
