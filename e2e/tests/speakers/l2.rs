//! Layer 2 mode end to end (issue 15, without the fast failover): one speaker per node
//! namespace, the lab's API server, a client namespace on the nodes' bridge. A
//! LoadBalancer Service's address is answered by exactly the node the election picks
//! (its MAC in the client's ARP answer and neighbour entry), `ServiceL2Status` names
//! that node and exists once, `metallb_speaker_announced{protocol="layer2"}` is set on
//! it only; when the owner stops being eligible (its Node no longer selected by the
//! L2Advertisement) the address moves to another node, whose gratuitous ARP moves the
//! client's neighbour entry without the client asking, and the status object moves
//! with it. With membership off (MetalLB's "memberlist disabled"), a stopped owner is
//! not replaced: the move is driven by a Node label, as the issue says.
//!
//! No controller runs: the test writes the Service's ingress as the controller would.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, metric_value, netns_available, pool_ip};
use e2e::{EndpointSpec, Lab, wait_until};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use testkit::plan;

/// How long an answer or a status may take after the write that causes it (the
/// speakers decide in milliseconds; this leaves room for a loaded machine).
pub(crate) const WITHIN: Duration = Duration::from_secs(10);

/// MAC (lower case) -> node name, for the nodes' interfaces on the segment.
pub(crate) fn node_macs(sl: &SpeakerLab) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for n in 1..=3 {
        let node = plan::node_name(n);
        let iface = sl.net.net.l2_iface(&node).to_owned();
        m.insert(sl.net.net.node(n).mac(&iface)?, node);
    }
    Ok(m)
}

/// The MACs of every ARP reply for `ip` that the client receives within 1 s (one
/// per reply, so two answering nodes show as two MACs).
pub(crate) fn arp_answers(sl: &SpeakerLab, ip: &str) -> Result<Vec<String>> {
    sl.l2_answers(ip.parse()?)
}

/// The client's neighbour entry for `ip`: (MAC, state), if any.
pub(crate) fn neighbour(sl: &SpeakerLab, ip: &str) -> Result<Option<(String, String)>> {
    let v = sl.net.net.client().ip_json(&["neigh", "show", ip])?;
    Ok(v.as_array().and_then(|a| a.first()).map(|e| {
        (
            e["lladdr"]
                .as_str()
                .unwrap_or_default()
                .to_ascii_lowercase(),
            e["state"].to_string(),
        )
    }))
}

/// (node label, status.node, serviceName, interfaces) of every ServiceL2Status.
pub(crate) async fn l2_statuses(sl: &SpeakerLab) -> Result<Vec<(String, String, String, String)>> {
    Ok(sl
        .list("ServiceL2Status", None)
        .await?
        .into_iter()
        .map(|o| {
            let s = &o.data["status"];
            let f = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
            (
                o.metadata
                    .labels
                    .unwrap_or_default()
                    .get("metallb.io/node")
                    .cloned()
                    .unwrap_or_default(),
                f("node"),
                f("serviceName"),
                s["interfaces"].to_string(),
            )
        })
        .collect())
}

/// Waits until exactly one node answers `ip` and one ServiceL2Status names it; returns
/// that node.
pub(crate) async fn wait_owner(
    sl: &SpeakerLab,
    ip: &str,
    macs: &BTreeMap<String, String>,
    not: Option<&str>,
) -> Result<String> {
    wait_until(
        &format!("one node answers {ip} and one ServiceL2Status names it"),
        WITHIN,
        || async {
            let answers = arp_answers(sl, ip).map_err(|e| format!("{e:#}"))?;
            let owners: Vec<&String> = answers.iter().filter_map(|m| macs.get(m)).collect();
            let statuses = l2_statuses(sl).await.map_err(|e| format!("{e:#}"))?;
            match (owners.as_slice(), statuses.as_slice()) {
                ([owner], [(label, node, svc, _)])
                    if *owner == node
                        && label == node
                        && svc == "web"
                        && Some(owner.as_str()) != not =>
                {
                    Ok((*owner).clone())
                }
                _ => Err(format!(
                    "answers {answers:?} (nodes {owners:?}); statuses {statuses:?}"
                )),
            }
        },
    )
    .await
}

