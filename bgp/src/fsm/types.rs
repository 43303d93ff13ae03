//! The FSM's vocabulary: connection identities, timers, inputs, outputs and
//! the reasons it reports. Everything here serializes (replayable logs).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::serde_wire;
use crate::state::{FamilyDisabled, FsmState};
use crate::wire::{
    Capabilities, DecodeContext, EncodeContext, Family, Message, Negotiated, Notification,
};

/// Who opened a TCP connection (RFC 4271 section 6.8 keeps the one opened
/// by the speaker with the higher BGP Identifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// We connected to the peer.
    Active,
    /// The peer connected to us.
    Passive,
}

/// One TCP connection of a session. The FSM numbers the connections it asks
/// for ([`Output::Connect`], role Active); the driver numbers the ones it
/// accepts (role Passive). Sequence numbers never repeat within a role, so
/// an event about a connection that is gone is recognised and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConnId {
    pub role: Role,
    pub seq: u64,
}

impl ConnId {
    pub const fn active(seq: u64) -> Self {
        ConnId {
            role: Role::Active,
            seq,
        }
    }

    pub const fn passive(seq: u64) -> Self {
        ConnId {
            role: Role::Passive,
            seq,
        }
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.role {
            Role::Active => "active",
            Role::Passive => "passive",
        };
        write!(f, "{role}#{}", self.seq)
    }
}

/// The timers the FSM runs. The driver keeps at most one of each; setting
/// one that runs restarts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timer {
    /// ConnectRetryTimer (RFC 4271 8.1.1): how long a TCP connection
    /// attempt may take before it is abandoned and retried.
    ConnectRetry,
    /// IdleHoldTimer (RFC 4271 8.1.1, event 13): the delay before the
    /// automatic restart that follows an error.
    IdleHold,
    /// HoldTimer of one connection.
    Hold { conn: ConnId },
    /// KeepaliveTimer of one connection.
    Keepalive { conn: ConnId },
    /// SendHoldTimer of one connection (RFC 9687): runs while output waits
    /// for the socket, restarted by every write that makes progress.
    SendHold { conn: ConnId },
    /// Not an RFC 4271 timer: armed when the session becomes Established
    /// while restarts are damped; an Established session that lasts
    /// [`crate::fsm::RESTART_DAMPING_FORGET`] clears the damping.
    Stable,
}

