//! `metallbctl bgp-probe`: open one BGP session with the native speaker,
//! announce prefixes, print each state change and the negotiated
//! capabilities as JSON lines; on SIGINT/SIGTERM withdraw everything and
//! close with Cease/Administrative Shutdown. Documented in `bgp/README.md`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use bgp::fsm::{Config, PeerAs};
use bgp::rib_out::Advertisement;
use bgp::session::{PeerConfig, Session, SessionEvent};
use bgp::wire::{Community, LargeCommunity};
use ipnet::IpNet;
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::broadcast::error::RecvError;

/// Open one BGP session to a router, announce prefixes, print the session
/// as JSON lines; Ctrl-C withdraws and closes with Cease.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The router's address.
    #[arg(long)]
    pub peer: IpAddr,
    /// The router's BGP port.
    #[arg(long, default_value_t = 179)]
    pub port: u16,
    /// Our AS number.
    #[arg(long)]
    pub my_asn: u32,
    /// The router's AS number (equal to --my-asn for iBGP).
    #[arg(long)]
    pub peer_asn: u32,
    /// File holding the TCP MD5 password (RFC 2385): the file's content
    /// without its trailing newline. The key is set with TCP_MD5SIG before
    /// connecting; a key the kernel refuses (over 80 bytes, no
    /// CONFIG_TCP_MD5SIG) is the session's error, and a password that differs
    /// from the router's shows as connect timeouts.
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// eBGP multihop: TTL 255 instead of 1.
    #[arg(long)]
    pub multihop: bool,
    /// Source address to bind before connecting.
    #[arg(long)]
    pub source: Option<IpAddr>,
    /// Hold time offered, e.g. `90s`, `3m` or `9` (seconds); 0 disables it.
    #[arg(long, default_value = "90s", value_parser = parse_hold_time)]
    pub hold_time: u16,
    /// BGP identifier (default: the session's local IPv4 address).
    #[arg(long)]
    pub router_id: Option<Ipv4Addr>,
    /// A prefix to announce (repeatable).
    #[arg(long = "prefix")]
    pub prefixes: Vec<IpNet>,
    /// A file of prefixes to announce, one per line (`#` comments).
    #[arg(long)]
    pub prefixes_file: Option<PathBuf>,
    /// A community `a:b` added to every prefix (repeatable).
    #[arg(long = "community", value_parser = parse_community)]
    pub communities: Vec<Community>,
    /// A large community `a:b:c` added to every prefix (repeatable).
    #[arg(long = "large-community", value_parser = parse_large_community)]
    pub large_communities: Vec<LargeCommunity>,
    /// LOCAL_PREF of every prefix (sent to iBGP peers only).
    #[arg(long)]
    pub local_pref: Option<u32>,
}

fn parse_hold_time(s: &str) -> Result<u16, String> {
    let (num, mult) = if let Some(n) = s.strip_suffix('s') {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60)
    } else {
        (s, 1)
    };
    let n: u32 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 90s"))?;
    match n.checked_mul(mult).map(u16::try_from) {
        Some(Ok(secs)) if secs == 0 || secs >= 3 => Ok(secs),
        _ => Err(format!("hold time {s}: use 0 or 3..=65535 s")),
    }
}

fn parse_community(s: &str) -> Result<Community, String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected a:b"))?;
    let a: u16 = a.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let b: u16 = b.parse().map_err(|e| format!("{s:?}: {e}"))?;
    Ok(Community::new(a, b))
}

fn parse_large_community(s: &str) -> Result<LargeCommunity, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [a, b, c] = parts[..] else {
        return Err(format!("{s:?}: expected a:b:c"));
    };
    let n = |x: &str| x.parse::<u32>().map_err(|e| format!("{s:?}: {e}"));
    Ok(LargeCommunity {
        global_admin: n(a)?,
        local_data1: n(b)?,
        local_data2: n(c)?,
    })
}

fn read_prefixes(args: &Args) -> Result<Vec<IpNet>> {
    let mut prefixes = args.prefixes.clone();
    if let Some(path) = &args.prefixes_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let p: IpNet = line
                .parse()
                .with_context(|| format!("{}:{}: {line:?}", path.display(), i + 1))?;
            prefixes.push(p);
        }
    }
    Ok(prefixes)
}

