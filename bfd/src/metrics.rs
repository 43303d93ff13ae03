//! MetalLB's BFD metrics on a caller-given Prometheus [`Registry`] (never
//! the global default one).
//!
//! Names, help texts, types and labels are those MetalLB's FRR mode exports
//! (its `frr-metrics` sidecar reading `show bfd peers counters`), so that
//! dashboards and alerts built on them keep working:
//!
//! | name | type | labels |
//! |---|---|---|
//! | `metallb_bfd_session_up` | gauge (1 Up, 0 otherwise) | peer, vrf |
//! | `metallb_bfd_control_packet_input` | counter | peer, vrf |
//! | `metallb_bfd_control_packet_output` | counter | peer, vrf |
//! | `metallb_bfd_echo_packet_input` | counter | peer, vrf |
//! | `metallb_bfd_echo_packet_output` | counter | peer, vrf |
//! | `metallb_bfd_session_up_events` | counter | peer, vrf |
//! | `metallb_bfd_session_down_events` | counter | peer, vrf |
//! | `metallb_bfd_zebra_notifications` | counter | peer, vrf |
//!
//! No `_total` suffix, exactly as MetalLB names them. `peer` is the peer's
//! address without a port ([`peer_label`]: `192.0.2.1`, `2001:db8::1`), as
//! FRR prints it; `vrf` is the VRF given at
//! [`BfdHandle::acquire_in_vrf`](crate::BfdHandle::acquire_in_vrf), or
//! [`DEFAULT_VRF`] (`default`, FRR's name of the default VRF and the value
//! MetalLB exports for it).
//!
//! Values:
//!
//! - `control_packet_input`: control packets the session accepted (source,
//!   TTL, discriminators and fields checked; those dropped are not counted).
//! - `control_packet_output`: control packets the kernel took (`sendto`
//!   succeeded); failed sends are in
//!   [`RuntimeStats::tx_errors`](crate::runtime::RuntimeStats::tx_errors).
//! - `echo_packet_input`: our echo packets that came back in time and were
//!   accepted (frame checks, discriminator, sequence window);
//!   `echo_packet_output`: echo packets the kernel took (failed sends, and
//!   packets not sent for want of the peer's MAC, are in `tx_errors`). Both
//!   stay 0 on a session that does not run echo, and are exported per
//!   session anyway, as MetalLB does.
//! - `session_up_events`: transitions to Up; `session_down_events`:
//!   transitions from Up (to Down, or to AdminDown).
//! - `zebra_notifications`: always 0. In FRR it counts bfdd's messages to
//!   zebra; there is no zebra here (clients are told through
//!   [`BfdHandle::subscribe`](crate::BfdHandle::subscribe)). It is exported
//!   per session anyway so that queries and dashboards using it keep
//!   finding a series.
//!
//! Counters start at 0 when a session is created and its series go away
//! when the session is removed (its last client released it); a session
//! created again counts from 0, which Prometheus reads as a counter reset.
//!
//! # How values are read
//! Nothing is added to the runtime's packet or timer path: the
//! [`Collector`] registered by [`register`] asks the runtime thread, at each
//! scrape, for a snapshot of its sessions' existing counters (a command on
//! the same queue as `acquire`, answered between two epoll wakeups) and
//! waits up to [`SCRAPE_TIMEOUT`] for it. The thread takes no lock a scraper
//! holds. A scrape on a worker of a multi-threaded tokio runtime waits in
//! `block_in_place`, so the worker's other tasks run on meanwhile. A stopped runtime (or one that does not answer in time) yields no
//! BFD series rather than stale ones.
//!
//! Two sessions with the same `peer` and `vrf` (e.g. single hop and
//! multihop to one address) would be duplicate series, which Prometheus
//! refuses: they are exported as one, their counters summed and
//! `session_up` 1 only if all of them are Up.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::runtime::BfdHandle;

