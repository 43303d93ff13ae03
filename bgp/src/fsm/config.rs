//! Per-session configuration of the FSM, its checks, and the timer rules.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::serde_wire;
use crate::wire::{
    Capabilities, Capability, ExtendedNextHop, Family, GracefulRestart, GracefulRestartFamily,
    HoldTime, Open,
};

/// Hold time when none is configured (RFC 4271 suggests 90 s; MetalLB's).
pub const DEFAULT_HOLD_TIME: u16 = 90;
/// The hold timer of OpenSent (RFC 4271 8.2.2 suggests 4 minutes).
pub const OPEN_SENT_HOLD_TIME: Duration = Duration::from_secs(240);
/// The least SendHoldTime when none is configured (RFC 9687: 8 minutes, or
/// twice the hold time when that is longer).
pub const DEFAULT_SEND_HOLD_TIME: Duration = Duration::from_secs(480);
/// The first connect retry delay of the exponential schedule.
pub const CONNECT_RETRY_INITIAL: Duration = Duration::from_secs(1);
/// The cap of the exponential connect retry schedule.
pub const CONNECT_RETRY_MAX: Duration = Duration::from_secs(30);
/// The least time the ConnectRetry timer gives a TCP handshake of ours
/// (while it bounds one: in Connect): Linux retransmits an unanswered SYN
/// after 1 s (its initial RTO), so a shorter bound would abandon every
/// handshake whose first SYN was lost before the kernel could retry it.
/// The pause between failed attempts (IdleHold) keeps the 1, 2, 4... s
/// schedule.
pub const MIN_HANDSHAKE_TIME: Duration = Duration::from_secs(3);
/// The automatic restart after the `n`-th session in a row that ended with
/// a NOTIFICATION (sent or received) waits at least 2^(n-1) s, up to this
/// cap (a peer that rejects our UPDATEs no longer makes the session flap
/// every second).
pub const RESTART_DAMPING_MAX: Duration = Duration::from_secs(120);
/// An Established session lasting this long clears the damping.
pub const RESTART_DAMPING_FORGET: Duration = Duration::from_secs(120);

/// The least delay of the automatic restart after `n` sessions in a row
/// ended with a NOTIFICATION (zero when `n` is 0).
pub fn restart_damping_delay(n: u32) -> Duration {
    if n == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
    Duration::from_secs(1)
        .saturating_mul(factor)
        .min(RESTART_DAMPING_MAX)
}

/// How the peer's AS is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerAs {
    /// `peerASN`: the peer's AS must be this one.
    Fixed(u32),
    /// `dynamicASN: internal`: the peer's AS must be ours.
    Internal,
    /// `dynamicASN: external`: the peer's AS must differ from ours.
    External,
}

/// A capability without which the session is refused with OPEN Message
/// Error/Unsupported Capability (RFC 5492). None is required by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequiredCapability {
    Multiprotocol(#[serde(with = "serde_wire::family")] Family),
    RouteRefresh,
    EnhancedRouteRefresh,
    FourOctetAs,
    GracefulRestart,
    ExtendedMessage,
}

impl RequiredCapability {
    /// Whether the peer's capabilities satisfy this requirement.
    pub fn is_met(&self, peer: &Capabilities) -> bool {
        match self {
            RequiredCapability::Multiprotocol(f) => peer.multiprotocol.contains(f),
            RequiredCapability::RouteRefresh => peer.any_route_refresh(),
            RequiredCapability::EnhancedRouteRefresh => peer.enhanced_route_refresh,
            RequiredCapability::FourOctetAs => peer.four_octet_as.is_some(),
            RequiredCapability::GracefulRestart => peer.graceful_restart.is_some(),
            RequiredCapability::ExtendedMessage => peer.extended_message,
        }
    }

    /// The capability as we would advertise it: the data of the
    /// Unsupported Capability NOTIFICATION lists these.
    pub fn capability(&self, local_as: u32) -> Capability {
        match self {
            RequiredCapability::Multiprotocol(f) => Capability::Multiprotocol(*f),
            RequiredCapability::RouteRefresh => Capability::RouteRefresh,
            RequiredCapability::EnhancedRouteRefresh => Capability::EnhancedRouteRefresh,
            RequiredCapability::FourOctetAs => Capability::FourOctetAs(local_as),
            RequiredCapability::GracefulRestart => {
                Capability::GracefulRestart(GracefulRestart::default())
            }
            RequiredCapability::ExtendedMessage => Capability::ExtendedMessage,
        }
    }
}

