//! `metallb_rs_membership_*` metrics on a caller-given registry. The edge
//! updates them after each step of the core (counters by the difference
//! since the last update).

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::core::{Core, Counters, Event};
use crate::wire::Kind;

/// The metrics of one membership instance.
#[derive(Debug)]
pub struct Metrics {
    members: IntGaugeVec,
    owner_down: IntCounter,
    path_faults: IntCounter,
    unconfirmed: IntCounter,
    detection: Histogram,
    auth_failures: IntCounter,
    malformed: IntCounter,
    replays: IntCounter,
    sync_refused: IntCounter,
    packets_sent: IntCounterVec,
    packets_received: IntCounterVec,
    fenced: IntGauge,
    heartbeat_sessions: IntGauge,
    pub(crate) events_dropped: IntCounter,
    pub(crate) send_errors: IntCounter,
    last: Counters,
}

const NAMESPACE: &str = "metallb_rs_membership";

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

impl Metrics {
    pub fn register(registry: &Registry) -> Result<Metrics, prometheus::Error> {
        let metrics = Metrics {
            members: IntGaugeVec::new(
                opts("members", "Members known to this speaker, by SWIM state."),
                &["state"],
            )?,
            owner_down: IntCounter::with_opts(opts(
                "owner_down_total",
                "Watched owners confirmed down on the fast path (takeovers).",
            ))?,
            path_faults: IntCounter::with_opts(opts(
                "path_faults_total",
                "Heartbeat losses where a helper still reached the owner (nothing moved).",
            ))?,
            unconfirmed: IntCounter::with_opts(opts(
                "unconfirmed_total",
                "Heartbeat losses no helper answered for (this speaker likely cut off; nothing moved).",
            ))?,
            detection: Histogram::with_opts(
                HistogramOpts::new(
                    "detection_seconds",
                    "From an owner's last heartbeat to its confirmation as down.",
                )
                .namespace(NAMESPACE)
                .buckets(vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 5.0]),
            )?,
            auth_failures: IntCounter::with_opts(opts(
                "auth_failures_total",
                "Datagrams dropped because they failed authentication.",
            ))?,
            malformed: IntCounter::with_opts(opts(
                "malformed_total",
                "Authenticated datagrams that could not be decoded.",
            ))?,
            replays: IntCounter::with_opts(opts(
                "replays_total",
                "Authenticated datagrams refused as replays (seen before, older than the window, or a heartbeat sequence not above the last).",
            ))?,
            sync_refused: IntCounter::with_opts(opts(
                "sync_refused_total",
                "State syncs refused (sender not a member at the source address) or not answered (that source was answered less than a second ago).",
            ))?,
            packets_sent: IntCounterVec::new(
                opts("packets_sent_total", "Datagrams sent, by type."),
                &["type"],
            )?,
            packets_received: IntCounterVec::new(
                opts(
                    "packets_received_total",
                    "Authenticated datagrams received, by type.",
                ),
                &["type"],
            )?,
            fenced: IntGauge::with_opts(opts(
                "fenced",
                "1 while this speaker fences itself (minority side of a partition).",
            ))?,
            heartbeat_sessions: IntGauge::with_opts(opts(
                "watched_owners",
                "Owners this speaker watches.",
            ))?,
            events_dropped: IntCounter::with_opts(opts(
                "events_dropped_total",
                "Events dropped because the speaker did not read them in time.",
            ))?,
            send_errors: IntCounter::with_opts(opts(
                "send_errors_total",
                "Datagrams that could not be sent (socket buffer full or error).",
            ))?,
            last: Counters::default(),
        };
        registry.register(Box::new(metrics.members.clone()))?;
        registry.register(Box::new(metrics.owner_down.clone()))?;
        registry.register(Box::new(metrics.path_faults.clone()))?;
        registry.register(Box::new(metrics.detection.clone()))?;
        registry.register(Box::new(metrics.auth_failures.clone()))?;
        registry.register(Box::new(metrics.malformed.clone()))?;
        registry.register(Box::new(metrics.replays.clone()))?;
        registry.register(Box::new(metrics.unconfirmed.clone()))?;
        registry.register(Box::new(metrics.sync_refused.clone()))?;
        registry.register(Box::new(metrics.packets_sent.clone()))?;
        registry.register(Box::new(metrics.packets_received.clone()))?;
        registry.register(Box::new(metrics.fenced.clone()))?;
        registry.register(Box::new(metrics.heartbeat_sessions.clone()))?;
        registry.register(Box::new(metrics.events_dropped.clone()))?;
        registry.register(Box::new(metrics.send_errors.clone()))?;
        for kind in Kind::ALL {
            metrics.packets_sent.with_label_values(&[kind.label()]);
            metrics.packets_received.with_label_values(&[kind.label()]);
        }
        for state in ["alive", "suspect", "down"] {
            metrics.members.with_label_values(&[state]);
        }
        Ok(metrics)
    }

    /// Observes an event (the detection time of an owner down).
    pub fn observe_event(&self, event: &Event) {
        if let Event::OwnerDown { after_ns, .. } = event {
            self.detection.observe(*after_ns as f64 / 1e9);
        }
    }

    /// Brings the metrics up to the core's counters and state.
    pub fn update(&mut self, core: &Core) {
        let now = core.counters();
        let delta = |new: u64, old: u64| new.saturating_sub(old);
        self.owner_down
            .inc_by(delta(now.owner_down, self.last.owner_down));
        self.path_faults
            .inc_by(delta(now.path_faults, self.last.path_faults));
        self.unconfirmed
            .inc_by(delta(now.unconfirmed, self.last.unconfirmed));
        self.auth_failures
            .inc_by(delta(now.auth_failures, self.last.auth_failures));
        self.malformed
            .inc_by(delta(now.malformed, self.last.malformed));
        self.replays.inc_by(delta(now.replays, self.last.replays));
        self.sync_refused
            .inc_by(delta(now.sync_refused, self.last.sync_refused));
        for kind in Kind::ALL {
            let i = kind.index();
            self.packets_sent
                .with_label_values(&[kind.label()])
                .inc_by(delta(now.sent[i], self.last.sent[i]));
            self.packets_received
                .with_label_values(&[kind.label()])
                .inc_by(delta(now.received[i], self.last.received[i]));
        }
        self.last = now.clone();
        let (alive, suspect, down) = core.member_counts();
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.members.with_label_values(&["alive"]).set(gauge(alive));
        self.members
            .with_label_values(&["suspect"])
            .set(gauge(suspect));
        self.members.with_label_values(&["down"]).set(gauge(down));
        self.fenced.set(i64::from(core.fenced()));
        self.heartbeat_sessions
            .set(i64::try_from(core.watched_count()).unwrap_or(i64::MAX));
    }
}
