//! Measurements of the responder for BENCHMARKS.md, in the project lab
//! (`testkit`: node-1 and the client on the MLD-snooping bridge), against
//! the Linux kernel answering for addresses configured on node-1 (the
//! anchor; MetalLB's Go speaker cannot run here). Built only with the
//! `bench-lab` feature; run in release, one test at a time:
//!
//! ```text
//! cargo test -p arp-ndp --release --features bench-lab --test bench_lab -- \
//!     --nocapture --test-threads=1
//! ```
//!
//! - `bench_reply_latency_and_rate`: node-1 owns 1,000 IPv4 addresses
//!   (198.18.0.1 on) and 1,000 IPv6 addresses (2001:db8:100::1 on) with the
//!   driver; then, with the driver stopped, the kernel answers for 1,000 +
//!   1,000 addresses configured on node-1's interface (198.18.8.1 on,
//!   2001:db8:101::1 on). For each: request-to-reply time of 1,000 ARP
//!   who-has and 1,000 Neighbor Solicitations sent one at a time from the
//!   client (kernel time stamps of the request leaving the client's
//!   interface and of the reply arriving there); then bursts at 1,000 to
//!   20,000 requests/s for 3 s each, cycling over the 1,000 addresses,
//!   counting replies; and at 20,000/s with the driver owning one address
//!   of each family (the cost per request without the 2,000).
//! - `bench_idle_cpu_1000_ips`: the driver thread's CPU time (schedstat)
//!   and wake-ups while owning 1,000 + 1,000 IPs: the gratuitous
//!   announcement phase (first 6 s) and then 60 s of steady idle; the
//!   process's RSS.
//!
//! Every output line with a figure starts with `BENCH`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use arp_ndp::packet::MacAddr;

mod lab_support;
use lab_support::{
    Client, KERNEL_V4_BASE, KERNEL_V6_BASE, OWNED_V4_BASE, OWNED_V6_BASE, Responder, RxFilter,
    addresses, configure_addresses, groups_of, percentile, us,
};

/// Addresses of each family.
const N: u32 = 1000;
/// Sequential requests per latency measurement (after the warm-up).
const LATENCY_SAMPLES: usize = 1000;
const LATENCY_WARMUP: usize = 20;
/// Offered loads, requests per second, each for `STEP`.
const RATES: [u32; 5] = [1_000, 2_000, 5_000, 10_000, 20_000];
const STEP: Duration = Duration::from_secs(3);
/// Replies are still collected this long after the last request.
const GRACE: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
struct Latency {
    sorted: Vec<Duration>,
    lost: usize,
    wrong_mac: usize,
}

