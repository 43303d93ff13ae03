//! The state snapshot published for each session ("state from memory").
//!
//! Plain data with serde, no tokio: the speaker keeps one [`SessionState`]
//! per session, updates it as the FSM, the transport and the Adj-RIB-Out
//! move, and publishes clones (for instance through a
//! `tokio::sync::watch`). [`crate::metrics`] turns a snapshot into
//! MetalLB's Prometheus series.
//!
//! Nothing here ever holds a password: errors are built from a
//! NOTIFICATION (its `Display` text), an `io::Error`, or a message the
//! caller writes, and [`LastError::redact`] scrubs a secret from the text
//! when there is any doubt.

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::wire::{Family, MessageType, Negotiated, NextHop, Notification};

/// The session states of RFC 4271 section 8.2.2, serialized under their
/// RFC names (`"Idle"`, `"Connect"`, `"Active"`, `"OpenSent"`,
/// `"OpenConfirm"`, `"Established"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum FsmState {
    #[default]
    Idle,
    Connect,
    Active,
    OpenSent,
    OpenConfirm,
    Established,
}

impl FsmState {
    /// The RFC 4271 name.
    pub fn as_str(self) -> &'static str {
        match self {
            FsmState::Idle => "Idle",
            FsmState::Connect => "Connect",
            FsmState::Active => "Active",
            FsmState::OpenSent => "OpenSent",
            FsmState::OpenConfirm => "OpenConfirm",
            FsmState::Established => "Established",
        }
    }

    /// Whether OPENs were exchanged (capabilities and timers are known).
    pub fn is_negotiated(self) -> bool {
        matches!(self, FsmState::OpenConfirm | FsmState::Established)
    }
}

impl fmt::Display for FsmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Messages of each type, in one direction. `total` counts every message,
/// including types without a field of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MessageCounters {
    pub opens: u64,
    pub updates: u64,
    pub notifications: u64,
    pub keepalives: u64,
    pub route_refresh: u64,
    pub total: u64,
}

impl MessageCounters {
    /// Counts one message of type `t`.
    pub fn record(&mut self, t: MessageType) {
        self.record_n(t, 1);
    }

    /// Counts `n` messages of type `t`.
    pub fn record_n(&mut self, t: MessageType, n: u64) {
        let field = match t {
            MessageType::Open => &mut self.opens,
            MessageType::Update => &mut self.updates,
            MessageType::Notification => &mut self.notifications,
            MessageType::Keepalive => &mut self.keepalives,
            MessageType::RouteRefresh => &mut self.route_refresh,
        };
        *field += n;
        self.total += n;
    }

    /// Counts one encoded message (header included) by its type octet, as
    /// the driver writes the output of [`crate::rib_out::AdjRibOut::drain`].
    /// Returns the type, or `None` (nothing counted) for something that is
    /// not a message header.
    pub fn record_encoded(&mut self, message: &[u8]) -> Option<MessageType> {
        let t = MessageType::from_u8(*message.get(18)?)?;
        self.record(t);
        Some(t)
    }
}

/// Where the last error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorSource {
    /// The peer sent a NOTIFICATION.
    NotificationReceived,
    /// We sent a NOTIFICATION.
    NotificationSent,
    /// A socket operation failed (connect, bind, setsockopt, read, write).
    Socket,
    /// Anything else the session reports (e.g. "peer not on a connected
    /// subnet: set ebgpMultiHop").
    Session,
}

/// The last error of a session, as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    pub at: SystemTime,
    pub source: ErrorSource,
    pub text: String,
}

impl LastError {
    /// A NOTIFICATION the peer sent, e.g.
    /// `Cease/Administrative Shutdown: "maintenance"`.
    pub fn notification_received(notification: &Notification, at: SystemTime) -> Self {
        Self {
            at,
            source: ErrorSource::NotificationReceived,
            text: notification.to_string(),
        }
    }

    /// A NOTIFICATION we sent.
    pub fn notification_sent(notification: &Notification, at: SystemTime) -> Self {
        Self {
            at,
            source: ErrorSource::NotificationSent,
            text: notification.to_string(),
        }
    }

