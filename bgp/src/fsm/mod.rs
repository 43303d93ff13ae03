//! The BGP session state machine (RFC 4271 section 8), pure: no tokio, no
//! sockets, no clocks. A [`Session`] takes an [`Input`] and returns the
//! [`Output`]s to carry out, in order:
//! `process(&mut self, Input) -> Vec<Output>`. Timers are outputs
//! ([`Output::SetTimer`]) and their expiries are inputs; TCP connections
//! are asked for ([`Output::Connect`]) and reported back. Inputs and
//! outputs serialize, so an event log replays.
//!
//! # What is in the pure core
//!
//! - The six states of RFC 4271 section 8.2.2 ([`FsmState`]), with the
//!   Connect/Active handling and the ConnectRetry timer.
//! - Connection collision detection (section 6.8, RFC 6286 2.3): the
//!   session holds the connection it opened ([`Role::Active`]) and the ones
//!   the peer opened ([`Role::Passive`]); when an OPEN arrives while
//!   another connection is in OpenConfirm, the BGP Identifiers decide
//!   ([`collision_winner`]); an Established connection always wins; the
//!   loser gets Cease/Connection Collision Resolution (a restarted
//!   graceful-restart peer's new connection wins over the Established one,
//!   RFC 4724 4.2). A newer connection
//!   from the peer replaces its unfinished older one.
//! - OPEN checks (peer AS fixed or dynamic internal/external, BGP
//!   Identifier, required capabilities), capability negotiation
//!   ([`crate::wire::negotiate`]) and the timers: hold time the smaller of
//!   ours ([`DEFAULT_HOLD_TIME`] when unset) and the peer's, 0 disabling
//!   both timers; keepalive the smaller of `keepaliveTime` and a third of
//!   the hold time; OpenSent's hold timer [`OPEN_SENT_HOLD_TIME`].
//! - Connect retry: attempt *n* (counted from 0 after a manual start or an
//!   Established session) waits `connectTime` when set, else
//!   min(2^*n*, 30) s: 1, 2, 4, 8, 16, 30, 30... That delay bounds the TCP
//!   handshake (ConnectRetry timer, at least [`MIN_HANDSHAKE_TIME`], 3 s,
//!   so that the kernel's first SYN retransmission after 1 s is not cut
//!   off) and, when the attempt fails, is the pause before the next one
//!   (IdleHold timer, automatic restart).
//! - Closing: Cease with the subcode of the cause (Administrative
//!   Shutdown with an RFC 9003 message, Peer De-configured, BFD Down, the
//!   caller's [`CeaseSubcode`] for a hold-down), wrapped in Hard Reset
//!   when the RFC 8538 N bit was negotiated, and the graceful planned
//!   restart (see [`Input::PlannedRestart`]).
//! - Hold-down ([`Input::HoldDown`] / [`Input::Release`]): ManualStop and
//!   ManualStart for the BFD coupling: the session stops with the caller's
//!   Cease and stays Idle, ignoring every start (manual, automatic,
//!   IdleHold) and refusing every connection, until released.
//! - Graceful restart (RFC 4724) as the restarting speaker: the capability
//!   of [`Config::graceful_restart`] (see
//!   [`Config::enable_graceful_restart`]), its R bit sent until the first
//!   Established after a restart, End-of-RIB after the first round of
//!   UPDATEs (the Adj-RIB-Out's). As the receiving speaker there is nothing
//!   to keep: a load-balancer speaker imports nothing.
//! - RFC 9687's SendHoldTimer ([`Timer::SendHold`]): the driver reports
//!   its output waiting for the socket and every write that makes progress
//!   ([`Input::SendProgress`]); when nothing is written for the
//!   SendHoldTime ([`Config::send_hold_time`], default the larger of
//!   [`DEFAULT_SEND_HOLD_TIME`] and twice the hold time) the connection
//!   closes with Send Hold Timer Expired (8/0, best effort) and the
//!   session goes Idle, in OpenSent, OpenConfirm and Established alike.
//! - RFC 6608 FSM errors, Hold Timer Expired, and RFC 7606 session resets
//!   for received UPDATEs ([`crate::wire::validate_update`]).
//! - [`router_id`]: MetalLB's rule for the BGP Identifier.
//!
//! # RFC 4271 section 8.1 session attributes
//!
//! Mandatory: State ([`Session::state`]), ConnectRetryCounter
//! ([`Session::connect_retry_counter`]), ConnectRetryTimer /
//! ConnectRetryTime ([`Timer::ConnectRetry`], [`Config::connect_time`] or
//! the exponential schedule), HoldTimer / HoldTime ([`Timer::Hold`],
//! [`Config::hold_time`]), KeepaliveTimer / KeepaliveTime
//! ([`Timer::Keepalive`], [`Config::keepalive_time`]).
//!
//! Optional, implemented:
//! - AllowAutomaticStart: [`Config::allow_automatic_start`] (default true:
//!   after an error the session restarts after the IdleHold delay).
//! - PassiveTcpEstablishment: [`Config::passive_tcp_establishment`]
//!   (default false).
//! - IdleHoldTimer / IdleHoldTime: [`Timer::IdleHold`], the delay of the
//!   automatic restart, following the connect retry schedule.
//!
//! Optional, not implemented (behaving as the RFC's FALSE):
//! - AllowAutomaticStop: FALSE as a configured attribute; the driver's
//!   [`Input::Reset`] is the only AutomaticStop (event 8). A BFD coupling
//!   that must keep the session down until the path is back uses
//!   [`Input::HoldDown`] (event 2) and [`Input::Release`] (event 1).
//! - DampPeerOscillations: partly. Sessions that end with a NOTIFICATION
//!   (sent or received) are damped: after the *n*-th in a row the
//!   automatic restart waits at least 2^(*n*-1) s
//!   ([`restart_damping_delay`], capped at [`RESTART_DAMPING_MAX`]), and an
//!   Established session lasting [`RESTART_DAMPING_FORGET`]
//!   ([`Timer::Stable`]) or a manual start clears the count. Other
//!   failures follow the connect retry schedule only.
//! - DelayOpen / DelayOpenTime / DelayOpenTimer: FALSE (our OPEN goes out
//!   as soon as TCP is up; events 12 and 20 never occur).
//! - SendNOTIFICATIONwithoutOPEN: FALSE (no NOTIFICATION before our OPEN;
//!   there is never a connection without our OPEN, since DelayOpen is
//!   FALSE).
//! - TrackTcpState: FALSE (events 14 and 15 never occur: the driver
//!   accepts only configured peers).
//! - CollisionDetectEstablishedState: FALSE (an Established connection
//!   always wins), except after a graceful restart: when graceful restart
//!   was negotiated on the Established connection, a valid OPEN on a new
//!   connection from the peer ends it (Cease/Connection Collision
//!   Resolution, [`DownReason::PeerRestarted`]) and the new connection
//!   carries on (RFC 4724 section 4.2), instead of being refused until our
//!   hold timer expires.
//!
//! # Deliberate readings of the RFC
//!
//! - A timer expiry for a timer that is not set is stale and ignored: the
//!   FSM cancels its timers on every transition, so the RFC's rows for
//!   unexpected timer events (e.g. HoldTimer_Expires in Connect) cannot
//!   occur.
//! - Events about a connection the session does not hold (it was closed)
//!   are ignored. In Idle every new connection is closed at once.
//! - A NOTIFICATION is never answered with a NOTIFICATION (RFC 4271 lists
//!   NotifMsg among OpenSent's FSM errors).
//! - Framing and decoding errors are answered with the codec's
//!   NOTIFICATION in every state (section 6 over the catch-all rows), except
//!   that an UPDATE or ROUTE-REFRESH before Established is an RFC 6608 FSM
//!   error whatever its content.
//!
//! # What the driver does with each output
//!
//! See [`Output`]: `Connect` opens a socket (bind, MD5, TTL, then connect)
//! and reports [`Input::TcpCrAcked`] or [`Input::TcpConnectionFails`];
//! `Send` writes with the connection's encode context; `CloseConnection`
//! flushes what was queued (best effort, bounded) and closes, or aborts
//! the attempt; `SetTimer`/`CancelTimer` run one timer per [`Timer`],
//! whose expiry comes back as [`Input::timer_expired`]; `Negotiated`
//! switches the connection's codec contexts before the next frame is
//! decoded and records the result in state; `Established`,
//! `StateChanged` and `SessionDown` update state, metrics and the
//! Adj-RIB-Out; `SendInitialUpdates` runs the Adj-RIB-Out's full send
//! (then End-of-RIB).

mod collision;
mod config;
mod router_id;
mod serde_wire;
mod session;
mod types;

pub use crate::state::FsmState;
pub use collision::collision_winner;
pub use config::{
    CONNECT_RETRY_INITIAL, CONNECT_RETRY_MAX, Config, ConfigError, DEFAULT_HOLD_TIME,
    DEFAULT_SEND_HOLD_TIME, MAX_RESTART_TIME, MIN_HANDSHAKE_TIME, OPEN_SENT_HOLD_TIME, PeerAs,
    RESTART_DAMPING_FORGET, RESTART_DAMPING_MAX, RequiredCapability, restart_damping_delay,
};
pub use router_id::{crc32, router_id};
pub use session::Session;
pub use types::{
    CeaseSubcode, ConnId, Direction, DisabledFamily, DownReason, FsmEvent, Input,
    NotificationEvent, Output, ResendCause, Role, SessionParams, Timer,
};
