//! The lab's API server frozen (SIGSTOP) for longer than the Lease's renew deadline while
//! Services are being created, then continued, with two controllers (each its own
//! ServiceAccount, so the audit log tells them apart): no address is ever given to two
//! Services, no address once seen moves, and the Service writes of the audit log come from
//! one identity per term (no more changes of writer than Lease transitions).
//!
//! A test binary of its own: cargo runs test binaries one after the other, so freezing the
//! API server cannot disturb the other end-to-end tests. Needs a running lab.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::{Lab, wait_until};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const SERVICES: usize = 40;
/// Faster than the defaults so the freeze outlasts a term within a short test.
const LEASE_FLAGS: [&str; 6] = [
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "500ms",
];
const FREEZE: Duration = Duration::from_secs(8);

/// The tests of this binary freeze the one API server: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Continues the API server when dropped (also when the test fails mid-freeze).
struct Frozen(u32);

impl Frozen {
    fn stop(pid: u32) -> Result<Frozen> {
        signal("-STOP", pid)?;
        Ok(Frozen(pid))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = signal("-CONT", self.0);
    }
}

fn signal(sig: &str, pid: u32) -> Result<()> {
    let st = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    ensure!(st.success(), "kill {sig} {pid} failed");
    Ok(())
}

fn first_ingress(svc: &Service) -> Option<String> {
    svc.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

/// `(stage time, user)` of every successful Service status write in `ns` logged after
/// line `mark` of the audit log.
fn status_writes(log: &std::path::Path, mark: u64, ns: &str) -> Result<Vec<(String, String)>> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let mut out = Vec::new();
    for line in text.lines().skip(usize::try_from(mark)?) {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let o = &e["objectRef"];
        let ok = e["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|c| (200..300).contains(&c));
        if e["stage"] == "ResponseComplete"
            && e["verb"] == "patch"
            && o["resource"] == "services"
            && o["subresource"] == "status"
            && o["namespace"] == ns
            && ok
        {
            out.push((
                e["stageTimestamp"].as_str().unwrap_or_default().to_owned(),
                e["user"]["username"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ));
        }
    }
    out.sort();
    Ok(out)
}

#[tokio::test]
async fn a_frozen_api_server_never_gives_an_address_twice_nor_moves_one() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("freeze").await?;
    let ns = setup.namespace().to_owned();
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    pools
        .patch(
            "a",
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(json!({
                "apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
                "metadata": {"name": "a", "namespace": ns},
                "spec": {"addresses": ["198.51.100.64/26"]},
            })),
        )
        .await?;
    let (kubeconfig_b, user_b) = setup.second_account(&lab, "controller-b").await?;
    let mut a = setup.start("freeze-a", &LEASE_FLAGS).await?;
    let mut b = setup
        .start_as("freeze-b", &LEASE_FLAGS, &kubeconfig_b)
        .await?;
    let audit_log = lab.env.state_dir.join("audit/audit.log");
    let mark = lab.audit().mark().await?;
    let pid: u32 = std::fs::read_to_string(lab.env.state_dir.join("run/kube-apiserver.pid"))?
        .trim()
        .parse()?;

    let services: Api<Service> = Api::namespaced(lab.client.clone(), &ns);
    // Every address each Service was ever seen with.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(
        BTreeMap::<String, BTreeSet<String>>::new(),
    ));
    let observer = tokio::spawn({
        let (services, seen) = (services.clone(), seen.clone());
        async move {
            loop {
                if let Ok(Ok(list)) = tokio::time::timeout(
                    Duration::from_secs(1),
                    services.list(&ListParams::default()),
                )
                .await
                {
                    let mut seen = seen.lock().unwrap();
                    for s in &list.items {
                        if let Some(ip) = first_ingress(s) {
                            seen.entry(s.metadata.name.clone().unwrap_or_default())
                                .or_default()
                                .insert(ip);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    let body = async {
        let creator = async {
            for i in 0..SERVICES {
                lab.create_lb_service(&ns, &setup.service(&format!("s{i:02}")))
                    .await?;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            anyhow::Ok(())
        };
        let freezer = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let frozen = Frozen::stop(pid)?;
            eprintln!("froze the API server (pid {pid}) for {FREEZE:?}");
            tokio::time::sleep(FREEZE).await;
            drop(frozen);
            anyhow::Ok(())
        };
        let (c, f) = tokio::join!(creator, freezer);
        c?;
        f?;
        wait_until(
            &format!("all {SERVICES} Services allocated"),
            Duration::from_secs(90),
            || async {
                let list = services
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let n = list
                    .items
                    .iter()
                    .filter(|s| first_ingress(s).is_some())
                    .count();
                if n == SERVICES {
                    Ok(())
                } else {
                    Err(format!("{n} allocated"))
                }
            },
        )
        .await?;
        // Watch a little longer for anything moving.
        tokio::time::sleep(Duration::from_secs(3)).await;
        a.process.check_running()?;
        b.process.check_running()?;
        // The freeze outlasted the leader's renew deadline: its term ended.
        let logs = format!("{}{}", a.process.log_text(), b.process.log_text());
        ensure!(
            logs.contains("lost the lease"),
            "no controller lost its term during the freeze"
        );
        let seen = seen.lock().unwrap().clone();
        let moved: Vec<_> = seen.iter().filter(|(_, ips)| ips.len() > 1).collect();
        ensure!(moved.is_empty(), "addresses moved: {moved:?}");
        let mut owners: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
        for (svc, ips) in &seen {
            for ip in ips {
                owners.entry(ip).or_default().push(svc);
            }
        }
        let shared: Vec<_> = owners.iter().filter(|(_, s)| s.len() > 1).collect();
        ensure!(shared.is_empty(), "addresses given twice: {shared:?}");
        ensure!(
            seen.len() == SERVICES,
            "{} Services seen with an address",
            seen.len()
        );

        // One writer per term.
        let lease = Api::<Lease>::namespaced(lab.client.clone(), &ns)
            .get("metallb-rs-controller")
            .await?;
        let transitions = lease.spec.and_then(|s| s.lease_transitions).unwrap_or(0);
        let writes = wait_until(
            "the audit log has every status write",
            Duration::from_secs(10),
            || async {
                let w = status_writes(&audit_log, mark, &ns).map_err(|e| e.to_string())?;
                if w.len() >= SERVICES {
                    Ok(w)
                } else {
                    Err(format!("{} writes", w.len()))
                }
            },
        )
        .await?;
        let writers: Vec<&String> = writes.iter().map(|(_, u)| u).collect();
        let changes = writers.windows(2).filter(|w| w[0] != w[1]).count();
        let users: BTreeSet<&String> = writers.iter().copied().collect();
        eprintln!(
            "{} status writes by {users:?}; {changes} changes of writer; {transitions} Lease transitions",
            writes.len()
        );
        ensure!(
            users.iter().all(|u| **u == setup.user || **u == user_b),
            "writes by others: {users:?}"
        );
        ensure!(
            i64::try_from(changes)? <= i64::from(transitions),
            "{changes} changes of writer but only {transitions} Lease transitions: {writes:?}"
        );
        anyhow::Ok(())
    };
    let result = body.await;
    observer.abort();
    let log_a = a.process.log_text();
    let log_b = b.process.log_text();
    let _ = a.process.terminate(Duration::from_secs(25)).await;
    let _ = b.process.terminate(Duration::from_secs(25)).await;
    match result {
        Ok(()) => setup.delete().await,
        Err(e) => Err(e.context(format!("freeze-a log:\n{log_a}\nfreeze-b log:\n{log_b}"))),
    }
}

/// SIGTERM while the API server is frozen (the Lease release, the status writes and
/// every request hang): the controller still exits within its shutdown budget, well
/// inside the Pod's grace period.
#[tokio::test]
async fn shutdown_fits_its_budget_while_the_api_server_is_frozen() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("frozen-stop").await?;
    let pid: u32 = std::fs::read_to_string(lab.env.state_dir.join("run/kube-apiserver.pid"))?
        .trim()
        .parse()?;
    let mut ctl = setup
        .start("frozen-stop", &["--shutdown-timeout", "5s"])
        .await?;
    let result = async {
        let frozen = Frozen::stop(pid)?;
        let started = std::time::Instant::now();
        let status = ctl.process.terminate(Duration::from_secs(15)).await;
        let took = started.elapsed();
        drop(frozen);
        let status = status?;
        eprintln!("exited {status} {took:?} after SIGTERM with the API server frozen");
        ensure!(
            took < Duration::from_secs(8),
            "took {took:?} for a 5 s shutdown budget"
        );
        anyhow::Ok(())
    }
    .await;
    match result {
        Ok(()) => setup.delete().await,
        Err(e) => Err(e.context(format!("log:\n{}", ctl.process.log_text()))),
    }
}

/// The API server frozen while three speakers announce a Service: nothing is withdrawn
/// and every session stays up during the freeze and after it; once it is back the
/// speakers follow changes again (the Service's deletion withdraws it) and write their
/// status (ServiceBGPStatus objects go with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_api_server_withdraws_nothing_and_speakers_follow_once_it_is_back() -> Result<()> {
    use e2e::EndpointSpec;
    use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available, pool_ip};

    let _serial = SERIAL.lock().await;
    if !netns_available("freeze speakers")? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let pid: u32 = std::fs::read_to_string(lab.env.state_dir.join("run/kube-apiserver.pid"))?
        .trim()
        .parse()?;
    let sl = SpeakerLab::start(&lab, SpeakerLabOptions::new("freeze-speakers")).await?;
    let body = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&[1, 2, 3], Duration::from_secs(30))
            .await?;
        let ip = pool_ip(90);
        let prefix = format!("{ip}/32");
        sl.create_service(
            sl.service("web")
                .endpoints(vec![EndpointSpec::ready("node-1")]),
            &[ip],
        )
        .await?;
        sl.wait_next_hops(&prefix, &[1, 2, 3], Duration::from_secs(10))
            .await?;
        let frozen = Frozen::stop(pid)?;
        eprintln!("froze the API server (pid {pid}) for {FREEZE:?}");
        let started = std::time::Instant::now();
        let mut samples = 0;
        while started.elapsed() < FREEZE {
            let hops = e2e::speakers::next_hops(&sl.router, &prefix)?;
            ensure!(
                hops.len() == 3,
                "{:?} into the freeze the router has {hops:?} for {prefix}",
                started.elapsed()
            );
            samples += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        drop(frozen);
        eprintln!("{samples} samples during the freeze: 3 paths each time");
        // Still there a while after, and the speakers follow the API server again.
        tokio::time::sleep(Duration::from_secs(2)).await;
        sl.wait_next_hops(&prefix, &[1, 2, 3], Duration::from_secs(1))
            .await?;
        sl.wait_sessions(&[1, 2, 3], Duration::from_secs(1)).await?;
        sl.delete_service("web").await?;
        sl.wait_next_hops(&prefix, &[], Duration::from_secs(20))
            .await?;
        wait_until(
            "no ServiceBGPStatus left",
            Duration::from_secs(20),
            || async {
                let n = sl
                    .list("ServiceBGPStatus", None)
                    .await
                    .map_err(|e| e.to_string())?
                    .len();
                if n == 0 {
                    Ok(())
                } else {
                    Err(format!("{n} left"))
                }
            },
        )
        .await?;
        Ok(())
    };
    let result = body.await;
    sl.finish(result).await
}

/// MetalLB's order for 198.51.100.90 (see `speakers/l2_failover.rs`): node-2, node-1,
/// node-3.
const L2_OWNER: usize = 2;
const L2_NEXT: usize = 1;

/// Issue 24, item 1: with the API server frozen, the owner of a layer-2 address is
/// killed and restarted at once. The restarted process cannot list anything, so it must
/// not become a candidate: its successor keeps answering for the whole outage (before,
/// the other members pulled the new process in within seconds and the successor let go:
/// nobody answered until the API server came back). After the API server returns, the
/// owner takes its address back. Every sample counts every answer: never none, never two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speaker_restarted_while_the_api_server_is_away_takes_nothing_from_its_successor()
-> Result<()> {
    use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available};
    let test = "l2-api-away";
    if !netns_available(test)? {
        return Ok(());
    }
    let _serial = SERIAL.lock().await;
    let lab = Lab::connect().await?;
    let pid: u32 = std::fs::read_to_string(lab.env.state_dir.join("run/kube-apiserver.pid"))?
        .trim()
        .parse()?;
    let mut sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test).membership()).await?;
    let r = api_away_scenario(&mut sl, pid).await;
    sl.finish(r).await
}

