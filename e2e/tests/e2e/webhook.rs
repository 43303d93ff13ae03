//! MetalLB's validating webhooks, served by the controller binary, called by the lab's
//! real API server: `kubectl apply` of a bad object is refused with MetalLB's message, a
//! good one passes, `--dry-run=server` is validated and persists nothing, a BFDProfile in
//! use cannot be deleted, and with the controller stopped the API server applies
//! `failurePolicy: Fail` (as MetalLB: metallb.io writes refused, nothing else affected).
//!
//! The controller runs as a process on the host, so the API server calls it by URL
//! (`https://127.0.0.1:<port>/...`, a loopback port) instead of deploy/webhook.yaml's
//! Service (no kube-proxy in the lab). Everything else is the production path: the
//! controller creates its CA and certificate in the Secret `metallb-webhook-cert` and
//! patches the `caBundle` of `metallb-webhook-configuration`. The configuration here is
//! limited to the test's namespace (`namespaceSelector`), so the tests running in
//! parallel never reach this webhook.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::{Lab, wait_until};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const NAME: &str = "metallb-webhook-configuration";

/// MetalLB's webhooks (deploy/webhook.yaml), by URL, for namespace `ns` only.
fn configuration(port: u16, ns: &str) -> Result<ValidatingWebhookConfiguration> {
    let hook = |name: &str, path: &str, versions: &[&str], ops: &[&str], resource: &str| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}")},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "rules": [{"apiGroups": ["metallb.io"], "apiVersions": versions,
                       "operations": ops, "resources": [resource]}],
        })
    };
    let cu = ["CREATE", "UPDATE"];
    Ok(serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [
            hook("bgppeersvalidationwebhook.metallb.io", "/validate-metallb-io-v1beta2-bgppeer", &["v1beta1", "v1beta2"], &cu, "bgppeers"),
            hook("bfdprofilevalidationwebhook.metallb.io", "/validate-metallb-io-v1beta1-bfdprofile", &["v1beta1"], &["CREATE", "DELETE"], "bfdprofiles"),
            hook("bgpadvertisementvalidationwebhook.metallb.io", "/validate-metallb-io-v1beta1-bgpadvertisement", &["v1beta1"], &cu, "bgpadvertisements"),
            hook("communityvalidationwebhook.metallb.io", "/validate-metallb-io-v1beta1-community", &["v1beta1"], &cu, "communities"),
            hook("ipaddresspoolvalidationwebhook.metallb.io", "/validate-metallb-io-v1beta1-ipaddresspool", &["v1beta1"], &cu, "ipaddresspools"),
            hook("l2advertisementvalidationwebhook.metallb.io", "/validate-metallb-io-v1beta1-l2advertisement", &["v1beta1"], &cu, "l2advertisements"),
        ],
    }))?)
}

fn pool(ns: &str, name: &str, cidr: &str) -> String {
    format!(
        "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  addresses: [\"{cidr}\"]\n"
    )
}

fn peer(ns: &str, name: &str, address: &str, bfd: &str) -> String {
    format!(
        "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  myASN: 64512\n  peerASN: 64513\n  peerAddress: {address}\n  bfdProfile: \"{bfd}\"\n"
    )
}

/// `kubectl apply -f -` of `yaml` (with `extra` flags): Ok(stdout) or Err(stderr).
async fn apply(lab: &Lab, yaml: &str, extra: &[&str]) -> Result<Result<String, String>> {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(extra);
    let out = lab.kubectl(&args, Some(yaml)).await?;
    Ok(if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(out.stderr)
    })
}

/// Applies with `--dry-run=server` until the webhook refuses with `message` (the
/// controller's view catches up with the objects applied just before), then once for real,
/// which must be refused the same way.
async fn refused(lab: &Lab, yaml: &str, webhook: &str, message: &str) -> Result<()> {
    let want = format!("admission webhook \"{webhook}\" denied the request: {message}");
    wait_until(
        &format!("{webhook} refuses with {message:?}"),
        Duration::from_secs(20),
        || async {
            match apply(lab, yaml, &["--dry-run=server"]).await {
                Ok(Err(e)) if e.contains(&want) => Ok(()),
                Ok(other) => Err(format!("{other:?}")),
                Err(e) => Err(format!("{e:#}")),
            }
        },
    )
    .await?;
    match apply(lab, yaml, &[]).await? {
        Err(e) if e.contains(&want) => Ok(()),
        other => anyhow::bail!("applying for real: {other:?}, want {want:?}"),
    }
}