/// What the driver tells the FSM. Each variant names the RFC 4271 event
/// (section 8.1) it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Input {
    /// Event 1 (or 4 with PassiveTcpEstablishment): the operator starts
    /// the session. Resets the connect retry schedule.
    ManualStart,
    /// Event 3 (or 5 with PassiveTcpEstablishment).
    AutomaticStart,
    /// Event 2: stop, with a reason for the log; sends Cease/Administrative
    /// Shutdown without a message. The session stays Idle until started.
    ManualStop { reason: String },
    /// Event 2 with an RFC 9003 Shutdown Communication sent to the peer.
    AdminShutdown { message: String },
    /// Event 2: the peer was removed from the configuration; sends
    /// Cease/Peer De-configured.
    Deconfigured,
    /// Event 2 for a planned restart of this speaker: with graceful
    /// restart negotiated the peer is left to keep our routes (no
    /// NOTIFICATION, or Cease/Administrative Reset when the RFC 8538 N bit
    /// was negotiated); `hard` asks the peer to drop them instead.
    PlannedRestart { message: String, hard: bool },
    /// Event 8 (AutomaticStop), for the BFD coupling: drop the session at
    /// once, sending Cease/BFD Down (RFC 9384) best effort, inside Hard
    /// Reset when the RFC 8538 N bit was negotiated (so the peer drops our
    /// routes instead of keeping them as stale); the session restarts by
    /// itself after the IdleHold delay. To keep it down, see
    /// [`Input::HoldDown`].
    Reset { reason: String },
    /// Event 2 (ManualStop) for a hold-down, e.g. while BFD says the path
    /// is down: sends Cease with the subcode `cease`, inside Hard Reset
    /// when the RFC 8538 N bit was negotiated (the peer drops our routes at
    /// once either way), closes every connection and stays Idle: no
    /// automatic restart, starts ignored, every incoming connection closed
    /// at once (RFC 4271 Idle "refuses all incoming BGP connections"),
    /// until [`Input::Release`]. From Idle it only holds the session down.
    HoldDown {
        reason: String,
        #[serde(default)]
        cease: CeaseSubcode,
    },
    /// Event 1 (ManualStart, or 4 with PassiveTcpEstablishment) ending a
    /// hold-down: the session starts again with a fresh connect retry
    /// schedule. Ignored when the session is not held down.
    Release,
    /// Event 9.
    ConnectRetryTimerExpired,
    /// Event 13.
    IdleHoldTimerExpired,
    /// Event 10.
    HoldTimerExpired { conn: ConnId },
    /// Event 11.
    KeepaliveTimerExpired { conn: ConnId },
    /// Event 16 (Tcp_CR_Acked): a connection asked for with
    /// [`Output::Connect`] is up. `interface_v4` is the first IPv4 address
    /// of the interface that holds `local` (for the router ID rule).
    TcpCrAcked {
        conn: ConnId,
        local: SocketAddr,
        remote: SocketAddr,
        #[serde(default)]
        interface_v4: Option<Ipv4Addr>,
    },
    /// Event 17 (TcpConnectionConfirmed): the peer connected to us (the
    /// driver accepted it and gave it a [`ConnId::passive`] id).
    TcpConnectionConfirmed {
        conn: ConnId,
        local: SocketAddr,
        remote: SocketAddr,
        #[serde(default)]
        interface_v4: Option<Ipv4Addr>,
    },
    /// Event 18: the connection failed or closed (or the attempt failed).
    TcpConnectionFails { conn: ConnId },
    /// Events 19, 24-27 and ROUTE-REFRESH: a message decoded with the
    /// connection's current [`DecodeContext`].
    MessageReceived {
        conn: ConnId,
        #[serde(with = "serde_wire::message")]
        message: Message,
    },
    /// Events 21, 22 and 28: framing or decoding failed with this error.
    DecodeError {
        conn: ConnId,
        #[serde(with = "serde_wire::notification")]
        notification: Notification,
    },
    /// The driver wrote an UPDATE: the KeepaliveTimer restarts (RFC 4271
    /// 8.2.2, Established). Optional.
    UpdateSent { conn: ConnId },
    /// RFC 9687 event 29 (SendHoldTimer_Expires): output has waited for
    /// the socket, with no write making progress, for the SendHoldTime.
    SendHoldTimerExpired { conn: ConnId },
    /// The driver's output towards the peer on `conn`: `waiting` when
    /// messages wait for the socket, reported when output starts waiting
    /// and after every write that makes progress (the SendHoldTimer of RFC
    /// 9687 is (re)started); `waiting: false` when everything was written
    /// (the timer stops).
    SendProgress { conn: ConnId, waiting: bool },
    /// [`Timer::Stable`] expired: the session stayed Established long
    /// enough for its earlier NOTIFICATIONs to be forgotten.
    StableTimerExpired,
}

impl Input {
    /// The input that reports the expiry of `timer`.
    pub fn timer_expired(timer: Timer) -> Input {
        match timer {
            Timer::ConnectRetry => Input::ConnectRetryTimerExpired,
            Timer::IdleHold => Input::IdleHoldTimerExpired,
            Timer::Hold { conn } => Input::HoldTimerExpired { conn },
            Timer::Keepalive { conn } => Input::KeepaliveTimerExpired { conn },
            Timer::SendHold { conn } => Input::SendHoldTimerExpired { conn },
            Timer::Stable => Input::StableTimerExpired,
        }
    }
}

/// The Cease subcode (RFC 4486, RFC 9384) of an [`Input::HoldDown`],
/// chosen by the caller. Left out: 1 (Maximum Number of Prefixes Reached,
/// about routes received, and we import none), 7 (Connection Collision
/// Resolution, the FSM's own) and 9 (Hard Reset, the RFC 8538 wrapper the
/// FSM adds when the N bit was negotiated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CeaseSubcode {
    /// 0.
    Unspecific,
    /// 2, without a Shutdown Communication.
    AdministrativeShutdown,
    /// 3.
    PeerDeconfigured,
    /// 4, without a Shutdown Communication.
    AdministrativeReset,
    /// 5.
    ConnectionRejected,
    /// 6.
    OtherConfigurationChange,
    /// 8.
    OutOfResources,
    /// 10 (RFC 9384): the default, for a hold-down BFD asked for.
    #[default]
    BfdDown,
}

impl CeaseSubcode {
    /// The subcode on the wire.
    pub fn subcode(self) -> u8 {
        self.notification().subcode()
    }

    /// The Cease NOTIFICATION with this subcode and no data.
    pub fn notification(self) -> Notification {
        match self {
            CeaseSubcode::Unspecific => Notification::CeaseUnspecific,
            CeaseSubcode::AdministrativeShutdown => {
                Notification::AdministrativeShutdown { message: None }
            }
            CeaseSubcode::PeerDeconfigured => Notification::PeerDeconfigured,
            CeaseSubcode::AdministrativeReset => {
                Notification::AdministrativeReset { message: None }
            }
            CeaseSubcode::ConnectionRejected => Notification::ConnectionRejected,
            CeaseSubcode::OtherConfigurationChange => Notification::OtherConfigurationChange,
            CeaseSubcode::OutOfResources => Notification::OutOfResources,
            CeaseSubcode::BfdDown => Notification::BfdDown,
        }
    }
}

