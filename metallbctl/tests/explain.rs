//! `metallbctl explain service`, run as a process on `tests/fixtures/explain/`: the
//! speaker's own decisions per node, with MetalLB's reasons, hints naming the object
//! and field, and the warning for selectors that cannot overlap.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/explain")
}

fn explain(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_metallbctl"))
        .args(["explain", "service"])
        .args(args)
        .current_dir(fixtures())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("metallbctl runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn an_announced_service_shows_each_node_its_routes_and_why_not() {
    let out = explain(&["demo/web", "-f", "."], None);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert_eq!(
        t,
        "Service demo/web: 198.51.100.1
BGP:
  edge-1    announces
              198.51.100.1/32 -> spine (LOCAL_PREF 100 to iBGP peers, communities 64512:100, BGPAdvertisement edge)
  edge-2    announces
              198.51.100.1/32 -> spine (LOCAL_PREF 100 to iBGP peers, communities 64512:100, BGPAdvertisement edge)
  worker-1  not announced: notOwner
              no BGPAdvertisement of IPAddressPool edge selects node worker-1: its spec.ipAddressPools / spec.ipAddressPoolSelectors or spec.nodeSelectors
"
    );
}

#[test]
fn a_local_service_whose_pods_run_where_no_advertisement_selects_is_warned() {
    let out = explain(&["demo/local", "-f", ".", "-o", "json"], None);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "not announced anywhere: {t}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&t);
    let reasons: Vec<(&str, &str)> = v["bgp"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["node"].as_str().unwrap(), n["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("edge-1", "noLocalEndpoints"),
            ("edge-2", "noLocalEndpoints"),
            ("worker-1", "notOwner")
        ]
    );
    assert_eq!(
        v["warnings"][0],
        "Service demo/local has spec.externalTrafficPolicy Local and its endpoints run only \
         on worker-1, which no BGPAdvertisement of its pool selects: nothing announces it \
         (BGPAdvertisement spec.nodeSelectors, or where its Pods run)"
    );

    // Fixed: the advertisement selects every node; worker-1 announces, no warning.
    let fixed = std::fs::read_to_string(fixtures().join("cluster.yaml"))
        .unwrap()
        .replace("  nodeSelectors:\n  - matchLabels: {role: edge}\n", "");
    let services = std::fs::read_to_string(fixtures().join("services.yaml")).unwrap();
    let out = explain(
        &["demo/local", "-f", "-", "-o", "json"],
        Some(&format!("{fixed}---\n{services}")),
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&t);
    let announcing: Vec<&str> = v["bgp"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["announced"] == true)
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(announcing, ["worker-1"]);
    assert_eq!(v["warnings"], serde_json::json!([]));
}

#[test]
fn a_missing_service_and_missing_nodes_are_explained() {
    let out = explain(&["demo/nope", "-f", "."], None);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("not announced: serviceDeleted"), "{t}");
    let out = explain(&["demo/web", "-f", "services.yaml"], None);
    let t = text(&out);
    assert_ne!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("no Node in the input"), "{t}");
}
