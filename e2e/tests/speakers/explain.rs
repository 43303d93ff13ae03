//! Broken-on-purpose setups, with the controller allocating and the speakers running:
//! each shows its reason in `metallbctl explain service` (live, no files), the
//! controller's `NotAnnounceable` Warning event on the Service when the pool's
//! selectors cannot overlap, and the speakers' `ConfigurationWarnings` condition;
//! fixing it clears the condition, publishes no new event, and explain shows the
//! Service announced (and reported so by the speakers' status objects).
//!
//! (a) an L2Advertisement whose nodeSelectors exclude every node with an endpoint of
//! an `externalTrafficPolicy: Local` Service; (b) a BGPAdvertisement whose `peers` run
//! on no node it selects; (c) a BGPAdvertisement selecting no node.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::controller::{RunningController, start_controller_process};
use e2e::process::{Process, workspace_binary};
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available, router_peer_spec};
use e2e::{EndpointSpec, Lab, wait_until};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

/// The controller of the speakers' namespace and class (the lab's admin credential:
/// its RBAC is checked elsewhere), ready.
async fn start_controller(sl: &SpeakerLab) -> Result<RunningController> {
    start_controller_process(
        &workspace_binary(sl.lab.repo(), "controller", "controller")?,
        &Process::scratch_dir("spk-explain-controller")?,
        &sl.lab.env.kubeconfig,
        sl.namespace(),
        sl.lb_class(),
        "controller-e2e",
        &[],
    )
    .await
}

/// `metallbctl explain service NS/NAME` on the live objects: exit status, output.
async fn explain(sl: &SpeakerLab, svc: &str, json: bool) -> Result<(Option<i32>, String)> {
    metallbctl_as(sl, &explain_args(sl, svc, json), &sl.lab.env.kubeconfig).await
}

pub(crate) fn explain_args(sl: &SpeakerLab, svc: &str, json: bool) -> Vec<String> {
    let key = format!("{}/{svc}", sl.namespace());
    let mut args: Vec<String> = [
        "explain",
        "service",
        key.as_str(),
        "-n",
        sl.namespace(),
        "--lb-class",
        sl.lb_class(),
        "--timeout",
        "10",
    ]
    .map(str::to_owned)
    .to_vec();
    if json {
        args.extend(["-o".to_owned(), "json".to_owned()]);
    }
    args
}

/// metallbctl with `args` and `kubeconfig`: exit code and stdout (stderr must be
/// empty: a refused request shows there).
pub(crate) async fn metallbctl_as(
    sl: &SpeakerLab,
    args: &[String],
    kubeconfig: &std::path::Path,
) -> Result<(Option<i32>, String)> {
    let bin = workspace_binary(sl.lab.repo(), "metallbctl", "metallbctl")?;
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(bin)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("metallbctl {args:?}: no end within 30 s"))??;
    ensure!(
        out.stderr.is_empty(),
        "metallbctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// explain's JSON, with its exit status.
pub(crate) async fn explain_json(sl: &SpeakerLab, svc: &str) -> Result<(Option<i32>, Value)> {
    let (code, out) = explain(sl, svc, true).await?;
    Ok((code, serde_json::from_str(&out).context("explain's JSON")?))
}

/// The `NotAnnounceable` Warning events on Service `svc`: message -> series count.
async fn not_announceable(sl: &SpeakerLab, svc: &str) -> Result<BTreeMap<String, i32>> {
    let events = Api::<Event>::namespaced(sl.lab.client.clone(), sl.namespace())
        .list(&ListParams::default())
        .await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(svc)
                && e.reason.as_deref() == Some("NotAnnounceable")
                && e.type_.as_deref() == Some("Warning")
        })
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (e.note.unwrap_or_default(), count)
        })
        .collect())
}

/// speaker-<node>'s ConfigurationState: `(result, ConfigurationWarnings message)`.
async fn warning_condition(sl: &SpeakerLab, node: &str) -> Result<(String, Option<String>)> {
    let (result, cond) = sl.configuration_warnings(node).await?;
    let msg = cond
        .filter(|c| c["status"] == "True")
        .map(|c| c["message"].as_str().unwrap_or_default().to_owned());
    Ok((result, msg))
}

/// Waits until speaker-node-1's warning condition contains `want` (`None`: has none).
async fn wait_condition(sl: &SpeakerLab, want: Option<&str>) -> Result<()> {
    wait_condition_of(sl, "node-1", want).await
}