/// What the FSM asks of the driver, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "output", rename_all = "snake_case")]
pub enum Output {
    /// Open a TCP connection to the peer and report it with
    /// [`Input::TcpCrAcked`] or [`Input::TcpConnectionFails`].
    Connect { conn: ConnId },
    /// Close the connection after writing what was queued for it (a
    /// NOTIFICATION just sent, best effort), or abandon the attempt.
    CloseConnection { conn: ConnId },
    /// Write a message on the connection.
    Send {
        conn: ConnId,
        #[serde(with = "serde_wire::message")]
        message: Message,
    },
    /// Start the timer, or restart it if it runs.
    SetTimer { timer: Timer, duration: Duration },
    /// Stop the timer; its expiry must not be reported.
    CancelTimer { timer: Timer },
    /// The peer's OPEN was accepted on `conn`: decode and encode with these
    /// contexts from now on, and show the result in state.
    Negotiated(Box<SessionParams>),
    /// The session is up on `conn`.
    Established { conn: ConnId },
    /// The session state changed; `reason` is the event that did it.
    StateChanged {
        from: FsmState,
        to: FsmState,
        reason: FsmEvent,
    },
    /// The session ended (from OpenSent, OpenConfirm or Established).
    /// When `was_established`, the Adj-RIB-Out is void: everything is sent
    /// again after the next Established.
    SessionDown {
        conn: ConnId,
        reason: DownReason,
        notification: Option<NotificationEvent>,
        was_established: bool,
    },
    /// Send the whole Adj-RIB-Out for these families (then End-of-RIB):
    /// after Established, or after a ROUTE-REFRESH request.
    SendInitialUpdates {
        conn: ConnId,
        #[serde(with = "serde_wire::families")]
        families: Vec<Family>,
        cause: ResendCause,
    },
}

/// Why the Adj-RIB-Out is sent in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResendCause {
    Established,
    RouteRefresh,
}

/// Which way a NOTIFICATION went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Sent,
    Received,
}

/// A NOTIFICATION that ended a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationEvent {
    pub direction: Direction,
    #[serde(with = "serde_wire::notification")]
    pub notification: Notification,
}

impl NotificationEvent {
    pub fn sent(notification: Notification) -> Self {
        Self {
            direction: Direction::Sent,
            notification,
        }
    }

    pub fn received(notification: Notification) -> Self {
        Self {
            direction: Direction::Received,
            notification,
        }
    }
}

/// Why a session went down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DownReason {
    ManualStop {
        reason: String,
    },
    AdminShutdown {
        message: String,
    },
    Deconfigured,
    PlannedRestart {
        message: String,
        hard: bool,
    },
    /// [`Input::Reset`] (BFD down).
    Reset {
        reason: String,
    },
    /// [`Input::HoldDown`].
    HeldDown {
        reason: String,
        cease: CeaseSubcode,
    },
    HoldTimerExpired,
    /// RFC 9687: the peer stopped reading (nothing written for the
    /// SendHoldTime).
    SendHoldTimerExpired,
    /// The TCP connection failed or was closed by the peer.
    ConnectionClosed,
    /// The peer sent a NOTIFICATION.
    NotificationReceived,
    /// The peer's OPEN was refused.
    OpenRejected,
    /// A message could not be framed or decoded (or an UPDATE needed a
    /// session reset under RFC 7606).
    MessageError,
    /// A message the state does not allow (RFC 6608).
    UnexpectedMessage {
        message_type: u8,
    },
    /// The peer, which negotiated graceful restart, sent a valid OPEN on a
    /// new connection while the old one was Established: it restarted
    /// (RFC 4724 section 4.2), the new connection carries on.
    PeerRestarted,
}

impl fmt::Display for DownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownReason::ManualStop { reason } => write!(f, "stopped: {reason}"),
            DownReason::AdminShutdown { message } => {
                write!(f, "administrative shutdown: {message}")
            }
            DownReason::Deconfigured => f.write_str("peer de-configured"),
            DownReason::PlannedRestart { hard: false, .. } => f.write_str("planned restart"),
            DownReason::PlannedRestart { hard: true, .. } => f.write_str("planned restart (hard)"),
            DownReason::Reset { reason } => write!(f, "reset: {reason}"),
            DownReason::HeldDown { reason, .. } => write!(f, "held down: {reason}"),
            DownReason::HoldTimerExpired => f.write_str("hold timer expired"),
            DownReason::SendHoldTimerExpired => {
                f.write_str("send hold timer expired (the peer stopped reading)")
            }
            DownReason::ConnectionClosed => f.write_str("TCP connection closed"),
            DownReason::NotificationReceived => f.write_str("NOTIFICATION received"),
            DownReason::OpenRejected => f.write_str("peer's OPEN refused"),
            DownReason::MessageError => f.write_str("malformed message"),
            DownReason::UnexpectedMessage { message_type } => {
                write!(f, "unexpected message of type {message_type}")
            }
            DownReason::PeerRestarted => {
                f.write_str("the peer restarted (new OPEN on a new connection, RFC 4724)")
            }
        }
    }
}

