//! `metallbctl l2-announce`: own IPs on one interface with the arp-ndp
//! driver (gratuitous burst, then answers to ARP who-has and Neighbor
//! Solicitations), printing what happens as JSON lines on stdout until
//! Ctrl-C, SIGTERM or `--duration`.
//!
//! Before owning anything it probes each IP (one who-has or one NS, then
//! `--probe-wait`) and refuses if another MAC answers, unless `--force`.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use arp_ndp::interfaces::{AllowedInterfaces, ExcludeList};
use arp_ndp::linux::{DriverConfig, GratuitousEvent, L2Handle, RequestEvent};
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::broadcast::error::RecvError;

/// Exit status when another MAC answers for an IP and `--force` is absent.
pub const EXIT_CONFLICT: u8 = 1;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Interface to announce on (the default interface exclusion list does
    /// not apply: the interface is named explicitly).
    #[arg(long, value_name = "IF")]
    pub interface: String,
    /// IP to own (repeatable; IPv4 answered with ARP, IPv6 with NDP).
    #[arg(long = "ip", value_name = "IP", required = true)]
    pub ips: Vec<IpAddr>,
    /// Stop after this long (`500ms`, `30s`, `2m`); default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Own the IPs even if another MAC already answers for them.
    #[arg(long)]
    pub force: bool,
    /// How long to wait for an answer to the pre-ownership probe.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    pub probe_wait: Duration,
}

/// `30s`, `500ms`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (e.g. 30s, 500ms, 2m)"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("invalid duration unit in {s:?} (ms, s, m, h)")),
    })
}

fn emit(v: Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // A closed stdout (piped into `head`) is not an error worth dying on.
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn ms_since(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

fn request_json(e: &RequestEvent, start: Instant) -> Value {
    json!({
        "event": "request",
        "t_ms": ms_since(start),
        "interface": e.interface,
        "ip": e.ip,
        "from": e.from.to_string(),
        "answered": e.dropped.is_none(),
        "dropped": e.dropped.map(|d| format!("{d:?}")),
    })
}

fn gratuitous_json(e: &GratuitousEvent, start: Instant) -> Value {
    json!({
        "event": "gratuitous",
        "t_ms": ms_since(start),
        "interface": e.interface,
        "ip": e.ip,
        "packet": e.kind.as_str(),
        "sent": e.sent,
    })
}

fn counters(handle: &L2Handle, ips: &[IpAddr], start: Instant) {
    for ip in ips {
        let c = handle.counters(ip);
        emit(json!({
            "event": "counters",
            "t_ms": ms_since(start),
            "ip": ip,
            "requests_received": c.requests_received,
            "responses_sent": c.responses_sent,
            "gratuitous_sent": c.gratuitous_sent,
        }));
    }
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(announce(args))
}

async fn announce(args: &Args) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let mut ips = args.ips.clone();
    ips.sort();
    ips.dedup();
    // Ask the segment first.
    let mut conflict = false;
    for ip in &ips {
        let other = arp_ndp::linux::probe(&args.interface, *ip, args.probe_wait)
            .await
            .with_context(|| format!("probing {ip} on {}", args.interface))?;
        emit(json!({
            "event": "probe",
            "t_ms": ms_since(start),
            "interface": args.interface,
            "ip": ip,
            "answered_by": other.map(|m| m.to_string()),
        }));
        if let Some(mac) = other {
            if args.force {
                eprintln!("metallbctl: {mac} already answers for {ip}; taking it over (--force)");
            } else {
                eprintln!(
                    "metallbctl: {mac} already answers for {ip} on {}; refusing (use --force to take it over)",
                    args.interface
                );
                conflict = true;
            }
        }
    }
    if conflict {
        return Ok(ExitCode::from(EXIT_CONFLICT));
    }

    let cfg = DriverConfig {
        exclude: ExcludeList::none(),
        ..Default::default()
    };
    let (handle, mut task) = arp_ndp::linux::start(cfg)
        .await
        .context("cannot start the ARP/NDP driver (root or CAP_NET_RAW needed)")?;
    let Some(iface) = handle
        .interfaces()
        .into_iter()
        .find(|i| i.name == args.interface)
    else {
        bail!(
            "interface {} is missing or not eligible (down, enslaved to a bridge or bond, NOARP, or no MAC)",
            args.interface
        );
    };
    for ip in &ips {
        if !iface.serves(*ip) {
            bail!(
                "interface {} cannot serve {ip} ({})",
                iface.name,
                if ip.is_ipv4() {
                    "no ARP: not broadcast-capable"
                } else {
                    "no IPv6 link-local address"
                }
            );
        }
    }
    // The signal streams exist before the first claim and for the whole loop: a
    // stream made anew per iteration (`tokio::signal::ctrl_c()` in the select)
    // loses a signal the runtime delivers between two iterations, and under a
    // flood of requests the loop is always between two (SIGINT lost 7 times in
    // 20 at 2,000 requests/s).
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut requests = handle.subscribe();
    let mut gratuitous = handle.subscribe_gratuitous();
    let allowed = AllowedInterfaces::only([args.interface.clone()]);
    for ip in &ips {
        handle.own(*ip, allowed.clone())?;
        emit(json!({
            "event": "owned",
            "t_ms": ms_since(start),
            "interface": iface.name,
            "mac": iface.mac.to_string(),
            "ip": ip,
        }));
    }

    let until = async {
        match args.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until);
    let reason = loop {
        tokio::select! {
            _ = interrupt.recv() => break "interrupt",
            _ = term.recv() => break "terminate",
            () = &mut until => break "duration",
            r = &mut task => {
                let r = r.context("the ARP/NDP driver panicked")?;
                r.context("the ARP/NDP driver stopped")?;
                bail!("the ARP/NDP driver stopped");
            }
            e = requests.recv() => match e {
                Ok(e) => emit(request_json(&e, start)),
                Err(RecvError::Lagged(n)) => emit(json!({"event": "lagged", "missed": n})),
                Err(RecvError::Closed) => {}
            },
            e = gratuitous.recv() => match e {
                Ok(e) => emit(gratuitous_json(&e, start)),
                Err(RecvError::Lagged(n)) => emit(json!({"event": "lagged", "missed": n})),
                Err(RecvError::Closed) => {}
            },
        }
    };
    // Print what was already sent or answered before the counters.
    while let Ok(e) = gratuitous.try_recv() {
        emit(gratuitous_json(&e, start));
    }
    while let Ok(e) = requests.try_recv() {
        emit(request_json(&e, start));
    }
    counters(&handle, &ips, start);
    for ip in &ips {
        let _ = handle.disown(*ip);
    }
    drop(handle);
    // The driver ends once every handle is gone (it leaves its groups).
    let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    emit(json!({"event": "stopped", "t_ms": ms_since(start), "reason": reason}));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration("s").is_err());
    }
}