/// Sends a request for each of `ips` in turn (cycling), each after the
/// previous one's reply or a 500 ms timeout, 1 ms apart; the time is from
/// the request leaving the client's interface to the reply arriving there
/// (both kernel time stamps).
fn latency(client: &Client, ips: &[IpAddr], mac: MacAddr) -> anyhow::Result<Latency> {
    client.set_filter(RxFilter::RequestsAndReplies)?;
    let mut r = Latency::default();
    for i in 0..LATENCY_WARMUP + LATENCY_SAMPLES {
        let ip = ips[i % ips.len()];
        client.send(&client.request(ip))?;
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut sent_at = None;
        let sample = loop {
            let Some(s) = client.recv(deadline.saturating_duration_since(Instant::now()))? else {
                break None;
            };
            if s.outgoing {
                if s.packet.request_for() == Some(ip) {
                    sent_at = Some(s.at);
                }
                continue;
            }
            if let Some((rip, rmac)) = s.packet.reply_for()
                && rip == ip
            {
                if rmac != Some(mac) {
                    r.wrong_mac += 1;
                }
                let t0 = sent_at.context("the request was not seen leaving the client")?;
                break Some(s.at.duration_since(t0)?);
            }
        };
        if i >= LATENCY_WARMUP {
            match sample {
                Some(d) => r.sorted.push(d),
                None => r.lost += 1,
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    r.sorted.sort();
    Ok(r)
}

#[derive(Debug, Default)]
struct RateStep {
    offered: u32,
    sent: usize,
    send_errors: usize,
    /// First to last request.
    send_wall: Duration,
    replies: usize,
    duplicates: usize,
    unanswered: usize,
    sorted: Vec<Duration>,
    rx_dropped: u32,
}

/// Requests at `rate` per second for [`STEP`], cycling over `ips`, from a
/// sender thread (paced by sleeping until each request is due); replies
/// collected until [`GRACE`] after the last request. A reply is matched to
/// the latest request for its address sent before it (each address comes
/// round every `ips.len() / rate` s, 50 ms at the highest rate); its time
/// is from just before the `send` call (user space) to the reply's
/// arrival (kernel stamp), so it includes the client's send path.
fn rate_step(client: &Client, ips: &[IpAddr], rate: u32) -> anyhow::Result<RateStep> {
    client.set_filter(RxFilter::RepliesOnly)?;
    let frames: Vec<Vec<u8>> = ips.iter().map(|ip| client.request(*ip)).collect();
    let index: HashMap<IpAddr, usize> = ips.iter().enumerate().map(|(i, ip)| (*ip, i)).collect();
    let total = usize::try_from(u64::from(rate) * STEP.as_secs())?;
    let done = AtomicBool::new(false);
    let before_drops = client.rx_dropped.load(Ordering::Relaxed);
    let (sends, send_errors, send_wall, replies) = thread::scope(|sc| {
        let sender = sc.spawn(|| {
            let mut sends: Vec<Vec<SystemTime>> = vec![Vec::new(); ips.len()];
            let mut errors = 0usize;
            let start = Instant::now();
            let interval = Duration::from_secs(1) / rate;
            let mut k = 0usize;
            while k < total {
                let due = start + interval * u32::try_from(k).unwrap_or(u32::MAX);
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                    continue;
                }
                let i = k % ips.len();
                let t = SystemTime::now();
                match client.send(&frames[i]) {
                    Ok(()) => sends[i].push(t),
                    Err(_) => errors += 1,
                }
                k += 1;
            }
            let wall = start.elapsed();
            done.store(true, Ordering::Release);
            (sends, errors, wall)
        });
        let mut replies: Vec<(usize, SystemTime)> = Vec::with_capacity(total);
        let mut done_at: Option<Instant> = None;
        loop {
            if done_at.is_none() && done.load(Ordering::Acquire) {
                done_at = Some(Instant::now());
            }
            if done_at.is_some_and(|d| d.elapsed() >= GRACE) {
                break;
            }
            if let Some(s) = client.recv(Duration::from_millis(20))?
                && let Some((ip, _)) = s.packet.reply_for()
                && let Some(i) = index.get(&ip)
            {
                replies.push((*i, s.at));
            }
        }
        let (sends, errors, wall) = sender
            .join()
            .map_err(|_| anyhow::anyhow!("sender panicked"))?;
        anyhow::Ok((sends, errors, wall, replies))
    })?;
    let mut used: Vec<Vec<bool>> = sends.iter().map(|v| vec![false; v.len()]).collect();
    let mut r = RateStep {
        offered: rate,
        sent: sends.iter().map(Vec::len).sum(),
        send_errors,
        send_wall,
        replies: replies.len(),
        rx_dropped: client.rx_dropped.load(Ordering::Relaxed) - before_drops,
        ..Default::default()
    };
    for (i, at) in replies {
        let k = sends[i].partition_point(|t| *t <= at);
        if k == 0 || used[i][k - 1] {
            r.duplicates += 1;
            continue;
        }
        used[i][k - 1] = true;
        r.sorted.push(at.duration_since(sends[i][k - 1])?);
    }
    r.unanswered = if ips.len() > 1 {
        r.sent - r.sorted.len()
    } else {
        // Not matched (see `rates`): count replies only.
        r.duplicates = 0;
        r.sorted.clear();
        r.sent.saturating_sub(r.replies)
    };
    r.sorted.sort();
    Ok(r)
}

fn family(ips: &[IpAddr]) -> &'static str {
    if ips[0].is_ipv4() { "arp" } else { "ndp" }
}

fn print_latency(who: &str, ips: &[IpAddr], l: &Latency) {
    eprintln!(
        "BENCH latency {who} {}: n={} lost={} wrong_mac={} median={} p99={} min={} max={}",
        family(ips),
        l.sorted.len(),
        l.lost,
        l.wrong_mac,
        us(percentile(&l.sorted, 0.5)),
        us(percentile(&l.sorted, 0.99)),
        us(l.sorted.first().copied().unwrap_or_default()),
        us(l.sorted.last().copied().unwrap_or_default()),
    );
}

/// Runs the rate steps for `ips`; `responder` (ours) adds its thread's CPU
/// and counters.
fn rates(
    who: &str,
    client: &Client,
    ips: &[IpAddr],
    offered: &[u32],
    responder: Option<&Responder>,
) -> anyhow::Result<()> {
    for &rate in offered {
        thread::sleep(Duration::from_secs(1));
        let cpu0 = responder.map(Responder::cpu).transpose()?;
        let c0 = responder.map(|r| r.totals(ips));
        let t0 = Instant::now();
        let s = rate_step(client, ips, rate)?;
        let wall = t0.elapsed();
        let ours = match (responder, cpu0, c0) {
            (Some(r), Some(cpu0), Some(c0)) => {
                let cpu = r.cpu()?.since(&cpu0);
                let c1 = r.totals(ips);
                format!(
                    " | responder: cpu={:.1}% of a core over {:.2} s, requests_received={}, responses_sent={}",
                    cpu.on_cpu_ns as f64 / wall.as_nanos() as f64 * 100.0,
                    wall.as_secs_f64(),
                    c1.0 - c0.0,
                    c1.1 - c0.1
                )
            }
            _ => String::new(),
        };
        let secs = s.send_wall.as_secs_f64();
        // With one address, requests for it are 50 us apart at the highest
        // rate: a reply cannot be matched to its request.
        let latency = if ips.len() > 1 {
            format!(
                "latency p50={} p99={} max={}",
                us(percentile(&s.sorted, 0.5)),
                us(percentile(&s.sorted, 0.99)),
                us(s.sorted.last().copied().unwrap_or_default()),
            )
        } else {
            "latency not matched (one address)".to_owned()
        };
        eprintln!(
            "BENCH rate {who} {}: offered={}/s sent={} ({:.0}/s) send_errors={} replies={} ({:.0}/s) unanswered={} ({:.2}%) duplicates={} client_rx_dropped={} {latency}{ours}",
            family(ips),
            s.offered,
            s.sent,
            s.sent as f64 / secs,
            s.send_errors,
            s.replies,
            s.replies as f64 / secs,
            s.unanswered,
            s.unanswered as f64 / s.sent.max(1) as f64 * 100.0,
            s.duplicates,
            s.rx_dropped,
        );
    }
    Ok(())
}

fn conditions() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    eprintln!(
        "BENCH conditions: {date}, {cpus} CPUs, load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

#[test]
fn bench_reply_latency_and_rate() -> anyhow::Result<()> {
    let _serial = testkit::serial()?;
    conditions();
    let lab = lab_support::lab()?;
    let if1 = lab.l2_iface("node-1").to_owned();
    let mac1: MacAddr = lab.node(1).mac(&if1)?.parse()?;
    let client = Client::open(&lab)?;

    // Ours: the driver owns 1,000 + 1,000 addresses.
    let (v4, v6) = addresses(OWNED_V4_BASE, OWNED_V6_BASE, N);
    let all: Vec<IpAddr> = v4.iter().chain(&v6).copied().collect();
    {
        let responder = Responder::start(lab.node(1))?;
        let t0 = Instant::now();
        responder.own_all(&all)?;
        // The burst: 5 rounds, 2 ARP packets per IPv4 address or 1 NA per
        // IPv6 address each.
        let want = u64::from(N) * 15;
        testkit::wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
            let g = responder.totals(&all).2;
            if g >= want {
                Ok(())
            } else {
                Err(format!("gratuitous sent: {g} of {want}"))
            }
        })?;
        eprintln!(
            "owned and announced {} IPs in {:?}",
            all.len(),
            t0.elapsed()
        );
        lab_support::wait_snooped(&lab, "node-1", &groups_of(&v6), Duration::from_secs(60))?;
        for ips in [&v4, &v6] {
            let l = latency(&client, ips, mac1)?;
            print_latency("ours", ips, &l);
        }
        for ips in [&v4, &v6] {
            rates("ours", &client, ips, &RATES, Some(&responder))?;
        }
    }

    // Ours again, owning one address of each family: the cost per request
    // that does not depend on how many addresses are owned.
    {
        let one = [v4[0], v6[0]];
        let responder = Responder::start(lab.node(1))?;
        responder.own_all(&one)?;
        testkit::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            let g = responder.totals(&one).2;
            if g >= 15 {
                Ok(())
            } else {
                Err(format!("gratuitous sent: {g} of 15"))
            }
        })?;
        for ip in one {
            rates("ours-1+1", &client, &[ip], &[20_000], Some(&responder))?;
        }
    }

    // The anchor: the kernel answers for addresses configured on node-1
    // (the driver is stopped).
    let (k4, k6) = addresses(KERNEL_V4_BASE, KERNEL_V6_BASE, N);
    let kall: Vec<IpAddr> = k4.iter().chain(&k6).copied().collect();
    configure_addresses(lab.node(1), &if1, &kall)?;
    lab_support::wait_snooped(&lab, "node-1", &groups_of(&k6), Duration::from_secs(60))?;
    thread::sleep(Duration::from_secs(2));
    for ips in [&k4, &k6] {
        let l = latency(&client, ips, mac1)?;
        print_latency("kernel", ips, &l);
    }
    for ips in [&k4, &k6] {
        rates("kernel", &client, ips, &RATES, None)?;
    }
    conditions();
    Ok(())
}

