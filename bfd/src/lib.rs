//! Native BFD (RFC 5880/5881/5883 and echo) for metallb-rs: packet codec, pure
//! session state machine and the timer/socket edge. Knows nothing of Kubernetes or BGP.
//!
//! Not built yet: see the bfd crate issue.
