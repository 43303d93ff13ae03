//! MetalLB's `metallb_k8s_client_*` metrics, the same in the controller and the speaker.
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `metallb_k8s_client_updates_total` | counter | reconciles processed, failed ones included |
//! | `metallb_k8s_client_update_errors_total` | counter | reconciles that failed |
//! | `metallb_k8s_client_config_loaded_bool` | gauge | 1 once a configuration was loaded |
//! | `metallb_k8s_client_config_stale_bool` | gauge | 1 while the latest configuration failed to load |

use prometheus::{IntCounter, IntGauge, Registry};

/// The `metallb_k8s_client_*` metrics. Cheap to clone (clones share the values).
#[derive(Clone, Debug)]
pub struct K8sClientMetrics {
    updates: IntCounter,
    update_errors: IntCounter,
    config_loaded: IntGauge,
    config_stale: IntGauge,
}

fn gauge(registry: &Registry, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
    let g = IntGauge::new(name, help)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

fn counter(registry: &Registry, name: &str, help: &str) -> Result<IntCounter, prometheus::Error> {
    let c = IntCounter::new(name, help)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

impl K8sClientMetrics {
    /// Creates the metrics and registers them on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(Self {
            updates: counter(
                registry,
                "metallb_k8s_client_updates_total",
                "Number of k8s object updates that have been processed.",
            )?,
            update_errors: counter(
                registry,
                "metallb_k8s_client_update_errors_total",
                "Number of k8s object updates that failed for some reason.",
            )?,
            config_loaded: gauge(
                registry,
                "metallb_k8s_client_config_loaded_bool",
                "1 if the MetalLB configuration was successfully loaded at least once.",
            )?,
            config_stale: gauge(
                registry,
                "metallb_k8s_client_config_stale_bool",
                "1 if running on a stale configuration, because the latest config failed to load.",
            )?,
        })
    }

    /// A reconcile was processed and succeeded: `updates_total` + 1.
    pub fn update_ok(&self) {
        self.updates.inc();
    }

    /// A reconcile was processed and failed: `updates_total` + 1 and
    /// `update_errors_total` + 1 (MetalLB counts every processed update, then the failed
    /// ones).
    pub fn update_error(&self) {
        self.updates.inc();
        self.update_errors.inc();
    }

    /// Whether a configuration was loaded (MetalLB sets it once one is, and never back).
    pub fn config_loaded(&self, loaded: bool) {
        self.config_loaded.set(i64::from(loaded));
    }

    /// Whether the latest configuration failed to load (the previous one is still in use).
    pub fn config_stale(&self, stale: bool) {
        self.config_stale.set(i64::from(stale));
    }
}
