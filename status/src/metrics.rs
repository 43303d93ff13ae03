//! The writer's Prometheus counters and gauges.
//!
//! | name | labels | counts |
//! |---|---|---|
//! | `metallb_rs_status_writes_total` | `kind`, `op` (`create`, `apply`, `metadata`, `delete`), `result` (`ok`, `not_found`, `error`) | API write requests |
//! | `metallb_rs_status_reads_total` | `kind`, `result` (`ok`, `error`) | API reads and lists (of objects not seen yet) |
//! | `metallb_rs_status_skips_total` | `kind` | desired statuses handed in that needed no write (the server was known to have them already) |
//! | `metallb_rs_status_coalesced_total` | `kind` | desired statuses that replaced one not written yet |
//! | `metallb_rs_status_pending` (gauge) | `kind` | objects not yet as wanted on the server |
//! | `metallb_rs_status_failed` (gauge) | `kind` | objects (and identities without an object, and a writer's list) whose last request failed, or that still wait for a write after failures (retried with backoff) |

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

/// The counters, registered once per Registry and shared by every writer.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub(crate) writes: IntCounterVec,
    pub(crate) reads: IntCounterVec,
    pub(crate) skips: IntCounterVec,
    pub(crate) coalesced: IntCounterVec,
    pub(crate) pending: IntGaugeVec,
    pub(crate) failed: IntGaugeVec,
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
        let pending = IntGaugeVec::new(
            Opts::new(
                "metallb_rs_status_pending",
                "Status objects not yet as wanted on the server, by kind.",
            ),
            &["kind"],
        )?;
        let failed = IntGaugeVec::new(
            Opts::new(
                "metallb_rs_status_failed",
                "Status objects whose last request failed (retried with backoff), by kind.",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(reads.clone()))?;
        registry.register(Box::new(skips.clone()))?;
        registry.register(Box::new(coalesced.clone()))?;
        registry.register(Box::new(pending.clone()))?;
        registry.register(Box::new(failed.clone()))?;
        Ok(Self {
            writes,
            reads,
            skips,
            coalesced,
            pending,
            failed,
        })
    }

    /// Counters on a registry of their own (tests, or when not exported).
    pub fn unregistered() -> Self {
        Self::register(&Registry::new()).expect("fresh registry")
    }
}