async fn api_away_scenario(sl: &mut e2e::speakers::SpeakerLab, pid: u32) -> Result<()> {
    use e2e::EndpointSpec;
    use testkit::plan;
    // In the pool, as `e2e::speakers::pool_ip(90)`.
    let ip = std::net::Ipv4Addr::new(198, 51, 100, 90);
    let ip_s = ip.to_string();
    let mac = |n: usize| -> Result<String> {
        let node = plan::node_name(n);
        let iface = sl.net.net.l2_iface(&node).to_owned();
        sl.net.net.node(n).mac(&iface)
    };
    let (owner_mac, next_mac) = (mac(L2_OWNER)?, mac(L2_NEXT)?);
    sl.l2_address_on_segment(ip).await?;
    sl.apply("L2Advertisement", "l2", json!({})).await?;
    sl.wait_configuration_valid(Duration::from_secs(60)).await?;
    let svc = sl.service("web").endpoints(vec![
        EndpointSpec::ready("node-1"),
        EndpointSpec::ready("node-3"),
    ]);
    sl.create_service(svc, &[std::net::IpAddr::V4(ip)]).await?;
    wait_answered(sl, ip, &owner_mac, Duration::from_secs(60))
        .await
        .context("the owner answers alone")?;
    // The successor's fast path watches the owner before the fault.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let frozen = Frozen::stop(pid)?;
    eprintln!("froze the API server (pid {pid})");
    let at = std::time::Instant::now();
    sl.kill_speaker(L2_OWNER)?;
    sl.launch_speaker(L2_OWNER, &[])?;
    // The successor takes over (about 0.5 s; each probe is a 1 s arping window, and a
    // loaded 2-core machine needs a margin: 8 s), then keeps
    // answering, alone, while the API server stays away (the gap opened at ~9 s).
    wait_answered(sl, ip, &next_mac, Duration::from_secs(8))
        .await
        .context("the successor did not take over with the API server away")?;
    let took = at.elapsed();
    let mut samples = Vec::new();
    while at.elapsed() < Duration::from_secs(25) {
        let a = sl.l2_answers(ip)?;
        samples.push((at.elapsed(), a.clone()));
        ensure!(
            a == [next_mac.clone()],
            "{:?} after the kill, with the API server away, {ip_s} is answered by {a:?}, want only the successor {next_mac}; samples {samples:?}",
            at.elapsed()
        );
    }
    eprintln!(
        "TIMING l2 takeover with the API server away: {took:?}; {} samples of one answer over {:?}",
        samples.len(),
        at.elapsed()
    );
    drop(frozen);
    eprintln!("continued the API server");
    // The restarted owner lists, joins and takes its address back.
    let back = std::time::Instant::now();
    wait_answered(sl, ip, &owner_mac, Duration::from_secs(60))
        .await
        .context("the restarted owner answers alone")?;
    eprintln!(
        "TIMING l2 owner back {:?} after the API server returned",
        back.elapsed()
    );
    Ok(())
}

