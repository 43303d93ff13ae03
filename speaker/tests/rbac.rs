//! deploy/rbac/speaker.yaml grants exactly what the speaker's code paths use: an
//! extra grant (a verb nothing calls) or a missing one fails this test. Keep the
//! table next to any change of the speaker's API calls.

use std::path::PathBuf;

const W: &str = "cluster_view reflector (list + watch)";

/// Every API call the speaker makes: (group, resource, name, verb, code path).
const USED: &[(&str, &str, &str, &str, &str)] = &[
    ("", "services", "*", "list", W),
    ("", "services", "*", "watch", W),
    ("discovery.k8s.io", "endpointslices", "*", "list", W),
    ("discovery.k8s.io", "endpointslices", "*", "watch", W),
    ("", "nodes", "*", "list", W),
    ("", "nodes", "*", "watch", W),
    ("", "namespaces", "*", "list", W),
    ("", "namespaces", "*", "watch", W),
    ("", "secrets", "*", "list", W),
    ("", "secrets", "*", "watch", W),
    ("", "configmaps", "*", "list", W),
    ("", "configmaps", "*", "watch", W),
    (
        "",
        "pods",
        "*",
        "list",
        "speaker::discovery (--ml-labels: the other speakers' Pod IPs)",
    ),
    ("metallb.io", "ipaddresspools", "*", "list", W),
    ("metallb.io", "ipaddresspools", "*", "watch", W),
    ("metallb.io", "bgppeers", "*", "list", W),
    ("metallb.io", "bgppeers", "*", "watch", W),
    ("metallb.io", "bgpadvertisements", "*", "list", W),
    ("metallb.io", "bgpadvertisements", "*", "watch", W),
    ("metallb.io", "l2advertisements", "*", "list", W),
    ("metallb.io", "l2advertisements", "*", "watch", W),
    ("metallb.io", "bfdprofiles", "*", "list", W),
    ("metallb.io", "bfdprofiles", "*", "watch", W),
    ("metallb.io", "communities", "*", "list", W),
    ("metallb.io", "communities", "*", "watch", W),
    (
        "events.k8s.io",
        "events",
        "*",
        "create",
        "daemon::events (kube Recorder): nodeAssigned",
    ),
    (
        "events.k8s.io",
        "events",
        "*",
        "patch",
        "daemon::events (Recorder: series count)",
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
    // ConfigurationState speaker-<node>: server-side apply creates it.
    (
        "metallb.io",
        "configurationstates",
        "*",
        "create",
        "status writer apply of a new object",
    ),
    (
        "metallb.io",
        "configurationstates",
        "*",
        "get",
        "status writer Fetch",
    ),
    (
        "metallb.io",
        "configurationstates",
        "*",
        "list",
        "status::watch_into",
    ),
    (
        "metallb.io",
        "configurationstates",
        "*",
        "watch",
        "status::watch_into",
    ),
    (
        "metallb.io",
        "configurationstates",
        "*",
        "patch",
        "status writer metadata apply",
    ),
    (
        "metallb.io",
        "configurationstates/status",
        "*",
        "patch",
        "status writer apply",
    ),
    // ServiceBGPStatus and BGPSessionStatus of the node (label-keyed writers).
    (
        "metallb.io",
        "servicebgpstatuses",
        "*",
        "create",
        "status writer create (generateName bgp-)",
    ),
    (
        "metallb.io",
        "servicebgpstatuses",
        "*",
        "get",
        "status writer Fetch",
    ),
    (
        "metallb.io",
        "servicebgpstatuses",
        "*",
        "list",
        "status::watch_into (label metallb.io/node)",
    ),
    (
        "metallb.io",
        "servicebgpstatuses",
        "*",
        "watch",
        "status::watch_into",
    ),
    (
        "metallb.io",
        "servicebgpstatuses",
        "*",
        "patch",
        "status writer metadata apply",
    ),
    (
        "metallb.io",
        "servicebgpstatuses",
        "*",
        "delete",
        "status writer: no longer announced",
    ),
    (
        "metallb.io",
        "servicebgpstatuses/status",
        "*",
        "patch",
        "status writer apply",
    ),
    // ServiceL2Status of the Services this node announces in layer 2 (label-keyed
    // writer; the owner also deletes the other nodes' objects of its Services).
    (
        "metallb.io",
        "servicel2statuses",
        "*",
        "create",
        "status writer create (generateName l2-)",
    ),
    (
        "metallb.io",
        "servicel2statuses",
        "*",
        "get",
        "status writer Fetch",
    ),
    (
        "metallb.io",
        "servicel2statuses",
        "*",
        "list",
        "status::watch_into (label metallb.io/node); delete_others sweep",
    ),
    (
        "metallb.io",
        "servicel2statuses",
        "*",
        "watch",
        "status::watch_into",
    ),
    (
        "metallb.io",
        "servicel2statuses",
        "*",
        "patch",
        "status writer metadata apply",
    ),
    (
        "metallb.io",
        "servicel2statuses",
        "*",
        "delete",
        "status writer: no longer announced; the former owner's object",
    ),
    (
        "metallb.io",
        "servicel2statuses/status",
        "*",
        "patch",
        "status writer apply",
    ),
    (
        "metallb.io",
        "bgpsessionstatuses",
        "*",
        "create",
        "status writer create (generateName <node>-<peer>-)",
    ),
    (
        "metallb.io",
        "bgpsessionstatuses",
        "*",
        "get",
        "status writer Fetch",
    ),
    (
        "metallb.io",
        "bgpsessionstatuses",
        "*",
        "list",
        "status::watch_into (label metallb.io/node)",
    ),
    (
        "metallb.io",
        "bgpsessionstatuses",
        "*",
        "watch",
        "status::watch_into",
    ),
    (
        "metallb.io",
        "bgpsessionstatuses",
        "*",
        "patch",
        "status writer metadata apply",
    ),
    (
        "metallb.io",
        "bgpsessionstatuses",
        "*",
        "delete",
        "status writer: peer no longer on the node",
    ),
    (
        "metallb.io",
        "bgpsessionstatuses/status",
        "*",
        "patch",
        "status writer apply",
    ),
];

#[test]
fn the_speaker_is_granted_exactly_what_it_uses() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac/speaker.yaml");
    testkit::rbac::assert_exactly_used(&path, USED);
}