/// A configuration the FSM refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("hold time of {0} s is not allowed: use 0 (no keepalives) or at least 3 s")]
    HoldTime(u16),
    #[error("send hold time of 0 s is not allowed: leave it unset for the RFC 9687 default")]
    SendHoldTimeZero,
    #[error("keepalive time of {keepalive} s is longer than the hold time of {hold} s")]
    KeepaliveAboveHold { keepalive: u16, hold: u16 },
    #[error("connect time must be at least 1 s")]
    ConnectTimeZero,
    #[error("AS 0 is reserved (RFC 7607) and cannot be our AS")]
    LocalAsZero,
    #[error("AS 0 is reserved (RFC 7607) and cannot be the peer's AS")]
    PeerAsZero,
    #[error("no address family to offer")]
    NoFamilies,
    #[error("graceful restart time of {0} s does not fit the capability's 12 bits (at most 4095)")]
    RestartTime(u16),
}

/// The largest Restart Time of the graceful restart capability (12 bits).
pub const MAX_RESTART_TIME: u16 = 0x0fff;

/// One session's configuration. [`Config::new`] gives the defaults.
///
/// The optional session attributes of RFC 4271 section 8.1.1 are named
/// here as [`Config`] fields or constants in [`super`]; see the module
/// documentation for the full list of implemented and ignored ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// `myASN`.
    pub my_as: u32,
    /// `localASN`: the AS sent in our OPEN (and used for the iBGP/eBGP
    /// decision) in place of `my_as`.
    pub local_as: Option<u32>,
    pub peer_as: PeerAs,
    /// `routerID` (see [`super::router_id`] for the rule when unset).
    pub router_id: Option<Ipv4Addr>,
    /// This node's name: the last resort of the router ID rule.
    pub node_name: String,
    /// `holdTime` in seconds: 0 or at least 3; [`DEFAULT_HOLD_TIME`] when
    /// unset.
    pub hold_time: Option<u16>,
    /// `keepaliveTime` in seconds; the keepalive interval is the smaller of
    /// this and a third of the negotiated hold time. 0 counts as unset.
    pub keepalive_time: Option<u16>,
    /// SendHoldTime in seconds (RFC 9687, not negotiated): how long output
    /// may wait for a peer that stopped reading before the session closes
    /// with Send Hold Timer Expired. Unset: the larger of
    /// [`DEFAULT_SEND_HOLD_TIME`] and twice the hold time (the negotiated
    /// one once known, else ours). 0 is refused.
    #[serde(default)]
    pub send_hold_time: Option<u32>,
    /// `connectTime` in seconds: a fixed connect retry interval. Unset:
    /// exponential from [`CONNECT_RETRY_INITIAL`] doubling to
    /// [`CONNECT_RETRY_MAX`].
    pub connect_time: Option<u16>,
    /// RFC 4271 PassiveTcpEstablishment: on start, wait for the peer to
    /// connect (Active) instead of connecting (Connect).
    pub passive_tcp_establishment: bool,
    /// RFC 4271 AllowAutomaticStart: after an error, restart by itself
    /// after the IdleHold delay.
    pub allow_automatic_start: bool,
    /// Families offered with the multiprotocol capability, in order.
    #[serde(with = "serde_wire::families")]
    pub families: Vec<Family>,
    /// Offer route refresh (RFC 2918).
    pub route_refresh: bool,
    /// Offer enhanced route refresh (RFC 7313): the Adj-RIB-Out must then
    /// wrap refresh answers in BoRR/EoRR.
    pub enhanced_route_refresh: bool,
    /// Offer extended messages (RFC 8654).
    pub extended_message: bool,
    /// Extended next hop tuples offered (RFC 8950).
    #[serde(with = "serde_wire::extended_next_hops")]
    pub extended_next_hop: Vec<ExtendedNextHop>,
    /// The graceful restart capability offered (RFC 4724, N bit of RFC 8538),
    /// sent as given except for the R bit
    /// ([`GracefulRestart::RESTART_STATE`]): set here, it is sent until the
    /// session first reaches Established, then cleared (the speaker has
    /// restarted once, not at every reconnection). See
    /// [`Config::enable_graceful_restart`].
    #[serde(with = "serde_wire::opt_graceful_restart")]
    pub graceful_restart: Option<GracefulRestart>,
    /// Capabilities the peer must offer.
    pub required_capabilities: Vec<RequiredCapability>,
}