#[test]
fn bench_idle_cpu_1000_ips() -> anyhow::Result<()> {
    const ANNOUNCE: Duration = Duration::from_secs(6);
    const SETTLE: Duration = Duration::from_secs(4);
    const BASELINE: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(60);
    let _serial = testkit::serial()?;
    conditions();
    let lab = lab_support::lab()?;
    let if1 = lab.l2_iface("node-1").to_owned();
    let (v4, v6) = addresses(OWNED_V4_BASE, OWNED_V6_BASE, N);
    let all: Vec<IpAddr> = v4.iter().chain(&v6).copied().collect();

    let threads = || std::fs::read_dir("/proc/self/task").map(|d| d.count());
    let (rss_before, _) = lab_support::rss_kib()?;
    let threads_before = threads()?;
    let responder = Responder::start(lab.node(1))?;
    thread::sleep(Duration::from_secs(1));
    let (rss_started, _) = lab_support::rss_kib()?;
    eprintln!(
        "BENCH idle: driver started: threads {} -> {}, RSS {} -> {} KiB",
        threads_before,
        threads()?,
        rss_before,
        rss_started
    );

    // Nothing owned yet.
    let c0 = responder.cpu()?;
    thread::sleep(BASELINE);
    let base = responder.cpu()?.since(&c0);
    eprintln!(
        "BENCH idle: nothing owned, {:?}: cpu {:.3} ms ({:.4}% of a core), wake-ups {} voluntary + {} involuntary",
        BASELINE,
        base.on_cpu_ns as f64 / 1e6,
        base.on_cpu_ns as f64 / BASELINE.as_nanos() as f64 * 100.0,
        base.voluntary_switches,
        base.involuntary_switches
    );

    // Own 1,000 + 1,000: the announcement phase.
    let c0 = responder.cpu()?;
    let p0 = lab_support::process_cpu()?;
    let t0 = Instant::now();
    responder.own_all(&all)?;
    let last = *all.last().context("no addresses")?;
    testkit::wait_until(Duration::from_secs(60), Duration::from_millis(2), || {
        if responder.handle.counters(&last).gratuitous_sent > 0 {
            Ok(())
        } else {
            Err("last address not announced yet".to_owned())
        }
    })?;
    let owned_in = t0.elapsed();
    let own_cpu = responder.cpu()?.since(&c0);
    thread::sleep(ANNOUNCE.saturating_sub(t0.elapsed()));
    let announce_wall = t0.elapsed();
    let announce = responder.cpu()?.since(&c0);
    let announce_proc = lab_support::process_cpu()? - p0;
    let (r, s, g) = responder.totals(&all);
    ensure!(
        g == u64::from(N) * 15 && r == 0 && s == 0,
        "after {announce_wall:?}: gratuitous {g} (want {}), requests {r}, responses {s}",
        u64::from(N) * 15
    );
    let (rss_owned, _) = lab_support::rss_kib()?;
    eprintln!(
        "BENCH idle: own {} IPs: commands handled and first round sent in {:?}, driver cpu {:.1} ms",
        all.len(),
        owned_in,
        own_cpu.on_cpu_ns as f64 / 1e6
    );
    eprintln!(
        "BENCH idle: announcement phase ({:.2} s from the first own, {} gratuitous packets): driver cpu {:.1} ms ({:.2}% of a core), wake-ups {} + {}, process cpu {:?}",
        announce_wall.as_secs_f64(),
        g,
        announce.on_cpu_ns as f64 / 1e6,
        announce.on_cpu_ns as f64 / announce_wall.as_nanos() as f64 * 100.0,
        announce.voluntary_switches,
        announce.involuntary_switches,
        announce_proc
    );
    let groups = lab_support::joined_groups(lab.node(1), &if1)?;
    let want = groups_of(&v6);
    eprintln!(
        "BENCH idle: node-1 joined {} of {} solicited-node groups",
        want.intersection(&groups).count(),
        want.len()
    );

    // Steady idle.
    thread::sleep(SETTLE);
    let c1 = responder.cpu()?;
    let p1 = lab_support::process_cpu()?;
    let t1 = Instant::now();
    thread::sleep(IDLE);
    let wall = t1.elapsed();
    let idle = responder.cpu()?.since(&c1);
    let idle_proc = lab_support::process_cpu()? - p1;
    let (rss_end, hwm) = lab_support::rss_kib()?;
    eprintln!(
        "BENCH idle: steady, {:.1} s, 1,000 + 1,000 owned: driver cpu {:.3} ms ({:.4}% of a core), wake-ups {} voluntary + {} involuntary, process cpu {:?}",
        wall.as_secs_f64(),
        idle.on_cpu_ns as f64 / 1e6,
        idle.on_cpu_ns as f64 / wall.as_nanos() as f64 * 100.0,
        idle.voluntary_switches,
        idle.involuntary_switches,
        idle_proc
    );
    eprintln!(
        "BENCH idle: RSS before the driver {rss_before} KiB, driver started {rss_started} KiB, 2,000 owned {rss_owned} KiB, after idle {rss_end} KiB (peak {hwm} KiB)"
    );
    conditions();
    Ok(())
}
