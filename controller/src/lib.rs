//! metallb-rs controller: LoadBalancer IP allocation, Service status,
//! IPAddressPool status and the controller's `ConfigurationState`.
//!
//! What exists so far:
//!
//! - [`alloc`]: the allocator, a pure library (no Kubernetes types): pools
//!   from a validated [`config::Config`], MetalLB's assignment, pool
//!   selection, sharing and dual-stack rules and messages, re-homing on pool
//!   changes, restore on start, and per-pool counters. Addresses are found
//!   in O(log n) of the allocated addresses, never by scanning a pool.
//!
//! - [`pool_reconciler`]: the pool configuration (pools, communities,
//!   namespaces) parsed as MetalLB's PoolReconciler does, keeping the last
//!   valid one; the binary reports it in the `ConfigurationState`
//!   `controller` through the status writer.
//! - [`service`]: MetalLB's per-Service logic (`SetBalancer`,
//!   `convergeBalancer`) over the allocator: what to write on a Service and
//!   which events to emit, pure.
//! - [`driver`]: the loop that ties them together (configuration, Service
//!   changes, leadership term, retries), over the [`edge::ServiceApi`]
//!   trait, so its failure scenarios run as unit tests with a fake API.
//! - [`edge`]: the Service writes (status subresource, annotation patch,
//!   conditional on the `resourceVersion` decided on) and events.
//! - [`leader`]: the Lease that lets one controller allocate at a time.
//! - [`metrics`]: MetalLB's controller metrics (`metallb_allocator_*`,
//!   `metallb_k8s_client_*`).
//! - [`webhook`]: MetalLB's validating admission webhooks: the reviews
//!   (pure, [`webhook::admission`]), the HTTPS server, and the certificate
//!   (pure plan in [`webhook::certs`], the Secret and `caBundle` edge in
//!   [`webhook::rotator`]).
//! - `/healthz`, `/readyz`, logging and metrics flags, events: the `daemon`
//!   crate, shared with the speaker.
//! - The binary (`src/main.rs`): MetalLB's flags, the watches, probes,
//!   metrics server, bounded graceful shutdown.

pub mod alloc;
pub mod driver;
pub mod edge;
pub mod leader;
pub mod memberlist;
pub mod metrics;
pub mod node_sweep;
pub mod pool_reconciler;
pub mod service;
pub mod webhook;