#[tokio::test]
async fn webhooks_refuse_bad_objects_at_apply_time() -> Result<()> {
    // Its configuration and controller must not meet conversion.rs's or deploy.rs's.
    let _shared = crate::harness::WEBHOOK_OBJECTS.read().await;
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("webhook").await?;
    let ns = setup.namespace().to_owned();
    let port = e2e::process::free_port()?;
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(lab.client.clone());
    // One left behind by a failed run goes first; this one is created before the
    // controller starts, so its first pass fills in the caBundle.
    let _ = vwcs.delete(NAME, &DeleteParams::default()).await;
    wait_until(
        "the old configuration is gone",
        Duration::from_secs(20),
        || async {
            match vwcs.get_opt(NAME).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    vwcs.create(&PostParams::default(), &configuration(port, &ns)?)
        .await
        .context("creating the test's ValidatingWebhookConfiguration")?;
    let result = scenario(&lab, &setup, &ns, port, &vwcs).await;
    let _ = vwcs.delete(NAME, &DeleteParams::default()).await;
    setup.delete().await?;
    result
}

async fn scenario(
    lab: &Lab,
    setup: &e2e::ControllerSetup,
    ns: &str,
    port: u16,
    vwcs: &Api<ValidatingWebhookConfiguration>,
) -> Result<()> {
    let port_s = port.to_string();
    // Ready only once the webhook serves (upstream's StartedChecker): with a
    // Secret it cannot replace (immutable, not a certificate), the controller
    // allocates but its webhook does not serve, and /readyz says 503.
    let secrets: Api<Secret> = Api::namespaced(lab.client.clone(), ns);
    let blocker: Secret = serde_json::from_value(json!({
        "metadata": {"name": "metallb-webhook-cert", "namespace": ns},
        "immutable": true,
        "stringData": {"tls.crt": "not a certificate"},
    }))?;
    secrets
        .create(&PostParams::default(), &blocker)
        .await
        .context("creating an immutable Secret in the rotator's way")?;
    let mut controller = setup.spawn(
        "controller",
        &[
            "--webhook-port",
            &port_s,
            "--webhook-bind-address",
            "127.0.0.1",
            "--cert-extra-names",
            "127.0.0.1",
        ],
    )?;
    wait_until(
        "the controller's first certificate pass fails",
        Duration::from_secs(30),
        || async {
            let log = controller.process.log_text();
            if log.contains("webhook certificate pass failed") {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        },
    )
    .await?;
    // its loop is ready well within this (the other controller tests wait
    // 1-3 s for /readyz); the webhook must keep it from saying so
    for _ in 0..16 {
        let line = controller.readyz().await?;
        ensure!(
            line.starts_with("HTTP/1.1 503 "),
            "/readyz said {line:?} while the webhook cannot serve:\n{}",
            controller.process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    secrets
        .delete("metallb-webhook-cert", &DeleteParams::default())
        .await
        .context("deleting the immutable Secret")?;
    controller.wait_ready("controller").await?;

    // The certificate: in MetalLB's Secret, its CA in every caBundle.
    let ca = wait_until("the webhook Secret", Duration::from_secs(30), || async {
        let s = secrets
            .get_opt("metallb-webhook-cert")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Secret yet")?;
        let data = s.data.unwrap_or_default();
        for k in ["ca.key", "tls.crt", "tls.key"] {
            data.get(k).ok_or(format!("no {k}"))?;
        }
        data.get("ca.crt").cloned().ok_or("no ca.crt".to_string())
    })
    .await?;
    wait_until(
        "every caBundle is the CA",
        Duration::from_secs(30),
        || async {
            let vwc = vwcs.get(NAME).await.map_err(|e| e.to_string())?;
            let hooks = vwc.webhooks.unwrap_or_default();
            if hooks.len() == 6
                && hooks
                    .iter()
                    .all(|w| w.client_config.ca_bundle.as_ref() == Some(&ca))
            {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    )
    .await?;

    // A good pool passes; an overlapping one is refused with the parser's message.
    apply(lab, &pool(ns, "first", "192.0.2.0/28"), &[])
        .await?
        .map_err(|e| anyhow::anyhow!("a good pool was refused: {e}"))?;
    refused(
        lab,
        &pool(ns, "second", "192.0.2.8/29"),
        "ipaddresspoolvalidationwebhook.metallb.io",
        "CIDR \"192.0.2.8/29\" in pool \"second\" overlaps with already defined CIDR \"192.0.2.0/28\"",
    )
    .await?;
    // --dry-run=server of a good one: validated, allowed, not persisted.
    apply(
        lab,
        &pool(ns, "third", "198.51.100.0/28"),
        &["--dry-run=server"],
    )
    .await?
    .map_err(|e| anyhow::anyhow!("a good pool's dry run was refused: {e}"))?;
    let get = lab
        .kubectl(&["get", "ipaddresspool", "third", "-n", ns], None)
        .await?;
    ensure!(!get.status.success(), "a dry run persisted the pool");

    // A BFDProfile used by a BGPPeer cannot be deleted.
    let bfd = format!(
        "apiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata:\n  name: fast\n  namespace: {ns}\n"
    );
    apply(lab, &bfd, &[])
        .await?
        .map_err(|e| anyhow::anyhow!("the BFDProfile was refused: {e}"))?;
    apply(lab, &peer(ns, "router", "198.51.100.1", "fast"), &[])
        .await?
        .map_err(|e| anyhow::anyhow!("the BGPPeer was refused: {e}"))?;
    let want = "admission webhook \"bfdprofilevalidationwebhook.metallb.io\" denied the request: failed to delete BFDProfile fast, used by BGPPeer router";
    wait_until(
        "the BFDProfile delete is refused",
        Duration::from_secs(20),
        || async {
            let out = lab
                .kubectl(
                    &["delete", "bfdprofile", "fast", "-n", ns, "--dry-run=server"],
                    None,
                )
                .await
                .map_err(|e| e.to_string())?;
            if !out.status.success() && out.stderr.contains(want) {
                Ok(())
            } else {
                Err(format!("{}{}", out.stdout, out.stderr))
            }
        },
    )
    .await?;
    let out = lab
        .kubectl(&["delete", "bfdprofile", "fast", "-n", ns], None)
        .await?;
    ensure!(
        !out.status.success() && out.stderr.contains(want),
        "deleting a BFDProfile in use: {out:?}"
    );
    // A duplicate peer is refused; a peer whose BFD profile does not exist yet is not
    // (MetalLB's webhooks ignore references that a later object may satisfy).
    refused(
        lab,
        &peer(ns, "again", "198.51.100.1", ""),
        "bgppeersvalidationwebhook.metallb.io",
        "peer 198.51.100.1 already exists, FRR mode doesn't support duplicate BGPPeers selecting the same node",
    )
    .await?;
    apply(
        lab,
        &peer(ns, "later", "198.51.100.2", "not-yet"),
        &["--dry-run=server"],
    )
    .await?
    .map_err(|e| anyhow::anyhow!("a peer with a future BFD profile was refused: {e}"))?;

    // What got through is valid: the controller's ConfigurationState shows no error.
    let states = lab.metallb(&lab.client, ns, "ConfigurationState");
    wait_until(
        "ConfigurationState controller Valid",
        Duration::from_secs(20),
        || async {
            let s = states
                .get_opt("controller")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no ConfigurationState yet")?;
            let st = &s.data["status"];
            if st["result"] == "Valid" && st["lastError"].as_str().unwrap_or_default().is_empty() {
                Ok(())
            } else {
                Err(format!("{st}"))
            }
        },
    )
    .await?;

    // The controller stops: failurePolicy Fail refuses metallb.io writes of the
    // namespace, and nothing else.
    controller
        .process
        .terminate(Duration::from_secs(30))
        .await?;
    match apply(lab, &pool(ns, "fourth", "203.0.113.0/28"), &[]).await? {
        Err(e)
            if e.contains(
                "failed calling webhook \"ipaddresspoolvalidationwebhook.metallb.io\"",
            ) => {}
        other => anyhow::bail!("with no controller, a pool apply gave {other:?}"),
    }
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unaffected\n  namespace: {ns}\n"
    );
    apply(lab, &cm, &[])
        .await?
        .map_err(|e| anyhow::anyhow!("a ConfigMap was refused with the controller down: {e}"))?;

    // --webhook-mode onlywebhook: the webhook again (same Secret, same CA), no allocation.
    let _only = setup
        .start(
            "webhook-only",
            &[
                "--webhook-mode",
                "onlywebhook",
                "--webhook-port",
                &port_s,
                "--webhook-bind-address",
                "127.0.0.1",
                "--cert-extra-names",
                "127.0.0.1",
            ],
        )
        .await?;
    wait_until(
        "the webhook serves again",
        Duration::from_secs(30),
        || async {
            match apply(lab, &pool(ns, "fourth", "203.0.113.0/28"), &[]).await {
                Ok(Ok(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    refused(
        lab,
        &pool(ns, "sixth", "203.0.113.8/29"),
        "ipaddresspoolvalidationwebhook.metallb.io",
        "CIDR \"203.0.113.8/29\" in pool \"sixth\" overlaps with already defined CIDR \"203.0.113.0/28\"",
    )
    .await?;
    lab.create_lb_service(ns, &setup.service("web")).await?;
    // An allocating controller answers in well under a second; give it five.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let svc = Api::<k8s_openapi::api::core::v1::Service>::namespaced(lab.client.clone(), ns)
        .get("web")
        .await?;
    let ingress = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default();
    ensure!(
        ingress.is_empty(),
        "--webhook-mode onlywebhook allocated {ingress:?}"
    );
    Ok(())
}
