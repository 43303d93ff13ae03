//! Layer-2 failover with membership on (issue 15): three speakers run the membership
//! protocol as deployed (`--ml-bindaddr` = the node's address, peers found through
//! their Pods' IPs by `--ml-labels`, an encrypted membership with
//! `--ml-secret-key-path`). The owner of a Service's address is (1) killed with
//! SIGKILL, (2) stopped with SIGTERM, (3) cut from the segment at the switch (silently,
//! nftables): each time the next node of MetalLB's order answers, its gratuitous ARP
//! moves the client's neighbour entry (measured from the fault), exactly one node
//! answers the client, ServiceL2Status and the announced metric follow, and when the
//! old owner is back it takes the address back (MetalLB's failback: the hash order).
//! No API server is involved in the detection (the speakers' status writes are what
//! the test reads, after the fact).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, metric_value, netns_available, pool_ip};
use e2e::{EndpointSpec, Lab, wait_until};
use serde_json::json;
use testkit::plan;

use crate::l2::{
    WITHIN, arp_answers, l2_statuses, neighbour, node_macs, wait_node_assigned, wait_owner,
};

/// The longest a failover may take in this test: the goal is 1 s at p99 (BENCHMARKS.md
/// measures it); the margin covers a loaded 2-core machine.
const FAILOVER_WITHIN: Duration = Duration::from_secs(3);

/// MetalLB's order for 198.51.100.90 (sha256("node-N#198.51.100.90") ascending,
/// computed outside the project with Python's hashlib): node-2, node-1, node-3.
const OWNER: usize = 2;
const NEXT: &str = "node-1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_is_replaced_within_a_second_and_takes_its_address_back_when_it_returns()
-> Result<()> {
    let test = "spk-l2-failover";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let mut sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test).membership()).await?;
    let r = scenario(&mut sl).await;
    sl.finish(r).await
}