fn read_password(args: &Args) -> Result<Option<String>> {
    let Some(path) = &args.password_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the password file {}", path.display()))?;
    let password = text.trim_end_matches(['\n', '\r']).to_owned();
    if password.is_empty() {
        bail!("the password file {} is empty", path.display());
    }
    Ok(Some(password))
}

fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "metallbctl".to_owned())
}

/// Builds the session configuration from the flags.
pub fn peer_config(args: &Args) -> Result<(PeerConfig, Vec<Advertisement>)> {
    let mut fsm = Config::new(args.my_asn, PeerAs::Fixed(args.peer_asn), node_name());
    fsm.hold_time = Some(args.hold_time);
    fsm.router_id = args.router_id;
    fsm.validate()?;
    let mut peer = PeerConfig::new(fsm, SocketAddr::new(args.peer, args.port));
    peer.source = args.source;
    peer.ebgp_multihop = args.multihop;
    peer.password = read_password(args)?;
    let ads = read_prefixes(args)?
        .into_iter()
        .map(|p| {
            let mut a = Advertisement::new(p.trunc())
                .with_communities(args.communities.iter().copied())
                .with_large_communities(args.large_communities.iter().copied());
            a.local_pref = args.local_pref;
            a
        })
        .collect();
    Ok((peer, ads))
}

fn print(value: serde_json::Value) {
    println!("{value}");
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let (config, ads) = peer_config(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(probe(config, ads))
}

async fn probe(config: PeerConfig, ads: Vec<Advertisement>) -> Result<ExitCode> {
    let mut sigint = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    print(json!({
        "event": "start",
        "peer": config.peer.to_string(),
        "prefixes": ads.len(),
        "ttl": config.ttl(),
    }));
    let session = Session::spawn(config, None)?;
    let mut events = session.events();
    let mut state = session.state();
    session.set_advertisements(ads)?;
    let mut advertised = 0usize;
    let mut synced = false;
    let signal_name = loop {
        tokio::select! {
            _ = sigint.recv() => break "SIGINT",
            _ = sigterm.recv() => break "SIGTERM",
            ev = events.recv() => match ev {
                Ok(ev) => print_event(&ev),
                Err(RecvError::Lagged(n)) => print(json!({"event": "lagged", "missed": n})),
                Err(RecvError::Closed) => bail!("the session ended unexpectedly"),
            },
            changed = state.changed() => {
                if changed.is_err() {
                    bail!("the session ended unexpectedly");
                }
                let s = state.borrow_and_update().clone();
                let now = s.rib_out.prefixes_advertised();
                if now != advertised || s.rib_out.initial_sync_done != synced {
                    advertised = now;
                    synced = s.rib_out.initial_sync_done;
                    print(json!({"event": "rib_out", "rib_out": s.rib_out}));
                }
            }
        }
    };
    print(json!({"event": "stopping", "signal": signal_name}));
    session.set_advertisements(Vec::new())?;
    // The withdrawals go out ahead of the Cease: commands are handled in
    // order and the connection's writer is one FIFO.
    session.shutdown("metallbctl bgp-probe stopped").await;
    while let Ok(ev) = events.try_recv() {
        print_event(&ev);
    }
    print(json!({"event": "stopped"}));
    Ok(ExitCode::SUCCESS)
}

fn print_event(ev: &SessionEvent) {
    match serde_json::to_value(ev) {
        Ok(v) => print(v),
        Err(e) => print(json!({"event": "error", "text": format!("serializing an event: {e}")})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_hold_time("90s"), Ok(90));
        assert_eq!(parse_hold_time("9"), Ok(9));
        assert_eq!(parse_hold_time("3m"), Ok(180));
        assert_eq!(parse_hold_time("0s"), Ok(0));
        assert!(parse_hold_time("2s").is_err());
        assert!(parse_hold_time("x").is_err());
        assert!(parse_hold_time("4294967295m").is_err());
        assert!(parse_hold_time("65536").is_err());
        assert_eq!(parse_community("64512:100"), Ok(Community::new(64512, 100)));
        assert!(parse_community("70000:1").is_err());
        let l = parse_large_community("64512:1:2").unwrap();
        assert_eq!(l.to_string(), "64512:1:2");
        assert!(parse_large_community("1:2").is_err());
    }
}