async fn announced_on(sl: &SpeakerLab, ip: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for n in 1..=3 {
        let node = plan::node_name(n);
        let body = sl.speaker(n).metrics().await?;
        let series = format!(
            "metallb_speaker_announced{{ip=\"{ip}\",node=\"{node}\",protocol=\"layer2\",service=\"{}/web\"}}",
            sl.namespace()
        );
        if metric_value(&body, &series) == Some(1.0) {
            out.push(node);
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l2_address_is_answered_by_the_elected_node_and_moves_when_it_is_no_longer_eligible()
-> Result<()> {
    let test = "spk-l2";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let mut sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test)).await?;
    let key = sl.label_key();
    for node in sl.node_names() {
        sl.label_node(&node, &key, Some("yes")).await?;
    }
    let r = scenario(&mut sl, &key).await;
    // The Nodes are the lab's: NetworkUnavailable goes back to False whatever happened.
    let restore = network_unavailable(&sl, "node-1", false).await;
    sl.finish(r.and(restore)).await
}

/// Sets Node `node`'s NetworkUnavailable condition (strategic merge: the other
/// conditions stay).
async fn network_unavailable(sl: &SpeakerLab, node: &str, on: bool) -> Result<()> {
    let status = if on { "True" } else { "False" };
    Api::<Node>::all(sl.lab.client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": "NetworkUnavailable", "status": status, "reason": "E2E",
                "message": "set by the l2 lab test",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await
        .with_context(|| format!("setting NetworkUnavailable={status} on {node}"))?;
    Ok(())
}

/// Waits for the `nodeAssigned` event of Service `web` naming `node` and layer2.
pub(crate) async fn wait_node_assigned(sl: &SpeakerLab, node: &str) -> Result<()> {
    let want = format!("announcing from node \"{node}\" with protocol \"layer2\"");
    wait_until(&format!("event nodeAssigned: {want}"), WITHIN, || async {
        let out = sl
            .lab
            .kubectl_ok(&["get", "events", "-n", sl.namespace(), "-o", "json"], None)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        let seen: Vec<String> = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "nodeAssigned" && e["involvedObject"]["name"] == "web")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect();
        if seen.contains(&want) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await
}

async fn scenario(sl: &mut SpeakerLab, key: &str) -> Result<()> {
    let ip = pool_ip(90);
    let ip_s = ip.to_string();
    let macs = node_macs(sl)?;
    sl.l2_address_on_segment(ip).await?;
    // Only the nodes labelled by this test (other Nodes of the lab never win).
    sl.apply(
        "L2Advertisement",
        "l2",
        json!({"nodeSelectors": [{"matchLabels": {key: "yes"}}]}),
    )
    .await?;
    sl.wait_configuration_valid(WITHIN).await?;
    let svc = sl
        .service("web")
        .endpoints(vec![EndpointSpec::ready("node-2")]);
    let created = Instant::now();
    sl.create_service(svc, &[ip]).await?;
    let owner = wait_owner(sl, &ip_s, &macs, None).await?;
    // MetalLB's order for 198.51.100.90, sha256("node-N#198.51.100.90") ascending,
    // computed outside the project (Python's hashlib): node-2, node-1, node-3.
    ensure!(
        owner == "node-2",
        "the owner is {owner}, MetalLB elects node-2"
    );
    eprintln!(
        "TIMING l2 owner {owner} answers {ip_s} after {:?}",
        created.elapsed()
    );
    // The client's own resolution lands on the owner's MAC.
    // One UDP datagram makes the kernel resolve the address (nothing listens behind it:
    // only the resolution counts).
    let sent = sl.net.net.client().output(
        "bash",
        &["-c", &format!("echo x > /dev/udp/{ip_s}/9; sleep 0.5")],
    )?;
    let (mac, state) = neighbour(sl, &ip_s)?.with_context(|| {
        format!(
            "no neighbour entry after a datagram ({sent:?}); the client's: {:?}",
            sl.net.net.client().ip(&["neigh", "show"])
        )
    })?;
    ensure!(
        macs.get(&mac) == Some(&owner),
        "the client's neighbour entry is {mac} ({state}), want {owner}'s"
    );
    let on = announced_on(sl, &ip_s).await?;
    ensure!(on == [owner.clone()], "announced metric set on {on:?}");
    // MetalLB's counters on the owner (the arpings and the datagram asked it).
    let body = sl.speaker(2).metrics().await?;
    let asked = metric_value(
        &body,
        &format!("metallb_layer2_requests_received{{ip=\"{ip_s}\"}}"),
    )
    .unwrap_or(0.0);
    let answered = metric_value(
        &body,
        &format!("metallb_layer2_responses_sent{{ip=\"{ip_s}\"}}"),
    )
    .unwrap_or(0.0);
    ensure!(
        asked >= 1.0 && answered >= 1.0,
        "node-2 counted {asked} requests and {answered} responses for {ip_s}"
    );
    wait_node_assigned(sl, &owner).await?;

    // The owner is no longer selected: another node takes over, and its gratuitous ARP
    // moves the client's neighbour entry without the client asking.
    let moved = Instant::now();
    sl.label_node(&owner, key, None).await?;
    let next = wait_owner(sl, &ip_s, &macs, Some(&owner)).await?;
    ensure!(
        next == "node-1",
        "the next owner is {next}, MetalLB elects node-1"
    );
    eprintln!(
        "TIMING l2 move {owner} -> {next} after {:?}",
        moved.elapsed()
    );
    wait_until(
        &format!("the client's neighbour entry for {ip_s} moves to {next}"),
        WITHIN,
        || async {
            match neighbour(sl, &ip_s).map_err(|e| format!("{e:#}"))? {
                Some((mac, _)) if macs.get(&mac) == Some(&next) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    wait_until("the announced metric follows the owner", WITHIN, || async {
        let on = announced_on(sl, &ip_s)
            .await
            .map_err(|e| format!("{e:#}"))?;
        if on == [next.clone()] {
            Ok(())
        } else {
            Err(format!("{on:?}"))
        }
    })
    .await?;
    wait_node_assigned(sl, &next).await?;

    // node-1's network is unavailable: node-3 (last in the order) takes over.
    let moved = Instant::now();
    network_unavailable(sl, "node-1", true).await?;
    let third = wait_owner(sl, &ip_s, &macs, Some("node-1")).await?;
    ensure!(
        third == "node-3",
        "the owner is {third}, MetalLB elects node-3"
    );
    eprintln!(
        "TIMING l2 move node-1 -> node-3 (NetworkUnavailable) after {:?}",
        moved.elapsed()
    );
    // Back: node-1 takes it back (the hash order, MetalLB's failback).
    network_unavailable(sl, "node-1", false).await?;
    let back = wait_owner(sl, &ip_s, &macs, Some("node-3")).await?;
    ensure!(
        back == "node-1",
        "the owner is {back}, MetalLB elects node-1 again"
    );
    let next = back;

    // kubectl shows the owner.
    let out = sl
        .lab
        .kubectl_ok(
            &[
                "get",
                "servicel2statuses",
                "-n",
                sl.namespace(),
                "-o",
                "wide",
            ],
            None,
        )
        .await?;
    eprintln!("{out}");
    ensure!(out.contains(&next), "kubectl get servicel2statuses: {out}");

    // The Service goes: nobody answers, no status object.
    sl.delete_service("web").await?;
    wait_until("nobody answers and no ServiceL2Status", WITHIN, || async {
        let a = arp_answers(sl, &ip_s).map_err(|e| format!("{e:#}"))?;
        let s = l2_statuses(sl).await.map_err(|e| format!("{e:#}"))?;
        if a.is_empty() && s.is_empty() {
            Ok(())
        } else {
            Err(format!("answers {a:?}, statuses {s:?}"))
        }
    })
    .await?;
    Ok(())
}
