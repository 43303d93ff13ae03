use std::collections::BTreeMap;
use std::net::IpAddr;

use config::api::v1beta1::{IPAddressPool, IPAddressPoolSpec};
use config::{Config, Resources};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service as KubeService, ServicePort, ServiceSpec,
    ServiceStatus,
};
use kube::api::ObjectMeta;

use super::*;

fn pool(name: &str, addresses: &[&str]) -> IPAddressPool {
    IPAddressPool {
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
    }
}

fn config(pools: Vec<IPAddressPool>) -> Config {
    config::parse(&Resources {
        pools: pools.into_iter().map(std::sync::Arc::new).collect(),
        ..Resources::default()
    })
    .expect("valid test configuration")
}

fn one_pool() -> Config {
    config(vec![pool("a", &["198.51.100.0/30"])])
}

/// A LoadBalancer Service with one IPv4 cluster IP and port TCP/80.
fn lb(name: &str) -> KubeService {
    KubeService {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            cluster_ip: Some("10.96.0.10".into()),
            cluster_ips: Some(vec!["10.96.0.10".into()]),
            ports: Some(vec![ServicePort {
                protocol: Some("TCP".into()),
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

fn annotate(mut svc: KubeService, k: &str, v: &str) -> KubeService {
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(k.into(), v.into());
    svc
}

fn spec(mut svc: KubeService, f: impl FnOnce(&mut ServiceSpec)) -> KubeService {
    f(svc.spec.get_or_insert_with(Default::default));
    svc
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The Service as the server holds it after `sync`'s writes.
fn apply(mut svc: KubeService, s: &Sync) -> KubeService {
    if let Some(ips) = &s.update.ingress {
        svc.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: (!ips.is_empty()).then(|| {
                    ips.iter()
                        .map(|ip| LoadBalancerIngress {
                            ip: Some(ip.to_string()),
                            // The API server defaults ipMode: not a change.
                            ip_mode: Some("VIP".into()),
                            ..Default::default()
                        })
                        .collect()
                }),
            }),
            ..Default::default()
        });
    }
    let ann = svc.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in &s.update.annotations {
        match v {
            Some(v) => ann.insert(k.clone(), v.clone()),
            None => ann.remove(k),
        };
    }
    svc
}

/// Syncs `svc` and returns it as the server then holds it, with the Sync.
fn sync(r: &mut ServiceReconciler, svc: KubeService) -> (KubeService, Sync) {
    let key = key_of(&svc);
    let s = r.sync(&key, Some(&svc));
    (apply(svc, &s), s)
}

fn reasons(s: &Sync) -> Vec<&'static str> {
    s.events.iter().map(|e| e.reason).collect()
}

#[test]
fn a_service_gets_the_lowest_address_and_the_pool_annotation_then_nothing_changes() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (svc, s) = sync(&mut r, lb("web"));
    assert_eq!(s.state, SyncState::Success);
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.0")]));
    assert_eq!(
        s.update.annotations,
        BTreeMap::from([(
            ANNOTATION_IP_ALLOCATED_FROM_POOL.to_owned(),
            Some("a".to_owned())
        )])
    );
    assert_eq!(
        s.events,
        vec![Event {
            warning: false,
            reason: "IPAllocated",
            message: "Assigned IP [\"198.51.100.0\"]".into()
        }]
    );
    // The next pass over the written object: no write, no event.
    let (_, again) = sync(&mut r, svc);
    assert!(again.update.is_empty(), "{again:?}");
    assert!(again.events.is_empty(), "{again:?}");
    assert_eq!(again.state, SyncState::Success);
}

#[test]
fn nothing_happens_before_a_configuration_is_loaded() {
    let mut r = ServiceReconciler::new();
    let (_, s) = sync(&mut r, lb("web"));
    assert!(s.update.is_empty());
    assert!(s.events.is_empty());
    assert_eq!(s.state, SyncState::Success);
}

