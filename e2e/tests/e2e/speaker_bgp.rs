//! The speaker in BGP mode, end to end: one speaker process per node namespace (as the
//! DaemonSet's hostNetwork Pods), the lab's API server, real routers (FRR in `router`,
//! BIRD or GoBGP in `router2`). A LoadBalancer Service's address reaches both routers from every
//! node, with its communities; advertisement node selectors restrict; deleting the
//! Service withdraws, and so does changing its type to ClusterIP (a deletion to the
//! speakers, which watch LoadBalancer Services only); a silent link cut takes the node's session down within BFD's
//! detection time and the router withdraws, BGP stays down while BFD is down and comes
//! back with the link; `kubectl get bgpsessionstatuses,servicebgpstatuses` shows it all.
//! Needs root (network namespaces); takes the test kit's serial lock.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::nodes::NodeNetwork;
use e2e::process::free_port;
use e2e::{AuditFilter, EndpointSpec, Lab, wait_until};
use kube::api::{DeleteParams, DynamicObject, ListParams};
use serde_json::{Value, json};
use testkit::frr::{BfdProfile, FrrNeighbor};
use testkit::process::Signal;
use testkit::router::RouterKind;
use testkit::{Family, FrrConfig, LabOptions, NsChild, plan};

/// `kubectl apply --server-side` of `yaml` (Nodes too: only the labels given are set).
async fn apply(lab: &Lab, yaml: &str) -> Result<()> {
    lab.kubectl_ok(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "e2e-speaker-bgp",
            "-f",
            "-",
        ],
        Some(yaml),
    )
    .await
    .map(|_| ())
}

/// The prefix the Service gets (inside the lab's pool range).
const IP: &str = "198.51.100.77";

fn router_config() -> FrrConfig {
    let mut c = FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
        .bfd_profile(BfdProfile::new("fast", 100, 100, 3));
    for n in 1..=plan::NODES {
        c = c
            .neighbor(FrrNeighbor::new(plan::node_v4(n).into(), plan::NODE_AS).bfd_profile("fast"));
    }
    c
}

