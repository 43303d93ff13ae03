//! BGP passwords never show up in what gets logged or reported: `Debug`
//! (`{:?}`, `{:#?}`), `Display` and `serde_json` of parsed peers, of whole
//! configurations, of BGPPeer objects and of configuration errors.

mod common;

use common::{accept, objs, reject};
use config::api::{v1beta1, v1beta2};

/// Distinctive enough that it cannot appear by accident.
const PASSWORD: &str = "Zq7-md5-hunter2-XYZZY";

/// Fails if `what` contains the password (or any long piece of it).
#[track_caller]
fn assert_hidden(label: &str, what: &str) {
    assert!(
        !what.contains(PASSWORD) && !what.contains("hunter2-XYZZY") && !what.contains("Zq7-md5"),
        "{label} leaks the password:\n{what}"
    );
}

/// Every rendering of a serialisable, debuggable value.
#[track_caller]
fn assert_all_hidden<T: std::fmt::Debug + serde::Serialize>(label: &str, v: &T) {
    assert_hidden(&format!("{label} {{:?}}"), &format!("{v:?}"));
    assert_hidden(&format!("{label} {{:#?}}"), &format!("{v:#?}"));
    assert_hidden(
        &format!("{label} serde_json"),
        &serde_json::to_string(v).unwrap(),
    );
    assert_hidden(
        &format!("{label} serde_json pretty"),
        &serde_json::to_string_pretty(v).unwrap(),
    );
}

fn inline_peer() -> String {
    format!(
        "---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: inline
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: 192.0.2.1
  password: {PASSWORD}
"
    )
}

fn secret_peer() -> String {
    "---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: from-secret
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: 192.0.2.2
  passwordSecret:
    name: bgp-auth
    namespace: metallb-system
"
    .to_owned()
}

fn string_data_secret() -> String {
    format!(
        "---
apiVersion: v1
kind: Secret
metadata:
  name: bgp-auth
type: kubernetes.io/basic-auth
stringData:
  password: {PASSWORD}
"
    )
}

