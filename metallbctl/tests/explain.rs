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
         on worker-1, which no BGPAdvertisement of IPAddressPool edge selects (they select edge-1, \
         edge-2): nothing announces it (BGPAdvertisement spec.nodeSelectors, or where its \
         Pods run)"
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

/// Layer 2: the election order every speaker computes (checked here with sha2
/// directly), the winner answering on the advertisement's interface, the others
/// naming the winner; the worker is no candidate.
#[test]
fn layer2_shows_the_election_order_and_who_answers() {
    use sha2::{Digest, Sha256};
    let out = explain(&["demo/web", "-f", "../explain-l2", "-o", "json"], None);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&t);
    let mut want = vec!["edge-1", "edge-2"];
    want.sort_by_key(|n| Sha256::digest(format!("{n}#198.51.100.5")).to_vec());
    let order: Vec<&str> = v["l2"]["election"]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["node"].as_str().unwrap())
        .collect();
    assert_eq!(order, want, "{t}");
    for n in v["l2"]["nodes"].as_array().unwrap() {
        let node = n["node"].as_str().unwrap();
        if node == want[0] {
            assert_eq!(n["announced"], true, "{n}");
            assert_eq!(n["interfaces"], serde_json::json!(["eth1"]));
        } else if node == want[1] {
            assert_eq!(n["reason"], "notOwner");
            assert_eq!(
                n["hint"],
                format!("node {} wins the election and answers", want[0])
            );
        } else {
            assert_eq!(n["reason"], "noMatchingAdvertisement", "{n}");
        }
    }
    // The text form lists the order with scores.
    let out = explain(&["demo/web", "-f", "../explain-l2"], None);
    let t = text(&out);
    assert!(
        t.starts_with(&format!(
            "Service demo/web: 198.51.100.5\nL2:\n  election on 198.51.100.5 (score descending, \
             then sha256(node#ip) ascending):\n    1. {:8}  score 0  sha256 ",
            want[0]
        )),
        "{t}"
    );
}

/// Issue 27: a Service whose ingress does not parse as an address gets upstream's
/// reason (`invalidIP`) on every node, in the BGP section; the explanation does not
/// drop that section nor claim that no advertisement selects its pool.
#[test]
fn an_unparsable_ingress_is_invalid_ip_on_every_node() {
    let cluster = std::fs::read_to_string(fixtures().join("cluster.yaml")).unwrap();
    let services = std::fs::read_to_string(fixtures().join("services.yaml"))
        .unwrap()
        .replace(
            "ingress: [{ip: 198.51.100.1}]",
            "ingress: [{ip: 198.51.100.999}]",
        );
    let out = explain(
        &["demo/web", "-f", "-", "-o", "json"],
        Some(&format!("{cluster}---\n{services}")),
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "announced nowhere: {t}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&t);
    let reasons: Vec<(&str, &str)> = v["bgp"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap(),
                n["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("edge-1", "invalidIP"),
            ("edge-2", "invalidIP"),
            ("worker-1", "invalidIP")
        ],
        "{t}"
    );
    let warnings = v["warnings"].to_string();
    assert!(!warnings.contains("nothing announces it"), "{warnings}");
    assert!(
        v["bgp"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("198.51.100.999"),
        "the hint names the address: {t}"
    );
}

/// Issue 27: layer 2 with `--live-speakers`: the election holds only the live
/// speakers, so when the first of MetalLB's order is not live the next one answers,
/// and the node left out says why. Without the flag every Node counts (membership off).
#[test]
fn layer2_elects_among_the_live_speakers_given() {
    use sha2::{Digest, Sha256};
    let mut want = ["edge-1", "edge-2"];
    want.sort_by_key(|n| Sha256::digest(format!("{n}#198.51.100.5")).to_vec());
    let live = format!("{},worker-1", want[1]);
    let out = explain(
        &[
            "demo/web",
            "-f",
            "../explain-l2",
            "-o",
            "json",
            "--live-speakers",
            &live,
        ],
        None,
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect(&t);
    let order: Vec<&str> = v["l2"]["election"]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["node"].as_str().unwrap())
        .collect();
    assert_eq!(order, [want[1]], "{t}");
    for n in v["l2"]["nodes"].as_array().unwrap() {
        let node = n["node"].as_str().unwrap();
        if node == want[1] {
            assert_eq!(n["announced"], true, "{n}");
        } else if node == want[0] {
            assert_eq!(n["announced"], false, "{n}");
            assert!(n["hint"].as_str().unwrap().contains("is not live"), "{n}");
        }
    }
}
