//! MetalLB's BGP metrics on a caller-given Prometheus [`Registry`] (never
//! the global default one).
//!
//! Names, types and labels are MetalLB's (reference section 7):
//!
//! | name | type | labels |
//! |---|---|---|
//! | `metallb_bgp_session_up` | gauge | peer |
//! | `metallb_bgp_updates_total` | counter | peer |
//! | `metallb_bgp_announced_prefixes_total` | gauge | peer |
//! | `metallb_bgp_pending_prefixes_total` | gauge | peer |
//! | `metallb_bgp_opens_sent`, `metallb_bgp_opens_received` | counter | peer, vrf |
//! | `metallb_bgp_notifications_sent` | counter | peer, vrf |
//! | `metallb_bgp_updates_total_received` | counter | peer, vrf |
//! | `metallb_bgp_keepalives_sent`, `metallb_bgp_keepalives_received` | counter | peer, vrf |
//! | `metallb_bgp_route_refresh_sent` | counter | peer, vrf |
//! | `metallb_bgp_total_sent`, `metallb_bgp_total_received` | counter | peer, vrf |
//!
//! The first four are the native speaker's; the others are the counters
//! MetalLB's FRR mode exported, kept so that dashboards built on them keep
//! working. `peer` is `addr:port` ([`peer_label`]); `vrf` is the peer's
//! VRF or [`DEFAULT_VRF`].
//!
//! Use: [`BgpMetrics::register`] once, [`BgpMetrics::session`] per session,
//! [`SessionMetrics::update`] with each published [`SessionState`], and
//! [`SessionMetrics::remove`] when the session is de-configured.

use std::net::SocketAddr;

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::state::{MessageCounters, SessionState};

/// Metric names, exactly as MetalLB exports them.
pub mod names {
    pub const SESSION_UP: &str = "metallb_bgp_session_up";
    pub const UPDATES_TOTAL: &str = "metallb_bgp_updates_total";
    pub const ANNOUNCED_PREFIXES_TOTAL: &str = "metallb_bgp_announced_prefixes_total";
    pub const PENDING_PREFIXES_TOTAL: &str = "metallb_bgp_pending_prefixes_total";
    pub const OPENS_SENT: &str = "metallb_bgp_opens_sent";
    pub const OPENS_RECEIVED: &str = "metallb_bgp_opens_received";
    pub const NOTIFICATIONS_SENT: &str = "metallb_bgp_notifications_sent";
    pub const UPDATES_TOTAL_RECEIVED: &str = "metallb_bgp_updates_total_received";
    pub const KEEPALIVES_SENT: &str = "metallb_bgp_keepalives_sent";
    pub const KEEPALIVES_RECEIVED: &str = "metallb_bgp_keepalives_received";
    pub const ROUTE_REFRESH_SENT: &str = "metallb_bgp_route_refresh_sent";
    pub const TOTAL_SENT: &str = "metallb_bgp_total_sent";
    pub const TOTAL_RECEIVED: &str = "metallb_bgp_total_received";
}

/// The peer label name.
pub const PEER_LABEL: &str = "peer";
/// The VRF label name (FRR-mode counters).
pub const VRF_LABEL: &str = "vrf";
/// The `vrf` label value of a peer in the default VRF (FRR's name for it).
pub const DEFAULT_VRF: &str = "default";

/// The `peer` label value: `addr:port`, IPv6 in brackets, as MetalLB's
/// `net.JoinHostPort`.
pub fn peer_label(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

/// Registration failed (a metric of the same name with other help or
/// labels is already registered, for instance).
#[derive(Debug, thiserror::Error)]
#[error("registering metric {name}: {source}")]
pub struct MetricsError {
    pub name: &'static str,
    #[source]
    pub source: prometheus::Error,
}

/// The metric families, registered on one registry. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BgpMetrics {
    session_up: IntGaugeVec,
    updates_total: IntCounterVec,
    announced_prefixes: IntGaugeVec,
    pending_prefixes: IntGaugeVec,
    opens_sent: IntCounterVec,
    opens_received: IntCounterVec,
    notifications_sent: IntCounterVec,
    updates_received: IntCounterVec,
    keepalives_sent: IntCounterVec,
    keepalives_received: IntCounterVec,
    route_refresh_sent: IntCounterVec,
    total_sent: IntCounterVec,
    total_received: IntCounterVec,
}