    /// A socket error; `context` says what was being done (e.g.
    /// `"connect to 192.0.2.1:179"`).
    pub fn socket(context: &str, error: &io::Error, at: SystemTime) -> Self {
        let text = if context.is_empty() {
            error.to_string()
        } else {
            format!("{context}: {error}")
        };
        Self {
            at,
            source: ErrorSource::Socket,
            text,
        }
    }

    /// Any other session error, in the caller's words.
    pub fn session(text: impl Into<String>, at: SystemTime) -> Self {
        Self {
            at,
            source: ErrorSource::Session,
            text: text.into(),
        }
    }

    /// Replaces every occurrence of `secret` in the text with
    /// `<redacted>` (nothing happens for an empty secret).
    pub fn redact(mut self, secret: &str) -> Self {
        if !secret.is_empty() && self.text.contains(secret) {
            self.text = self.text.replace(secret, "<redacted>");
        }
        self
    }
}

/// Graceful restart as negotiated, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GracefulRestartState {
    pub peer_restart_time: u16,
    pub peer_restart_state: bool,
    pub notification: bool,
    /// Families the peer preserves (`"ipv4-unicast"` …).
    pub peer_families: Vec<String>,
}

/// A capability of the peer that the codec does not interpret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownCapabilityState {
    pub code: u8,
    /// The value in lowercase hex.
    pub value: String,
}

/// The outcome of capability negotiation, for display.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CapabilitiesState {
    /// Families both sides support.
    pub families: Vec<String>,
    /// Families we offered that the peer did not.
    pub local_only_families: Vec<String>,
    pub four_octet_as: bool,
    pub route_refresh: bool,
    pub enhanced_route_refresh: bool,
    pub extended_message: bool,
    pub graceful_restart: Option<GracefulRestartState>,
    /// `"<nlri family> via <next hop afi>"` tuples (RFC 8950).
    pub extended_next_hop: Vec<String>,
    pub peer_unknown: Vec<UnknownCapabilityState>,
}

impl From<&Negotiated> for CapabilitiesState {
    fn from(n: &Negotiated) -> Self {
        let names = |fs: &[Family]| fs.iter().map(Family::to_string).collect();
        Self {
            families: names(&n.families),
            local_only_families: names(&n.local_only_families),
            four_octet_as: n.four_octet_as,
            route_refresh: n.route_refresh,
            enhanced_route_refresh: n.enhanced_route_refresh,
            extended_message: n.extended_message,
            graceful_restart: n.graceful_restart.as_ref().map(|gr| GracefulRestartState {
                peer_restart_time: gr.peer_restart_time,
                peer_restart_state: gr.peer_restart_state,
                notification: gr.notification,
                peer_families: gr
                    .peer_families
                    .iter()
                    .map(|f| f.family.to_string())
                    .collect(),
            }),
            extended_next_hop: n
                .extended_next_hop
                .iter()
                .map(|t| {
                    let nlri = match t.family() {
                        Some(f) => f.to_string(),
                        None => format!("afi{}/safi{}", t.nlri_afi.0, t.nlri_safi),
                    };
                    format!("{nlri} via afi{}", t.next_hop_afi.0)
                })
                .collect(),
            peer_unknown: n
                .peer_unknown
                .iter()
                .map(|u| UnknownCapabilityState {
                    code: u.code,
                    value: u.value.iter().map(|b| format!("{b:02x}")).collect(),
                })
                .collect(),
        }
    }
}

/// Why a family is not announced on a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum FamilyDisabled {
    /// The session is not Established.
    SessionDown,
    /// We offered the family and the peer did not.
    NotSupportedByPeer,
    /// We did not offer the family in our OPEN.
    NotOffered,
    /// The session has no next hop address of a usable family.
    NoNextHop,
    /// The next hop is of another address family and RFC 8950 extended
    /// next hop was not negotiated for it.
    NextHopNotAllowed,
}

impl fmt::Display for FamilyDisabled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FamilyDisabled::SessionDown => "the session is not established",
            FamilyDisabled::NotSupportedByPeer => {
                "the peer did not advertise the multiprotocol capability for this family"
            }
            FamilyDisabled::NotOffered => "not offered in our OPEN",
            FamilyDisabled::NoNextHop => {
                "no next hop: the session has no local address of this family \
                 (set sourceAddress or add an address of this family to the interface)"
            }
            FamilyDisabled::NextHopNotAllowed => {
                "the next hop is of another address family and extended next hop \
                 (RFC 8950) was not negotiated"
            }
        })
    }
}

