//! `metallbctl validate`, run as a process on the fixtures in
//! `tests/fixtures/` (documentation addresses and private ASNs only).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Runs `metallbctl validate ARGS...` in the fixtures directory, so that
/// messages name files as given.
fn validate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metallbctl"))
        .arg("validate")
        .args(args)
        .current_dir(fixtures())
        .output()
        .expect("metallbctl runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("UTF-8 stderr")
}

#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

#[test]
fn valid_file_prints_summary() {
    let out = validate(&["valid.yaml"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("configuration is valid"));
    assert_eq!(
        lines.next(),
        Some(
            "1 pools, 0 peers, 1 L2 advertisements, 0 BGP advertisements, 0 BFD profiles, 0 communities"
        )
    );
    assert!(
        text.contains(
            "notes:\n  valid.yaml: document 3, line 17: skipping v1 Service web: not a configuration kind\n"
        ),
        "{text}"
    );
    assert!(!text.contains("warnings:"), "{text}");
}

#[test]
fn directory_argument() {
    let out = validate(&["valid"]);
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        "configuration is valid\n\
         2 pools, 2 peers, 1 L2 advertisements, 1 BGP advertisements, 1 BFD profiles, 1 communities\n"
    );
}

#[test]
fn standard_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_metallbctl"))
        .args(["validate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("metallbctl runs");
    let text = std::fs::read(fixtures().join("overlap.yaml")).unwrap();
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 1);
    assert!(stdout(&out).contains("object: IPAddressPool/b\n"));
}

#[test]
fn unknown_field_is_a_warning() {
    let out = validate(&["unknown-field.yaml"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("configuration is valid\n"), "{text}");
    assert!(
        text.contains(
            "warnings:\n  unknown-field.yaml: document 1, line 8: IPAddressPool/a: unknown field \"spec.autoAsign\"\n"
        ),
        "{text}"
    );
}

#[test]
fn unknown_field_is_an_error_when_strict() {
    let out = validate(&["--strict", "unknown-field.yaml"]);
    assert_exit(&out, 2);
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        "metallbctl: unknown-field.yaml: document 1, line 8: IPAddressPool/a: unknown field \"spec.autoAsign\"\n"
    );
}

#[test]
fn overlapping_pools_are_invalid() {
    let out = validate(&["overlap.yaml"]);
    assert_exit(&out, 1);
    assert_eq!(
        stdout(&out),
        "configuration is invalid\n\
         object: IPAddressPool/b\n\
         error: CIDR \"198.51.100.128/32\" in pool \"b\" overlaps with already defined CIDR \"198.51.100.0/24\"\n\
         transient: no\n"
    );
}

#[test]
fn missing_bfd_profile_is_transient() {
    let out = validate(&["missing-bfd.yaml"]);
    assert_exit(&out, 1);
    assert_eq!(
        stdout(&out),
        "configuration is invalid\n\
         object: BGPPeer/p1\n\
         error: peer p1 referencing non existing bfd profile missing\n\
         transient: yes — it resolves once the referenced object exists\n"
    );
}

#[test]
fn schema_violation_is_invalid() {
    let out = validate(&["schema-violation.yaml"]);
    assert_exit(&out, 1);
    let text = stdout(&out);
    assert!(text.starts_with("configuration is invalid\n"), "{text}");
    assert!(
        text.contains(
            "schema violations (kubectl apply would reject these objects):\n  \
             L2Advertisement/l2 (schema-violation.yaml:10): spec.preferredNodeSelectors[0].weight"
        ),
        "{text}"
    );
}

