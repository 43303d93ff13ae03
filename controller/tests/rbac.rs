//! deploy/rbac/controller.yaml grants exactly what the controller's code paths use:
//! an extra grant (a verb nothing calls) or a missing one fails this test. The table
//! below is the list of those calls, each with the code path that makes it; keep it
//! next to any change of the controller's API calls.

use std::path::PathBuf;

/// Every API call the controller makes.
const USED: &[(&str, &str, &str, &str, &str)] = &[
    // (group, resource, name, verb, code path)
    (
        "",
        "services",
        "*",
        "list",
        "main.rs watch_services (watcher)",
    ),
    (
        "",
        "services",
        "*",
        "watch",
        "main.rs watch_services (watcher)",
    ),
    (
        "",
        "services",
        "*",
        "get",
        "edge.rs ServiceApi::get (re-read after a 409)",
    ),
    (
        "",
        "services",
        "*",
        "patch",
        "edge.rs write: the pool annotation",
    ),
    (
        "",
        "services/status",
        "*",
        "patch",
        "edge.rs write: status.loadBalancer.ingress",
    ),
    ("", "namespaces", "*", "list", "main.rs reflect(Namespace)"),
    ("", "namespaces", "*", "watch", "main.rs reflect(Namespace)"),
    (
        "events.k8s.io",
        "events",
        "*",
        "create",
        "edge.rs publish (kube Recorder)",
    ),
    (
        "events.k8s.io",
        "events",
        "*",
        "patch",
        "edge.rs publish (Recorder: series count)",
    ),
    (
        "authentication.k8s.io",
        "tokenreviews",
        "*",
        "create",
        "kube-metrics KubeAuthorizer",
    ),
    (
        "authorization.k8s.io",
        "subjectaccessreviews",
        "*",
        "create",
        "kube-metrics KubeAuthorizer",
    ),
    (
        "metallb.io",
        "ipaddresspools",
        "*",
        "list",
        "main.rs reflect + status::watch_into",
    ),
    (
        "metallb.io",
        "ipaddresspools",
        "*",
        "watch",
        "main.rs reflect + status::watch_into",
    ),
    (
        "metallb.io",
        "ipaddresspools",
        "*",
        "get",
        "status writer Fetch (pool status)",
    ),
    (
        "metallb.io",
        "ipaddresspools/status",
        "*",
        "patch",
        "status writer apply (pool status)",
    ),
    (
        "metallb.io",
        "communities",
        "*",
        "list",
        "main.rs reflect(Community)",
    ),
    (
        "metallb.io",
        "communities",
        "*",
        "watch",
        "main.rs reflect(Community)",
    ),
    (
        "metallb.io",
        "configurationstates",
        "*",
        "create",
        "status writer create (server-side apply of a new object)",
    ),
    (
        "metallb.io",
        "configurationstates",
        "controller",
        "get",
        "status writer Fetch",
    ),
    (
        "metallb.io",
        "configurationstates",
        "controller",
        "list",
        "status::watch_into (field selector on its name)",
    ),
    (
        "metallb.io",
        "configurationstates",
        "controller",
        "watch",
        "status::watch_into",
    ),
    (
        "metallb.io",
        "configurationstates",
        "controller",
        "patch",
        "status writer create/metadata (server-side apply)",
    ),
    (
        "metallb.io",
        "configurationstates/status",
        "controller",
        "patch",
        "status writer apply",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "*",
        "create",
        "leader.rs KubeLeaseApi::create",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "metallb-rs-controller",
        "get",
        "leader.rs KubeLeaseApi::get",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "metallb-rs-controller",
        "update",
        "leader.rs KubeLeaseApi::replace",
    ),
];

#[test]
fn the_controller_is_granted_exactly_what_it_uses() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac/controller.yaml");
    testkit::rbac::assert_exactly_used(&path, USED);
}
