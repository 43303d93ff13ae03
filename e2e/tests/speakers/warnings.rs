//! Selector combinations that cannot overlap (`config::overlap`) in the speakers'
//! ConfigurationState: a `ConfigurationWarnings` condition naming the object and field
//! while the configuration stays `Valid` (routes untouched), gone once it is fixed.

use std::time::Duration;

use anyhow::Result;
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available};
use e2e::{Lab, wait_until};
use serde_json::{Value, json};

/// `(result, the ConfigurationWarnings condition)` of speaker-<node>'s
/// ConfigurationState.
async fn state(sl: &SpeakerLab, node: &str) -> Result<(String, Option<Value>)> {
    sl.configuration_warnings(node).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_that_cannot_overlap_is_a_warning_condition_not_invalid() -> Result<()> {
    if !netns_available("spk-warn")? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let sl = SpeakerLab::start(&lab, SpeakerLabOptions::new("spk-warn")).await?;
    let body = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_configuration_valid(Duration::from_secs(10)).await?;
        // A second advertisement of the pool for nodes that do not exist.
        sl.apply(
            "BGPAdvertisement",
            "nowhere",
            json!({"ipAddressPools": ["pool"],
                   "nodeSelectors": [{"matchLabels": {"zone": "nowhere"}}]}),
        )
        .await?;
        wait_until(
            "speaker-node-1: Valid with a ConfigurationWarnings condition",
            Duration::from_secs(10),
            || async {
                let (result, cond) = state(&sl, "node-1").await.map_err(|e| format!("{e:#}"))?;
                let msg = cond
                    .as_ref()
                    .and_then(|c| c["message"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                let ok = result == "Valid"
                    && cond.as_ref().is_some_and(|c| {
                        c["status"] == "True" && c["reason"] == "SelectorsCannotOverlap"
                    })
                    && msg.contains(
                        "BGPAdvertisement/nowhere: spec.nodeSelectors match none of the 3 Nodes",
                    );
                if ok {
                    Ok(())
                } else {
                    Err(format!("{result} {cond:?}"))
                }
            },
        )
        .await?;
        // Fixed: the condition goes, still Valid.
        sl.delete("BGPAdvertisement", "nowhere").await?;
        wait_until(
            "speaker-node-1: Valid without ConfigurationWarnings",
            Duration::from_secs(10),
            || async {
                let (result, cond) = state(&sl, "node-1").await.map_err(|e| format!("{e:#}"))?;
                if result == "Valid" && cond.is_none() {
                    Ok(())
                } else {
                    Err(format!("{result} {cond:?}"))
                }
            },
        )
        .await?;
        anyhow::Ok(())
    };
    let r = body.await;
    sl.finish(r).await
}
