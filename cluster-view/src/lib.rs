//! The Kubernetes watches the controller and the speaker share.
//!
//! - [`Reflector`]: one watch of one kind into one cache, in a task that
//!   ends when the reflector is dropped; readiness after the first list,
//!   [`Reflector::relist`] (a fresh list on demand, e.g. before the first
//!   pass of a new leadership term), and health (failing, lists completed).
//! - [`ClusterView`]: the reflectors a daemon chooses ([`Kind::CONTROLLER`],
//!   [`Kind::SPEAKER`]), ready after every first list, with two coalescing
//!   signal queues ([`Changes`]): the configuration (a flag) and the
//!   Services (keys `namespace/name`; EndpointSlices signal their Service),
//!   and [`ClusterView::resources`], the configuration inputs as shared
//!   objects (no copies).
//! - Filters: Node updates that change no label and do not flip
//!   `NetworkUnavailable`, and Namespace updates that change no label, are
//!   not signalled (the cache still holds the latest object).
//! - MetalLB's EndpointSlice and Node semantics: [`endpoints`], [`nodes`].

pub mod changes;
pub mod endpoints;
pub mod nodes;
mod reflector;
mod view;

pub use changes::{Batch, Changes, DEFAULT_KEY_BOUND};
pub use endpoints::{Addresses, SliceIndex};
pub use reflector::{Change, Health, Reflector, Stopped};
pub use view::{
    BGP_EXTRAS, Builder, ClusterView, Kind, config_map_signal, namespace_signal, node_signal,
    service_key,
};
