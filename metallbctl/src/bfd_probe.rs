//! `metallbctl bfd-probe`: one BFD session against a peer, with the
//! `BFDProfile` parameters as flags, printing each change as a JSON line on
//! stdout until Ctrl-C / SIGTERM (or `--duration`), then AdminDown.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bfd::runtime::{BfdEvent, monotonic_ns, to_system_time};
use bfd::{Bfd, Config, Parameters, SessionKey, SessionStatus};
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};

/// `metallbctl bfd-probe` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The peer's address.
    #[arg(long)]
    peer: IpAddr,

    /// Our address (source of our packets, destination of the peer's).
    #[arg(long)]
    local: IpAddr,

    /// The interface towards the peer (required for single hop; binds a
    /// multihop session to a device, e.g. a VRF, when given).
    #[arg(long)]
    interface: Option<String>,

    /// Multihop session (RFC 5883, UDP 4784) instead of single hop.
    #[arg(long)]
    multihop: bool,

    /// receiveInterval: Required Min RX Interval we advertise, ms.
    #[arg(long, default_value_t = bfd::params::DEFAULT_INTERVAL_MS)]
    rx: u32,

    /// transmitInterval: Desired Min TX Interval once Up, ms.
    #[arg(long, default_value_t = bfd::params::DEFAULT_INTERVAL_MS)]
    tx: u32,

    /// detectMultiplier.
    #[arg(long, default_value_t = bfd::params::DEFAULT_DETECT_MULTIPLIER)]
    multiplier: u32,

    /// passiveMode: send nothing until the peer is heard.
    #[arg(long)]
    passive: bool,

    /// echoMode: run the echo function (single-hop IPv4 only; needs
    /// CAP_NET_RAW for its packet socket).
    #[arg(long)]
    echo: bool,

    /// echoInterval: echo transmit interval, and the Required Min Echo RX
    /// Interval advertised in echo mode, ms.
    #[arg(long, default_value_t = bfd::params::DEFAULT_ECHO_INTERVAL_MS)]
    echo_interval: u32,

    /// minimumTtl: smallest TTL accepted on a multihop session.
    #[arg(long, default_value_t = bfd::params::DEFAULT_MINIMUM_TTL)]
    minimum_ttl: u32,

    /// Run the session in this network namespace (a name under /run/netns
    /// or a path), like `ip netns exec NAME`.
    #[arg(long)]
    netns: Option<String>,

    /// Stop after this many seconds (AdminDown, as on Ctrl-C).
    #[arg(long)]
    duration: Option<f64>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if !args.multihop && args.interface.is_none() {
        bail!("a single-hop session needs --interface (or use --multihop)");
    }
    if args.peer.is_ipv4() != args.local.is_ipv4() {
        bail!("--peer and --local must be of the same address family");
    }
    if args.echo && (args.multihop || !args.peer.is_ipv4()) {
        bail!("--echo runs on single-hop IPv4 sessions only (RFC 5881 §4)");
    }
    let params = Parameters {
        receive_interval_ms: args.rx,
        transmit_interval_ms: args.tx,
        detect_multiplier: args.multiplier,
        passive_mode: args.passive,
        echo_mode: args.echo,
        echo_interval_ms: args.echo_interval,
        minimum_ttl: args.minimum_ttl,
    };
    params.validate()?;
    let key = SessionKey {
        interface: args.interface.clone(),
        local: args.local,
        remote: args.peer,
        hop: if args.multihop {
            bfd::Hop::MultiHop
        } else {
            bfd::Hop::SingleHop
        },
    };
    let netns = args.netns.as_ref().map(|n| {
        if n.contains('/') {
            PathBuf::from(n)
        } else {
            PathBuf::from("/run/netns").join(n)
        }
    });
    let duration = args
        .duration
        .map(Duration::try_from_secs_f64)
        .transpose()
        .context("--duration")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(probe(key, params, netns, duration))?;
    Ok(ExitCode::SUCCESS)
}

