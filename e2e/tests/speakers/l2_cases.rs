//! Layer-2 election cases in the lab (issue 15), each against MetalLB's rules, with the
//! client's ARP answers as the proof: `externalTrafficPolicy: Local` elects among the
//! nodes with a serving endpoint (and follows the endpoint); the exclude label removes
//! a node from the candidates (and its removal brings it back); two Services sharing an
//! address (`allow-shared-ip`) are answered by one node until the last of them goes; an
//! L2Advertisement whose `interfaces` do not exist on the node gets the Warning
//! `announceFailed` with MetalLB's text and nobody answers.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available, pool_ip};
use e2e::{EndpointSpec, Lab, wait_until};
use serde_json::json;
use testkit::plan;

use crate::l2::{WITHIN, arp_answers, node_macs};

/// MetalLB's label that takes a node out of the candidates.
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Waits until the nodes answering `ip` are exactly `want` (empty: nobody).
async fn wait_answered_by(
    sl: &SpeakerLab,
    macs: &BTreeMap<String, String>,
    ip: &str,
    want: &[&str],
) -> Result<()> {
    wait_until(&format!("{ip} answered by {want:?}"), WITHIN, || async {
        let answers = arp_answers(sl, ip).map_err(|e| format!("{e:#}"))?;
        let mut nodes: Vec<String> = answers
            .iter()
            .map(|m| macs.get(m).cloned().unwrap_or_else(|| m.clone()))
            .collect();
        nodes.sort();
        nodes.dedup();
        if nodes == want {
            Ok(())
        } else {
            Err(format!("answered by {nodes:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_policy_exclusion_shared_addresses_and_missing_interfaces() -> Result<()> {
    let test = "spk-l2-cases";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let mut sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test)).await?;
    let r = scenario(&mut sl).await;
    sl.finish(r).await
}

async fn scenario(sl: &mut SpeakerLab) -> Result<()> {
    let macs = node_macs(sl)?;
    let client_if = sl.net.net.l2_iface("client").to_owned();
    sl.net
        .net
        .client()
        .ip(&["route", "add", "198.51.100.0/24", "dev", &client_if])?;
    sl.apply(
        "IPAddressPool",
        "pool",
        json!({"addresses": ["198.51.100.0/25"]}),
    )
    .await?;
    sl.apply(
        "IPAddressPool",
        "ifpool",
        json!({"addresses": ["198.51.100.200/29"]}),
    )
    .await?;
    // Only the nodes labelled by this test: other Nodes of the lab (without a speaker)
    // never win.
    let key = sl.label_key();
    for node in sl.node_names() {
        sl.label_node(&node, &key, Some("yes")).await?;
    }
    let mine = json!([{"matchLabels": {key.as_str(): "yes"}}]);
    sl.apply(
        "L2Advertisement",
        "l2",
        json!({"ipAddressPools": ["pool"], "nodeSelectors": mine}),
    )
    .await?;
    sl.apply(
        "L2Advertisement",
        "l2-if",
        json!({"ipAddressPools": ["ifpool"], "interfaces": ["no-such0"], "nodeSelectors": mine}),
    )
    .await?;
    sl.wait_configuration_valid(WITHIN).await?;

    // externalTrafficPolicy Local: only node-3 has an endpoint, so node-3 answers
    // (198.51.100.90's hash order is node-2, node-1, node-3: the policy, not the hash).
    let ip = pool_ip(90);
    let svc = sl
        .service("local")
        .local()
        .endpoints(vec![EndpointSpec::ready("node-3")]);
    let created = sl.create_service(svc, &[ip]).await?;
    wait_answered_by(sl, &macs, &ip.to_string(), &["node-3"]).await?;
    // The endpoint moves to node-1: so does the address.
    sl.lab
        .set_endpoints(&created, &[EndpointSpec::ready("node-1")])
        .await?;
    wait_answered_by(sl, &macs, &ip.to_string(), &["node-1"]).await?;
    // No serving endpoint anywhere: nobody answers.
    sl.lab
        .set_endpoints(&created, &[EndpointSpec::not_ready("node-1")])
        .await?;
    wait_answered_by(sl, &macs, &ip.to_string(), &[]).await?;
    sl.delete_service("local").await?;

    // The exclude label: the hash winner node-2 is excluded, node-1 (next) answers; the
    // label removed, node-2 answers again.
    let svc = sl
        .service("web")
        .endpoints(vec![EndpointSpec::ready("node-3")]);
    sl.create_service(svc, &[ip]).await?;
    wait_answered_by(sl, &macs, &ip.to_string(), &["node-2"]).await?;
    sl.label_node("node-2", EXCLUDE, Some("")).await?;
    wait_answered_by(sl, &macs, &ip.to_string(), &["node-1"]).await?;
    sl.label_node("node-2", EXCLUDE, None).await?;
    wait_answered_by(sl, &macs, &ip.to_string(), &["node-2"]).await?;
    sl.delete_service("web").await?;
    wait_answered_by(sl, &macs, &ip.to_string(), &[]).await?;

    // Two Services sharing 198.51.100.92: one node answers it until the last one goes.
    let shared = pool_ip(92);
    for name in ["sa", "sb"] {
        let svc = sl
            .service(name)
            .annotation("metallb.io/allow-shared-ip", "k")
            .endpoints(vec![EndpointSpec::ready("node-1")]);
        sl.create_service(svc, &[shared]).await?;
    }
    let answers = wait_until("one node answers the shared address", WITHIN, || async {
        let a = arp_answers(sl, &shared.to_string()).map_err(|e| format!("{e:#}"))?;
        if a.len() == 1 {
            Ok(a)
        } else {
            Err(format!("{a:?}"))
        }
    })
    .await?;
    let owner = macs
        .get(&answers[0])
        .cloned()
        .unwrap_or_else(|| answers[0].clone());
    sl.delete_service("sa").await?;
    // Still answered, by the same node, for a while after one of them went.
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_answered_by(sl, &macs, &shared.to_string(), &[owner.as_str()]).await?;
    sl.delete_service("sb").await?;
    wait_answered_by(sl, &macs, &shared.to_string(), &[]).await?;

    // Interfaces that do not exist: nobody answers, and the owner says why, in
    // MetalLB's words.
    let if_ip: std::net::IpAddr = "198.51.100.201".parse()?;
    let svc = sl
        .service("ifsvc")
        .endpoints(vec![EndpointSpec::ready("node-1")]);
    sl.create_service(svc, &[if_ip]).await?;
    let prefix =
        format!("the interfaces specified by LB IP \"{if_ip}\" doesn't exist in assigned node \"");
    let msg = wait_until("the Warning announceFailed on ifsvc", WITHIN, || async {
        let out = sl
            .lab
            .kubectl_ok(&["get", "events", "-n", sl.namespace(), "-o", "json"], None)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["reason"] == "announceFailed"
                    && e["type"] == "Warning"
                    && e["involvedObject"]["name"] == "ifsvc"
            })
            .filter_map(|e| e["message"].as_str().map(str::to_owned))
            .find(|m| m.starts_with(&prefix))
            .ok_or_else(|| "no such event yet".to_string())
    })
    .await?;
    ensure!(
        msg.ends_with("\" with protocol \"layer2\"")
            && (1..=3).any(|n| msg.contains(&format!("node \"{}\"", plan::node_name(n)))),
        "announceFailed message: {msg}"
    );
    wait_answered_by(sl, &macs, &if_ip.to_string(), &[]).await?;
    Ok(())
}