fn gauge(registry: &Registry, name: &'static str, help: &str) -> Result<IntGaugeVec, MetricsError> {
    let err = |source| MetricsError { name, source };
    let g = IntGaugeVec::new(Opts::new(name, help), &[PEER_LABEL]).map_err(err)?;
    registry.register(Box::new(g.clone())).map_err(err)?;
    Ok(g)
}

fn counter(
    registry: &Registry,
    name: &'static str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, MetricsError> {
    let err = |source| MetricsError { name, source };
    let c = IntCounterVec::new(Opts::new(name, help), labels).map_err(err)?;
    registry.register(Box::new(c.clone())).map_err(err)?;
    Ok(c)
}

impl BgpMetrics {
    /// Creates and registers every family on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, MetricsError> {
        use names::*;
        let pv = &[PEER_LABEL, VRF_LABEL];
        Ok(Self {
            session_up: gauge(
                registry,
                SESSION_UP,
                "BGP session state (1 is up, 0 is down)",
            )?,
            updates_total: counter(
                registry,
                UPDATES_TOTAL,
                "Number of BGP UPDATE messages sent",
                &[PEER_LABEL],
            )?,
            announced_prefixes: gauge(
                registry,
                ANNOUNCED_PREFIXES_TOTAL,
                "Number of prefixes currently being advertised on the BGP session",
            )?,
            pending_prefixes: gauge(
                registry,
                PENDING_PREFIXES_TOTAL,
                "Number of prefixes that should be advertised on the BGP session but are not yet",
            )?,
            opens_sent: counter(registry, OPENS_SENT, "Number of BGP open messages sent", pv)?,
            opens_received: counter(
                registry,
                OPENS_RECEIVED,
                "Number of BGP open messages received",
                pv,
            )?,
            notifications_sent: counter(
                registry,
                NOTIFICATIONS_SENT,
                "Number of BGP notification messages sent",
                pv,
            )?,
            updates_received: counter(
                registry,
                UPDATES_TOTAL_RECEIVED,
                "Number of BGP UPDATE messages received",
                pv,
            )?,
            keepalives_sent: counter(
                registry,
                KEEPALIVES_SENT,
                "Number of BGP keepalive messages sent",
                pv,
            )?,
            keepalives_received: counter(
                registry,
                KEEPALIVES_RECEIVED,
                "Number of BGP keepalive messages received",
                pv,
            )?,
            route_refresh_sent: counter(
                registry,
                ROUTE_REFRESH_SENT,
                "Number of BGP route refresh messages sent",
                pv,
            )?,
            total_sent: counter(
                registry,
                TOTAL_SENT,
                "Number of total BGP messages sent",
                pv,
            )?,
            total_received: counter(
                registry,
                TOTAL_RECEIVED,
                "Number of total BGP messages received",
                pv,
            )?,
        })
    }

    /// The series of one session, created at zero (session down). `vrf`
    /// `None` is the default VRF.
    pub fn session(&self, peer: impl Into<String>, vrf: Option<&str>) -> SessionMetrics {
        let s = SessionMetrics {
            metrics: self.clone(),
            peer: peer.into(),
            vrf: vrf.unwrap_or(DEFAULT_VRF).to_owned(),
            last_sent: MessageCounters::default(),
            last_received: MessageCounters::default(),
        };
        s.touch();
        s
    }
}

