//! The controller's Prometheus metrics, with MetalLB's names, types, labels and help texts,
//! registered on a caller-given [`Registry`] (served by `kube-metrics` on `--port`).
//!
//! | name | type | labels | value |
//! |---|---|---|---|
//! | `metallb_allocator_addresses_total` | gauge | `pool` | usable addresses of the pool, both families |
//! | `metallb_allocator_ipv4_addresses_total` | gauge | `pool` | usable IPv4 addresses |
//! | `metallb_allocator_ipv6_addresses_total` | gauge | `pool` | usable IPv6 addresses |
//! | `metallb_allocator_addresses_in_use_total` | gauge | `pool` | distinct addresses assigned, both families |
//! | `metallb_allocator_ipv4_addresses_in_use_total` | gauge | `pool` | distinct IPv4 addresses assigned |
//! | `metallb_allocator_ipv6_addresses_in_use_total` | gauge | `pool` | distinct IPv6 addresses assigned |
//! | `metallb_allocator_services_allocated_total` | gauge | `pool` | Services holding addresses of the pool (see below) |
//! | `metallb_k8s_client_updates_total` | counter | — | reconciles processed, failed ones included |
//! | `metallb_k8s_client_update_errors_total` | counter | — | reconciles that failed |
//! | `metallb_k8s_client_config_loaded_bool` | gauge | — | 1 once a configuration was loaded |
//! | `metallb_k8s_client_config_stale_bool` | gauge | — | 1 while the latest configuration failed to load |
//!
//! The address counts are [`PoolStats`]: exact up to `i64::MAX` and clamped to it (MetalLB
//! reports `i64::MAX` as soon as a CIDR has 62 or more host bits). Like every Prometheus
//! sample they are exposed as floating point numbers, so exact up to 2^53.
//!
//! **Departure:** MetalLB registers `metallb_allocator_services_allocated_total` and
//! deletes it with its pool but never sets it (it reads 0, or is absent). Here it is the
//! number of Services allocated from the pool, as its help text says.

use prometheus::{IntGaugeVec, Opts, Registry};

use crate::alloc::PoolStats;

/// The label of the allocator gauges.
pub const POOL_LABEL: &str = "pool";

/// The controller's metrics. Cheap to clone (the clones share the values).
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    addresses: IntGaugeVec,
    ipv4_addresses: IntGaugeVec,
    ipv6_addresses: IntGaugeVec,
    in_use: IntGaugeVec,
    ipv4_in_use: IntGaugeVec,
    ipv6_in_use: IntGaugeVec,
    services_allocated: IntGaugeVec,
    k8s: daemon::k8s_metrics::K8sClientMetrics,
}