/// The paths the FRR router has for `prefix`: (peer, communities), from
/// `show bgp ipv4 unicast <prefix> json` (the table's JSON has no communities).
fn frr_paths(router: &testkit::Frr, prefix: &str) -> Result<Vec<(String, String)>> {
    let text = router.vtysh(&[&format!("show bgp ipv4 unicast {prefix} json")])?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("FRR said {text:?}"))?;
    Ok(v["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["peer"]["peerId"].as_str().unwrap_or_default().to_owned(),
                p["community"]["string"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect())
}

async fn wait_paths(
    router: &testkit::Frr,
    prefix: &str,
    want: usize,
    within: Duration,
) -> Result<Vec<(String, String)>> {
    let mut last = Vec::new();
    let started = Instant::now();
    while started.elapsed() < within {
        last = frr_paths(router, prefix)?;
        if last.len() == want {
            return Ok(last);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!(
        "the router has {} path(s) to {prefix} after {within:?}, want {want}: {last:?}",
        last.len()
    )
}

async fn list(lab: &Lab, ns: &str, kind: &str) -> Result<Vec<DynamicObject>> {
    Ok(lab
        .metallb(&lab.client, ns, kind)
        .list(&ListParams::default())
        .await?
        .items)
}

/// (node, bgpStatus, bfdStatus) of every BGPSessionStatus, sorted.
async fn sessions(lab: &Lab, ns: &str) -> Result<Vec<(String, String, String)>> {
    let mut out: Vec<_> = list(lab, ns, "BGPSessionStatus")
        .await?
        .into_iter()
        .map(|o| {
            let s = &o.data["status"];
            let f = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
            (f("node"), f("bgpStatus"), f("bfdStatus"))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Gives the Service `ns/name` the ingress `ip` in its status, as a controller
/// would.
async fn set_ingress(lab: &Lab, ns: &str, name: &str, ip: &str) -> Result<()> {
    lab.kubectl_ok(
        &[
            "-n",
            ns,
            "patch",
            "svc",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}).to_string(),
        ],
        None,
    )
    .await?;
    Ok(())
}

/// Waits (10 s) until no ServiceBGPStatus has `status.<field>` == `value`.
async fn no_bgp_status(lab: &Lab, ns: &str, field: &str, value: &str) -> Result<()> {
    wait_until(
        &format!("no ServiceBGPStatus with {field} {value}"),
        Duration::from_secs(10),
        || async {
            let objs = list(lab, ns, "ServiceBGPStatus")
                .await
                .map_err(|e| e.to_string())?;
            let n = objs
                .iter()
                .filter(|o| o.data["status"][field] == value)
                .count();
            if n == 0 {
                Ok(())
            } else {
                Err(format!("{n} left"))
            }
        },
    )
    .await
}

/// The `result` of `ConfigurationState speaker-node-1` becomes `want`.
async fn wait_state(lab: &Lab, ns: &str, want: &str) -> Result<()> {
    wait_until(
        &format!("speaker-node-1 {want}"),
        Duration::from_secs(5),
        || async {
            let o = lab
                .metallb(&lab.client, ns, "ConfigurationState")
                .get("speaker-node-1")
                .await
                .map_err(|e| e.to_string())?;
            let r = o.data["status"]["result"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if r == want {
                Ok(())
            } else {
                Err(format!("{r}: {}", o.data["status"]))
            }
        },
    )
    .await
}

struct Speakers {
    procs: Vec<NsChild>,
}

impl Speakers {
    fn logs(&self) -> String {
        self.procs
            .iter()
            .map(|p| format!("--- {}\n{}", p.describe(), tail(&p.log(), 30)))
            .collect()
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bgp_routes_reach_frr_and_bird_from_every_node_and_bfd_gates_them() -> Result<()> {
    run(RouterKind::Bird).await
}

/// The same with GoBGP as the second router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bgp_routes_reach_frr_and_gobgp_from_every_node_and_bfd_gates_them() -> Result<()> {
    run(RouterKind::Gobgp).await
}

async fn run(router2: RouterKind) -> Result<()> {
    let lab = Lab::connect().await?;
    let setup = lab.speaker_setup("speaker-bgp").await?;
    let ns = setup.namespace().to_owned();
    let class = setup.lb_class.clone();
    // A label of this test on each node (rack a, b, a): Nodes are shared by the tests.
    let rack = format!("e2e.metallb-rs.io/{ns}");
    // (`kubectl label`, not an apply: two tests applying with one field manager would
    // remove each other's labels.)
    e2e::speakers::ensure_nodes(&lab, plan::NODES).await?;
    for n in 1..=plan::NODES {
        let r = if n == 2 { "b" } else { "a" };
        lab.kubectl_ok(
            &[
                "label",
                "--overwrite",
                "node",
                &format!("node-{n}"),
                &format!("{rack}={r}"),
            ],
            None,
        )
        .await?;
    }
    apply(
        &lab,
        &format!(
            r#"apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {{name: pool, namespace: {ns}}}
spec: {{addresses: [198.51.100.64/26]}}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {{name: fast, namespace: {ns}}}
spec: {{receiveInterval: 100, transmitInterval: 100, detectMultiplier: 3}}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {{name: frr, namespace: {ns}}}
spec: {{myASN: {node_as}, peerASN: {router_as}, peerAddress: {router}, bfdProfile: fast}}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {{name: router2, namespace: {ns}}}
spec: {{myASN: {node_as}, peerASN: 64514, peerAddress: {router2}}}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {{name: ad, namespace: {ns}}}
spec: {{communities: ["64512:7"]}}
"#,
            node_as = plan::NODE_AS,
            router_as = plan::ROUTER_AS,
            router = plan::ROUTER_V4,
            router2 = plan::ROUTER2_V4,
        ),
    )
    .await?;

    // The network: nodes, FRR in `router`, BIRD in `router2`, a speaker per node.
    // (Holds the test kit's serial lock: not Send, so built in place.)
    let net: NodeNetwork = tokio::task::block_in_place(|| {
        lab.node_network(&LabOptions {
            far: false,
            ..LabOptions::default()
        })
    })?;
    let frr = net.net.start_router(&router_config())?;
    let node_peers: Vec<_> = (1..=plan::NODES)
        .map(|n| (std::net::IpAddr::from(plan::node_v4(n)), plan::NODE_AS))
        .collect();
    let bird = net.net.start_router2(router2, &node_peers, &[])?;
    let kubeconfig = setup
        .kubeconfig
        .to_str()
        .context("kubeconfig path")?
        .to_owned();
    let mut procs = Vec::new();
    for n in 1..=plan::NODES {
        let health = free_port()?.to_string();
        let node = format!("node-{n}");
        procs.push(net.spawn(
            n,
            &setup.bin,
            &[
                "--node-name",
                &node,
                "--lb-class",
                &class,
                "--port",
                "0",
                "--health-probe-port",
                &health,
                "--log-format",
                "text",
            ],
            &[
                ("KUBECONFIG", kubeconfig.as_str()),
                ("METALLB_NAMESPACE", ns.as_str()),
                ("RUST_LOG", "info,speaker=debug"),
            ],
        )?);
    }
    let speakers = Speakers { procs };
    let result = scenario(&lab, &setup, &ns, &rack, &net, &frr, &bird, &speakers).await;
    if result.is_err() {
        eprintln!("speaker logs:\n{}", speakers.logs());
        eprintln!(
            "router: {}",
            frr.vtysh(&["show bgp summary"]).unwrap_or_default()
        );
    }
    drop(speakers);
    drop(bird);
    drop(frr);
    drop(net);
    setup.delete().await?;
    result
}

#[allow(clippy::too_many_arguments)]
async fn scenario(
    lab: &Lab,
    setup: &e2e::ControllerSetup,
    ns: &str,
    rack: &str,
    net: &NodeNetwork,
    frr: &testkit::Frr,
    bird: &testkit::router::Router,
    speakers: &Speakers,
) -> Result<()> {
    let prefix = format!("{IP}/32");
    // Every session up, as kubectl shows them.
    wait_until(
        "3 FRR sessions Established, BFD Up",
        Duration::from_secs(30),
        || async {
            let s = sessions(lab, ns).await.map_err(|e| e.to_string())?;
            let frr_up = s
                .iter()
                .filter(|(_, b, f)| b == "Established" && f == "Up")
                .count();
            let bird_up = s
                .iter()
                .filter(|(_, b, f)| b == "Established" && f == "N/A")
                .count();
            if frr_up == 3 && bird_up == 3 {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await?;

    // A Service with a serving endpoint and an address: its /32 from every node.
    let svc = setup
        .service("web")
        .endpoints(vec![EndpointSpec::ready("node-2")]);
    let created = Instant::now();
    lab.create_lb_service(ns, &svc).await?;
    set_ingress(lab, ns, "web", IP).await?;
    let paths = wait_paths(frr, &prefix, 3, Duration::from_secs(10)).await?;
    eprintln!(
        "FRR: 3 paths to {prefix} {:?} after creation",
        created.elapsed()
    );
    for (peer, communities) in &paths {
        ensure!(
            communities == "64512:7",
            "path from {peer}: communities {communities:?}"
        );
    }
    wait_until(
        "router2 (BIRD or GoBGP) has the prefix from 3 nodes",
        Duration::from_secs(10),
        || async {
            let routes = bird.routes(Family::Ipv4).map_err(|e| e.to_string())?;
            let n = routes.iter().filter(|r| r.prefix == prefix).count();
            if n == 3 {
                Ok(())
            } else {
                Err(format!("{n} routes: {routes:?}"))
            }
        },
    )
    .await?;
    wait_until(
        "3 ServiceBGPStatus objects naming both peers",
        Duration::from_secs(10),
        || async {
            let objs = list(lab, ns, "ServiceBGPStatus")
                .await
                .map_err(|e| e.to_string())?;
            let ok = objs.iter().filter(|o| {
                o.data["status"]["peers"] == json!(["frr", "router2"])
                    && o.data["status"]["serviceName"] == "web"
            });
            if ok.count() == 3 {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    objs.iter()
                        .map(|o| &o.data["status"])
                        .collect::<Vec<&Value>>()
                ))
            }
        },
    )
    .await?;

    // The advertisement selects rack b only: only node-2 keeps announcing.
    apply(
        lab,
        &format!(
            r#"apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {{name: ad, namespace: {ns}}}
spec: {{communities: ["64512:7"], nodeSelectors: [{{matchLabels: {{{rack}: b}}}}]}}
"#
        ),
    )
    .await?;
    let paths = wait_paths(frr, &prefix, 1, Duration::from_secs(10)).await?;
    ensure!(paths[0].0 == plan::node_v4(2).to_string(), "{paths:?}");
    apply(
        lab,
        &format!(
            "apiVersion: metallb.io/v1beta1\nkind: BGPAdvertisement\nmetadata: {{name: ad, namespace: {ns}}}\nspec: {{communities: [\"64512:7\"]}}\n"
        ),
    )
    .await?;
    wait_paths(frr, &prefix, 3, Duration::from_secs(10)).await?;

    // NetworkUnavailable=True on node-3: it withdraws; False again: it announces.
    let condition = |status: &str| {
        json!({"status": {"conditions": [{
            "type": "NetworkUnavailable", "status": status, "reason": "e2e",
            "message": "speaker_bgp test", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}})
        .to_string()
    };
    let patch_node = |status: &'static str| {
        let body = condition(status);
        async move {
            lab.kubectl_ok(
                &[
                    "patch",
                    "node",
                    "node-3",
                    "--subresource=status",
                    "--type=strategic",
                    "-p",
                    &body,
                ],
                None,
            )
            .await
        }
    };
    patch_node("True").await?;
    let result = wait_paths(frr, &prefix, 2, Duration::from_secs(10)).await;
    patch_node("False").await?;
    ensure!(
        result?
            .iter()
            .all(|(peer, _)| peer != &plan::node_v4(3).to_string()),
        "node-3 still announces with NetworkUnavailable=True"
    );
    wait_paths(frr, &prefix, 3, Duration::from_secs(10)).await?;

    // No longer a LoadBalancer: the speakers watch LoadBalancer Services only, so to
    // them it is a deletion (their log says `serviceDeleted`); withdrawn from every node,
    // the status objects go. A LoadBalancer again (the API server cleared its address
    // with the type change: patched back, as the controller would): announced again.
    // (A type change away from LoadBalancer drops spec.loadBalancerClass too: given back.)
    let class = (setup.lb_class.as_str() != "").then_some(setup.lb_class.as_str());
    let set_type = |type_: &'static str| async move {
        let class = if type_ == "LoadBalancer" { class } else { None };
        lab.kubectl_ok(
            &[
                "-n",
                ns,
                "patch",
                "svc",
                "web",
                "--type=merge",
                "-p",
                &json!({"spec": {"type": type_, "loadBalancerClass": class}}).to_string(),
            ],
            None,
        )
        .await
    };
    let t = Instant::now();
    set_type("ClusterIP").await?;
    wait_paths(frr, &prefix, 0, Duration::from_secs(10)).await?;
    eprintln!(
        "FRR: {prefix} withdrawn {:?} after the type change to ClusterIP",
        t.elapsed()
    );
    no_bgp_status(lab, ns, "serviceName", "web").await?;
    set_type("LoadBalancer").await?;
    set_ingress(lab, ns, "web", IP).await?;
    wait_paths(frr, &prefix, 3, Duration::from_secs(10)).await?;

    // BFD: node-1's cable is cut silently; its session goes down within the detection
    // time (3 x 100 ms, with margin) and the router withdraws its path.
    let cut = net.net.cut_cable("node-1")?;
    let t = Instant::now();
    wait_paths(frr, &prefix, 2, Duration::from_secs(3)).await?;
    eprintln!("FRR withdrew node-1's path {:?} after the cut", t.elapsed());
    wait_until(
        "node-1's session held down while BFD is down",
        Duration::from_secs(10),
        || async {
            let s = sessions(lab, ns).await.map_err(|e| e.to_string())?;
            let n1: Vec<_> = s
                .iter()
                .filter(|(n, _, f)| n == "node-1" && f != "N/A")
                .collect();
            match n1.as_slice() {
                [(_, b, f)] if b != "Established" && f == "Down" => Ok(()),
                _ => Err(format!("{s:?}")),
            }
        },
    )
    .await?;
    // Still down a while later (no reconnection while BFD says Down).
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        frr_paths(frr, &prefix)?.len() == 2,
        "node-1 came back while its link is cut"
    );
    cut.restore()?;
    wait_paths(frr, &prefix, 3, Duration::from_secs(30)).await?;

    // An invalid configuration (an overlapping pool) keeps every route and shows
    // Invalid; fixing it shows Valid.
    apply(
        lab,
        &format!(
            "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {{name: overlap, namespace: {ns}}}\nspec: {{addresses: [198.51.100.64/28]}}\n"
        ),
    )
    .await?;
    wait_state(lab, ns, "Invalid").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(
        frr_paths(frr, &prefix)?.len() == 3,
        "a route went with the invalid configuration"
    );
    lab.kubectl_ok(&["-n", ns, "delete", "ipaddresspool", "overlap"], None)
        .await?;
    wait_state(lab, ns, "Valid").await?;

    // Nothing changes for 30 s: the speakers write nothing.
    let audit = lab.audit();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mark = audit.mark().await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle = audit
        .count(Some(mark), &AuditFilter::user(&setup.user))
        .await?;
    ensure!(
        idle.rows().is_empty(),
        "writes by idle speakers: {:?}",
        idle.rows()
    );

    // The router resets every session: the routes come back.
    frr.vtysh(&["clear bgp *"])?;
    let t = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    wait_paths(frr, &prefix, 3, Duration::from_secs(30)).await?;
    eprintln!(
        "FRR: 3 paths again {:?} after clearing its sessions",
        t.elapsed()
    );

    // SIGTERM: a Cease, the router withdraws at once (not after the 90 s hold time).
    let t = Instant::now();
    speakers.procs[2].signal(Signal::TERM);
    wait_paths(frr, &prefix, 2, Duration::from_secs(3)).await?;
    eprintln!(
        "FRR withdrew node-3's path {:?} after its SIGTERM",
        t.elapsed()
    );
    // SIGKILL: no Cease; BFD notices (3 x 100 ms) and the router withdraws.
    let t = Instant::now();
    speakers.procs[0].signal(Signal::KILL);
    wait_paths(frr, &prefix, 1, Duration::from_secs(3)).await?;
    eprintln!(
        "FRR withdrew node-1's path {:?} after its SIGKILL",
        t.elapsed()
    );

    // Deleted: withdrawn everywhere, the status objects go.
    let t = Instant::now();
    lab.kubectl_ok(&["-n", ns, "delete", "svc", "web", "--wait=false"], None)
        .await?;
    wait_paths(frr, &prefix, 0, Duration::from_secs(10)).await?;
    eprintln!("FRR: {prefix} withdrawn {:?} after the delete", t.elapsed());
    // (the killed speakers' stay: their Pods own them)
    no_bgp_status(lab, ns, "node", "node-2").await?;
    let _ = lab
        .metallb(&lab.client, ns, "BGPPeer")
        .delete("router2", &DeleteParams::default())
        .await;
    wait_until(
        "node-2's router2 BGPSessionStatus deleted (the killed speakers' stay)",
        Duration::from_secs(10),
        || async {
            let s = sessions(lab, ns).await.map_err(|e| e.to_string())?;
            if s.iter().filter(|(n, _, _)| n == "node-2").count() == 1 {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await?;
    Ok(())
}