#[test]
fn syntax_error_names_file_document_and_line() {
    let out = validate(&["syntax-error.yaml"]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.starts_with("metallbctl: syntax-error.yaml: document 1, line 6, column "),
        "{err}"
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn unknown_metallb_api_version() {
    let out = validate(&["unknown-version.yaml"]);
    assert_exit(&out, 2);
    assert_eq!(
        stderr(&out),
        "metallbctl: unknown-version.yaml: document 2, line 6: IPAddressPool a: unknown apiVersion \"metallb.io/v1\"; IPAddressPool is served as metallb.io/v1beta1\n"
    );
}

#[test]
fn wrong_type_names_path_and_line() {
    let out = validate(&["wrong-type.yaml"]);
    assert_exit(&out, 2);
    assert_eq!(
        stderr(&out),
        "metallbctl: wrong-type.yaml: document 2, line 17: spec.peerPort: invalid type: string \"bgp\", expected u16\n"
    );
}

#[test]
fn unreadable_path() {
    let out = validate(&["valid.yaml", "does-not-exist.yaml"]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.starts_with("metallbctl: does-not-exist.yaml: "),
        "{err}"
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn namespace_option() {
    let out = validate(&["namespaces.yaml"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("\n2 pools, "), "{text}");
    assert!(
        text.contains(
            "namespaces.yaml: document 2, line 10: ignoring IPAddressPool/b in namespace lb: \
             MetalLB reads only its own namespace, metallb-system"
        ),
        "{text}"
    );

    let out = validate(&["--namespace", "lb", "--output", "json", "namespaces.yaml"]);
    assert_exit(&out, 0);
    let report = json(&out);
    assert_eq!(report["valid"], true);
    assert_eq!(report["summary"]["pools"], 2);
    let notes = report["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1);
    assert_eq!(
        notes[0]["message"],
        "ignoring IPAddressPool/a in namespace metallb-system: MetalLB reads only its own namespace, lb"
    );
    assert_eq!(notes[0]["at"]["line"], 1);
}

#[test]
fn json_output_valid() {
    let out = validate(&["--output", "json", "unknown-field.yaml"]);
    assert_exit(&out, 0);
    let report = json(&out);
    assert_eq!(report["valid"], true);
    assert_eq!(report["summary"]["pools"], 1);
    assert_eq!(report["error"], Value::Null);
    assert_eq!(report["schemaViolations"], serde_json::json!([]));
    let warning = &report["warnings"][0];
    assert_eq!(
        warning["object"],
        serde_json::json!({"kind": "IPAddressPool", "name": "a"})
    );
    assert_eq!(warning["path"], "spec.autoAsign");
    assert_eq!(warning["at"]["file"], "unknown-field.yaml");
    assert_eq!(warning["at"]["line"], 8);
}

#[test]
fn json_output_invalid() {
    let out = validate(&["-o", "json", "missing-bfd.yaml"]);
    assert_exit(&out, 1);
    let report = json(&out);
    assert_eq!(report["valid"], false);
    assert_eq!(report["summary"], Value::Null);
    assert_eq!(
        report["error"],
        serde_json::json!({
            "object": {"kind": "BGPPeer", "name": "p1"},
            "message": "peer p1 referencing non existing bfd profile missing",
            "transient": true,
        })
    );

    let out = validate(&["-o", "json", "schema-violation.yaml"]);
    assert_exit(&out, 1);
    let report = json(&out);
    assert_eq!(report["valid"], false);
    assert_eq!(report["error"], Value::Null);
    let violation = &report["schemaViolations"][0];
    assert_eq!(violation["object"]["kind"], "L2Advertisement");
    assert_eq!(violation["at"]["line"], 10);
}

#[test]
fn json_output_load_error() {
    let out = validate(&["-o", "json", "wrong-type.yaml"]);
    assert_exit(&out, 2);
    let report = json(&out);
    assert_eq!(report["valid"], false);
    let err = &report["loadError"];
    assert_eq!(err["reason"], "decode");
    assert_eq!(err["path"], "spec.peerPort");
    assert_eq!(err["at"]["document"], 2);
    assert_eq!(err["at"]["line"], 17);
}

#[test]
fn help_documents_exit_status() {
    let out = Command::new(env!("CARGO_BIN_EXE_metallbctl"))
        .args(["validate", "--help"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("Exit status:"), "{text}");
    assert!(
        text.contains("  2  the input could not be loaded"),
        "{text}"
    );
}

/// `bfd-probe --echo` off single-hop IPv4 is a usage error, refused before
/// any socket is opened (no privilege, no network).
#[test]
fn bfd_probe_refuses_echo_off_single_hop_ipv4() {
    for args in [
        &[
            "--peer",
            "2001:db8::1",
            "--local",
            "2001:db8::11",
            "--interface",
            "x",
        ][..],
        &[
            "--peer",
            "203.0.113.2",
            "--local",
            "192.0.2.11",
            "--multihop",
        ][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_metallbctl"))
            .arg("bfd-probe")
            .args(args)
            .args(["--echo", "--echo-interval", "100"])
            .output()
            .expect("metallbctl runs");
        assert_exit(&out, 2);
        assert!(
            stderr(&out).contains("--echo runs on single-hop IPv4 sessions only"),
            "{}",
            stderr(&out)
        );
    }
}

/// Every example of MetalLB's configuration documentation (written out in
/// config/tests/fixtures/metallb-docs, spec-less advertisements among them)
/// is valid, with `--strict` too.
#[test]
fn metallb_documentation_examples_are_valid() {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/tests/fixtures/metallb-docs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "{files:?}");
    for file in &files {
        let file = file.to_str().expect("UTF-8 path");
        let out = validate(&["--strict", "--output", "json", file]);
        assert_exit(&out, 0);
        assert_eq!(json(&out)["valid"], Value::Bool(true), "{file}");
    }
    // The spec-less L2Advertisement alone, as the documentation's first
    // example applies it.
    let mut child = Command::new(env!("CARGO_BIN_EXE_metallbctl"))
        .args(["validate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("metallbctl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: example, namespace: metallb-system}\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 0);
}

/// A configuration MetalLB accepts under which a pool is never announced: valid
/// (exit 0), with a warning naming the object and the fields to change.
#[test]
fn selectors_that_cannot_overlap_are_warned() {
    let out = validate(&["unannounced.yaml"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("configuration is valid\n"), "{text}");
    assert!(
        text.contains(
            "warnings:\n  BGPAdvertisement/edge: no BGPPeer runs on the nodes it selects \
             (worker-1): pool(s) edge are not announced (BGPPeer spec.nodeSelectors or this \
             advertisement's spec.nodeSelectors)\n"
        ),
        "{text}"
    );
    // Fixed (the advertisement selects the edge nodes): no warning.
    let fixed = std::fs::read_to_string(fixtures().join("unannounced.yaml"))
        .unwrap()
        .replace(
            "  - matchLabels: {role: worker}",
            "  - matchLabels: {role: edge}",
        );
    let mut child = Command::new(env!("CARGO_BIN_EXE_metallbctl"))
        .args(["validate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("metallbctl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(fixed.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 0);
    assert!(!stdout(&out).contains("warnings:"), "{}", stdout(&out));
}