/// Waits until speaker-`node`'s warning condition contains `want` (`None`: has none).
async fn wait_condition_of(sl: &SpeakerLab, node: &str, want: Option<&str>) -> Result<()> {
    wait_until(
        &format!("speaker-{node} Valid, warning condition {want:?}"),
        Duration::from_secs(15),
        || async {
            let (result, msg) = warning_condition(sl, node)
                .await
                .map_err(|e| format!("{e:#}"))?;
            let ok = result == "Valid"
                && match (want, &msg) {
                    (None, None) => true,
                    (Some(w), Some(m)) => m.contains(w),
                    _ => false,
                };
            if ok {
                Ok(())
            } else {
                Err(format!("{result} {msg:?}"))
            }
        },
    )
    .await
}

/// Waits until Service `svc` has `n` NotAnnounceable events, one containing `want`.
async fn wait_event(sl: &SpeakerLab, svc: &str, want: &str) -> Result<BTreeMap<String, i32>> {
    wait_until(
        &format!("a NotAnnounceable event on {svc} with {want:?}"),
        Duration::from_secs(15),
        || async {
            let ev = not_announceable(sl, svc)
                .await
                .map_err(|e| format!("{e:#}"))?;
            if ev.keys().any(|m| m.contains(want)) {
                Ok(())
            } else {
                Err(format!("{ev:?}"))
            }
        },
    )
    .await?;
    not_announceable(sl, svc).await
}

/// Waits for the controller's address on Service `svc`.
async fn wait_ingress(sl: &SpeakerLab, svc: &str) -> Result<()> {
    let api = Api::<Service>::namespaced(sl.lab.client.clone(), sl.namespace());
    wait_until(
        &format!("an address on {svc}"),
        Duration::from_secs(15),
        || async {
            let s = api.get(svc).await.map_err(|e| e.to_string())?;
            let has = s
                .status
                .and_then(|st| st.load_balancer?.ingress)
                .is_some_and(|i| !i.is_empty());
            if has { Ok(()) } else { Err("none yet".into()) }
        },
    )
    .await
}

/// Waits until explain exits 0 with `reported` naming the `nodes` for `proto` (`bgp`
/// or `l2`) and no difference: decided and reported agree.
async fn wait_announced(sl: &SpeakerLab, svc: &str, proto: &str, nodes: &[&str]) -> Result<Value> {
    wait_until(
        &format!("explain: {svc} announced ({proto}) by {nodes:?}, as reported"),
        Duration::from_secs(30),
        || async {
            let (code, v) = explain_json(sl, svc).await.map_err(|e| format!("{e:#}"))?;
            let reported: Vec<&str> = v["reported"][proto]
                .as_object()
                .map(|m| m.keys().map(String::as_str).collect())
                .unwrap_or_default();
            if code == Some(0) && reported == nodes {
                Ok(())
            } else {
                Err(format!("exit {code:?}: {v}"))
            }
        },
    )
    .await?;
    Ok(explain_json(sl, svc).await?.1)
}

