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
//! - [`health`]: `/healthz` and `/readyz`.
//! - The binary (`src/main.rs`): MetalLB's flags, the watches of pools,
//!   communities and namespaces, the `ConfigurationState`, probes, graceful
//!   shutdown.
//!
//! Not built yet (see the controller issue): Service allocation (watching
//! Services and writing their status with [`alloc`]), IPAddressPool status,
//! events, the Lease, metrics on `--port`.

pub mod alloc;
pub mod health;
pub mod pool_reconciler;
