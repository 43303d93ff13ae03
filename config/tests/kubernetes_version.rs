//! The Kubernetes version is written once, in `KUBERNETES_VERSION`; the
//! k8s-openapi feature compiled in must be the same minor.

#[test]
#[allow(unused_assignments)] // only the enabled version's macro assigns
fn k8s_openapi_feature_matches_kubernetes_version() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let version = std::fs::read_to_string(format!("{root}/KUBERNETES_VERSION")).unwrap();
    let version = version.trim();
    let mut parts = version.split('.');
    assert_eq!(
        parts.next(),
        Some("1"),
        "KUBERNETES_VERSION {version} must be 1.x.y"
    );
    let minor: u32 = parts.next().unwrap().parse().unwrap();
    assert!(
        minor >= 35,
        "Kubernetes 1.35 or newer is required, got {version}"
    );
    let patch = parts
        .next()
        .expect("KUBERNETES_VERSION must carry a patch release");
    patch.parse::<u32>().expect("patch must be a number");

    let mut compiled = 0;
    k8s_openapi::k8s_if_1_33! { compiled = 33; }
    k8s_openapi::k8s_if_1_34! { compiled = 34; }
    k8s_openapi::k8s_if_1_35! { compiled = 35; }
    k8s_openapi::k8s_if_1_36! { compiled = 36; }
    k8s_openapi::k8s_if_1_37! { compiled = 37; }
    assert_eq!(
        compiled, minor,
        "Cargo.toml enables k8s-openapi for 1.{compiled}, KUBERNETES_VERSION says {version}"
    );

    let manifest = std::fs::read_to_string(format!("{root}/Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!("\"v1_{minor}\"")),
        "the workspace Cargo.toml must enable the k8s-openapi feature v1_{minor}"
    );
}