impl Config {
    /// Defaults: IPv4 and IPv6 unicast, route refresh, extended messages,
    /// the 4-octet AS capability (always sent), active connection, automatic
    /// restart, no graceful restart, nothing required.
    pub fn new(my_as: u32, peer_as: PeerAs, node_name: impl Into<String>) -> Self {
        Config {
            my_as,
            local_as: None,
            peer_as,
            router_id: None,
            node_name: node_name.into(),
            hold_time: None,
            keepalive_time: None,
            send_hold_time: None,
            connect_time: None,
            passive_tcp_establishment: false,
            allow_automatic_start: true,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            route_refresh: true,
            enhanced_route_refresh: false,
            extended_message: true,
            extended_next_hop: Vec::new(),
            graceful_restart: None,
            required_capabilities: Vec::new(),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.my_as == 0 || self.local_as == Some(0) {
            return Err(ConfigError::LocalAsZero);
        }
        if self.peer_as == PeerAs::Fixed(0) {
            return Err(ConfigError::PeerAsZero);
        }
        let hold = self.hold_time();
        if let Some(h) = self.hold_time
            && HoldTime::new(h).is_none()
        {
            return Err(ConfigError::HoldTime(h));
        }
        if let Some(k) = self.keepalive_time
            && hold.seconds() != 0
            && k > hold.seconds()
        {
            return Err(ConfigError::KeepaliveAboveHold {
                keepalive: k,
                hold: hold.seconds(),
            });
        }
        if self.send_hold_time == Some(0) {
            return Err(ConfigError::SendHoldTimeZero);
        }
        if self.connect_time == Some(0) {
            return Err(ConfigError::ConnectTimeZero);
        }
        if self.families.is_empty() {
            return Err(ConfigError::NoFamilies);
        }
        if let Some(gr) = &self.graceful_restart
            && gr.restart_time > MAX_RESTART_TIME
        {
            return Err(ConfigError::RestartTime(gr.restart_time));
        }
        Ok(())
    }

    /// Offers graceful restart (RFC 4724) as a load-balancer speaker does:
    /// every family of [`Config::families`] with the Forwarding State bit
    /// set, since the forwarding of the announced services does not live in
    /// this process and survives its restart; `restart_time` (seconds, at
    /// most [`MAX_RESTART_TIME`]) is how long the peer keeps our routes
    /// while we are away; `notification` sets the RFC 8538 N bit;
    /// `restarted` sets the R bit (this speaker has just restarted), sent
    /// until the first Established.
    ///
    /// A planned restart ([`super::Input::PlannedRestart`]) then leaves our
    /// routes at the peer, which keeps them as stale until we are back and
    /// have sent End-of-RIB; it removes then those we did not announce
    /// again. Give the session its prefixes before it comes up (right after
    /// starting it): End-of-RIB follows the first round of UPDATEs.
    pub fn enable_graceful_restart(
        &mut self,
        restart_time: u16,
        notification: bool,
        restarted: bool,
    ) {
        let mut flags = 0;
        if notification {
            flags |= GracefulRestart::NOTIFICATION;
        }
        if restarted {
            flags |= GracefulRestart::RESTART_STATE;
        }
        self.graceful_restart = Some(GracefulRestart {
            flags,
            restart_time,
            families: self
                .families
                .iter()
                .map(|&family| GracefulRestartFamily {
                    family,
                    flags: GracefulRestartFamily::FORWARDING_STATE,
                })
                .collect(),
        });
    }

    /// The AS we present: `localASN`, else `myASN`.
    pub fn effective_local_as(&self) -> u32 {
        self.local_as.unwrap_or(self.my_as)
    }

    /// The hold time we offer.
    pub fn hold_time(&self) -> HoldTime {
        self.hold_time
            .and_then(HoldTime::new)
            .unwrap_or(HoldTime::DEFAULT)
    }

    /// The SendHoldTime (RFC 9687) of a connection whose hold time is
    /// `hold` seconds (the negotiated one, or ours before the OPENs):
    /// [`Config::send_hold_time`] when set, else the larger of
    /// [`DEFAULT_SEND_HOLD_TIME`] and twice `hold`.
    pub fn send_hold_duration(&self, hold: u16) -> Duration {
        match self.send_hold_time {
            Some(s) => Duration::from_secs(u64::from(s)),
            None => DEFAULT_SEND_HOLD_TIME.max(Duration::from_secs(2 * u64::from(hold))),
        }
    }

    /// The capabilities we offer. The 4-octet AS capability is always
    /// there, carrying the AS we present.
    pub fn local_capabilities(&self) -> Capabilities {
        Capabilities {
            multiprotocol: self.families.clone(),
            route_refresh: self.route_refresh,
            route_refresh_old: false,
            enhanced_route_refresh: self.enhanced_route_refresh,
            four_octet_as: Some(self.effective_local_as()),
            graceful_restart: self.graceful_restart.clone(),
            extended_message: self.extended_message,
            extended_next_hop: self.extended_next_hop.clone(),
            unknown: Vec::new(),
        }
    }

    /// Our OPEN: the AS we present (AS_TRANS in My AS when it does not fit
    /// 2 octets), our hold time, `router_id`, our capabilities.
    pub fn open_message(&self, router_id: Ipv4Addr) -> Open {
        Open::new(
            self.effective_local_as(),
            self.hold_time(),
            router_id,
            self.local_capabilities().to_capabilities(),
        )
    }

    /// The delay of connection attempt `attempt` (0 after a manual start or
    /// an Established session): `connectTime` when set, else 1 s doubling to
    /// the 30 s cap (1, 2, 4, 8, 16, 30, 30, ...).
    pub fn connect_retry_delay(&self, attempt: u32) -> Duration {
        if let Some(fixed) = self.connect_time {
            return Duration::from_secs(u64::from(fixed));
        }
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        CONNECT_RETRY_INITIAL
            .saturating_mul(factor)
            .min(CONNECT_RETRY_MAX)
    }

    /// Hold time and keepalive interval (seconds) for a peer offering
    /// `peer_hold`: the smaller hold time; keepalive the smaller of the
    /// configured keepalive and a third of it; both 0 when it is 0.
    pub fn negotiate_timers(&self, peer_hold: HoldTime) -> (u16, u16) {
        let hold = self.hold_time().seconds().min(peer_hold.seconds());
        if hold == 0 {
            return (0, 0);
        }
        let third = hold / 3;
        let keepalive = match self.keepalive_time {
            Some(k) if k > 0 => k.min(third),
            _ => third,
        };
        (hold, keepalive.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let ok = Config::new(64512, PeerAs::Fixed(64513), "n");
        assert_eq!(ok.validate(), Ok(()));
        let mut c = ok.clone();
        c.hold_time = Some(2);
        assert_eq!(c.validate(), Err(ConfigError::HoldTime(2)));
        let mut c = ok.clone();
        c.hold_time = Some(30);
        c.keepalive_time = Some(31);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::KeepaliveAboveHold { .. })
        ));
        let mut c = ok.clone();
        c.connect_time = Some(0);
        assert_eq!(c.validate(), Err(ConfigError::ConnectTimeZero));
        let mut c = ok.clone();
        c.local_as = Some(0);
        assert_eq!(c.validate(), Err(ConfigError::LocalAsZero));
        let c = Config::new(1, PeerAs::Fixed(0), "n");
        assert_eq!(c.validate(), Err(ConfigError::PeerAsZero));
        let mut c = ok;
        c.families.clear();
        assert_eq!(c.validate(), Err(ConfigError::NoFamilies));
    }

    #[test]
    fn graceful_restart_offers_every_family_with_forwarding_state() {
        let mut c = Config::new(64512, PeerAs::Fixed(64513), "n");
        c.enable_graceful_restart(30, true, true);
        let gr = c.graceful_restart.clone().unwrap();
        assert_eq!(gr.restart_time, 30);
        assert!(gr.notification() && gr.restart_state());
        assert_eq!(
            gr.families.iter().map(|f| f.family).collect::<Vec<_>>(),
            c.families
        );
        assert!(gr.families.iter().all(|f| f.forwarding_state()));
        assert_eq!(c.validate(), Ok(()));
        c.enable_graceful_restart(0, false, false);
        let gr = c.graceful_restart.clone().unwrap();
        assert!(!gr.notification() && !gr.restart_state());
        c.enable_graceful_restart(MAX_RESTART_TIME + 1, false, false);
        assert_eq!(
            c.validate(),
            Err(ConfigError::RestartTime(MAX_RESTART_TIME + 1))
        );
    }

    #[test]
    fn retry_delay_saturates() {
        let c = Config::new(1, PeerAs::Internal, "n");
        assert_eq!(c.connect_retry_delay(200), CONNECT_RETRY_MAX);
        assert_eq!(c.connect_retry_delay(0), CONNECT_RETRY_INITIAL);
    }
}
