//! The BGPPeer conversion webhook, served by the controller binary, called by the lab's
//! real API server: a v1beta1 BGPPeer applied is stored as v1beta2 and read back as
//! v1beta2 with every field, a v1beta2 one reads as v1beta1 (the fields v1beta1 lacks
//! left out), both `conversionReviewVersions` forms work (MetalLB's `[v1beta1, v1beta2]`,
//! which makes the API server send `apiextensions.k8s.io/v1beta1` reviews, and `[v1]`),
//! and with the controller stopped the API server refuses whatever needs a conversion
//! while v1beta2 (the stored version) is unaffected.
//!
//! The lab installs the BGPPeer CRD with conversion `None` (lab/cluster: deploy/crds'
//! Service reference cannot be reached there). This test points the CRD's conversion at
//! its controller by URL (`https://127.0.0.1:<port>/convert`, as webhook.rs does for the
//! validating webhooks), lets the controller's certificate rotator fill in the
//! `caBundle` (the production path), and puts `None` back at the end. The CRD is
//! cluster-wide: this test holds [`crate::harness::WEBHOOK_OBJECTS`] for writing.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::{Lab, wait_until};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const CRD: &str = "bgppeers.metallb.io";
const FIELD_MANAGER: &str = "metallb-rs-e2e-conversion";

/// A v1beta1 BGPPeer with every v1beta1 field set.
fn v1beta1_peer(ns: &str) -> Value {
    json!({
        "apiVersion": "metallb.io/v1beta1",
        "kind": "BGPPeer",
        "metadata": {"name": "old", "namespace": ns, "labels": {"written-as": "v1beta1"}},
        "spec": {
            "myASN": 64512,
            "peerASN": 64513,
            "peerAddress": "192.0.2.1",
            "sourceAddress": "192.0.2.11",
            "peerPort": 1179,
            "holdTime": "3m0s",
            "keepaliveTime": "1m0s",
            "routerID": "192.0.2.11",
            "nodeSelectors": [
                {
                    "matchLabels": {"kubernetes.io/hostname": "node-1"},
                    "matchExpressions": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    ],
                },
                {},
            ],
            "password": "conversion-test-password",
            "bfdProfile": "fast",
            "ebgpMultiHop": true,
        },
    })
}

/// What the v1beta1 peer's spec reads as at v1beta2: MetalLB's mapping, plus the API
/// server's v1beta2 defaults for the fields v1beta1 does not have.
fn v1beta1_peer_as_v1beta2() -> Value {
    let mut spec = v1beta1_peer("")["spec"].clone();
    spec["disableMP"] = json!(false);
    spec["dualStackAddressFamily"] = json!(false);
    spec
}

/// A v1beta2 BGPPeer with every field set, the v1beta2-only ones included.
fn v1beta2_peer(ns: &str) -> Value {
    json!({
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "new", "namespace": ns},
        "spec": {
            "myASN": 64512,
            "peerASN": 64514,
            "localASN": 64600,
            "peerAddress": "192.0.2.2",
            "sourceAddress": "192.0.2.12",
            "peerPort": 1180,
            "holdTime": "90s",
            "keepaliveTime": "30s",
            "connectTime": "5s",
            "routerID": "192.0.2.12",
            "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-2"}}],
            "passwordSecret": {"name": "peer-secret", "namespace": ns},
            "bfdProfile": "slow",
            "enableGracefulRestart": true,
            "ebgpMultiHop": true,
            "vrf": "red",
            "disableMP": true,
            "dualStackAddressFamily": true,
        },
    })
}

/// The v1beta2 peer at v1beta1: the fields v1beta1 has (MetalLB's `ConvertFrom`).
fn v1beta2_peer_as_v1beta1() -> Value {
    json!({
        "myASN": 64512,
        "peerASN": 64514,
        "peerAddress": "192.0.2.2",
        "sourceAddress": "192.0.2.12",
        "peerPort": 1180,
        "holdTime": "90s",
        "keepaliveTime": "30s",
        "routerID": "192.0.2.12",
        "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-2"}}],
        "bfdProfile": "slow",
        "ebgpMultiHop": true,
    })
}

/// `kubectl apply -f -` of `obj`: Ok(stdout) or Err(stderr).
async fn apply(lab: &Lab, obj: &Value) -> Result<Result<String, String>> {
    let out = lab
        .kubectl(&["apply", "-f", "-"], Some(&obj.to_string()))
        .await?;
    Ok(if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(out.stderr)
    })
}

/// GET of one BGPPeer at `version` (raw, so nothing is lost in a typed decode):
/// Ok(object) or Err(the API server's error).
async fn get(lab: &Lab, ns: &str, version: &str, name: &str) -> Result<Result<Value, String>> {
    list_or_get(
        lab,
        &format!("/apis/metallb.io/{version}/namespaces/{ns}/bgppeers/{name}"),
    )
    .await
}

async fn list_or_get(lab: &Lab, path: &str) -> Result<Result<Value, String>> {
    let req = http::Request::get(path).body(Vec::new())?;
    Ok(match lab.client.request_text(req).await {
        Ok(text) => Ok(serde_json::from_str(&text).with_context(|| format!("GET {path}"))?),
        Err(e) => Err(e.to_string()),
    })
}

