//! The speaker end to end in the lab: one `speaker` process per node INSIDE its node
//! namespace (e2e::speakers::SpeakerLab), the lab's real API server, FRR routers. Needs
//! root and a running lab (`lab/cluster up`); fails, never skips, unless
//! METALLB_E2E_SKIP_NETNS=1 is set where there is no root. Each test takes the test
//! kit's serial lock (they run one at a time).
//!
//! Run: `cargo build -p speaker && cargo test --manifest-path e2e/Cargo.toml --test speakers`.

mod bgp;
mod explain;
mod harness;
mod ipv6;
mod l2;
mod l2_cases;
mod l2_failover;
mod l2_yield;
mod metrics;
mod warnings;
