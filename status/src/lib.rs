//! The status writer of metallb-rs: every status write of the controller and
//! the speakers goes through it (`ConfigurationState`, `IPAddressPool` status,
//! `ServiceL2Status`, `ServiceBGPStatus`, `BGPSessionStatus`).
//!
//! Callers hand a [`StatusWriter`] the desired status of an object
//! ([`StatusWriter::set_desired`], [`StatusWriter::remove`]) and never block.
//! The writer keeps the last status it saw on the server (from its own reads
//! and writes, and from [`watch_into`]) and writes only differences:
//!
//! - server-side apply on the status subresource, with one field manager per
//!   component ([`FIELD_MANAGER_CONTROLLER`], [`FIELD_MANAGER_SPEAKER`]);
//! - at most one write per object per [`WriterConfig::min_write_interval`]
//!   (1 s by default): changes within it are coalesced, the last one wins;
//! - a missing object it owns is created (labels, optional ownerReference),
//!   then its status is written; objects the caller removes are deleted;
//!   `IPAddressPool`s are never created nor deleted;
//! - API errors are retried with exponential backoff, never dropping the
//!   desired state;
//! - a server that normalises a written value does not cause rewrites.
//!
//! The decisions live in [`Engine`], pure and driven by the `now` it is
//! given ([`Clock`], [`FakeClock`]); the API calls are the [`StatusApi`]
//! trait ([`KubeStatusApi`] for a real server, [`testing::FakeApi`] in memory).
//! Counters: see [`metrics`].
//!
//! [`configuration_state`] builds `ConfigurationState` statuses (`controller`,
//! `speaker-<node>`) from the outcome of loading a configuration.

mod api;
mod clock;
pub mod configuration_state;
mod engine;
mod kube_api;
pub mod metrics;
mod object;
pub mod testing;
mod writer;

pub use api::{ApiError, Listed, StatusApi};
pub use clock::{Clock, FakeClock, SystemClock};
pub use engine::{Action, Engine, Outcome, Seen, SetResult, WriterConfig};
pub use kube_api::{
    FIELD_MANAGER_CONTROLLER, FIELD_MANAGER_SPEAKER, KubeStatusApi, pod_owner_reference, watch_into,
};
pub use kube_edge::{Backoff, Class};
pub use metrics::Metrics;
pub use object::{
    Desired, LabelScope, Labels, MAX_CONDITION_MESSAGE, ObjectKey, Observed, StatusObject,
    TRUNCATION_MARKER, is_subset, selector_string, truncate,
};
pub use writer::{StatusWriter, WriteBudget};

#[cfg(test)]
mod tests;