#[test]
fn a_valid_configuration_without_pools_clears_and_fails() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (svc, _) = sync(&mut r, lb("web"));
    r.set_config(&config(vec![]));
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(s.state, SyncState::ErrorNoRetry);
    assert_eq!(s.update.ingress, Some(vec![]));
    assert_eq!(
        s.update.annotations.get(ANNOTATION_IP_ALLOCATED_FROM_POOL),
        Some(&None)
    );
    assert!(ingress_ips(&svc).unwrap().is_empty());
}

#[test]
fn a_service_that_is_no_longer_a_load_balancer_is_cleared() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (svc, _) = sync(&mut r, lb("web"));
    let svc = spec(svc, |s| s.type_ = Some("ClusterIP".into()));
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(s.state, SyncState::ReprocessAll, "the address was released");
    assert_eq!(s.update.ingress, Some(vec![]));
    assert!(r.allocator().is_empty());
    let (_, s) = sync(&mut r, svc);
    assert!(s.update.is_empty());
}

#[test]
fn deleting_a_service_releases_its_address_and_asks_for_a_reprocess() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    sync(&mut r, lb("web"));
    assert_eq!(r.sync("ns/web", None).state, SyncState::ReprocessAll);
    assert!(r.allocator().is_empty());
    assert_eq!(r.sync("ns/web", None).state, SyncState::Success);
}

#[test]
fn an_exhausted_pool_fails_with_metallbs_event_and_a_freed_address_is_used_on_reprocess() {
    let mut r = ServiceReconciler::new();
    r.set_config(&config(vec![pool("a", &["198.51.100.1/32"])]));
    let (_first, _) = sync(&mut r, lb("first"));
    let (second, s) = sync(&mut r, lb("second"));
    assert_eq!(s.state, SyncState::ErrorNoRetry);
    assert!(s.update.is_empty(), "no address, nothing to write: {s:?}");
    assert_eq!(
        s.events,
        vec![Event {
            warning: true,
            reason: "AllocationFailed",
            message: "Failed to allocate IP for \"ns/second\": no available IPs".into()
        }]
    );
    assert_eq!(r.sync("ns/first", None).state, SyncState::ReprocessAll);
    let (_, s) = sync(&mut r, second);
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.1")]));
}

#[test]
fn requested_addresses_and_their_errors() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (_, s) = sync(
        &mut r,
        spec(lb("a"), |s| {
            s.load_balancer_ip = Some("198.51.100.2".into())
        }),
    );
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.2")]));

    let (_, s) = sync(
        &mut r,
        annotate(lb("b"), ANNOTATION_LOAD_BALANCER_IPS, " 198.51.100.3 "),
    );
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.3")]));

    let both = spec(
        annotate(lb("c"), ANNOTATION_LOAD_BALANCER_IPS, "198.51.100.1"),
        |s| s.load_balancer_ip = Some("198.51.100.1".into()),
    );
    let (_, s) = sync(&mut r, both);
    assert_eq!(
        s.events[0].message,
        "Failed to allocate IP for \"ns/c\": service can not have both metallb.io/loadBalancerIPs and svc.Spec.LoadBalancerIP"
    );

    let (_, s) = sync(
        &mut r,
        annotate(lb("d"), ANNOTATION_LOAD_BALANCER_IPS, "198.51.100.x"),
    );
    assert_eq!(
        s.events[0].message,
        "Failed to allocate IP for \"ns/d\": invalid metallb.io/loadBalancerIPs: \"198.51.100.x\""
    );
    let (_, s) = sync(
        &mut r,
        spec(lb("e"), |s| s.load_balancer_ip = Some("nope".into())),
    );
    assert_eq!(
        s.events[0].message,
        "Failed to allocate IP for \"ns/e\": invalid spec.loadBalancerIP \"nope\""
    );
    let (_, s) = sync(
        &mut r,
        spec(lb("f"), |s| s.load_balancer_ip = Some("203.0.113.9".into())),
    );
    assert_eq!(
        s.events[0].message,
        "Failed to allocate IP for \"ns/f\": [\"203.0.113.9\"] is not allowed in config"
    );
    let (_, s) = sync(
        &mut r,
        spec(lb("g"), |s| {
            s.load_balancer_ip = Some("2001:db8:100::1".into())
        }),
    );
    assert_eq!(
        s.events[0].message,
        "Failed to allocate IP for \"ns/g\": requested loadBalancer IP(s) [\"2001:db8:100::1\"] does not match the ipFamily of the service"
    );
}

