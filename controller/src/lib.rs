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
//! Not built yet (see the controller issue): the Kubernetes side (watches,
//! Service and IPAddressPool status, events, `ConfigurationState`, Lease,
//! metrics, flags) and the binary.

pub mod alloc;
