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
//!   then its status is written; on an existing object, labels and owner are
//!   reconciled by a server-side apply of its metadata (never a delete and
//!   re-create); objects the caller removes are deleted; `IPAddressPool`s are
//!   never created nor deleted;
//! - every request has a deadline ([`kube_edge::call`] at the edge,
//!   [`WriterConfig::request_timeout`] per action), a hung request holds one
//!   of [`WriterConfig::concurrency`] slots and no other object's writes, and
//!   [`StatusWriter::run`] returns as soon as its shutdown future completes;
//! - API errors are classified once ([`kube_edge::Class`]): per-object
//!   exponential backoff with jitter for transient ones, a slow pace for
//!   permanent 4xx (sooner when the status changes), a re-read on 409; the
//!   desired state is never dropped, except by [`StatusWriter::forget_all`]
//!   (a leader that lost its lease), which deletes nothing;
//! - every request takes a token of a [`WriteBudget`] (5 QPS, bursts of 10
//!   by default), which the writers of a process can share, served in turn
//!   when they wait (one kind cannot starve the others);
//! - a 404 on a list or a create (a CRD or namespace missing) backs off
//!   like a transient error, not at once;
//! - texts over the CRD's lengths are truncated ([`StatusObject::limit`]);
//! - a server that normalises a written value does not cause rewrites.
//!
//! Label-keyed writers ([`StatusWriter::labeled`], the speaker's
//! `ServiceL2Status`, `ServiceBGPStatus` and `BGPSessionStatus`) identify
//! objects by labels within a [`LabelScope`] (`metallb.io/node=<node>`):
//! they list the scope at start and adopt existing objects (whether the
//! caller's desired state comes before the list or after), create missing
//! ones (one POST with labels and owner, then the status) named
//! [`StatusObject::name`] when free, else with `generateName`
//! ([`StatusObject::generate_name`]), ignore observations older than what
//! they know (`resourceVersion`), delete
//! duplicates, and delete objects nobody asked for once the caller says
//! [`StatusWriter::initial_sync_done`]; [`StatusWriter::delete_others`]
//! deletes other nodes' objects of a service.
//!
//! The decisions live in [`Engine`], pure and driven by the `now` it is
//! given ([`Clock`], [`FakeClock`]); the API calls are the [`StatusApi`]
//! trait ([`KubeStatusApi`] for a real server, [`testing::FakeApi`] in memory).
//! Counters and gauges: see [`metrics`].
//!
//! [`configuration_state`] builds `ConfigurationState` statuses (`controller`,
//! `speaker-<node>`) from the outcome of loading a configuration.

mod api;
mod budget;
mod clock;
pub mod configuration_state;
mod engine;
mod kube_api;
pub mod metrics;
mod object;
pub mod testing;
mod writer;

pub use api::{ApiError, Listed, StatusApi};
pub use budget::WriteBudget;
pub use clock::{Clock, FakeClock, SystemClock};
pub use engine::{Action, Engine, Outcome, Seen, SetResult, WriterConfig};
pub use kube_api::{
    FIELD_MANAGER_CONTROLLER, FIELD_MANAGER_SPEAKER, KubeStatusApi, own_pod_owner,
    pod_owner_reference, watch_into,
};
pub use kube_edge::{Backoff, Class};
pub use metrics::Metrics;
pub use object::{
    Desired, LabelScope, Labels, MAX_CONDITION_MESSAGE, ObjectKey, Observed, StatusObject,
    TRUNCATION_MARKER, is_subset, selector_string, truncate,
};
pub use writer::StatusWriter;

#[cfg(test)]
mod tests;