/// The RFC 4271 section 8.1 events, by name, as reported in
/// [`Output::StateChanged`]. `RouteRefreshMsg` is not an RFC 4271 event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FsmEvent {
    ManualStart,
    ManualStop,
    AutomaticStart,
    ManualStartWithPassiveTcpEstablishment,
    AutomaticStartWithPassiveTcpEstablishment,
    AutomaticStop,
    ConnectRetryTimerExpires,
    HoldTimerExpires,
    KeepaliveTimerExpires,
    IdleHoldTimerExpires,
    TcpCrAcked,
    TcpConnectionConfirmed,
    TcpConnectionFails,
    BgpOpen,
    BgpHeaderErr,
    BgpOpenMsgErr,
    OpenCollisionDump,
    NotifMsgVerErr,
    NotifMsg,
    KeepAliveMsg,
    UpdateMsg,
    UpdateMsgErr,
    RouteRefreshMsg,
    /// Not an event: the driver reported an UPDATE written.
    UpdateSent,
    /// RFC 9687 event 29.
    SendHoldTimerExpires,
    /// Not an event: the driver reported progress (or none) writing.
    SendProgress,
    /// Not an event: [`Timer::Stable`] expired.
    StableTimerExpires,
}

impl FsmEvent {
    /// The event number of RFC 4271 section 8.1.
    pub fn number(self) -> Option<u8> {
        use FsmEvent::*;
        Some(match self {
            ManualStart => 1,
            ManualStop => 2,
            AutomaticStart => 3,
            ManualStartWithPassiveTcpEstablishment => 4,
            AutomaticStartWithPassiveTcpEstablishment => 5,
            AutomaticStop => 8,
            ConnectRetryTimerExpires => 9,
            HoldTimerExpires => 10,
            KeepaliveTimerExpires => 11,
            IdleHoldTimerExpires => 13,
            TcpCrAcked => 16,
            TcpConnectionConfirmed => 17,
            TcpConnectionFails => 18,
            BgpOpen => 19,
            BgpHeaderErr => 21,
            BgpOpenMsgErr => 22,
            OpenCollisionDump => 23,
            NotifMsgVerErr => 24,
            NotifMsg => 25,
            KeepAliveMsg => 26,
            UpdateMsg => 27,
            UpdateMsgErr => 28,
            SendHoldTimerExpires => 29,
            RouteRefreshMsg | UpdateSent | SendProgress | StableTimerExpires => return None,
        })
    }
}

/// A family we offered that the session does not carry, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisabledFamily {
    #[serde(with = "serde_wire::family")]
    pub family: Family,
    pub reason: FamilyDisabled,
    /// For people, e.g. "peer did not offer MP IPv6 unicast".
    pub text: String,
}

/// What the OPEN exchange settled on one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionParams {
    pub conn: ConnId,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The AS we present (localASN, else myASN).
    pub local_as: u32,
    /// The peer's AS (its 4-octet AS capability, else My AS).
    pub peer_as: u32,
    pub ibgp: bool,
    pub local_id: Ipv4Addr,
    pub peer_id: Ipv4Addr,
    /// Negotiated hold time in seconds; 0: no hold timer, no keepalives.
    pub hold_time: u16,
    /// Keepalive interval in seconds; 0 when the hold time is 0.
    pub keepalive_time: u16,
    #[serde(with = "serde_wire::negotiated")]
    pub negotiated: Negotiated,
    /// What the peer offered (unknown capabilities included).
    #[serde(with = "serde_wire::capabilities")]
    pub peer_capabilities: Capabilities,
    pub families_disabled: Vec<DisabledFamily>,
    #[serde(with = "serde_wire::decode_context")]
    pub decode: DecodeContext,
    #[serde(with = "serde_wire::encode_context")]
    pub encode: EncodeContext,
}

impl SessionParams {
    /// The families the session carries.
    pub fn families(&self) -> &[Family] {
        &self.negotiated.families
    }

    /// Both sides set the RFC 8538 N bit.
    pub fn notification_gr(&self) -> bool {
        self.negotiated
            .graceful_restart
            .as_ref()
            .is_some_and(|gr| gr.notification)
    }
}
