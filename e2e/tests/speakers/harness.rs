//! The harness itself, with any speaker that watches its configuration: each speaker
//! runs in its node namespace, becomes ready, and writes its ConfigurationState
//! `speaker-node-N` Valid through its node's API relay.

use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::Lab;
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_speaker_runs_in_its_node_namespace_and_reports_valid_through_the_relay() -> Result<()>
{
    let test = "spk-harness";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test)).await?;
    let body = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_configuration_valid(Duration::from_secs(15)).await?;
        for n in 1..=3 {
            ensure!(
                sl.net.relayed(n) >= 1,
                "node-{n}: nothing went through its API relay"
            );
            let sp = sl.speaker(n);
            let netns_of_pid = std::fs::read_link(format!("/proc/{}/ns/net", sp.child.pid()))?;
            let own = std::fs::read_link("/proc/self/ns/net")?;
            // The child is `ip netns exec ... speaker` (exec'd in place): its namespace
            // is the node's, not ours.
            ensure!(
                netns_of_pid != own,
                "the speaker of node-{n} runs in the root namespace ({netns_of_pid:?})"
            );
            let h = sp.health("/healthz").await?;
            ensure!(h.starts_with("HTTP/1.1 200 "), "node-{n} /healthz: {h}");
        }
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}