/// The same Secret with `data` (base64), as the API server returns it.
fn data_secret() -> String {
    use std::fmt::Write;
    // Minimal base64 (standard alphabet, padded), to avoid a dependency.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = PASSWORD.as_bytes();
    let mut b64 = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                let idx = (n >> (18 - 6 * i)) & 0x3f;
                b64.push(ALPHABET[idx as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::new();
    write!(
        out,
        "---
apiVersion: v1
kind: Secret
metadata:
  name: bgp-auth
type: kubernetes.io/basic-auth
data:
  username: YWRtaW4=
  password: {b64}
"
    )
    .unwrap();
    out
}

fn pool_and_ad() -> &'static str {
    "---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: pool
spec:
  addresses: [198.51.100.0/24]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata:
  name: adv
spec:
  peers: [inline, from-secret]
"
}

#[test]
fn parsed_peers_and_config_hide_the_password() {
    for secret in [string_data_secret(), data_secret()] {
        let cfg = accept(&[&inline_peer(), &secret_peer(), &secret, pool_and_ad()].concat());
        assert_eq!(cfg.peers.len(), 2);
        for peer in &cfg.peers {
            // The password is there, for the code that installs it...
            assert_eq!(peer.password.as_ref().unwrap().expose(), PASSWORD);
            // ...and shows nowhere else.
            assert_all_hidden(&format!("peer {}", peer.name), peer);
            let pw = peer.password.as_ref().unwrap();
            assert_hidden("SecretString Display", &pw.to_string());
            assert_all_hidden("SecretString", pw);
        }
        assert_all_hidden("Config", &cfg);
        assert_hidden("Summary", &cfg.summary().to_string());
        for w in &cfg.warnings {
            assert_hidden("Warning", &w.to_string());
            assert_all_hidden("Warning", w);
        }
    }
}

#[test]
fn bgp_peer_objects_hide_the_password_from_debug() {
    let resources = objs(&inline_peer());
    let peer: &v1beta2::BGPPeer = &resources.peers[0];
    assert_eq!(peer.spec.password.expose(), PASSWORD);
    assert_hidden("v1beta2 BGPPeer {:?}", &format!("{peer:?}"));
    assert_hidden("v1beta2 BGPPeer {:#?}", &format!("{peer:#?}"));
    assert_hidden("Resources {:?}", &format!("{resources:?}"));
    assert_hidden("Resources {:#?}", &format!("{resources:#?}"));

    let v1: v1beta1::BGPPeer = common::typed(
        &common::docs(&format!(
            "apiVersion: metallb.io/v1beta1
kind: BGPPeer
metadata: {{name: legacy, namespace: metallb-system}}
spec: {{myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1, password: {PASSWORD}}}
"
        ))[0],
    );
    assert_eq!(v1.spec.password.expose(), PASSWORD);
    assert_hidden("v1beta1 BGPPeer {:?}", &format!("{v1:?}"));
    assert_hidden("v1beta1 BGPPeer {:#?}", &format!("{v1:#?}"));
    let converted = config::convert_bgp_peer(&v1);
    assert_hidden("converted BGPPeer {:#?}", &format!("{converted:#?}"));
}

#[test]
fn bgp_peer_objects_serialise_the_password_for_the_api() {
    // By design (config::api::Password): a BGPPeer is serialised as written,
    // since that is what gets sent to the API server; only Debug redacts.
    // serde_json of the *object* therefore does carry the password.
    let resources = objs(&inline_peer());
    let json = serde_json::to_string(&*resources.peers[0]).unwrap();
    assert!(json.contains(PASSWORD), "{json}");
}

#[test]
fn configuration_errors_hide_the_password() {
    let both = format!(
        "---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: both
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: 192.0.2.3
  password: {PASSWORD}
  passwordSecret: {{name: bgp-auth}}
"
    );
    let wrong_type = format!(
        "---
apiVersion: v1
kind: Secret
metadata:
  name: bgp-auth
type: Opaque
stringData:
  password: {PASSWORD}
"
    );
    let no_key = format!(
        "---
apiVersion: v1
kind: Secret
metadata:
  name: bgp-auth
type: kubernetes.io/basic-auth
stringData:
  username: {PASSWORD}
"
    );
    let with_bfd = inline_peer().replace(
        "peerAddress: 192.0.2.1",
        "peerAddress: 192.0.2.1\n  bfdProfile: missing",
    );
    let bad_address = inline_peer().replace("192.0.2.1", "192.0.2.999");
    let bad_timers = inline_peer().replace(
        "peerAddress: 192.0.2.1",
        "peerAddress: 192.0.2.1\n  holdTime: 1s",
    );
    let cases = [
        (both.clone() + &string_data_secret(), false),
        (secret_peer(), true),
        (secret_peer() + &wrong_type, false),
        (secret_peer() + &no_key, false),
        (with_bfd, true),
        (bad_address, false),
        (bad_timers, false),
        (
            inline_peer() + &inline_peer().replace("name: inline", "name: twin"),
            false,
        ),
    ];
    for (yaml, transient) in cases {
        let err = reject(&yaml);
        assert_eq!(err.transient, transient, "{err:?}");
        assert_hidden("ConfigError Display", &err.to_string());
        assert_hidden("ConfigError message", &err.message);
        assert_all_hidden("ConfigError", &err);
    }
}

#[test]
fn resources_debug_shows_secrets_by_name_only() {
    for secret in [string_data_secret(), data_secret()] {
        let res = objs(&format!("{}{secret}", secret_peer()));
        assert_eq!(res.secrets.len(), 1);
        let text = format!("{res:?}");
        assert_hidden("Resources {:?}", &text);
        assert_hidden("Resources {:#?}", &format!("{res:#?}"));
        let name = res.secrets[0].metadata.name.clone().unwrap();
        assert!(text.contains(&name), "the Secret is still named: {text}");
    }
}