/// Metric names, exactly as MetalLB exports them.
pub mod names {
    pub const SESSION_UP: &str = "metallb_bfd_session_up";
    pub const CONTROL_PACKET_INPUT: &str = "metallb_bfd_control_packet_input";
    pub const CONTROL_PACKET_OUTPUT: &str = "metallb_bfd_control_packet_output";
    pub const ECHO_PACKET_INPUT: &str = "metallb_bfd_echo_packet_input";
    pub const ECHO_PACKET_OUTPUT: &str = "metallb_bfd_echo_packet_output";
    pub const SESSION_UP_EVENTS: &str = "metallb_bfd_session_up_events";
    pub const SESSION_DOWN_EVENTS: &str = "metallb_bfd_session_down_events";
    pub const ZEBRA_NOTIFICATIONS: &str = "metallb_bfd_zebra_notifications";

    /// Every name, in the order above.
    pub const ALL: [&str; 8] = [
        SESSION_UP,
        CONTROL_PACKET_INPUT,
        CONTROL_PACKET_OUTPUT,
        ECHO_PACKET_INPUT,
        ECHO_PACKET_OUTPUT,
        SESSION_UP_EVENTS,
        SESSION_DOWN_EVENTS,
        ZEBRA_NOTIFICATIONS,
    ];
}

/// The peer label name.
pub const PEER_LABEL: &str = "peer";
/// The VRF label name.
pub const VRF_LABEL: &str = "vrf";
/// The `vrf` label value of a session in the default VRF.
pub const DEFAULT_VRF: &str = "default";
/// How long a scrape waits for the runtime thread's snapshot.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(1);

/// The `peer` label value: the address alone, IPv6 without brackets.
pub fn peer_label(remote: IpAddr) -> String {
    remote.to_string()
}

/// The `vrf` label value: the VRF's name, [`DEFAULT_VRF`] for none (or an
/// empty name).
pub fn vrf_label(vrf: Option<&str>) -> String {
    match vrf {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => DEFAULT_VRF.to_owned(),
    }
}

/// Registers the BFD metrics of the runtime behind `bfd` on `registry`.
/// Fails if metrics of the same names are already registered there.
pub fn register(registry: &Registry, bfd: &BfdHandle) -> prometheus::Result<()> {
    let bfd = bfd.clone();
    let collector = BfdCollector::new(Box::new(move || bfd.metric_samples(SCRAPE_TIMEOUT)))?;
    registry.register(Box::new(collector))
}

/// One session's values, as the runtime thread reports them at a scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) peer: Arc<str>,
    pub(crate) vrf: Arc<str>,
    pub(crate) up: bool,
    pub(crate) control_in: u64,
    pub(crate) control_out: u64,
    pub(crate) echo_in: u64,
    pub(crate) echo_out: u64,
    pub(crate) up_events: u64,
    pub(crate) down_events: u64,
}

/// Where a collector gets its samples; `None` when there are none to give
/// (the runtime stopped or did not answer).
type Source = Box<dyn Fn() -> Option<Vec<Sample>> + Send + Sync>;

/// The families, built with their names, help texts and labels.
struct Families {
    session_up: IntGaugeVec,
    control_in: IntCounterVec,
    control_out: IntCounterVec,
    echo_in: IntCounterVec,
    echo_out: IntCounterVec,
    up_events: IntCounterVec,
    down_events: IntCounterVec,
    zebra_notifications: IntCounterVec,
}

const LABELS: [&str; 2] = [PEER_LABEL, VRF_LABEL];

fn counter(name: &str, help: &str) -> prometheus::Result<IntCounterVec> {
    IntCounterVec::new(Opts::new(name, help), &LABELS)
}

impl Families {
    fn new() -> prometheus::Result<Families> {
        use names::*;
        Ok(Families {
            session_up: IntGaugeVec::new(
                Opts::new(SESSION_UP, "BFD session state (1 is up, 0 is down)"),
                &LABELS,
            )?,
            control_in: counter(
                CONTROL_PACKET_INPUT,
                "Number of received BFD control packets",
            )?,
            control_out: counter(CONTROL_PACKET_OUTPUT, "Number of sent BFD control packets")?,
            echo_in: counter(ECHO_PACKET_INPUT, "Number of received BFD echo packets")?,
            echo_out: counter(ECHO_PACKET_OUTPUT, "Number of sent BFD echo packets")?,
            up_events: counter(SESSION_UP_EVENTS, "Number of BFD session up events")?,
            down_events: counter(SESSION_DOWN_EVENTS, "Number of BFD session down events")?,
            zebra_notifications: counter(ZEBRA_NOTIFICATIONS, "Number of BFD zebra notifications")?,
        })
    }

