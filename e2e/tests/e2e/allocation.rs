//! The controller allocating LoadBalancer addresses in the lab (`cargo build -p controller`
//! first), with the deployed RBAC, isolated from the other tests by namespace and
//! `--lb-class` ([`e2e::controller`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use e2e::{AuditFilter, ControllerSetup, Lab, RunningController, wait_until};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};

use crate::controller::{apply, pool};

const POOL_ANNOTATION: &str = "metallb.io/ip-allocated-from-pool";

fn ingress(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .map(|i| {
            i.iter()
                .filter_map(|e| e.ip.as_deref().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter()
        .map(|s| s.parse().expect("test address"))
        .collect()
}

/// Waits until Service `name` has exactly `want` as its ingress and `pool` in the
/// allocation annotation.
async fn wait_ingress(api: &Api<Service>, name: &str, want: &[IpAddr], pool: &str) -> Result<()> {
    wait_until(
        &format!("Service {name} ingress {want:?} from pool {pool}"),
        Duration::from_secs(30),
        || async {
            let svc = api.get(name).await.map_err(|e| e.to_string())?;
            let got = ingress(&svc);
            let annotation = svc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(POOL_ANNOTATION))
                .cloned();
            if got == want && annotation.as_deref() == Some(pool) {
                Ok(())
            } else {
                Err(format!("ingress {got:?}, {POOL_ANNOTATION} {annotation:?}"))
            }
        },
    )
    .await
}

/// `(assignedIPv4, availableIPv4, assignedIPv6, availableIPv6)` of a pool.
async fn pool_status(
    pools: &Api<DynamicObject>,
    name: &str,
) -> Result<(i64, i64, i64, i64), String> {
    let p = pools.get(name).await.map_err(|e| e.to_string())?;
    let s = &p.data["status"];
    let n = |k: &str| s[k].as_i64().unwrap_or(-1);
    Ok((
        n("assignedIPv4"),
        n("availableIPv4"),
        n("assignedIPv6"),
        n("availableIPv6"),
    ))
}

async fn wait_pool_status(
    pools: &Api<DynamicObject>,
    name: &str,
    want: (i64, i64, i64, i64),
) -> Result<()> {
    wait_until(
        &format!("IPAddressPool {name} status (assignedIPv4, availableIPv4, assignedIPv6, availableIPv6) = {want:?}"),
        Duration::from_secs(30),
        || async {
            let got = pool_status(pools, name).await?;
            if got == want { Ok(()) } else { Err(format!("{got:?}")) }
        },
    )
    .await
}

/// The `(reason, note)` of the events about Service `name`.
async fn events_of(lab: &Lab, ns: &str, name: &str) -> Result<Vec<(String, String)>> {
    let list = Api::<Event>::namespaced(lab.client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

async fn stop(ctl: &mut RunningController) -> Result<()> {
    let status = ctl.process.terminate(Duration::from_secs(10)).await?;
    ensure!(
        status.success(),
        "exit after SIGTERM: {status}; log:\n{}",
        ctl.process.log_text()
    );
    Ok(())
}

/// Stops the controller after a test body; on failure the error carries its log.
async fn finish(ctl: &mut RunningController, result: Result<()>) -> Result<()> {
    match result {
        Ok(()) => stop(ctl).await,
        Err(e) => Err(e.context(format!("controller log:\n{}", ctl.process.log_text()))),
    }
}

#[tokio::test]
async fn services_get_addresses_pool_annotation_events_and_pool_status() -> Result<()> {
    let started = Instant::now();
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("alloc").await?;
    let ns = setup.namespace().to_owned();
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    let services: Api<Service> = Api::namespaced(lab.client.clone(), &ns);
    apply(
        &pools,
        "a",
        pool("a", &["198.51.100.0/28", "2001:db8:100::/124"]),
    )
    .await?;
    let mut ctl = setup.start("controller", &[]).await?;
    let body = async {
        // One Service: the lowest address, the annotation, MetalLB's event, kubectl's view.
        lab.create_lb_service(&ns, &setup.service("web")).await?;
        wait_ingress(&services, "web", &ips(&["198.51.100.0"]), "a").await?;
        wait_until(
            "event IPAllocated on web",
            Duration::from_secs(10),
            || async {
                let ev = events_of(&lab, &ns, "web")
                    .await
                    .map_err(|e| e.to_string())?;
                if ev.contains(&(
                    "IPAllocated".into(),
                    "Assigned IP [\"198.51.100.0\"]".into(),
                )) {
                    Ok(())
                } else {
                    Err(format!("{ev:?}"))
                }
            },
        )
        .await?;
        let table = lab
            .kubectl_ok(&["get", "svc", "-n", &ns, "web"], None)
            .await?;
        ensure!(
            table
                .lines()
                .nth(1)
                .is_some_and(|l| l.split_whitespace().nth(3) == Some("198.51.100.0")),
            "kubectl get svc shows the EXTERNAL-IP:\n{table}"
        );
        wait_pool_status(&pools, "a", (1, 15, 0, 16)).await?;

        // Sharing: same key, different ports: one address for both.
        for (name, proto) in [("dns-tcp", "TCP"), ("dns-udp", "UDP")] {
            let svc = setup
                .service(name)
                .only_port(proto, 53, 53)
                .annotation("metallb.io/allow-shared-ip", "dns");
            lab.create_lb_service(&ns, &svc).await?;
        }
        wait_ingress(&services, "dns-tcp", &ips(&["198.51.100.1"]), "a").await?;
        wait_ingress(&services, "dns-udp", &ips(&["198.51.100.1"]), "a").await?;

        // Dual stack: one address of each family from the same pool.
        let dual = setup
            .service("dual")
            .families("RequireDualStack", &["IPv4", "IPv6"]);
        lab.create_lb_service(&ns, &dual).await?;
        wait_ingress(
            &services,
            "dual",
            &ips(&["198.51.100.2", "2001:db8:100::"]),
            "a",
        )
        .await?;
        wait_pool_status(&pools, "a", (3, 13, 1, 15)).await?;

        // A requested address, and a request no pool can satisfy (MetalLB's event).
        let wanted = setup
            .service("wanted")
            .annotation("metallb.io/loadBalancerIPs", "198.51.100.9");
        lab.create_lb_service(&ns, &wanted).await?;
        wait_ingress(&services, "wanted", &ips(&["198.51.100.9"]), "a").await?;
        wait_pool_status(&pools, "a", (4, 12, 1, 15)).await?;
        let outside = setup
            .service("outside")
            .annotation("metallb.io/loadBalancerIPs", "203.0.113.5");
        lab.create_lb_service(&ns, &outside).await?;
        wait_until("event AllocationFailed on outside", Duration::from_secs(10), || async {
            let ev = events_of(&lab, &ns, "outside").await.map_err(|e| e.to_string())?;
            let want = format!(
                "Failed to allocate IP for \"{ns}/outside\": [\"203.0.113.5\"] is not allowed in config"
            );
            if ev.contains(&("AllocationFailed".into(), want)) { Ok(()) } else { Err(format!("{ev:?}")) }
        })
        .await?;

        // Pool status follows a Service going away.
        services.delete("web", &DeleteParams::default()).await?;
        wait_pool_status(&pools, "a", (3, 13, 1, 15)).await?;

        // A Service of no class (another controller's) is left alone.
        lab.create_lb_service(&ns, &e2e::LbService::new("unclassed"))
            .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let unclassed = services.get("unclassed").await?;
        ensure!(ingress(&unclassed).is_empty(), "{:?}", unclassed.status);

        // Nothing changes for 30 s: no write by the controller but its Lease renewals.
        let audit = lab.audit();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mark = audit.mark().await?;
        tokio::time::sleep(Duration::from_secs(30)).await;
        let idle = audit
            .count(Some(mark), &AuditFilter::user(&setup.user))
            .await?;
        let writes = idle.rows_except("leases");
        ensure!(
            writes.is_empty(),
            "writes by the idle controller (its Lease renewals aside): {writes:?}"
        );
        ensure!(
            !idle.rows().is_empty(),
            "the leading controller renews its Lease while idle: {:?}",
            idle.rows()
        );
        ctl.process.check_running()?;
        Ok(())
    };
    let result = body.await;
    finish(&mut ctl, result).await?;
    setup.delete().await?;
    eprintln!(
        "allocation e2e took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Creates `n` Services named `<prefix>-<i>` of the setup's class (IPv6 single stack),
/// returning when all are created.
async fn create_many(lab: &Lab, setup: &ControllerSetup, prefix: &str, n: usize) -> Result<()> {
    let ns = setup.namespace().to_owned();
    let mut tasks = tokio::task::JoinSet::new();
    let chunk = n.div_ceil(8);
    for w in 0..8 {
        let lab = lab.clone();
        let ns = ns.clone();
        let class = setup.lb_class.clone();
        let prefix = prefix.to_owned();
        tasks.spawn(async move {
            for i in (w * chunk)..((w + 1) * chunk).min(n) {
                let svc = e2e::LbService::new(&format!("{prefix}-{i}"))
                    .class(&class)
                    .families("SingleStack", &["IPv6"]);
                lab.create_lb_service(&ns, &svc).await?;
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("creating Services")??;
    }
    Ok(())
}

#[tokio::test]
async fn a_thousand_services_at_once_and_the_ingress_latency() -> Result<()> {
    let started = Instant::now();
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("bulk").await?;
    let ns = setup.namespace().to_owned();
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    let services: Api<Service> = Api::namespaced(lab.client.clone(), &ns);
    // IPv6 only: 1,000 addresses do not fit in the plan's IPv4 pool (lab/README.md).
    apply(&pools, "bulk", pool("bulk", &["2001:db8:100::/116"])).await?;
    let mut ctl = setup.start("controller", &[]).await?;
    let body = async {
        // Latency: one Service at a time, creation to ingress seen.
        let mut latencies = Vec::new();
        for i in 0..200 {
            let name = format!("lat-{i}");
            let svc = setup.service(&name).families("SingleStack", &["IPv6"]);
            let t0 = Instant::now();
            lab.create_lb_service(&ns, &svc).await?;
            loop {
                let s = services.get(&name).await?;
                if !ingress(&s).is_empty() {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(30) {
                    bail!("{name} got no address within 30 s");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            latencies.push(t0.elapsed());
        }
        latencies.sort();
        let median = latencies[latencies.len() / 2];
        let p99 = latencies[latencies.len() * 99 / 100];
        eprintln!("BENCH service-to-ingress over 200 Services: median {median:?}, p99 {p99:?}");
        ensure!(p99 < Duration::from_secs(10), "p99 {p99:?}");

        // 1,000 at once: all allocated, distinct, and few pool-status writes per second.
        let audit = lab.audit();
        let mark = audit.mark().await?;
        let t0 = Instant::now();
        create_many(&lab, &setup, "bulk", 1000).await?;
        let created = t0.elapsed();
        wait_until(
            "1,200 Services with an address",
            Duration::from_secs(180),
            || async {
                let list = services
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let with: usize = list.items.iter().filter(|s| !ingress(s).is_empty()).count();
                if with == 1200 {
                    Ok(())
                } else {
                    Err(format!("{with} of 1200"))
                }
            },
        )
        .await?;
        let all_allocated = t0.elapsed();
        wait_pool_status(&pools, "bulk", (0, 0, 1200, 4096 - 1200)).await?;
        let list = services.list(&ListParams::default()).await?;
        let mut seen = BTreeMap::new();
        for s in &list.items {
            for ip in ingress(s) {
                if let Some(other) = seen.insert(ip, s.metadata.name.clone()) {
                    bail!("{ip} given to {other:?} and {:?}", s.metadata.name);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let writes = audit
            .count(Some(mark), &AuditFilter::user(&setup.user))
            .await?;
        let rows = writes.rows();
        let pool_writes: u64 = rows
            .iter()
            .filter(|(_, resource, _)| resource.starts_with("ipaddresspools"))
            .map(|(_, _, n)| n)
            .sum();
        let elapsed = all_allocated.as_secs_f64() + 2.0;
        eprintln!(
            "BENCH 1,000 Services: created in {:.1} s, all allocated after {:.1} s; controller writes {:?}; pool-status writes {pool_writes} ({:.2}/s); API writes per allocation {:.2}",
            created.as_secs_f64(),
            all_allocated.as_secs_f64(),
            rows,
            pool_writes as f64 / elapsed,
            writes.total as f64 / 1000.0,
        );
        ensure!(
            (pool_writes as f64) <= elapsed + 3.0,
            "at most one pool-status write per second: {pool_writes} in {elapsed:.1} s"
        );
        ctl.process.check_running()?;
        Ok(())
    };
    let result = body.await;
    finish(&mut ctl, result).await?;
    setup.delete().await?;
    eprintln!("bulk e2e took {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The addresses of every Service of the namespace, by name.
async fn all_ingress(services: &Api<Service>) -> Result<BTreeMap<String, Vec<IpAddr>>> {
    Ok(services
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), ingress(s)))
        .collect())
}

#[tokio::test]
async fn a_restart_moves_no_address_and_two_controllers_never_both_allocate() -> Result<()> {
    let started = Instant::now();
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("lease").await?;
    let ns = setup.namespace().to_owned();
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    let services: Api<Service> = Api::namespaced(lab.client.clone(), &ns);
    apply(&pools, "a", pool("a", &["198.51.100.0/29"])).await?;

    // Three Services, then a restart during which one is deleted and one created.
    let mut first = setup.start("first", &[]).await?;
    let body = async {
        for (name, ip) in [
            ("a", "198.51.100.0"),
            ("b", "198.51.100.1"),
            ("c", "198.51.100.2"),
        ] {
            lab.create_lb_service(&ns, &setup.service(name)).await?;
            wait_ingress(&services, name, &ips(&[ip]), "a").await?;
        }
        Ok(())
    };
    let result = body.await;
    finish(&mut first, result).await?;
    services.delete("a", &DeleteParams::default()).await?;
    lab.create_lb_service(&ns, &setup.service("d")).await?;
    let mut first = setup.start("first-restarted", &[]).await?;
    let body = async {
        // d gets the freed lowest address; b and c keep theirs.
        wait_ingress(&services, "d", &ips(&["198.51.100.0"]), "a").await?;
        let now = all_ingress(&services).await?;
        ensure!(
            now["b"] == ips(&["198.51.100.1"]) && now["c"] == ips(&["198.51.100.2"]),
            "{now:?}"
        );
        Ok(())
    };
    let result = body.await;
    if let Err(e) = result {
        return finish(&mut first, Err(e)).await;
    }

    // A second controller stands by while the first holds the Lease.
    let mut second = setup.start("second", &[]).await?;
    let body = async {
        lab.create_lb_service(&ns, &setup.service("e")).await?;
        wait_ingress(&services, "e", &ips(&["198.51.100.3"]), "a").await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let log = second.process.log_text();
        ensure!(
            !log.contains("updated service object") && !log.contains("acquired the lease"),
            "the standby wrote or led while the first held the Lease:\n{log}"
        );
        Ok(())
    };
    let result = body.await;
    if let Err(e) = result {
        let _ = finish(&mut second, Ok(())).await;
        return finish(&mut first, Err(e)).await;
    }
    // The first stops (releasing the Lease): the second takes over at once and allocates;
    // nothing already allocated moves.
    let handover = Instant::now();
    finish(&mut first, Ok(())).await?;
    let body = async {
        lab.create_lb_service(&ns, &setup.service("f")).await?;
        wait_ingress(&services, "f", &ips(&["198.51.100.4"]), "a").await?;
        let took = handover.elapsed();
        eprintln!("BENCH lease hand-over on SIGTERM to the standby's first allocation: {took:?}");
        ensure!(took < Duration::from_secs(10), "hand-over took {took:?}");
        let log = second.process.log_text();
        ensure!(log.contains("acquired the lease"), "{log}");
        let now = all_ingress(&services).await?;
        let want: BTreeMap<String, Vec<IpAddr>> = [
            ("b", "198.51.100.1"),
            ("c", "198.51.100.2"),
            ("d", "198.51.100.0"),
            ("e", "198.51.100.3"),
            ("f", "198.51.100.4"),
        ]
        .into_iter()
        .map(|(n, ip)| (n.to_owned(), ips(&[ip])))
        .collect();
        ensure!(now == want, "after the hand-over: {now:?}");
        Ok(())
    };
    let result = body.await;
    finish(&mut second, result).await?;
    setup.delete().await?;
    eprintln!("lease e2e took {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
