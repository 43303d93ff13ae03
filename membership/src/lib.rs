//! Membership among speakers, without Kubernetes: SWIM (foca) for who is
//! live, and a fast path for the owners of L2 IPs: a BFD heartbeat from the
//! next candidate, loss confirmed through indirect probes, then takeover.
//! See `README.md`.
//!
//! - [`wire`]: the datagram framing (kind byte, authentication and
//!   encryption), foca's codec and the fast path's messages.
//! - [`core`]: the Sans-IO state machine ([`Core`]).
//! - [`edge`]: the tokio UDP edge and the speaker's handle,
//!   [`Membership`].
//! - [`metrics`]: `metallb_rs_membership_*` on a caller's registry.
//! - [`identity`]: the member identity, [`NodeId`].

pub mod core;
pub mod edge;
pub mod identity;
pub mod metrics;
pub mod wire;

pub use crate::core::{Config, Core, Counters, Event, JOIN_FANOUT, Output};
pub use crate::edge::{EdgeConfig, Membership, StartError};
pub use crate::identity::NodeId;
pub use crate::metrics::Metrics;
pub use crate::wire::{DEFAULT_PORT, KEY_FILE, KeyError, Kind, SecretKey, SyncPart};
