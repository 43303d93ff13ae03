//! The pool configuration as MetalLB's `PoolReconciler` sees it: the
//! `IPAddressPool`s and `Community`s of the MetalLB namespace plus the
//! cluster's Namespaces, parsed with [`config::parse`].
//!
//! Pure (no API calls): the binary feeds it the reflectors' contents on every
//! change and reports what it returns through the status writer.

use std::sync::Arc;

use config::api::v1beta1::{Community, IPAddressPool};
use config::{Config, Resources};
use k8s_openapi::api::core::v1::Namespace;

/// What a pass over the configuration found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pass {
    /// The same result as the previous pass: nothing to report.
    Unchanged,
    /// The configuration is valid and differs from the last one reported.
    Valid,
    /// The configuration is invalid (the error, without the
    /// `configuration error: ` prefix the `ConfigurationState` adds).
    Invalid(String),
}

/// Keeps the last valid configuration and the last result reported.
#[derive(Debug, Default)]
pub struct PoolReconciler {
    last_valid: Option<Config>,
    last_result: Option<Result<(), String>>,
}

/// The [`Resources`] the pool reconciler parses: pools, communities and
/// namespaces only (peers, advertisements and the rest are the speaker's).
pub fn resources(
    pools: Vec<Arc<IPAddressPool>>,
    communities: Vec<Arc<Community>>,
    namespaces: Vec<Arc<Namespace>>,
) -> Resources {
    Resources {
        pools,
        communities,
        namespaces,
        ..Resources::default()
    }
}

impl PoolReconciler {
    /// A reconciler that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `resources`. A valid configuration replaces the last valid one;
    /// an invalid one leaves it in place (what allocation will keep using).
    pub fn reconcile(&mut self, resources: &Resources) -> Pass {
        let result = match config::parse(resources) {
            Ok(cfg) => {
                self.last_valid = Some(cfg);
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        };
        if self.last_result.as_ref() == Some(&result) {
            return Pass::Unchanged;
        }
        self.last_result = Some(result.clone());
        match result {
            Ok(()) => Pass::Valid,
            Err(e) => Pass::Invalid(e),
        }
    }

    /// The last valid configuration, if any was ever seen.
    pub fn last_valid(&self) -> Option<&Config> {
        self.last_valid.as_ref()
    }

    /// The last result: `Ok(())` or the error (`None` before the first pass).
    pub fn last_result(&self) -> Option<&Result<(), String>> {
        self.last_result.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::api::v1beta1::IPAddressPoolSpec;
    use kube::api::ObjectMeta;

    fn pool(name: &str, addresses: &[&str]) -> Arc<IPAddressPool> {
        Arc::new(IPAddressPool {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("metallb-system".into()),
                ..Default::default()
            },
            spec: IPAddressPoolSpec {
                addresses: addresses.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
            status: None,
        })
    }

    #[test]
    fn valid_invalid_valid_keeps_the_last_valid_config_and_reports_changes_only() {
        let mut r = PoolReconciler::new();
        assert_eq!(r.last_result(), None);
        let a = pool("a", &["198.51.100.0/24"]);
        let ok = resources(vec![a.clone()], vec![], vec![]);
        assert_eq!(r.reconcile(&ok), Pass::Valid);
        assert_eq!(r.reconcile(&ok), Pass::Unchanged);
        assert_eq!(r.last_valid().map(|c| c.pools.len()), Some(1));

        let bad = resources(
            vec![a.clone(), pool("b", &["198.51.100.128/25"])],
            vec![],
            vec![],
        );
        assert_eq!(
            r.reconcile(&bad),
            Pass::Invalid(
                "CIDR \"198.51.100.128/25\" in pool \"b\" overlaps with already defined CIDR \"198.51.100.0/24\""
                    .into()
            )
        );
        assert_eq!(r.reconcile(&bad), Pass::Unchanged);
        // The last valid configuration is still the one-pool one.
        assert_eq!(r.last_valid().map(|c| c.pools.len()), Some(1));

        let fixed = resources(vec![a, pool("b", &["203.0.113.0/25"])], vec![], vec![]);
        assert_eq!(r.reconcile(&fixed), Pass::Valid);
        assert_eq!(r.last_valid().map(|c| c.pools.len()), Some(2));
    }

    #[test]
    fn an_empty_configuration_is_valid() {
        let mut r = PoolReconciler::new();
        assert_eq!(r.reconcile(&Resources::default()), Pass::Valid);
    }
}
