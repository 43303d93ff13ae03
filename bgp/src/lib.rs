//! Native BGP-4 speaker for metallb-rs: wire codec, pure session state machine,
//! Adj-RIB-Out and the socket driver. Knows nothing of Kubernetes.
//!
//! Not built yet: see the bgp crate issue.