#[test]
fn changing_the_requested_address_moves_the_service() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (svc, _) = sync(&mut r, lb("a"));
    assert_eq!(ingress_ips(&svc).unwrap(), vec![ip("198.51.100.0")]);
    let svc = spec(svc, |s| s.load_balancer_ip = Some("198.51.100.3".into()));
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.3")]));
    assert_eq!(r.allocator().ips("ns/a"), Some(&[ip("198.51.100.3")][..]));
    // The old address is free again.
    let (_, s) = sync(&mut r, lb("b"));
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.0")]));
    // An invalid request on a Service that has an address keeps the address.
    let svc = spec(svc, |s| s.load_balancer_ip = Some("bad".into()));
    let (_, s) = sync(&mut r, svc);
    assert_eq!(s.state, SyncState::ErrorNoRetry);
    assert_eq!(reasons(&s), vec!["LoadBalancerFailed"]);
    assert_eq!(
        s.events[0].message,
        "invalid requested loadbalancer IPs: invalid spec.loadBalancerIP \"bad\""
    );
    assert!(s.update.is_empty());
}

#[test]
fn the_pool_annotation_picks_the_pool_and_a_change_reallocates() {
    let mut r = ServiceReconciler::new();
    r.set_config(&config(vec![
        pool("a", &["198.51.100.0/30"]),
        pool("b", &["203.0.113.0/30"]),
    ]));
    let (svc, s) = sync(&mut r, annotate(lb("x"), ANNOTATION_ADDRESS_POOL, "b"));
    assert_eq!(s.update.ingress, Some(vec![ip("203.0.113.0")]));
    let svc = annotate(svc, ANNOTATION_ADDRESS_POOL, "a");
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.0")]));
    assert_eq!(
        s.update.annotations.get(ANNOTATION_IP_ALLOCATED_FROM_POOL),
        Some(&Some("a".to_owned()))
    );
    let svc = annotate(svc, ANNOTATION_ADDRESS_POOL, "nope");
    let (_, s) = sync(&mut r, svc);
    assert_eq!(
        s.events.last().unwrap().message,
        "Failed to allocate IP for \"ns/x\": unknown pool \"nope\""
    );
    assert_eq!(s.update.ingress, Some(vec![]), "the old address is cleared");
}

#[test]
fn sharing_gives_the_same_address_and_port_conflicts_do_not() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (_, s) = sync(&mut r, annotate(lb("a"), ANNOTATION_ALLOW_SHARED_IP, "k"));
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.0")]));
    let b = spec(annotate(lb("b"), ANNOTATION_ALLOW_SHARED_IP, "k"), |s| {
        s.ports = Some(vec![ServicePort {
            protocol: Some("UDP".into()),
            port: 53,
            ..Default::default()
        }])
    });
    let (_, s) = sync(&mut r, b);
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.0")]));
    // Same key, same port: the next address.
    let (_, s) = sync(&mut r, annotate(lb("c"), ANNOTATION_ALLOW_SHARED_IP, "k"));
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.1")]));
    // Asking for the shared address with a clashing port fails with MetalLB's text.
    let d = annotate(
        spec(lb("d"), |s| {
            s.load_balancer_ip = Some("198.51.100.0".into())
        }),
        ANNOTATION_ALLOW_SHARED_IP,
        "k",
    );
    let (_, s) = sync(&mut r, d);
    assert_eq!(
        s.events[0].message,
        "Failed to allocate IP for \"ns/d\": port TCP/80 is already in use on \"198.51.100.0\""
    );
}

