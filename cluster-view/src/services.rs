//! Service fields as MetalLB's controller and speaker both read them.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;

/// The addresses of `status.loadBalancer.ingress` (entries without `ip`
/// are skipped, as MetalLB does). `Err` holds the unparsable text.
pub fn ingress_ips(svc: &Service) -> Result<Vec<IpAddr>, String> {
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    let mut ips = Vec::new();
    for i in ingress.into_iter().flatten() {
        match i.ip.as_deref() {
            None | Some("") => {}
            Some(s) => ips.push(s.parse::<IpAddr>().map_err(|_| s.to_owned())?),
        }
    }
    Ok(ips)
}

/// Whether `lb_class` (the `--lb-class` flag, "" when unset) selects the
/// Service: without the flag, Services with no class; with it, Services of
/// that class only.
pub fn handles_class(svc: &Service, lb_class: &str) -> bool {
    let class = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_class.as_deref());
    match class {
        None => lb_class.is_empty(),
        Some(c) => !lb_class.is_empty() && c == lb_class,
    }
}

/// Whether the Service is `type: LoadBalancer`.
pub fn is_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// Whether `externalTrafficPolicy` is `Local`.
pub fn traffic_policy_local(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
        == Some("Local")
}