/// One address family of a session's Adj-RIB-Out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyState {
    /// `"ipv4-unicast"` or `"ipv6-unicast"`.
    pub family: String,
    pub enabled: bool,
    /// Why the family is not announced (when `enabled` is false).
    pub reason: Option<String>,
    pub next_hop: Option<String>,
    /// Prefixes of this family we want the peer to have.
    pub prefixes_desired: usize,
    /// Prefixes the peer has from us (sent).
    pub prefixes_advertised: usize,
    /// Prefixes that could not be encoded (attributes too large for a
    /// message), with the last such error.
    pub prefixes_rejected: usize,
    pub rejected_error: Option<String>,
}

impl FamilyState {
    pub(crate) fn new(family: Family) -> Self {
        Self {
            family: family.to_string(),
            enabled: false,
            reason: None,
            next_hop: None,
            prefixes_desired: 0,
            prefixes_advertised: 0,
            prefixes_rejected: 0,
            rejected_error: None,
        }
    }
}

pub(crate) fn next_hop_text(nh: &NextHop) -> String {
    match nh {
        NextHop::V4(a) => a.to_string(),
        NextHop::V6 {
            global,
            link_local: None,
        } => global.to_string(),
        NextHop::V6 {
            global,
            link_local: Some(ll),
        } => format!("{global} {ll}"),
    }
}

/// The Adj-RIB-Out's part of the state: see
/// [`crate::rib_out::AdjRibOut::state`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RibOutState {
    pub families: Vec<FamilyState>,
    /// Prefixes whose state at the peer differs from the desired one and
    /// that the next drain will send (announce or withdraw).
    pub pending_prefixes: usize,
    /// Whether the initial sync of this session (End-of-RIB) was sent.
    pub initial_sync_done: bool,
}

impl RibOutState {
    /// Prefixes the peer has from us, over all families.
    pub fn prefixes_advertised(&self) -> usize {
        self.families.iter().map(|f| f.prefixes_advertised).sum()
    }
}

/// Everything the speaker publishes about one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// `addr:port` (IPv6 in brackets), as in MetalLB's `peer` label.
    pub peer: String,
    pub fsm_state: FsmState,
    pub last_transition: SystemTime,
    pub last_error: Option<LastError>,
    /// From the peer's OPEN (real AS from the 4-octet AS capability).
    pub peer_as: Option<u32>,
    pub peer_router_id: Option<Ipv4Addr>,
    /// Known from OpenConfirm on; cleared when the session goes back to
    /// Idle, Connect or Active.
    pub capabilities: Option<CapabilitiesState>,
    /// Negotiated hold time in seconds (0: no keepalives).
    pub hold_time: Option<u16>,
    /// Keepalive interval in seconds.
    pub keepalive_time: Option<u16>,
    pub rib_out: RibOutState,
    pub sent: MessageCounters,
    pub received: MessageCounters,
    /// Held down (e.g. while BFD says the path is down): Idle, neither
    /// connecting nor accepting, until released.
    #[serde(default)]
    pub held_down: bool,
}

impl SessionState {
    pub fn new(peer: impl Into<String>, now: SystemTime) -> Self {
        Self {
            peer: peer.into(),
            fsm_state: FsmState::Idle,
            last_transition: now,
            last_error: None,
            peer_as: None,
            peer_router_id: None,
            capabilities: None,
            hold_time: None,
            keepalive_time: None,
            rib_out: RibOutState::default(),
            sent: MessageCounters::default(),
            received: MessageCounters::default(),
            held_down: false,
        }
    }

    /// Records a move to `to` at `now`; returns false (and changes
    /// nothing) when the state is the same. Leaving OpenConfirm/Established
    /// for an earlier state forgets the negotiated capabilities, timers
    /// and the peer's identity; the counters and the last error stay.
    pub fn transition(&mut self, to: FsmState, now: SystemTime) -> bool {
        if to == self.fsm_state {
            return false;
        }
        self.fsm_state = to;
        self.last_transition = now;
        if !to.is_negotiated() {
            self.capabilities = None;
            self.hold_time = None;
            self.keepalive_time = None;
            self.peer_as = None;
            self.peer_router_id = None;
        }
        true
    }

