//! End-to-end tests against the lab's real Kubernetes API server. They need a running lab
//! (`lab/cluster up`; the LAB_* variables select another one) and fail, never skip, when
//! it is not up. Run: `cargo test --manifest-path e2e/Cargo.toml`.

mod allocation;
mod audit;
mod chart;
mod controller;
mod conversion;
mod crds;
mod deploy;
mod docs_fixtures;
mod harness;
mod metrics;
mod nodes;
mod rbac;
mod samples;
mod speaker;
mod speaker_bgp;
mod table;
mod webhook;