/// One session's series. Counters follow the [`MessageCounters`] of the
/// published state: each update adds what they grew by (a state whose
/// counters went down, a new session object, counts from zero again).
#[derive(Debug)]
pub struct SessionMetrics {
    metrics: BgpMetrics,
    peer: String,
    vrf: String,
    last_sent: MessageCounters,
    last_received: MessageCounters,
}

fn grow(counter: &prometheus::IntCounter, last: u64, now: u64) {
    let delta = if now >= last { now - last } else { now };
    if delta > 0 {
        counter.inc_by(delta);
    }
}

impl SessionMetrics {
    pub fn peer(&self) -> &str {
        &self.peer
    }

    pub fn vrf(&self) -> &str {
        &self.vrf
    }

    fn pv(&self) -> [&str; 2] {
        [&self.peer, &self.vrf]
    }

    /// Creates every series so that they are exported before the first
    /// update.
    fn touch(&self) {
        let m = &self.metrics;
        let p = [self.peer.as_str()];
        let pv = self.pv();
        m.session_up.with_label_values(&p);
        m.updates_total.with_label_values(&p);
        m.announced_prefixes.with_label_values(&p);
        m.pending_prefixes.with_label_values(&p);
        for c in self.per_vrf_counters() {
            c.with_label_values(&pv);
        }
    }

    fn per_vrf_counters(&self) -> [&IntCounterVec; 9] {
        let m = &self.metrics;
        [
            &m.opens_sent,
            &m.opens_received,
            &m.notifications_sent,
            &m.updates_received,
            &m.keepalives_sent,
            &m.keepalives_received,
            &m.route_refresh_sent,
            &m.total_sent,
            &m.total_received,
        ]
    }

    /// Moves the series to `state`.
    pub fn update(&mut self, state: &SessionState) {
        let m = &self.metrics;
        let p = [self.peer.as_str()];
        let pv = self.pv();
        m.session_up
            .with_label_values(&p)
            .set(i64::from(state.is_up()));
        m.announced_prefixes
            .with_label_values(&p)
            .set(saturating_i64(state.rib_out.prefixes_advertised()));
        m.pending_prefixes
            .with_label_values(&p)
            .set(saturating_i64(state.rib_out.pending_prefixes));

        let (s0, s1) = (self.last_sent, state.sent);
        let (r0, r1) = (self.last_received, state.received);
        grow(
            &m.updates_total.with_label_values(&p),
            s0.updates,
            s1.updates,
        );
        grow(&m.opens_sent.with_label_values(&pv), s0.opens, s1.opens);
        grow(&m.opens_received.with_label_values(&pv), r0.opens, r1.opens);
        grow(
            &m.notifications_sent.with_label_values(&pv),
            s0.notifications,
            s1.notifications,
        );
        grow(
            &m.updates_received.with_label_values(&pv),
            r0.updates,
            r1.updates,
        );
        grow(
            &m.keepalives_sent.with_label_values(&pv),
            s0.keepalives,
            s1.keepalives,
        );
        grow(
            &m.keepalives_received.with_label_values(&pv),
            r0.keepalives,
            r1.keepalives,
        );
        grow(
            &m.route_refresh_sent.with_label_values(&pv),
            s0.route_refresh,
            s1.route_refresh,
        );
        grow(&m.total_sent.with_label_values(&pv), s0.total, s1.total);
        grow(&m.total_received.with_label_values(&pv), r0.total, r1.total);
        self.last_sent = s1;
        self.last_received = r1;
    }

    /// Deletes this session's series (the peer was de-configured).
    pub fn remove(self) {
        let m = &self.metrics;
        let p = [self.peer.as_str()];
        let pv = self.pv();
        // An error only says the series was not there.
        let _ = m.session_up.remove_label_values(&p);
        let _ = m.updates_total.remove_label_values(&p);
        let _ = m.announced_prefixes.remove_label_values(&p);
        let _ = m.pending_prefixes.remove_label_values(&p);
        for c in self.per_vrf_counters() {
            let _ = c.remove_label_values(&pv);
        }
    }
}

fn saturating_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