#[test]
fn a_sharing_key_change_asks_for_a_reprocess() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (svc, _) = sync(&mut r, annotate(lb("a"), ANNOTATION_ALLOW_SHARED_IP, "k"));
    let svc = annotate(svc, ANNOTATION_ALLOW_SHARED_IP, "other");
    let (_, s) = sync(&mut r, svc);
    assert_eq!(s.state, SyncState::ReprocessAll);
    assert!(s.update.is_empty(), "alone on its address: kept in place");
}

#[test]
fn dual_stack_services() {
    let mut r = ServiceReconciler::new();
    r.set_config(&config(vec![pool(
        "a",
        &["198.51.100.0/30", "2001:db8:100::/126"],
    )]));
    let dual = |name: &str, policy: &str| {
        spec(lb(name), |s| {
            s.cluster_ips = Some(vec!["10.96.0.10".into(), "fd00::10".into()]);
            s.ip_family_policy = Some(policy.into());
            s.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
        })
    };
    let (_, s) = sync(&mut r, dual("req", "RequireDualStack"));
    assert_eq!(
        s.update.ingress,
        Some(vec![ip("198.51.100.0"), ip("2001:db8:100::")])
    );
    let (_, s) = sync(&mut r, dual("pref", "PreferDualStack"));
    assert_eq!(
        s.update.ingress,
        Some(vec![ip("198.51.100.1"), ip("2001:db8:100::1")])
    );
    // RequireDualStack with one cluster IP: MetalLB's warning.
    let single = spec(lb("one"), |s| {
        s.ip_family_policy = Some("RequireDualStack".into())
    });
    let (_, s) = sync(&mut r, single);
    assert_eq!(s.state, SyncState::ErrorNoRetry);
    assert_eq!(
        s.events,
        vec![Event {
            warning: true,
            reason: "not enough clusterips",
            message: "Service requires dual stack but not enough clusterips [10.96.0.10]".into()
        }]
    );
}

#[test]
fn prefer_dual_stack_in_a_single_family_pool_reports_the_missing_family_once() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let svc = spec(lb("p"), |s| {
        s.cluster_ips = Some(vec!["10.96.0.10".into(), "fd00::10".into()]);
        s.ip_family_policy = Some("PreferDualStack".into());
    });
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(s.update.ingress, Some(vec![ip("198.51.100.0")]));
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(reasons(&s), vec!["AdditionalAssignFailed"]);
    assert_eq!(
        s.events[0].message,
        "cannot assign additional IP in PreferDualStack: no available IPs in pool a for ipv6 IPFamily"
    );
    let (_, s) = sync(&mut r, svc);
    assert!(s.events.is_empty(), "reported once: {s:?}");
    assert!(s.update.is_empty());
}

#[test]
fn an_address_no_pool_contains_any_more_is_replaced_with_a_clear_assignment_event() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (svc, _) = sync(&mut r, lb("a"));
    let report = r.set_config(&config(vec![pool("b", &["203.0.113.0/30"])]));
    assert_eq!(report.dropped.len(), 1);
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(reasons(&s), vec!["ClearAssignment", "IPAllocated"]);
    assert_eq!(
        s.events[0].message,
        "current IP for \"ns/a\" not allowed by config, will attempt for new IP assignment: [\"198.51.100.0\"] is not allowed in config"
    );
    assert_eq!(s.update.ingress, Some(vec![ip("203.0.113.0")]));
    assert_eq!(
        svc.metadata.annotations.unwrap()[ANNOTATION_IP_ALLOCATED_FROM_POOL],
        "b"
    );
}