    /// Records the negotiation result and timers (on entering OpenConfirm).
    pub fn set_negotiated(
        &mut self,
        negotiated: &Negotiated,
        peer_as: u32,
        peer_router_id: Ipv4Addr,
        hold_time: u16,
        keepalive_time: u16,
    ) {
        self.capabilities = Some(CapabilitiesState::from(negotiated));
        self.peer_as = Some(peer_as);
        self.peer_router_id = Some(peer_router_id);
        self.hold_time = Some(hold_time);
        self.keepalive_time = Some(keepalive_time);
    }

    pub fn set_error(&mut self, error: LastError) {
        self.last_error = Some(error);
    }

    pub fn is_up(&self) -> bool {
        self.fsm_state == FsmState::Established
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsm_states_serialize_under_rfc_names() {
        for (s, name) in [
            (FsmState::Idle, "Idle"),
            (FsmState::Connect, "Connect"),
            (FsmState::Active, "Active"),
            (FsmState::OpenSent, "OpenSent"),
            (FsmState::OpenConfirm, "OpenConfirm"),
            (FsmState::Established, "Established"),
        ] {
            assert_eq!(s.as_str(), name);
            assert_eq!(s.to_string(), name);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{name}\""));
        }
    }

    #[test]
    fn counters_count_by_type_and_total() {
        let mut c = MessageCounters::default();
        c.record(MessageType::Open);
        c.record_n(MessageType::Update, 3);
        let mut keepalive = vec![0xff; 16];
        keepalive.extend_from_slice(&[0, 19, 4]);
        assert_eq!(c.record_encoded(&keepalive), Some(MessageType::Keepalive));
        assert_eq!(c.record_encoded(&[0xff; 5]), None);
        assert_eq!(
            c,
            MessageCounters {
                opens: 1,
                updates: 3,
                keepalives: 1,
                total: 5,
                ..MessageCounters::default()
            }
        );
    }

    #[test]
    fn errors_are_text_and_secrets_are_redacted() {
        let at = SystemTime::UNIX_EPOCH;
        let n = Notification::administrative_shutdown("maintenance");
        let e = LastError::notification_received(&n, at);
        assert_eq!(e.text, "Cease/Administrative Shutdown: \"maintenance\"");
        assert_eq!(e.source, ErrorSource::NotificationReceived);
        let io = io::Error::from(io::ErrorKind::ConnectionRefused);
        let e = LastError::socket("connect to 192.0.2.1:179", &io, at);
        assert!(
            e.text.starts_with("connect to 192.0.2.1:179: "),
            "{}",
            e.text
        );
        let e = LastError::session("TCP MD5 key s3cret rejected", at).redact("s3cret");
        assert_eq!(e.text, "TCP MD5 key <redacted> rejected");
        assert!(!serde_json::to_string(&e).unwrap().contains("s3cret"));
    }

    #[test]
    fn leaving_established_forgets_the_negotiation() {
        let t0 = SystemTime::UNIX_EPOCH;
        let t1 = t0 + std::time::Duration::from_secs(5);
        let mut s = SessionState::new("192.0.2.1:179", t0);
        assert!(s.transition(FsmState::OpenConfirm, t1));
        s.set_negotiated(
            &crate::wire::negotiate(
                &crate::wire::Capabilities::default(),
                &crate::wire::Capabilities::default(),
            ),
            65001,
            Ipv4Addr::new(192, 0, 2, 1),
            90,
            30,
        );
        assert!(s.transition(FsmState::Established, t1));
        assert!(!s.transition(FsmState::Established, t0));
        assert_eq!(s.last_transition, t1);
        assert!(s.is_up());
        assert_eq!(s.hold_time, Some(90));
        s.transition(FsmState::Idle, t1);
        assert_eq!(s.capabilities, None);
        assert_eq!(s.hold_time, None);
        assert!(!s.is_up());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["fsm_state"], "Idle");
        assert_eq!(json["peer"], "192.0.2.1:179");
    }
}