/// Waits until `want` alone answers the client's ARP for `ip`.
async fn wait_answered(
    sl: &e2e::speakers::SpeakerLab,
    ip: std::net::Ipv4Addr,
    want: &str,
    timeout: Duration,
) -> Result<()> {
    wait_until(&format!("only {want} answers {ip}"), timeout, || async {
        let a = sl.l2_answers(ip).map_err(|e| format!("{e:#}"))?;
        if a == [want.to_owned()] {
            Ok(())
        } else {
            Err(format!("answers {a:?}"))
        }
    })
    .await
}

/// Sessions the router has seen established and dropped per node address (FRR's
/// `connectionsEstablished` and `connectionsDropped`).
fn router_connections(frr: &testkit::Frr) -> Result<BTreeMap<String, (u64, u64)>> {
    let v = frr.show_json("show bgp neighbors json")?;
    let mut out = BTreeMap::new();
    for (addr, n) in v.as_object().into_iter().flatten() {
        out.insert(
            addr.clone(),
            (
                n["connectionsEstablished"].as_u64().unwrap_or(0),
                n["connectionsDropped"].as_u64().unwrap_or(0),
            ),
        );
    }
    Ok(out)
}

/// The API server killed (SIGKILL: the speakers' connections are refused, their watches
/// break) and started again 6 s later, while three speakers announce a Service: at the
/// router nothing is withdrawn during the outage and no session drops at all; once
/// the API server is back the speakers list and watch again: the Service's address
/// changed after the restart moves its route (the new /32 from every node, the old one
/// withdrawn).
/// (bench-bgp-faults runs the long version: more Services, more rounds, MetalLB beside.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_api_server_withdraws_nothing_and_speakers_list_again_once_it_is_back()
-> Result<()> {
    use e2e::EndpointSpec;
    use e2e::apiserver::{ApiServer, wait_api};
    use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available, pool_ip};

    let test = "kill-api";
    if !netns_available(test)? {
        return Ok(());
    }
    let _serial = SERIAL.lock().await;
    let lab = Lab::connect().await?;
    let api = ApiServer::new(&lab)?;
    let sl = SpeakerLab::start(&lab, SpeakerLabOptions::new(test)).await?;
    let body = async {
        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&[1, 2, 3], Duration::from_secs(30))
            .await?;
        let (ip, ip2) = (pool_ip(91), pool_ip(92));
        let (prefix, prefix2) = (format!("{ip}/32"), format!("{ip2}/32"));
        sl.create_service(
            sl.service("web")
                .endpoints(vec![EndpointSpec::ready("node-1")]),
            &[ip],
        )
        .await?;
        sl.wait_next_hops(&prefix, &[1, 2, 3], Duration::from_secs(10))
            .await?;
        let before = router_connections(&sl.router)?;
        tokio::task::block_in_place(|| api.kill())?;
        eprintln!("killed the API server for {KILLED:?}");
        let started = std::time::Instant::now();
        let mut samples = 0;
        let restarted = async {
            while started.elapsed() < KILLED {
                let hops = e2e::speakers::next_hops(&sl.router, &prefix)?;
                ensure!(
                    hops.len() == 3,
                    "{:?} into the outage the router has {hops:?} for {prefix}",
                    started.elapsed()
                );
                samples += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Ok(())
        }
        .await;
        // Started again whatever the samples said: the lab must outlive the test.
        api.start()?;
        let back = wait_api(&lab).await?;
        restarted?;
        eprintln!(
            "{samples} samples during the outage: 3 paths each time; API server back after {:?}",
            started.elapsed()
        );
        // The speakers follow the API server again: the Service's address changed (the
        // controller's write, done here) moves its route. (Not a new Service: its
        // EndpointSlice would wait for the lab's kube-controller-manager to re-watch.)
        let mut tries = 0;
        while let Err(e) = sl.set_ingress("web", &[ip2]).await {
            tries += 1;
            ensure!(
                tries < 60,
                "changing web's address after the restart: {e:#}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // The speakers' watches retry at most 16 s apart (cluster_view::reflector's
        // back-off: 8 s jittered up to twice; with kube's default of 30 s, up to 60 s,
        // they came back 58-64 s after the API server did), and a restarted API
        // server refuses them for a few seconds more (403 while its authorizer's cache
        // fills; 13-21 s measured here): 45 s. See BENCHMARKS.md, "Speaker: BGP and API
        // server faults".
        sl.wait_next_hops(&prefix2, &[1, 2, 3], Duration::from_secs(45))
            .await?;
        eprintln!(
            "web's new address announced by every node {:?} after the API server answered",
            back.elapsed()
        );
        sl.wait_next_hops(&prefix, &[], Duration::from_secs(10))
            .await?;
        let after = router_connections(&sl.router)?;
        ensure!(
            before == after,
            "sessions at the router changed across the outage: {before:?} -> {after:?}"
        );
        Ok(())
    };
    let result = body.await;
    // The tests after this one need the lab's kube-controller-manager back (it re-watches
    // with client-go's back-off): whatever the result, leave only once it is.
    let kcm = e2e::apiserver::wait_controller_manager(&lab).await;
    let result = result.and(kcm.map(|t| eprintln!("kube-controller-manager back after {t:?}")));
    sl.finish(result).await
}

/// How long the kill test keeps the API server down.
const KILLED: Duration = Duration::from_secs(6);
