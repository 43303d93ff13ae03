//! ARP and NDP responder for metallb-rs layer-2 mode, on raw sockets and netlink.
//! Knows nothing of Kubernetes: the speaker tells it which IPs to own where.
//!
//! Not built yet: see the arp-ndp crate issue.