    fn counters(&self) -> [&IntCounterVec; 7] {
        [
            &self.control_in,
            &self.control_out,
            &self.echo_in,
            &self.echo_out,
            &self.up_events,
            &self.down_events,
            &self.zebra_notifications,
        ]
    }

    fn descs(&self) -> Vec<&Desc> {
        let mut descs = self.session_up.desc();
        for c in self.counters() {
            descs.extend(c.desc());
        }
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.session_up.collect();
        for c in self.counters() {
            families.extend(c.collect());
        }
        families
    }
}

/// Per `(peer, vrf)`: the sum of the sessions' counters, and whether all
/// of them are Up.
#[derive(Default)]
struct Merged {
    all_up: bool,
    control_in: u64,
    control_out: u64,
    echo_in: u64,
    echo_out: u64,
    up_events: u64,
    down_events: u64,
}

fn merge(samples: Vec<Sample>) -> BTreeMap<(Arc<str>, Arc<str>), Merged> {
    let mut merged: BTreeMap<(Arc<str>, Arc<str>), Merged> = BTreeMap::new();
    for s in samples {
        let m = merged.entry((s.peer, s.vrf)).or_insert(Merged {
            all_up: true,
            ..Merged::default()
        });
        m.all_up &= s.up;
        m.control_in = m.control_in.saturating_add(s.control_in);
        m.control_out = m.control_out.saturating_add(s.control_out);
        m.echo_in = m.echo_in.saturating_add(s.echo_in);
        m.echo_out = m.echo_out.saturating_add(s.echo_out);
        m.up_events = m.up_events.saturating_add(s.up_events);
        m.down_events = m.down_events.saturating_add(s.down_events);
    }
    merged
}

/// Runs `f`, which may wait (up to [`SCRAPE_TIMEOUT`] for the runtime
/// thread's answer), so that it never holds up other tasks: called on a
/// worker of a multi-threaded tokio runtime (a metrics handler gathering
/// the registry in its task), the worker's other tasks move to another
/// thread for the wait (`block_in_place`). Elsewhere (a plain thread, a
/// blocking-pool thread) it simply runs; a current-thread runtime cannot
/// hand its tasks over, so a caller there should gather in
/// `spawn_blocking`.
fn without_blocking_a_worker<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// A [`Collector`] that renders the runtime's sessions at each scrape.
struct BfdCollector {
    /// Only for [`Collector::desc`]; each scrape fills fresh families, so
    /// concurrent scrapes share nothing and removed sessions leave nothing
    /// behind.
    descs: Families,
    source: Source,
}

impl BfdCollector {
    fn new(source: Source) -> prometheus::Result<BfdCollector> {
        Ok(BfdCollector {
            descs: Families::new()?,
            source,
        })
    }
}