#[test]
fn a_restart_moves_no_address() {
    let mut r = ServiceReconciler::new();
    r.set_config(&one_pool());
    let (a, _) = sync(&mut r, lb("a"));
    let (b, _) = sync(&mut r, lb("b"));
    let (_, _) = sync(&mut r, lb("c"));
    // a is deleted while the controller is down; a new Service d appears.
    let d = lb("d");
    let mut restarted = ServiceReconciler::new();
    restarted.set_config(&one_pool());
    // b and d, in MetalLB's order: b (has an address) first, although d sorts first.
    let all = [d.clone(), b.clone()];
    let order: Vec<String> = reprocess_order(all.iter())
        .into_iter()
        .map(key_of)
        .collect();
    assert_eq!(order, vec!["ns/b", "ns/d"]);
    let (_, sb) = sync(&mut restarted, b);
    assert!(sb.update.is_empty(), "b keeps its address: {sb:?}");
    let (_, sd) = sync(&mut restarted, d);
    assert_eq!(
        sd.update.ingress,
        ingress_ips(&a).ok(),
        "d gets a's old address"
    );
}

#[test]
fn deprecated_annotations_are_read_and_reported_when_written_but_kept() {
    let mut r = ServiceReconciler::new();
    r.set_config(&config(vec![
        pool("a", &["198.51.100.0/30"]),
        pool("b", &["203.0.113.0/30"]),
    ]));
    let svc = annotate(lb("x"), "metallb.universe.tf/address-pool", "b");
    let (svc, s) = sync(&mut r, svc);
    assert_eq!(s.update.ingress, Some(vec![ip("203.0.113.0")]));
    assert_eq!(reasons(&s), vec!["IPAllocated", "deprecatedAnnotation"]);
    assert_eq!(
        s.events[1].message,
        "Service uses deprecated annotation metallb.universe.tf/address-pool"
    );
    assert!(
        !s.update
            .annotations
            .contains_key("metallb.universe.tf/address-pool")
    );
    // Nothing to write: no event either.
    let (_, s) = sync(&mut r, svc);
    assert!(s.events.is_empty() && s.update.is_empty(), "{s:?}");
    // Our own deprecated annotation is replaced by the stable one.
    let old = annotate(lb("y"), "metallb.universe.tf/ip-allocated-from-pool", "a");
    let (_, s) = sync(&mut r, old);
    assert_eq!(
        s.update
            .annotations
            .get("metallb.universe.tf/ip-allocated-from-pool"),
        Some(&None)
    );
}

#[test]
fn load_balancer_class_selection() {
    let with_class = |c: Option<&str>| spec(lb("x"), |s| s.load_balancer_class = c.map(Into::into));
    assert!(handles_class(&with_class(None), ""));
    assert!(!handles_class(&with_class(Some("other")), ""));
    assert!(handles_class(&with_class(Some("metallb")), "metallb"));
    assert!(!handles_class(&with_class(None), "metallb"));
    assert!(!handles_class(&with_class(Some("other")), "metallb"));
}

#[test]
fn describe_reads_metallbs_fields() {
    let svc = spec(
        annotate(
            annotate(lb("x"), ANNOTATION_ALLOW_SHARED_IP, ""),
            DEPRECATED_ALLOW_SHARED_IP,
            "old",
        ),
        |s| {
            s.external_traffic_policy = Some("Local".into());
            s.selector = Some(BTreeMap::from([
                ("b".to_owned(), "2".to_owned()),
                ("a".to_owned(), "1".to_owned()),
            ]));
            s.ip_families = Some(vec!["IPv6".into()]);
            s.cluster_ips = Some(vec!["fd00::1".into()]);
        },
    );
    let d = describe(&svc);
    assert_eq!(d.sharing_key, "", "the stable key wins even when empty");
    assert_eq!(d.backend_key, "a=1,b=2");
    assert_eq!(d.family, ServiceFamily::Ipv6);
    assert_eq!(d.primary_family, IpFamily::V6);
    assert_eq!(d.ports, vec![Port::tcp(80)]);
}