async fn probe(
    key: SessionKey,
    params: Parameters,
    netns: Option<PathBuf>,
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let bfd = Bfd::start(Config {
        netns,
        ..Config::default()
    })
    .context("starting BFD")?;
    let mut events = bfd.subscribe();
    let (client, mut status) = bfd
        .acquire(key.clone(), params)
        .await
        .with_context(|| format!("opening the session {key}"))?;
    let mut last = summary(&status.borrow_and_update());
    print_line("start", None, &status.borrow());

    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let stop_at = duration.map(|d| tokio::time::Instant::now() + d);
    let stop = async {
        match stop_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    let reason = loop {
        tokio::select! {
            Some(event) = events.recv() => {
                last = summary(&event.status);
                print_line("state", Some(&event), &event.status);
            }
            Ok(()) = status.changed() => {
                let s = status.borrow_and_update().clone();
                // Transitions are printed from the event stream; here only
                // negotiation changes within a state.
                if s.state == last.0 && summary(&s) != last {
                    last = summary(&s);
                    print_line("update", None, &s);
                }
            }
            _ = interrupt.recv() => break "SIGINT",
            _ = terminate.recv() => break "SIGTERM",
            () = &mut stop => break "duration",
        }
    };
    bfd.release(client).await?;
    // The AdminDown transition, published before the session went.
    while let Ok(event) = events.try_recv() {
        print_line("state", Some(&event), &event.status);
    }
    print_json(json!({
        "time": rfc3339(SystemTime::now()),
        "monotonic_ns": monotonic_ns(),
        "event": "stop",
        "reason": reason,
    }));
    tokio::task::spawn_blocking(move || bfd.shutdown()).await?;
    Ok(())
}

type Summary = (
    bfd::State,
    bfd::Diagnostic,
    bfd::session::RemoteInfo,
    [u64; 5],
    [bool; 2],
);

fn summary(s: &SessionStatus) -> Summary {
    (
        s.state,
        s.local_diag,
        s.remote,
        [
            s.tx_interval_us,
            s.rx_interval_us,
            s.detection_time_us,
            s.echo_tx_interval_us,
            u64::from(s.advertised_min_echo_rx_us),
        ],
        [s.poll_in_progress, s.echo_active],
    )
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn print_line(kind: &str, event: Option<&BfdEvent>, s: &SessionStatus) {
    let at = event.map_or_else(monotonic_ns, |e| e.change.at_ns);
    let mut line = json!({
        "time": rfc3339(to_system_time(at)),
        "monotonic_ns": at,
        "event": kind,
        "session": s.key.to_string(),
        "state": s.state.as_str(),
        "diag": s.local_diag.code(),
        "diag_text": s.local_diag.as_str(),
        "local_discr": s.local_discr,
        "remote_discr": s.remote.discr,
        "remote_state": s.remote.state.as_str(),
        "remote_diag": s.remote.diag.code(),
        "remote_diag_text": s.remote.diag.as_str(),
        "tx_interval_ms": ms(s.tx_interval_us),
        "rx_interval_ms": ms(s.rx_interval_us),
        "detection_time_ms": ms(s.detection_time_us),
        "advertised_min_tx_ms": ms(u64::from(s.advertised_min_tx_us)),
        "advertised_min_rx_ms": ms(u64::from(s.advertised_min_rx_us)),
        "remote_min_tx_ms": ms(u64::from(s.remote.desired_min_tx_us)),
        "remote_min_rx_ms": ms(u64::from(s.remote.required_min_rx_us)),
        "remote_detect_mult": s.remote.detect_mult,
        "poll": s.poll_in_progress,
        "last_rx_ago_ms": s.last_rx_ns.map(|rx| (at.saturating_sub(rx)) as f64 / 1e6),
        "control_in": s.counters.control_in,
        "control_out": s.counters.control_out,
        "echo": s.echo_active,
        "echo_tx_interval_ms": ms(s.echo_tx_interval_us),
        "echo_detection_time_ms": ms(s.echo_detection_time_us),
        "advertised_min_echo_rx_ms": ms(u64::from(s.advertised_min_echo_rx_us)),
        "remote_min_echo_rx_ms": ms(u64::from(s.remote.required_min_echo_rx_us)),
        "last_echo_rtt_ms": s.last_echo_rtt_ns.map(|ns| ns as f64 / 1e6),
        "echo_in": s.counters.echo_in,
        "echo_out": s.counters.echo_out,
    });
    if let (Some(e), Value::Object(map)) = (event, &mut line) {
        map.insert("from".into(), json!(e.change.from.as_str()));
        map.insert("cause".into(), json!(format!("{:?}", e.change.cause)));
        map.insert(
            "client_action".into(),
            json!(format!("{:?}", e.client_action)),
        );
    }
    print_json(line);
}

fn print_json(value: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

/// `2024-05-01T12:34:56.789012Z`.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = UNIX_EPOCH + Duration::from_micros(1_709_251_199_123_456);
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.123456Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.000000Z");
    }
}