/// The CRD's conversion: Webhook to `url` with `review_versions`, or None.
async fn set_conversion(
    crds: &Api<CustomResourceDefinition>,
    webhook: Option<(&str, &[&str])>,
) -> Result<()> {
    let conversion = match webhook {
        // The caBundle is left as it is: the controller's rotator writes it.
        Some((url, versions)) => json!({
            "strategy": "Webhook",
            "webhook": {"clientConfig": {"url": url}, "conversionReviewVersions": versions},
        }),
        None => json!({"strategy": "None", "webhook": null}),
    };
    crds.patch(
        CRD,
        &PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"spec": {"conversion": conversion}})),
    )
    .await
    .context("patching the BGPPeer CRD's conversion")?;
    Ok(())
}

#[tokio::test]
async fn bgppeer_conversion_webhook_converts_both_ways_and_fails_closed_when_down() -> Result<()> {
    let _exclusive = crate::harness::WEBHOOK_OBJECTS.write().await;
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("conversion").await?;
    let ns = setup.namespace().to_owned();
    let port = e2e::process::free_port()?;
    let crds: Api<CustomResourceDefinition> = Api::all(lab.client.clone());
    let url = format!("https://127.0.0.1:{port}/convert");
    let result = async {
        set_conversion(
            &crds,
            Some((&url, &config::crd::CONVERSION_REVIEW_VERSIONS)),
        )
        .await?;
        scenario(&lab, &setup, &ns, port, &crds, &url).await
    }
    .await;
    let restored = set_conversion(&crds, None).await;
    let deleted = setup.delete().await;
    result?;
    restored?;
    deleted
}

