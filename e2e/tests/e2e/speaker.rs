//! The speaker against the lab's API server, as its ServiceAccount with the deployed
//! RBAC, in a namespace of its own: its configuration as node-1 sees it, the last good
//! one kept when a new one is invalid, `ConfigurationState speaker-node-1` and
//! `metallb_k8s_client_config_*` following each attempt.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use e2e::{Lab, RunningController, wait_until};
use kube::api::{DeleteParams, DynamicObject};
use serde_json::{Value, json};

use crate::controller::{apply, pool};

const NODE: &str = "node-1";

async fn state(lab: &Lab, ns: &str) -> Result<(String, String, Value), String> {
    let api = lab.metallb(&lab.client, ns, "ConfigurationState");
    let o: DynamicObject = api
        .get_opt(&format!("speaker-{NODE}"))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no ConfigurationState yet")?;
    let s = &o.data["status"];
    Ok((
        s["result"].as_str().unwrap_or_default().to_owned(),
        s["errorSummary"].as_str().unwrap_or_default().to_owned(),
        serde_json::to_value(&o.metadata.labels).unwrap_or_default(),
    ))
}

async fn metric(port: u16, name: &str) -> Result<String, String> {
    let body = metrics_text(port).await?;
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .map(|l| l[name.len() + 1..].trim().to_owned())
        .ok_or_else(|| format!("{name} not in the metrics"))
}

/// GET /metrics over plain HTTP on 127.0.0.1.
async fn metrics_text(port: u16) -> Result<String, String> {
    e2e::controller::http_get(port, "/metrics")
        .await
        .map_err(|e| e.to_string())
}

async fn wait_state(lab: &Lab, ns: &str, result: &str, error_part: &str) -> Result<Duration> {
    let started = Instant::now();
    wait_until(
        &format!("speaker-{NODE} {result} ({error_part:?})"),
        Duration::from_secs(15),
        || async {
            let (r, e, _) = state(lab, ns).await?;
            if r == result && e.contains(error_part) {
                Ok(())
            } else {
                Err(format!("{r} {e:?}"))
            }
        },
    )
    .await?;
    Ok(started.elapsed())
}

async fn wait_metric(port: u16, name: &str, want: &str) -> Result<()> {
    wait_until(
        &format!("{name} {want}"),
        Duration::from_secs(10),
        || async {
            let v = metric(port, name).await?;
            if v == want { Ok(()) } else { Err(v) }
        },
    )
    .await
}

#[tokio::test]
async fn the_speaker_keeps_its_last_good_configuration_and_reports_each_attempt() -> Result<()> {
    let lab = Lab::connect().await?;
    let setup = lab.speaker_setup("speaker-config").await?;
    let ns = setup.namespace().to_owned();
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    let peers = lab.metallb(&lab.client, &ns, "BGPPeer");
    apply(&pools, "a", pool("a", &["198.51.100.0/24"])).await?;
    let peer = |name: &str, spec: Value| json!({"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer", "metadata": {"name": name}, "spec": spec});
    apply(
        &peers,
        "router",
        peer(
            "router",
            json!({"myASN": 64513, "peerASN": 64512, "peerAddress": "192.0.2.1"}),
        ),
    )
    .await?;
    // Invalid, but for other nodes only: node-1 leaves it out, as MetalLB's speaker.
    apply(
        &peers,
        "elsewhere",
        peer(
            "elsewhere",
            json!({"myASN": 64513, "peerASN": 64512, "peerAddress": "not-an-ip",
                   "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "no-such-node"}}]}),
        ),
    )
    .await?;
    let (mut speaker, port): (RunningController, u16) =
        setup.start_speaker("speaker-node-1", NODE).await?;
    let body = async {
        wait_state(&lab, &ns, "Valid", "").await?;
        let (_, _, labels) = state(&lab, &ns).await.map_err(anyhow::Error::msg)?;
        ensure!(
            labels["metallb.io/component-type"] == "speaker"
                && labels["metallb.io/node-name"] == NODE,
            "labels {labels}"
        );
        wait_metric(port, "metallb_k8s_client_config_loaded_bool", "1").await?;
        wait_metric(port, "metallb_k8s_client_config_stale_bool", "0").await?;

        // A bad edit to a running system (the status writer writes an object at most
        // once a second: let the first write age): an overlapping pool. Invalid, the
        // running configuration stays.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        apply(&pools, "b", pool("b", &["198.51.100.128/25"])).await?;
        let took = wait_state(&lab, &ns, "Invalid", "overlaps").await?;
        eprintln!("BENCH speaker ConfigurationState Invalid {took:?} after the bad apply returned");
        ensure!(
            took < Duration::from_secs(3),
            "Invalid shown after {took:?}"
        );
        wait_metric(port, "metallb_k8s_client_config_stale_bool", "1").await?;
        wait_metric(port, "metallb_k8s_client_config_loaded_bool", "1").await?;
        ensure!(
            speaker
                .process
                .log_text()
                .contains("keeping the last valid configuration"),
            "no 'keeping the last valid configuration' in the log"
        );

        // Reverted to exactly the running configuration: Valid and not stale (MetalLB's
        // speaker leaves config_stale_bool at 1 there).
        pools.delete("b", &DeleteParams::default()).await?;
        let took = wait_state(&lab, &ns, "Valid", "").await?;
        eprintln!("BENCH speaker ConfigurationState Valid again {took:?} after the revert");
        wait_metric(port, "metallb_k8s_client_config_stale_bool", "0").await?;
        speaker.process.check_running()?;
        anyhow::Ok(())
    };
    let result = body.await;
    let log = speaker.process.log_text();
    let _ = speaker.process.terminate(Duration::from_secs(10)).await;
    match result {
        Ok(()) => setup.delete().await,
        Err(e) => Err(e.context(format!("speaker log:\n{log}"))),
    }
}
