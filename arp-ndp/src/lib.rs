//! ARP and NDP responder for metallb-rs layer-2 mode.
//! Knows nothing of Kubernetes: the speaker tells it which IPs to own where.
//!
//! The pure core (no I/O, no clock; tested without privileges):
//! - [`packet`]: Ethernet, ARP (requests, replies, the gratuitous request
//!   and reply forms) and IPv6 Neighbor Solicitation / Advertisement
//!   codecs, the bounded IPv6 extension header walk in front of them
//!   (fragments dropped), the ICMPv6 checksum, RFC 4861 7.1.1 validation,
//!   solicited-node addresses and their MACs.
//! - [`responder`]: reply-or-drop decisions for received frames, with drop
//!   reasons as counters (Override set in our NAs, on purpose).
//! - [`announce`]: the gratuitous burst scheduler (`now` in, frames and the
//!   next wakeup out; an unchanged re-sync sends nothing).
//! - [`interfaces`]: eligibility rules and MetalLB's exclusion regex list
//!   (`excludel2.yaml`).
//! - [`state`]: owned IPs with allow-lists, announced-on interfaces,
//!   claims by named owners (an IP shared by several Services stays owned,
//!   on the union of their allow-lists, until its last owner releases it),
//!   the solicited-node groups wanted and per-IP counters; [`metrics`]:
//!   MetalLB's `metallb_layer2_*` counters on a caller's registry.
//! - [`groups`]: which solicited-node group is joined on which membership
//!   socket; failed joins fed back, retried with a jittered backoff, and
//!   spread over more sockets when the kernel's option memory runs out.
//!
//! The Linux edge ([`linux`], needs `CAP_NET_RAW`): `AF_PACKET` sockets
//! with BPF filters for ARP requests and Neighbor Solicitations,
//! solicited-node group memberships, interface descriptions from rtnetlink
//! (dump plus notifications, re-dumped when the notification socket
//! overflows), and the driver task that runs the core on them
//! ([`linux::start`], controlled through a [`linux::L2Handle`]).
//!
//! Unsafe code is denied crate-wide and allowed only in the private module
//! `linux::sys` (registering a socket with tokio), with its safety argument;
//! binding to a `sockaddr_ll` and attaching the socket filter go through
//! `netsys::packet`, the workspace's one audited wrapper for them.
//!
//! Also in [`linux`]: [`linux::probe()`], one who-has or solicitation and a
//! short wait, to see whether another MAC already answers for an IP
//! (`metallbctl l2-announce` runs it before owning; see the crate's
//! README.md for the command).
//!
//! Measured in the lab (`tests/bench_lab.rs`, feature `bench-lab`; figures
//! in BENCHMARKS.md): reply latency, replies per second and idle CPU with
//! 1,000 owned IPs of each family, beside the kernel answering for its own
//! addresses.

pub mod announce;
pub mod groups;
pub mod interfaces;
pub mod linux;
pub mod metrics;
pub mod packet;
pub mod responder;
pub mod state;