fn bgp_reasons(v: &Value) -> Vec<(String, String)> {
    v["bgp"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["node"].as_str().unwrap_or_default().to_owned(),
                n["reason"].as_str().unwrap_or("announced").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bgp_advertisements_that_cannot_announce_are_explained_warned_and_cleared() -> Result<()> {
    let test = "spk-explain-bgp";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let mut sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test)).await?;
    let key = sl.label_key();
    let body = async {
        // (c) The only advertisement of the pool selects no node.
        sl.apply_basic_config(
            json!({"nodeSelectors": [{"matchLabels": {key.clone(): "nowhere"}}]}),
        )
        .await?;
        let _controller = start_controller(&sl).await?;
        sl.lab
            .create_lb_service(
                sl.namespace(),
                &sl.service("web")
                    .endpoints(vec![EndpointSpec::ready("node-1")]),
            )
            .await?;
        wait_ingress(&sl, "web").await?;
        wait_condition(
            &sl,
            Some("BGPAdvertisement/adv: spec.nodeSelectors match none of the 3 Nodes"),
        )
        .await?;
        let ev = wait_event(
            &sl,
            "web",
            "BGPAdvertisement adv: spec.nodeSelectors match none of the 3 Nodes",
        )
        .await?;
        ensure!(
            ev.keys()
                .all(|m| m.starts_with("its address comes from IPAddressPool pool: ")),
            "{ev:?}"
        );
        let (code, text) = explain(&sl, "web", false).await?;
        println!("--- (c) explain, broken:\n{text}");
        let (_, v) = explain_json(&sl, "web").await?;
        ensure!(code == Some(1), "exit {code:?}: {text}");
        ensure!(
            v["warnings"].to_string().contains(
                "BGPAdvertisement adv: spec.nodeSelectors match none of the 3 Nodes: no node \
                 announces pool(s) pool"
            ),
            "explain names the object and field: {}",
            v["warnings"]
        );
        ensure!(
            bgp_reasons(&v).iter().all(|(_, r)| r != "announced"),
            "{:?}",
            bgp_reasons(&v)
        );
        ensure!(
            text.contains(
                "reported by the speakers (ServiceBGPStatus, NodeBGPStatus, ServiceL2Status):\n  nothing"
            ),
            "{text}"
        );

        // (b) It selects node-1, but its only peer runs on node-3 only.
        sl.label_node("node-1", &key, Some("adv")).await?;
        sl.label_node("node-3", &key, Some("far")).await?;
        let mut far = router_peer_spec();
        far["peerAddress"] = json!("192.0.2.250");
        far["nodeSelectors"] = json!([{"matchLabels": {key.clone(): "far"}}]);
        sl.apply("BGPPeer", "far", far).await?;
        sl.apply(
            "BGPAdvertisement",
            "adv",
            json!({"ipAddressPools": ["pool"], "peers": ["far"],
                   "nodeSelectors": [{"matchLabels": {key.clone(): "adv"}}]}),
        )
        .await?;
        let want = "spec.peers names BGPPeer far, whose spec.nodeSelectors match none of the \
                    nodes this advertisement selects (node-1)";
        wait_condition(&sl, Some(want)).await?;
        wait_event(&sl, "web", want).await?;
        let (code, text) = explain(&sl, "web", false).await?;
        println!("--- (b) explain, broken:\n{text}");
        ensure!(code == Some(1), "exit {code:?}: {text}");
        let (_, v) = explain_json(&sl, "web").await?;
        let nodes = v["bgp"].as_array().cloned().unwrap_or_default();
        ensure!(
            nodes
                .iter()
                .all(|n| n["routes"].as_array().is_some_and(Vec::is_empty)),
            "nothing is sent anywhere: {nodes:?}"
        );
        ensure!(
            text.contains("announced, but to no BGPPeer")
                && v["warnings"].to_string().contains(want),
            "{text}"
        );

        // Fixed: every node, every peer.
        let before = not_announceable(&sl, "web").await?;
        sl.apply(
            "BGPAdvertisement",
            "adv",
            json!({"ipAddressPools": ["pool"]}),
        )
        .await?;
        sl.delete("BGPPeer", "far").await?;
        wait_condition(&sl, None).await?;
        let v = wait_announced(&sl, "web", "bgp", &["node-1", "node-2", "node-3"]).await?;
        ensure!(
            v["reported"]["bgp"]["node-1"] == json!(["router"]),
            "{}",
            v["reported"]
        );
        let (_, text) = explain(&sl, "web", false).await?;
        println!("--- fixed, explain:\n{text}");
        ensure!(!text.contains("differs:"), "{text}");
        // No new event once fixed (the controller had all the time the speakers took).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = not_announceable(&sl, "web").await?;
        ensure!(
            after == before,
            "events changed once fixed: {before:?} -> {after:?}"
        );
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l2_advertisement_excluding_every_local_endpoint_is_explained_then_announced()
-> Result<()> {
    let test = "spk-explain-l2";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let mut sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test)).await?;
    let key = sl.label_key();
    let body = async {
        // (a) The pool's L2Advertisement selects node-1; the Local Service's only
        // endpoint runs on node-2.
        sl.label_node("node-1", &key, Some("l2")).await?;
        sl.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": ["198.51.100.0/24"]}),
        )
        .await?;
        sl.apply(
            "L2Advertisement",
            "l2",
            json!({"ipAddressPools": ["pool"],
                   "nodeSelectors": [{"matchLabels": {key.clone(): "l2"}}]}),
        )
        .await?;
        let _controller = start_controller(&sl).await?;
        sl.lab
            .create_lb_service(
                sl.namespace(),
                &sl.service("local")
                    .local()
                    .endpoints(vec![EndpointSpec::ready("node-2")]),
            )
            .await?;
        wait_ingress(&sl, "local").await?;
        let (code, text) = explain(&sl, "local", false).await?;
        println!("--- (a) explain, broken:\n{text}");
        ensure!(code == Some(1), "exit {code:?}: {text}");
        let (_, v) = explain_json(&sl, "local").await?;
        let w = v["warnings"].to_string();
        ensure!(
            w.contains("externalTrafficPolicy Local") && w.contains("node-2"),
            "the warning names the policy and where the Pods run: {w}"
        );
        let l2: Vec<(String, bool)> = v["l2"]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                (
                    n["node"].as_str().unwrap_or_default().to_owned(),
                    n["announced"] == true,
                )
            })
            .collect();
        ensure!(l2.iter().all(|(_, a)| !a), "{l2:?}");
        // A Service-level combination (it depends on where the Pods run): the speaker
        // of the node hosting the endpoint reports it, as a Warning event on the
        // Service and a warning condition of its ConfigurationState (still Valid);
        // the other speakers' conditions stay clear.
        let want = format!(
            "Service {}/local has spec.externalTrafficPolicy Local and its endpoints run only \
             on node-2, which no L2Advertisement of IPAddressPool pool selects (they select node-1)",
            sl.namespace()
        );
        ensure!(w.contains(&want), "explain says what the speakers say: {w}");
        wait_condition_of(&sl, "node-2", Some(&want)).await?;
        let ev = wait_event(&sl, "local", &want).await?;
        println!("--- (a) events: {ev:?}");
        for node in ["node-1", "node-3"] {
            let (result, cond) = warning_condition(&sl, node).await?;
            ensure!(
                result == "Valid" && cond.is_none(),
                "{node}: {result} {cond:?}"
            );
        }

        // Fixed: the advertisement also selects node-2, where the Pod runs.
        sl.label_node("node-2", &key, Some("l2")).await?;
        let v = wait_announced(&sl, "local", "l2", &["node-2"]).await?;
        ensure!(
            v["warnings"].as_array().is_none_or(Vec::is_empty),
            "{}",
            v["warnings"]
        );
        // Cleared: no condition left on node-2.
        wait_condition_of(&sl, "node-2", None).await?;
        let (_, text) = explain(&sl, "local", false).await?;
        println!("--- (a) fixed, explain:\n{text}");

        // (c) A viewer (metallbctl/rbac/viewer.yaml: get and list, no Secrets) reads the
        // same explanation and status as the administrator.
        let viewer = format!("{}-viewer", sl.namespace());
        let rbac = std::fs::read_to_string(sl.lab.repo().join("metallbctl/rbac/viewer.yaml"))?
            .replace("metallbctl-viewer", &viewer)
            .replace(
                "namespace: metallb-system",
                &format!("namespace: {}", sl.namespace()),
            );
        sl.lab
            .kubectl_ok(&["apply", "-f", "-"], Some(&rbac))
            .await?;
        let r = async {
            let dir = e2e::process::Process::scratch_dir("explain-viewer")?;
            let kc = sl
                .lab
                .service_account_kubeconfig(&dir, sl.namespace(), &viewer)
                .await?;
            // The binding reaches the authorizer's cache within moments.
            let mut as_viewer = metallbctl_as(&sl, &explain_args(&sl, "local", false), &kc).await;
            for _ in 0..50 {
                if as_viewer.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                as_viewer = metallbctl_as(&sl, &explain_args(&sl, "local", false), &kc).await;
            }
            let (code, viewer_text) = as_viewer?;
            ensure!(code == Some(0), "exit {code:?}: {viewer_text}");
            let (_, admin_text) = explain(&sl, "local", false).await?;
            ensure!(
                viewer_text == admin_text,
                "the viewer's explanation differs:\n{viewer_text}\nthe administrator's:\n{admin_text}"
            );
            let status = ["status", "-n", sl.namespace(), "-o", "json"].map(str::to_owned);
            let (code, out) = metallbctl_as(&sl, &status, &kc).await?;
            ensure!(code == Some(0), "metallbctl status as a viewer: exit {code:?}: {out}");
            let v: Value = serde_json::from_str(&out)?;
            let svc = v["services"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["service"] == format!("{}/local", sl.namespace()));
            ensure!(
                svc.is_some_and(|s| s["l2"].get("node-2").is_some()),
                "the viewer's status names node-2 answering for local: {out}"
            );
            anyhow::Ok(())
        }
        .await;
        let _ = sl
            .lab
            .kubectl(
                &[
                    "delete",
                    "clusterrole,clusterrolebinding",
                    &viewer,
                    "--ignore-not-found",
                ],
                None,
            )
            .await;
        r?;
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}