async fn scenario(
    lab: &Lab,
    setup: &e2e::ControllerSetup,
    ns: &str,
    port: u16,
    crds: &Api<CustomResourceDefinition>,
    url: &str,
) -> Result<()> {
    let port_s = port.to_string();
    let mut controller = setup
        .start(
            "controller",
            &[
                "--webhook-port",
                &port_s,
                "--webhook-bind-address",
                "127.0.0.1",
                "--cert-extra-names",
                "127.0.0.1",
            ],
        )
        .await?;

    // The rotator writes its CA into the CRD's conversion caBundle.
    let secrets: Api<Secret> = Api::namespaced(lab.client.clone(), ns);
    let ca = wait_until("the webhook Secret", Duration::from_secs(30), || async {
        secrets
            .get_opt("metallb-webhook-cert")
            .await
            .map_err(|e| e.to_string())?
            .and_then(|s| s.data.unwrap_or_default().get("ca.crt").cloned())
            .ok_or_else(|| "no ca.crt yet".to_string())
    })
    .await?;
    wait_until(
        "the CRD's conversion caBundle is the controller's CA",
        Duration::from_secs(30),
        || async {
            let crd = crds.get(CRD).await.map_err(|e| e.to_string())?;
            let bundle = crd
                .spec
                .conversion
                .and_then(|c| c.webhook)
                .and_then(|w| w.client_config)
                .and_then(|c| c.ca_bundle);
            if bundle.as_ref() == Some(&ca) {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        },
    )
    .await?;

    // A v1beta1 peer applied (converted to v1beta2 to be stored; the API server may take
    // a moment to use the new caBundle).
    let old = v1beta1_peer(ns);
    wait_until(
        "a v1beta1 BGPPeer is applied",
        Duration::from_secs(30),
        || async {
            match apply(lab, &old).await {
                Ok(Ok(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    let as_v2 = get(lab, ns, "v1beta2", "old")
        .await?
        .map_err(|e| anyhow::anyhow!("reading the v1beta1 peer at v1beta2: {e}"))?;
    ensure!(
        as_v2["apiVersion"] == "metallb.io/v1beta2" && as_v2["spec"] == v1beta1_peer_as_v1beta2(),
        "the v1beta1 peer at v1beta2:\n{:#}\nwant the spec\n{:#}",
        as_v2,
        v1beta1_peer_as_v1beta2()
    );
    ensure!(
        as_v2["metadata"]["labels"] == old["metadata"]["labels"],
        "labels lost: {:#}",
        as_v2["metadata"]
    );
    let back = get(lab, ns, "v1beta1", "old")
        .await?
        .map_err(|e| anyhow::anyhow!("reading the v1beta1 peer at v1beta1: {e}"))?;
    // Back at v1beta1: every field as written, and what the API server defaults at
    // v1beta2 is not shown (v1beta1 has no such fields).
    ensure!(
        back["apiVersion"] == "metallb.io/v1beta1" && back["spec"] == old["spec"],
        "the v1beta1 peer read back at v1beta1:\n{:#}\nwant the spec\n{:#}",
        back,
        old["spec"]
    );

    // A v1beta2 peer with every field, v1beta2-only ones included.
    let new = v1beta2_peer(ns);
    apply(lab, &new)
        .await?
        .map_err(|e| anyhow::anyhow!("applying the v1beta2 peer: {e}"))?;
    let as_v1 = get(lab, ns, "v1beta1", "new")
        .await?
        .map_err(|e| anyhow::anyhow!("reading the v1beta2 peer at v1beta1: {e}"))?;
    ensure!(
        as_v1["apiVersion"] == "metallb.io/v1beta1" && as_v1["spec"] == v1beta2_peer_as_v1beta1(),
        "the v1beta2 peer at v1beta1:\n{:#}\nwant the spec\n{:#}",
        as_v1,
        v1beta2_peer_as_v1beta1()
    );
    let stored = get(lab, ns, "v1beta2", "new")
        .await?
        .map_err(|e| anyhow::anyhow!("reading the v1beta2 peer: {e}"))?;
    ensure!(
        stored["spec"] == new["spec"],
        "the v1beta2 peer lost fields by being read at v1beta1:\n{:#}",
        stored["spec"]
    );

    // A list at v1beta1 converts both in one review; kubectl shows v1beta1's columns.
    let list = list_or_get(
        lab,
        &format!("/apis/metallb.io/v1beta1/namespaces/{ns}/bgppeers"),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("listing at v1beta1: {e}"))?;
    let mut names: Vec<(String, String)> = list["items"]
        .as_array()
        .context("items")?
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                i["spec"]["peerAddress"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    names.sort();
    ensure!(
        names
            == [
                ("new".to_string(), "192.0.2.2".to_string()),
                ("old".to_string(), "192.0.2.1".to_string())
            ],
        "the v1beta1 list: {names:?}"
    );

    // The ConversionReview v1 form works as well (the review version follows the CRD).
    set_conversion(crds, Some((url, &["v1"]))).await?;
    wait_until(
        "conversion with ConversionReview v1",
        Duration::from_secs(30),
        || async {
            let crd = crds.get(CRD).await.map_err(|e| e.to_string())?;
            let w = crd.spec.conversion.and_then(|c| c.webhook);
            let versions = w.as_ref().map(|w| w.conversion_review_versions.clone());
            if versions != Some(vec!["v1".to_string()]) {
                return Err(format!("review versions {versions:?}"));
            }
            match get(lab, ns, "v1beta1", "new").await {
                Ok(Ok(v)) if v["spec"] == v1beta2_peer_as_v1beta1() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;

    // The controller stops: what needs a conversion is refused, v1beta2 is not affected.
    controller
        .process
        .terminate(Duration::from_secs(30))
        .await?;
    // A read at v1beta1 (from etcd: converted now).
    match get(lab, ns, "v1beta1", "new").await? {
        Err(e)
            if e.contains("conversion webhook for metallb.io/v1beta2, Kind=BGPPeer failed")
                && e.contains("connect: connection refused") => {}
        other => bail!("reading at v1beta1 with the controller down: {other:?}"),
    }
    // A write at v1beta1 (converted to be stored).
    let mut another = v1beta1_peer(ns);
    another["metadata"]["name"] = json!("another");
    match apply(lab, &another).await? {
        Err(e)
            if e.contains("conversion webhook for metallb.io/v1beta1, Kind=BGPPeer failed")
                && e.contains("connect: connection refused") => {}
        other => bail!("applying a v1beta1 peer with the controller down: {other:?}"),
    }
    // v1beta2, the stored version, needs no conversion.
    match get(lab, ns, "v1beta2", "new").await? {
        Ok(v) if v["spec"] == new["spec"] => {}
        other => bail!("reading at v1beta2 with the controller down: {other:?}"),
    }
    let mut third = v1beta2_peer(ns);
    third["metadata"]["name"] = json!("third");
    apply(lab, &third)
        .await?
        .map_err(|e| anyhow::anyhow!("a v1beta2 apply with the controller down: {e}"))?;
    // Lists at v1beta1 come from the API server's v1beta1 watch cache, which holds the
    // objects converted while the webhook answered. A BGPPeer written now cannot be
    // converted into it: the cache's watch fails and so does its re-list ("object not
    // decodable"). What a list then gets depends on where the cache is (seen in the lab):
    // the conversion error once the cache gives up and the list goes to etcd, or no
    // answer while it waits for the cache to catch up. Never the new object.
    let list_path = format!("/apis/metallb.io/v1beta1/namespaces/{ns}/bgppeers?timeout=5s");
    let outcome = wait_until(
        "v1beta1 lists fail once a BGPPeer changed",
        Duration::from_secs(40),
        || async {
            match tokio::time::timeout(Duration::from_secs(15), list_or_get(lab, &list_path)).await
            {
                Ok(Ok(Err(e)))
                    if e.contains(
                        "conversion webhook for metallb.io/v1beta2, Kind=BGPPeer failed",
                    ) =>
                {
                    Ok("the conversion error")
                }
                Err(_) => Ok("no answer within 15 s"),
                Ok(Ok(Ok(v))) => {
                    let names: Vec<String> = v["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|i| {
                            i["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string()
                        })
                        .collect();
                    Err(format!("listed {names:?} (the cache before the change)"))
                }
                Ok(other) => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    println!("a v1beta1 list with the controller down: {outcome}");
    Ok(())
}