impl Collector for BfdCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.descs()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(samples) = without_blocking_a_worker(|| (self.source)()) else {
            return Vec::new();
        };
        // Cannot fail: the names and labels are the constants above, already
        // accepted by `new`.
        let Ok(f) = Families::new() else {
            return Vec::new();
        };
        for ((peer, vrf), m) in merge(samples) {
            let labels = [&*peer, &*vrf];
            f.session_up
                .with_label_values(&labels)
                .set(i64::from(m.all_up));
            for (family, value) in [
                (&f.control_in, m.control_in),
                (&f.control_out, m.control_out),
                (&f.echo_in, m.echo_in),
                (&f.echo_out, m.echo_out),
                (&f.up_events, m.up_events),
                (&f.down_events, m.down_events),
                (&f.zebra_notifications, 0),
            ] {
                family.with_label_values(&labels).inc_by(value);
            }
        }
        f.collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use prometheus::proto::MetricType;
    use prometheus::{Encoder, TextEncoder};

    use super::*;

    fn sample(peer: &str, vrf: &str, up: bool, n: u64) -> Sample {
        Sample {
            peer: peer.into(),
            vrf: vrf.into(),
            up,
            control_in: n,
            control_out: n + 1,
            echo_in: 0,
            echo_out: 0,
            up_events: 1,
            down_events: u64::from(!up),
        }
    }

    /// A registry whose collector reports whatever `samples` holds at the
    /// time of the scrape.
    fn registry(samples: Arc<Mutex<Option<Vec<Sample>>>>) -> Registry {
        let registry = Registry::new();
        let source: Source = Box::new(move || samples.lock().unwrap().clone());
        registry
            .register(Box::new(BfdCollector::new(source).unwrap()))
            .unwrap();
        registry
    }

    fn text(registry: &Registry) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A scrape that waits for a slow runtime thread, made on the only
    /// worker of a multi-threaded runtime, does not stop that runtime's
    /// other tasks (issue 13, Low list).
    #[test]
    fn a_slow_scrape_does_not_block_the_async_worker() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let registry = Registry::new();
        let source: Source = Box::new(|| {
            std::thread::sleep(Duration::from_millis(500));
            Some(vec![sample("192.0.2.1", "default", true, 1)])
        });
        registry
            .register(Box::new(BfdCollector::new(source).unwrap()))
            .unwrap();
        let ticks = Arc::new(AtomicU64::new(0));
        let during = rt.block_on(async {
            let counted = Arc::clone(&ticks);
            let ticker = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            });
            // Let the ticker start, then scrape from a task on the worker.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let before = ticks.load(Ordering::SeqCst);
            let families = tokio::spawn(async move { registry.gather() })
                .await
                .unwrap();
            let during = ticks.load(Ordering::SeqCst) - before;
            ticker.abort();
            assert!(!families.is_empty());
            during
        });
        // 500 ms at one tick per 10 ms: about 50; blocked, none.
        assert!(
            during >= 10,
            "the ticker ran {during} times during the scrape"
        );
    }

    #[test]
    fn labels() {
        assert_eq!(peer_label("192.0.2.1".parse().unwrap()), "192.0.2.1");
        assert_eq!(peer_label("2001:db8::1".parse().unwrap()), "2001:db8::1");
        assert_eq!(vrf_label(None), "default");
        assert_eq!(vrf_label(Some("")), "default");
        assert_eq!(vrf_label(Some("red")), "red");
    }

    #[test]
    fn exposition_matches_metallb_names_help_types_and_labels() {
        let samples = Arc::new(Mutex::new(Some(vec![
            sample("192.0.2.1", "default", true, 5),
            sample("2001:db8::1", "red", false, 7),
        ])));
        let registry = registry(Arc::clone(&samples));
        let expected = "\
# HELP metallb_bfd_control_packet_input Number of received BFD control packets
# TYPE metallb_bfd_control_packet_input counter
metallb_bfd_control_packet_input{peer=\"192.0.2.1\",vrf=\"default\"} 5
metallb_bfd_control_packet_input{peer=\"2001:db8::1\",vrf=\"red\"} 7
# HELP metallb_bfd_control_packet_output Number of sent BFD control packets
# TYPE metallb_bfd_control_packet_output counter
metallb_bfd_control_packet_output{peer=\"192.0.2.1\",vrf=\"default\"} 6
metallb_bfd_control_packet_output{peer=\"2001:db8::1\",vrf=\"red\"} 8
# HELP metallb_bfd_echo_packet_input Number of received BFD echo packets
# TYPE metallb_bfd_echo_packet_input counter
metallb_bfd_echo_packet_input{peer=\"192.0.2.1\",vrf=\"default\"} 0
metallb_bfd_echo_packet_input{peer=\"2001:db8::1\",vrf=\"red\"} 0
# HELP metallb_bfd_echo_packet_output Number of sent BFD echo packets
# TYPE metallb_bfd_echo_packet_output counter
metallb_bfd_echo_packet_output{peer=\"192.0.2.1\",vrf=\"default\"} 0
metallb_bfd_echo_packet_output{peer=\"2001:db8::1\",vrf=\"red\"} 0
# HELP metallb_bfd_session_down_events Number of BFD session down events
# TYPE metallb_bfd_session_down_events counter
metallb_bfd_session_down_events{peer=\"192.0.2.1\",vrf=\"default\"} 0
metallb_bfd_session_down_events{peer=\"2001:db8::1\",vrf=\"red\"} 1
# HELP metallb_bfd_session_up BFD session state (1 is up, 0 is down)
# TYPE metallb_bfd_session_up gauge
metallb_bfd_session_up{peer=\"192.0.2.1\",vrf=\"default\"} 1
metallb_bfd_session_up{peer=\"2001:db8::1\",vrf=\"red\"} 0
# HELP metallb_bfd_session_up_events Number of BFD session up events
# TYPE metallb_bfd_session_up_events counter
metallb_bfd_session_up_events{peer=\"192.0.2.1\",vrf=\"default\"} 1
metallb_bfd_session_up_events{peer=\"2001:db8::1\",vrf=\"red\"} 1
# HELP metallb_bfd_zebra_notifications Number of BFD zebra notifications
# TYPE metallb_bfd_zebra_notifications counter
metallb_bfd_zebra_notifications{peer=\"192.0.2.1\",vrf=\"default\"} 0
metallb_bfd_zebra_notifications{peer=\"2001:db8::1\",vrf=\"red\"} 0
";
        assert_eq!(text(&registry), expected);

        let families = registry.gather();
        let mut got: Vec<&str> = families.iter().map(|f| f.name()).collect();
        got.sort_unstable();
        let mut want = names::ALL.to_vec();
        want.sort_unstable();
        assert_eq!(got, want);
        for f in &families {
            let want_type = if f.name() == names::SESSION_UP {
                MetricType::GAUGE
            } else {
                MetricType::COUNTER
            };
            assert_eq!(f.get_field_type(), want_type, "{}", f.name());
        }

        // A session removed: its series go at the next scrape.
        samples.lock().unwrap().as_mut().unwrap().remove(1);
        let after = text(&registry);
        assert!(!after.contains("2001:db8::1"), "{after}");
        assert_eq!(after.matches("peer=\"192.0.2.1\"").count(), 8, "{after}");

        // No session, or no answer from the runtime: no series at all.
        *samples.lock().unwrap() = Some(Vec::new());
        assert!(registry.gather().is_empty());
        *samples.lock().unwrap() = None;
        assert!(registry.gather().is_empty());
    }

    #[test]
    fn sessions_sharing_peer_and_vrf_are_one_series() {
        let samples = Arc::new(Mutex::new(Some(vec![
            sample("192.0.2.1", "default", true, 5),
            sample("192.0.2.1", "default", true, 10),
            sample("192.0.2.1", "red", true, 1),
        ])));
        let registry = registry(Arc::clone(&samples));
        let out = text(&registry);
        assert!(
            out.contains(
                "metallb_bfd_control_packet_input{peer=\"192.0.2.1\",vrf=\"default\"} 15\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("metallb_bfd_session_up{peer=\"192.0.2.1\",vrf=\"default\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("metallb_bfd_session_up{peer=\"192.0.2.1\",vrf=\"red\"} 1\n"),
            "{out}"
        );
        // One of the two down: the merged series says down.
        {
            let mut samples = samples.lock().unwrap();
            let second = &mut samples.as_mut().unwrap()[1];
            second.up = false;
            second.down_events = 1;
        }
        let out = text(&registry);
        assert!(
            out.contains("metallb_bfd_session_up{peer=\"192.0.2.1\",vrf=\"default\"} 0\n"),
            "{out}"
        );
        assert!(
            out.contains("metallb_bfd_session_down_events{peer=\"192.0.2.1\",vrf=\"default\"} 1\n"),
            "{out}"
        );
    }

    #[test]
    fn registering_twice_on_one_registry_fails() {
        let registry = Registry::new();
        let none: Source = Box::new(|| None);
        registry
            .register(Box::new(BfdCollector::new(none).unwrap()))
            .unwrap();
        let none: Source = Box::new(|| None);
        assert!(
            registry
                .register(Box::new(BfdCollector::new(none).unwrap()))
                .is_err()
        );
    }
}