fn pool_gauge(
    registry: &Registry,
    name: &str,
    help: &str,
) -> Result<IntGaugeVec, prometheus::Error> {
    let g = IntGaugeVec::new(Opts::new(name, help), &[POOL_LABEL])?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

impl ControllerMetrics {
    /// Creates the metrics and registers them on `registry` (an error if any of the names
    /// is registered there already).
    pub fn register(registry: &Registry) -> Result<ControllerMetrics, prometheus::Error> {
        Ok(ControllerMetrics {
            addresses: pool_gauge(
                registry,
                "metallb_allocator_addresses_total",
                "Number of usable IP addresses, per pool",
            )?,
            ipv4_addresses: pool_gauge(
                registry,
                "metallb_allocator_ipv4_addresses_total",
                "Number of usable IPV4 addresses, per pool",
            )?,
            ipv6_addresses: pool_gauge(
                registry,
                "metallb_allocator_ipv6_addresses_total",
                "Number of usable IPV6 addresses, per pool",
            )?,
            in_use: pool_gauge(
                registry,
                "metallb_allocator_addresses_in_use_total",
                "Number of IP addresses in use, per pool",
            )?,
            ipv4_in_use: pool_gauge(
                registry,
                "metallb_allocator_ipv4_addresses_in_use_total",
                "Number of IPV4 addresses in use, per pool",
            )?,
            ipv6_in_use: pool_gauge(
                registry,
                "metallb_allocator_ipv6_addresses_in_use_total",
                "Number of IPV6 addresses in use, per pool",
            )?,
            services_allocated: pool_gauge(
                registry,
                "metallb_allocator_services_allocated_total",
                "Number of services allocated, per pool",
            )?,
            k8s: daemon::k8s_metrics::K8sClientMetrics::register(registry)?,
        })
    }

    fn pool_gauges(&self) -> [&IntGaugeVec; 7] {
        [
            &self.addresses,
            &self.ipv4_addresses,
            &self.ipv6_addresses,
            &self.in_use,
            &self.ipv4_in_use,
            &self.ipv6_in_use,
            &self.services_allocated,
        ]
    }

    /// Sets the gauges of `pool`: its address counts, and `services`, the number of
    /// Services allocated from it (clamped to `i64::MAX`).
    pub fn set_pool(&self, pool: &str, stats: &PoolStats, services: usize) {
        let l = &[pool];
        self.addresses
            .with_label_values(l)
            .set(stats.total.capacity);
        self.ipv4_addresses
            .with_label_values(l)
            .set(stats.ipv4.capacity);
        self.ipv6_addresses
            .with_label_values(l)
            .set(stats.ipv6.capacity);
        self.in_use.with_label_values(l).set(stats.total.in_use);
        self.ipv4_in_use.with_label_values(l).set(stats.ipv4.in_use);
        self.ipv6_in_use.with_label_values(l).set(stats.ipv6.in_use);
        self.services_allocated
            .with_label_values(l)
            .set(i64::try_from(services).unwrap_or(i64::MAX));
    }

    /// Removes every gauge of `pool` (a deleted pool); nothing if it has none.
    pub fn remove_pool(&self, pool: &str) {
        for g in self.pool_gauges() {
            // Not found is fine: the pool may never have been set.
            let _ = g.remove_label_values(&[pool]);
        }
    }

    /// A reconcile was processed and succeeded.
    pub fn update_ok(&self) {
        self.k8s.update_ok();
    }

    /// A reconcile was processed and failed.
    pub fn update_error(&self) {
        self.k8s.update_error();
    }

    /// Whether a configuration was loaded.
    pub fn config_loaded(&self, loaded: bool) {
        self.k8s.config_loaded(loaded);
    }

    /// Whether the latest configuration failed to load.
    pub fn config_stale(&self, stale: bool) {
        self.k8s.config_stale(stale);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use prometheus::proto::MetricType;

    use super::*;
    use crate::alloc::FamilyStats;

    /// (type, label names) of every family, by name.
    fn families(registry: &Registry) -> BTreeMap<String, (MetricType, Vec<String>)> {
        registry
            .gather()
            .into_iter()
            .map(|f| {
                let labels = f
                    .get_metric()
                    .first()
                    .map(|m| m.get_label().iter().map(|l| l.name().to_string()).collect())
                    .unwrap_or_default();
                (f.name().to_string(), (f.get_field_type(), labels))
            })
            .collect()
    }

    /// The value of `name` (for `pool`, if given), as the text exposition says it.
    fn value(registry: &Registry, name: &str, pool: Option<&str>) -> Option<String> {
        let text = exposition(registry);
        let prefix = match pool {
            Some(p) => format!("{name}{{pool=\"{p}\"}} "),
            None => format!("{name} "),
        };
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(str::to_string)
    }

    fn exposition(registry: &Registry) -> String {
        prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap()
    }

    fn stats(c4: i64, u4: i64, c6: i64, u6: i64) -> PoolStats {
        let f = |capacity: i64, in_use: i64| FamilyStats {
            capacity,
            in_use,
            available: capacity - in_use,
        };
        PoolStats {
            total: f(c4.saturating_add(c6), u4 + u6),
            ipv4: f(c4, u4),
            ipv6: f(c6, u6),
        }
    }

    const POOL_GAUGES: [&str; 7] = [
        "metallb_allocator_addresses_total",
        "metallb_allocator_ipv4_addresses_total",
        "metallb_allocator_ipv6_addresses_total",
        "metallb_allocator_addresses_in_use_total",
        "metallb_allocator_ipv4_addresses_in_use_total",
        "metallb_allocator_ipv6_addresses_in_use_total",
        "metallb_allocator_services_allocated_total",
    ];

    #[test]
    fn metallb_names_types_and_labels() {
        let registry = Registry::new();
        let m = ControllerMetrics::register(&registry).unwrap();
        m.set_pool("p", &stats(1, 0, 0, 0), 0);
        let got = families(&registry);
        let mut want: BTreeMap<String, (MetricType, Vec<String>)> = POOL_GAUGES
            .iter()
            .map(|n| (n.to_string(), (MetricType::GAUGE, vec!["pool".to_string()])))
            .collect();
        for (n, t) in [
            ("metallb_k8s_client_updates_total", MetricType::COUNTER),
            (
                "metallb_k8s_client_update_errors_total",
                MetricType::COUNTER,
            ),
            ("metallb_k8s_client_config_loaded_bool", MetricType::GAUGE),
            ("metallb_k8s_client_config_stale_bool", MetricType::GAUGE),
        ] {
            want.insert(n.to_string(), (t, vec![]));
        }
        assert_eq!(got, want);

        // MetalLB's help texts.
        let text = exposition(&registry);
        for line in [
            "# HELP metallb_allocator_addresses_total Number of usable IP addresses, per pool",
            "# HELP metallb_allocator_ipv6_addresses_in_use_total Number of IPV6 addresses in use, per pool",
            "# HELP metallb_allocator_services_allocated_total Number of services allocated, per pool",
            "# HELP metallb_k8s_client_config_stale_bool 1 if running on a stale configuration, because the latest config failed to load.",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\nnot in\n{text}");
        }

        // A second registration on the same registry is refused.
        assert!(ControllerMetrics::register(&registry).is_err());
    }

    #[test]
    fn pool_values_set_and_removed() {
        let registry = Registry::new();
        let m = ControllerMetrics::register(&registry).unwrap();
        m.set_pool("dual", &stats(254, 3, 1 << 40, 2), 4);
        m.set_pool("big", &stats(0, 0, i64::MAX, 1), usize::MAX);
        let v = |name: &str, pool: &str| value(&registry, name, Some(pool));
        let s = |x: i64| Some(x.to_string());
        assert_eq!(
            v("metallb_allocator_addresses_total", "dual"),
            s(254 + (1 << 40))
        );
        assert_eq!(v("metallb_allocator_ipv4_addresses_total", "dual"), s(254));
        assert_eq!(
            v("metallb_allocator_ipv6_addresses_total", "dual"),
            s(1 << 40)
        );
        assert_eq!(v("metallb_allocator_addresses_in_use_total", "dual"), s(5));
        assert_eq!(
            v("metallb_allocator_ipv4_addresses_in_use_total", "dual"),
            s(3)
        );
        assert_eq!(
            v("metallb_allocator_ipv6_addresses_in_use_total", "dual"),
            s(2)
        );
        assert_eq!(
            v("metallb_allocator_services_allocated_total", "dual"),
            s(4)
        );
        // Exposed as a float sample (2^63), as MetalLB's Go gauges are.
        let max = Some((i64::MAX as f64).to_string());
        assert_eq!(v("metallb_allocator_addresses_total", "big"), max);
        assert_eq!(v("metallb_allocator_services_allocated_total", "big"), max);

        // A new value replaces the old.
        m.set_pool("dual", &stats(254, 0, 1 << 40, 0), 0);
        assert_eq!(v("metallb_allocator_addresses_in_use_total", "dual"), s(0));
        assert_eq!(
            v("metallb_allocator_services_allocated_total", "dual"),
            s(0)
        );

        // Removed: every gauge of that pool goes, the other pool's stay.
        m.remove_pool("dual");
        for name in POOL_GAUGES {
            assert_eq!(v(name, "dual"), None, "{name}");
            assert!(v(name, "big").is_some(), "{name}");
        }
        m.remove_pool("dual");
        m.remove_pool("never-set");
        m.remove_pool("big");
        let left: Vec<_> = families(&registry)
            .into_keys()
            .filter(|n| n.starts_with("metallb_allocator_"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn client_counters_and_config_gauges() {
        let registry = Registry::new();
        let m = ControllerMetrics::register(&registry).unwrap();
        let v = |name: &str| value(&registry, name, None);
        let s = |x: i64| Some(x.to_string());
        assert_eq!(v("metallb_k8s_client_updates_total"), s(0));
        assert_eq!(v("metallb_k8s_client_config_loaded_bool"), s(0));
        m.update_ok();
        m.update_ok();
        m.update_error();
        assert_eq!(v("metallb_k8s_client_updates_total"), s(3));
        assert_eq!(v("metallb_k8s_client_update_errors_total"), s(1));
        m.config_loaded(true);
        m.config_stale(true);
        assert_eq!(v("metallb_k8s_client_config_loaded_bool"), s(1));
        assert_eq!(v("metallb_k8s_client_config_stale_bool"), s(1));
        m.config_stale(false);
        assert_eq!(v("metallb_k8s_client_config_stale_bool"), s(0));
        assert_eq!(v("metallb_k8s_client_config_loaded_bool"), s(1));
        // Clones share the values.
        m.clone().update_error();
        assert_eq!(v("metallb_k8s_client_update_errors_total"), s(2));
    }
}
