//! The writer's Prometheus counters.
//!
//! | name | labels | counts |
//! |---|---|---|
//! | `metallb_rs_status_writes_total` | `kind`, `op` (`create`, `apply`, `delete`), `result` (`ok`, `not_found`, `error`) | API write requests |
//! | `metallb_rs_status_reads_total` | `kind`, `result` (`ok`, `error`) | API reads (of objects not seen yet) |
//! | `metallb_rs_status_skips_total` | `kind` | desired statuses handed in that needed no write (the server was known to have them already) |
//! | `metallb_rs_status_coalesced_total` | `kind` | desired statuses that replaced one not written yet |

use prometheus::{IntCounterVec, Opts, Registry};

/// The counters, registered once per Registry and shared by every writer.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub(crate) writes: IntCounterVec,
    pub(crate) reads: IntCounterVec,
    pub(crate) skips: IntCounterVec,
    pub(crate) coalesced: IntCounterVec,
}

impl Metrics {
    /// Creates the counters and registers them on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let writes = IntCounterVec::new(
            Opts::new(
                "metallb_rs_status_writes_total",
                "Status write requests to the API server, by kind, operation and result.",
            ),
            &["kind", "op", "result"],
        )?;
        let reads = IntCounterVec::new(
            Opts::new(
                "metallb_rs_status_reads_total",
                "Reads of status objects not seen yet, by kind and result.",
            ),
            &["kind", "result"],
        )?;
        let skips = IntCounterVec::new(
            Opts::new(
                "metallb_rs_status_skips_total",
                "Desired statuses that needed no write, by kind.",
            ),
            &["kind"],
        )?;
        let coalesced = IntCounterVec::new(
            Opts::new(
                "metallb_rs_status_coalesced_total",
                "Desired statuses that replaced one not written yet, by kind.",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(reads.clone()))?;
        registry.register(Box::new(skips.clone()))?;
        registry.register(Box::new(coalesced.clone()))?;
        Ok(Self {
            writes,
            reads,
            skips,
            coalesced,
        })
    }

    /// Counters on a registry of their own (tests, or when not exported).
    pub fn unregistered() -> Self {
        Self::register(&Registry::new()).expect("fresh registry")
    }
}
