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
//! - What the caches keep ([`lean`]): every object without its managed
//!   fields and last-applied annotation; Nodes with their labels and two
//!   conditions alone; EndpointSlices decoded as
//!   [`endpoints::LeanSlice`]s, each endpoint's node, readiness and whether
//!   it has an address alone (what the daemons read, listed there).
//! - Filters: Node updates that change no label and do not flip
//!   `NetworkUnavailable`, and Namespace updates that change no label, are
//!   not signalled (the cache still holds the latest object).
//! - MetalLB's EndpointSlice and Node semantics: [`endpoints`], [`nodes`].
//!
//! [`Changes::next`] is cancel-safe (nothing is taken until it returns), so
//! both queues can be awaited in one `select!`.
//!
//! The controller:
//!
//! ```no_run
//! # async fn controller(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use cluster_view::{Batch, ClusterView, Kind};
//! use kube::runtime::reflector::ObjectRef;
//! let view = ClusterView::builder(client, "metallb-system").kinds(Kind::CONTROLLER).start();
//! view.ready().await?;
//! // A new leadership term: rebuild from a list made now, not a stale cache.
//! tokio::time::timeout(std::time::Duration::from_secs(30), view.relist()).await??;
//! let services = view.services().expect("watched").store();
//! loop {
//!     tokio::select! {
//!         _ = view.config_changes().next() => {
//!             let _parsed = config::parse(&view.resources()); // shares the cached objects
//!         }
//!         batch = view.service_changes().next() => match batch {
//!             Batch::All => for _svc in services.state() { /* every Service */ },
//!             Batch::Keys(keys) => for key in keys {
//!                 let (ns, name) = key.split_once('/').expect("namespace/name");
//!                 let _svc = services.get(&ObjectRef::new(name).within(ns)); // None: deleted
//!             },
//!         },
//!     }
//! }
//! # }
//! ```
//!
//! The speaker:
//!
//! ```no_run
//! # async fn speaker(client: kube::Client, me: &str, ignore_exclude_lb: bool) -> Result<(), Box<dyn std::error::Error>> {
//! use cluster_view::endpoints::{has_serving_endpoint_on, nodes_with_serving_endpoints};
//! use cluster_view::nodes::{excluded_from_lb, network_unavailable};
//! use cluster_view::{Addresses, ClusterView, Kind};
//! use kube::runtime::reflector::ObjectRef;
//! let view = ClusterView::builder(client, "metallb-system")
//!     .kinds(Kind::SPEAKER)
//!     .load_balancer_services_only() // a Service of another type: as if deleted
//!     .start();
//! view.ready().await?;
//! let _config = config::parse(&view.resources());
//! let node = view.nodes().expect("watched").store().get(&ObjectRef::new(me));
//! let may_announce = node.is_none_or(|n| {
//!     !network_unavailable(&n) && (ignore_exclude_lb || !excluded_from_lb(&n))
//! });
//! let slices = view.endpoint_slices_of("demo/web");
//! let bgp_local = has_serving_endpoint_on(&slices, me, Addresses::Required);
//! let l2_local_candidates = nodes_with_serving_endpoints(&slices, Addresses::NotRequired);
//! # let _ = (may_announce, bgp_local, l2_local_candidates);
//! # Ok(())
//! # }
//! ```

pub mod changes;
pub mod endpoints;
pub mod lean;
pub mod nodes;
mod reflector;
pub mod services;
mod view;

pub use changes::{Batch, Changes, DEFAULT_KEY_BOUND};
pub use endpoints::{Addresses, SliceIndex};
pub use reflector::{Change, Health, Reflector, Stopped};
pub use view::{
    BGP_EXTRAS, Builder, ClusterView, Kind, LOAD_BALANCER_SERVICES, config_map_signal,
    config_object_signal, namespace_signal, node_signal, service_key,
};