/// Polls the client's neighbour entry for `ip` until it holds `mac`; returns the time
/// from `since`.
async fn neighbour_moves(sl: &SpeakerLab, ip: &str, mac: &str, since: Instant) -> Result<Duration> {
    let deadline = since + FAILOVER_WITHIN;
    loop {
        let now = neighbour(sl, ip)?;
        if now.as_ref().is_some_and(|(m, _)| m == mac) {
            return Ok(since.elapsed());
        }
        ensure!(
            Instant::now() < deadline,
            "the client's neighbour entry for {ip} is {now:?} {:?} after the fault, want {mac}",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Makes sure the client has a neighbour entry for `ip` on `mac` (a datagram makes the
/// kernel resolve it), fresh before a round. An entry on another MAC is deleted first.
async fn resolve(sl: &SpeakerLab, ip: &str, mac: &str) -> Result<()> {
    let client_if = sl.net.net.l2_iface("client").to_owned();
    wait_until(
        &format!("the client resolves {ip} to {mac}"),
        WITHIN,
        || async {
            if let Ok(Some((m, _))) = neighbour(sl, ip)
                && m != mac
            {
                let _ = sl
                    .net
                    .net
                    .client()
                    .ip(&["neigh", "del", ip, "dev", &client_if]);
            }
            let _ = sl.net.net.client().output(
                "bash",
                &["-c", &format!("echo x > /dev/udp/{ip}/9; sleep 0.2")],
            );
            match neighbour(sl, ip).map_err(|e| format!("{e:#}"))? {
                Some((m, _)) if m == mac => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// The source MACs (lower case) of the ARP packets in `text` (tcpdump -e) that claim
/// `ip`: replies `<ip> is-at` and gratuitous requests `tell <ip>`.
fn arp_claims(text: &str, ip: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(&format!("{ip} is-at")) || l.contains(&format!("tell {ip},")))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The lines of tcpdump's `-tt` output (epoch seconds first) stamped at `since`
/// or later: what a capture started just before a fault saw after it (the owner's
/// gratuitous burst, 5 s after its last change, may still send a packet in between).
fn since(text: &str, since: std::time::SystemTime) -> String {
    let t0 = since
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    text.lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .and_then(|t| t.parse::<f64>().ok())
                .is_some_and(|t| t >= t0)
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Node `n`'s counter `name` (0 when absent).
async fn counter(sl: &SpeakerLab, n: usize, name: &str) -> Result<f64> {
    let body = sl.speaker(n).metrics().await?;
    Ok(metric_value(&body, name).unwrap_or(0.0))
}

/// Exactly one MAC answers the client's ARP for `ip`, and it is `mac`.
fn one_answer(sl: &SpeakerLab, ip: &str, mac: &str) -> Result<()> {
    let answers = arp_answers(sl, ip)?;
    ensure!(
        answers == [mac.to_owned()],
        "answers to the client's ARP for {ip}: {answers:?}, want only {mac}"
    );
    Ok(())
}

/// Each speaker's published membership view: node -> (state, live nodes).
async fn membership_views(sl: &SpeakerLab) -> Result<BTreeMap<String, (String, Vec<String>)>> {
    let states = sl
        .list(
            "ConfigurationState",
            Some("metallb.io/component-type=speaker"),
        )
        .await?;
    Ok(states
        .iter()
        .filter_map(|o| {
            let node = o
                .metadata
                .labels
                .as_ref()?
                .get("metallb.io/node-name")?
                .clone();
            let m = &o.data["status"]["layer2Membership"];
            let live = m["liveSpeakers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            Some((node, (m["state"].as_str()?.to_owned(), live)))
        })
        .collect())
}

/// What both scenarios start from: the probe address's Service answered by its owner
/// (MetalLB's order), whose successor watches it.
struct Setup {
    ip_s: String,
    macs: BTreeMap<String, String>,
    mac_of: BTreeMap<String, String>,
    owner: String,
    client_if: String,
}

/// A pool, an L2Advertisement and Service `web` at the probe address; waits until its
/// owner answers alone and node-1 watches it.
async fn setup(sl: &mut SpeakerLab) -> Result<Setup> {
    let ip = pool_ip(90);
    let ip_s = ip.to_string();
    let macs = node_macs(sl)?;
    let mac_of: BTreeMap<String, String> =
        macs.iter().map(|(m, n)| (n.clone(), m.clone())).collect();
    let owner = plan::node_name(OWNER);
    let client_if = sl.net.net.l2_iface("client").to_owned();
    sl.l2_address_on_segment(ip).await?;
    sl.apply("L2Advertisement", "l2", json!({})).await?;
    sl.wait_configuration_valid(WITHIN).await?;
    let svc = sl.service("web").endpoints(vec![
        EndpointSpec::ready("node-1"),
        EndpointSpec::ready("node-3"),
    ]);
    sl.create_service(svc, &[ip]).await?;
    let first = wait_owner(sl, &ip_s, &macs, None).await?;
    ensure!(
        first == owner,
        "the owner is {first}, MetalLB elects {owner}"
    );
    // Every speaker publishes its view: joined, all three live.
    let all: Vec<String> = ["node-1", "node-2", "node-3"].map(str::to_owned).to_vec();
    wait_until("every speaker reports all three live", WITHIN, || async {
        let v = membership_views(sl).await.map_err(|e| format!("{e:#}"))?;
        if v.len() == 3 && v.values().all(|(s, live)| s == "Joined" && *live == all) {
            Ok(())
        } else {
            Err(format!("{v:?}"))
        }
    })
    .await?;
    // The successor's fast path watches the owner (heartbeat up within about 1 s).
    wait_until("node-1 watches the owner", WITHIN, || async {
        let w = counter(sl, 1, "metallb_rs_membership_watched_owners")
            .await
            .map_err(|e| format!("{e:#}"))?;
        if w == 1.0 {
            Ok(())
        } else {
            Err(format!("{w}"))
        }
    })
    .await?;
    Ok(Setup {
        ip_s,
        macs,
        mac_of,
        owner,
        client_if,
    })
}

async fn scenario(sl: &mut SpeakerLab) -> Result<()> {
    let Setup {
        ip_s,
        macs,
        mac_of,
        owner,
        client_if,
    } = setup(sl).await?;

    let mut times = Vec::new();
    for fault in ["SIGKILL", "SIGTERM", "link cut"] {
        resolve(sl, &ip_s, &mac_of[&owner]).await?;
        // Let the heartbeat settle after the previous return.
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Every ARP packet the client receives (broadcast announcements and the answers
        // to it; a cut node's packets never reach it, which is what a cut is).
        let pcap = sl
            .setup
            .dir
            .join(format!("failover-{}.pcap", fault.replace(' ', "-")));
        let capture = sl.net.net.client().capture(&client_if, &pcap, &["arp"])?;
        let at = Instant::now();
        let cut = match fault {
            "SIGKILL" => {
                sl.kill_speaker(OWNER)?;
                None
            }
            "SIGTERM" => {
                // Timed from the signal (the process then takes its time to end).
                sl.speaker(OWNER)
                    .child
                    .signal(testkit::process::Signal::TERM);
                None
            }
            _ => Some(sl.net.net.cut_cable(&owner)?),
        };
        // The fault is in force (signal sent, drop rule in place).
        let fault_at = std::time::SystemTime::now();
        let took = neighbour_moves(sl, &ip_s, &mac_of[NEXT], at)
            .await
            .with_context(|| format!("failover after {fault} of {owner}"))?;
        eprintln!("TIMING l2 failover ({fault}) {owner} -> {NEXT}: {took:?}");
        times.push((fault, took));
        // Exactly one node answers, and the status follows.
        one_answer(sl, &ip_s, &mac_of[NEXT])?;
        // Since the fault, every ARP packet claiming the address (answers and
        // gratuitous announcements) came from one MAC: the new owner's.
        let path = capture.stop()?;
        let packets = testkit::capture::read_pcap(&path, &["-tt"])?;
        let claims = arp_claims(&since(&packets, fault_at), &ip_s);
        ensure!(
            claims.iter().all(|m| *m == mac_of[NEXT]) && !claims.is_empty(),
            "ARP packets claiming {ip_s} on the segment after {fault}: from {claims:?}, want only {NEXT}'s {}",
            mac_of[NEXT]
        );
        if cut.is_none() {
            let now = wait_owner(sl, &ip_s, &macs, Some(&owner)).await?;
            ensure!(now == NEXT, "after {fault} the owner is {now}, want {NEXT}");
        } else {
            // The cut owner still reaches the API server but no speaker: in its own view
            // it still owns the address, and keeps its ServiceL2Status (MetalLB's split
            // brain; `--ml-self-fence` makes it stand down): only the new owner's object
            // is asserted.
            wait_until(
                &format!("a ServiceL2Status names {NEXT}"),
                WITHIN,
                || async {
                    let s = l2_statuses(sl).await.map_err(|e| format!("{e:#}"))?;
                    if s.iter()
                        .any(|(label, node, ..)| label == NEXT && node == NEXT)
                    {
                        Ok(())
                    } else {
                        Err(format!("{s:?}"))
                    }
                },
            )
            .await?;
        }
        wait_node_assigned(sl, NEXT).await?;
        // Back: the old owner takes its address back (the hash order).
        let back = Instant::now();
        let again = match cut {
            Some(c) => {
                c.restore()?;
                // The successor declared the owner down; on hearing it again it sends
                // the owner its state (the suspicion among it), the owner refutes and
                // takes its address back (under a second in the lab; it took up to 27 s
                // when the owner learnt of the suspicion only at the next full sync).
                wait_until(
                    &format!("{owner} owns {ip_s} again after the cut"),
                    Duration::from_secs(10),
                    || async {
                        wait_owner(sl, &ip_s, &macs, Some(NEXT))
                            .await
                            .map_err(|e| format!("{e:#}"))
                    },
                )
                .await?
            }
            None => {
                if fault == "SIGTERM" {
                    sl.stop_speaker(OWNER, Duration::from_secs(5))?;
                }
                sl.start_speaker(OWNER, &[]).await?;
                wait_owner(sl, &ip_s, &macs, Some(NEXT)).await?
            }
        };
        ensure!(
            again == owner,
            "after {fault} and back the owner is {again}, want {owner}"
        );
        eprintln!("TIMING l2 failback after {fault}: {:?}", back.elapsed());
        // The client follows without help: a restarted owner claims the address anew
        // (gratuitous ARP); after a cut, the owner never stopped owning it in its own
        // view and announces it again when the successor's heartbeat is back (the
        // successor watches it again once it releases the address).
        let returned = Instant::now();
        wait_until(
            &format!("the client's entry for {ip_s} back on {owner}'s MAC after {fault}"),
            Duration::from_secs(8),
            || async {
                match neighbour(sl, &ip_s).map_err(|e| format!("{e:#}"))? {
                    Some((m, _)) if m == mac_of[&owner] => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await?;
        eprintln!(
            "TIMING l2 client back on {owner} after {fault}: {:?} after the failback",
            returned.elapsed()
        );
        resolve(sl, &ip_s, &mac_of[&owner]).await?;
        one_answer(sl, &ip_s, &mac_of[&owner])?;
    }
    // The successor counted its takeovers on the fast path (the SIGTERM hand-over is a
    // leave, not a detection).
    let downs = counter(sl, 1, "metallb_rs_membership_owner_down_total").await?;
    ensure!(
        downs >= 2.0,
        "node-1 counted {downs} owners down, want at least 2 (SIGKILL, link cut)"
    );
    eprintln!("failover times: {times:?}");
    Ok(())
}

/// Issue 24 item 2 in the lab, with `--ml-self-fence`: the owner is cut from the other
/// speakers only (its UDP 7946 dropped) while the client, the router and the API server
/// still reach it, for longer than the membership's suspicion (4 s at 3 speakers).
/// Without the fence it keeps answering beside its successor for the whole cut (MetalLB's
/// split brain); with it, it stands down before the successor takes over and stays down
/// for the whole cut (the fence used to lift itself after 5-7 s, once the other side was
/// Down in its own view). Every ARP answer is counted (one sample per second, `arping`
/// without `-c`): after the first second, exactly one node answers in every sample.
/// When the cut heals, the fence lifts and the owner takes its address back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_cut_from_the_speakers_only_stands_down_for_the_whole_cut() -> Result<()> {
    let test = "spk-l2-fence";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let mut sl = SpeakerLab::start(
        &lab,
        SpeakerLabOptions::new(test)
            .membership()
            .speaker_arg("--ml-self-fence"),
    )
    .await?;
    let r = fence_scenario(&mut sl).await;
    sl.finish(r).await
}

/// How long the owner stays cut from the other speakers: past the suspicion (4 s at 3
/// speakers) and the members' Down, when the old fence lifted itself.
const FENCE_CUT: usize = 12;

async fn fence_scenario(sl: &mut SpeakerLab) -> Result<()> {
    let Setup {
        ip_s,
        macs,
        mac_of,
        owner,
        ..
    } = setup(sl).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let cut = testkit::cut::drop_local_udp(sl.net.net.node(OWNER), 7946)?;
    let mut samples = Vec::new();
    for _ in 0..FENCE_CUT {
        samples.push(arp_answers(sl, &ip_s)?);
    }
    let fenced = counter(sl, OWNER, "metallb_rs_membership_fenced").await?;
    // What the speakers publish of their views, and what explain makes of them, while
    // the cut lasts (issue 27): the owner says it is fenced, the others hold it down.
    let views = membership_views(sl).await?;
    let others: BTreeMap<String, (String, Vec<String>)> = views
        .iter()
        .filter(|(n, _)| **n != owner)
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let want_others: Vec<String> = ["node-1", "node-3"].map(str::to_owned).to_vec();
    ensure!(
        views.get(&owner).map(|(s, _)| s.as_str()) == Some("SelfFenced")
            && others.len() == 2
            && others
                .values()
                .all(|(s, live)| s == "Joined" && *live == want_others),
        "the speakers' membership views during the cut: {views:?}"
    );
    let (code, text) = crate::explain::metallbctl_as(
        sl,
        &crate::explain::explain_args(sl, "web", true),
        &sl.lab.env.kubeconfig,
    )
    .await?;
    ensure!(
        code == Some(0),
        "explain during the cut: exit {code:?}: {text}"
    );
    let v: serde_json::Value = serde_json::from_str(&text).context("explain's JSON")?;
    let l2: BTreeMap<String, (bool, String)> = v["l2"]["nodes"]
        .as_array()
        .context("explain has no l2 nodes")?
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap_or_default().to_owned(),
                (
                    n["announced"].as_bool().unwrap_or_default(),
                    n["hint"].as_str().unwrap_or_default().to_owned(),
                ),
            )
        })
        .collect();
    ensure!(
        l2.get(NEXT).is_some_and(|(a, _)| *a)
            && l2
                .get(&owner)
                .is_some_and(|(a, h)| !*a && h.contains("SelfFenced")),
        "explain during the cut: {l2:?}"
    );
    cut.restore()?;
    let named: Vec<Vec<&str>> = samples
        .iter()
        .map(|s| {
            s.iter()
                .map(|m| macs.get(m).map_or(m.as_str(), |n| n.as_str()))
                .collect()
        })
        .collect();
    eprintln!("answers per second of the cut: {named:?}");
    // The first second holds the hand-over (the owner fences at about 350 ms, the
    // successor answers from about 500 ms): both may show there, one after the other.
    for (i, answers) in samples.iter().enumerate().skip(1) {
        ensure!(
            *answers == [mac_of[NEXT].clone()],
            "second {} of the cut: answers from {:?}, want only {NEXT} (all: {named:?})",
            i + 1,
            named[i]
        );
    }
    ensure!(
        fenced == 1.0,
        "{owner}'s fenced gauge is {fenced} at the end of the cut"
    );

    // Healed: the fence lifts and the owner takes its address back (the hash order).
    let again = wait_until(
        &format!("{owner} owns {ip_s} again after the cut"),
        Duration::from_secs(15),
        || async {
            wait_owner(sl, &ip_s, &macs, Some(NEXT))
                .await
                .map_err(|e| format!("{e:#}"))
        },
    )
    .await?;
    ensure!(
        again == owner,
        "after the cut the owner is {again}, want {owner}"
    );
    let fenced = counter(sl, OWNER, "metallb_rs_membership_fenced").await?;
    ensure!(
        fenced == 0.0,
        "{owner}'s fenced gauge is {fenced} after the heal"
    );
    resolve(sl, &ip_s, &mac_of[&owner]).await?;
    one_answer(sl, &ip_s, &mac_of[&owner])?;
    Ok(())
}
