//! The session state machine: one peer, up to one connection we opened and
//! the ones the peer opened, RFC 4271 section 8.2.2 with collision
//! detection (section 6.8).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::BytesMut;

use super::collision::collision_winner;
use super::config::{
    Config, ConfigError, MIN_HANDSHAKE_TIME, OPEN_SENT_HOLD_TIME, PeerAs, RESTART_DAMPING_FORGET,
    restart_damping_delay,
};
use super::router_id::router_id;
use super::types::{
    CeaseSubcode, ConnId, DisabledFamily, DownReason, FsmEvent, Input, NotificationEvent, Output,
    ResendCause, Role, SessionParams, Timer,
};
use crate::state::{FamilyDisabled, FsmState};
use crate::wire::{
    AS_TRANS, Capabilities, Capability, Family, GracefulRestart, Message, MessageType,
    Notification, Open, RouteRefreshSubtype, UpdateVerdict, error_code, negotiate, validate_update,
};

/// One TCP connection that carries (or tries to carry) the session.
#[derive(Debug, Clone)]
struct Conn {
    id: ConnId,
    /// OpenSent, OpenConfirm or Established.
    state: FsmState,
    local: SocketAddr,
    remote: SocketAddr,
    /// Our BGP Identifier on this connection.
    router_id: Ipv4Addr,
    /// Set once the peer's OPEN is accepted.
    params: Option<SessionParams>,
}

/// How the session is being stopped.
#[derive(Debug, Clone)]
enum Stop {
    Manual {
        reason: String,
    },
    Admin {
        message: String,
    },
    Deconfigured,
    Restart {
        message: String,
        hard: bool,
    },
    /// AutomaticStop (BFD down): the only one after which the session
    /// restarts by itself.
    Reset {
        reason: String,
    },
    /// ManualStop that holds the session down until released.
    HoldDown {
        reason: String,
        cease: CeaseSubcode,
    },
}

impl Stop {
    fn reason(&self) -> DownReason {
        match self {
            Stop::Manual { reason } => DownReason::ManualStop {
                reason: reason.clone(),
            },
            Stop::Admin { message } => DownReason::AdminShutdown {
                message: message.clone(),
            },
            Stop::Deconfigured => DownReason::Deconfigured,
            Stop::Restart { message, hard } => DownReason::PlannedRestart {
                message: message.clone(),
                hard: *hard,
            },
            Stop::Reset { reason } => DownReason::Reset {
                reason: reason.clone(),
            },
            Stop::HoldDown { reason, cease } => DownReason::HeldDown {
                reason: reason.clone(),
                cease: *cease,
            },
        }
    }

    /// The NOTIFICATION closing a connection whose negotiation (if the
    /// peer's OPEN was accepted) is `params`.
    ///
    /// With the RFC 8538 N bit negotiated, every NOTIFICATION but Hard
    /// Reset keeps the peer's graceful restart procedures (it retains our
    /// routes); section 5 of RFC 8538 recommends Hard Reset for
    /// Administrative Shutdown and Peer De-configured, which we follow, so
    /// that those still flush our routes at once. So do the BFD-triggered
    /// stops (reset and hold-down, whatever Cease subcode the caller
    /// chose): the path is broken, the peer must not keep routes over it.
    /// A planned restart keeps our routes at the peer whenever graceful
    /// restart was negotiated: no
    /// NOTIFICATION without the N bit (RFC 4724: any NOTIFICATION would
    /// flush them), Cease/Administrative Reset with it (the "provider
    /// determined" subcode of RFC 8538 section 5, which we determine to
    /// mean graceful). `hard` asks for the routes to go: Hard Reset with the
    /// N bit, a plain Cease without.
    fn notification(&self, params: Option<&SessionParams>) -> Option<Notification> {
        let n_bit = params.is_some_and(SessionParams::notification_gr);
        let graceful = params.is_some_and(|p| p.negotiated.graceful_restart.is_some());
        let hard = |n: Notification| {
            if n_bit {
                Notification::hard_reset(n)
            } else {
                n
            }
        };
        match self {
            Stop::Manual { .. } => {
                Some(hard(Notification::AdministrativeShutdown { message: None }))
            }
            Stop::Admin { message } => Some(hard(Notification::administrative_shutdown(message))),
            Stop::Deconfigured => Some(hard(Notification::PeerDeconfigured)),
            Stop::Restart {
                message,
                hard: true,
            } => Some(hard(Notification::administrative_reset(message))),
            Stop::Restart {
                message,
                hard: false,
            } => {
                if n_bit || !graceful {
                    Some(Notification::administrative_reset(message))
                } else {
                    None
                }
            }
            Stop::Reset { .. } => Some(hard(Notification::BfdDown)),
            Stop::HoldDown { cease, .. } => Some(hard(cease.notification())),
        }
    }
}

/// Where the session goes when its last connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    Idle,
    /// OpenSent + TcpConnectionFails: listen and retry (RFC 4271 8.2.2).
    Active,
}

/// The state machine of one BGP session. Pure: feed it [`Input`]s, carry
/// out the [`Output`]s it returns, in order.
#[derive(Debug, Clone)]
pub struct Session {
    config: Config,
    /// Idle, Connect or Active: the state while no connection is held.
    base: FsmState,
    /// The state last reported with [`Output::StateChanged`].
    reported: FsmState,
    conns: Vec<Conn>,
    /// The connection asked for with [`Output::Connect`] and not yet up.
    pending_connect: Option<ConnId>,
    next_active_seq: u64,
    /// Timers set and neither cancelled nor expired since.
    armed: Vec<Timer>,
    /// RFC 4271 ConnectRetryCounter.
    connect_retry_counter: u32,
    /// Connection attempts since the last manual start or Established:
    /// the index into the connect retry schedule.
    attempt: u32,
    /// Started and not stopped: errors restart the session by themselves.
    auto_restart: bool,
    /// The event being processed, reported in [`Output::StateChanged`].
    event: FsmEvent,
    /// The R bit of our graceful restart capability: set when configured
    /// (this speaker has restarted), cleared at the first Established.
    restart_state: bool,
    /// Held down ([`Input::HoldDown`]) until [`Input::Release`]: Idle, no
    /// starts of any kind.
    held_down: bool,
    /// Sessions in a row that ended with a NOTIFICATION (restart damping).
    damping: u32,
}

impl Session {
    /// A session in Idle.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Session {
            base: FsmState::Idle,
            reported: FsmState::Idle,
            conns: Vec::new(),
            pending_connect: None,
            next_active_seq: 1,
            armed: Vec::new(),
            connect_retry_counter: 0,
            attempt: 0,
            auto_restart: false,
            event: FsmEvent::ManualStart,
            restart_state: config
                .graceful_restart
                .as_ref()
                .is_some_and(|gr| gr.restart_state()),
            held_down: false,
            damping: 0,
            config,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The session state: that of its most advanced connection, or Idle,
    /// Connect or Active when it holds none.
    pub fn state(&self) -> FsmState {
        self.conns
            .iter()
            .map(|c| c.state)
            .max_by_key(|s| rank(*s))
            .unwrap_or(self.base)
    }

    /// Sessions in a row that ended with a NOTIFICATION (sent or
    /// received): the automatic restart waits at least
    /// [`restart_damping_delay`] of it.
    pub fn restart_damping(&self) -> u32 {
        self.damping
    }

    /// RFC 4271 ConnectRetryCounter: failures since the last start or stop.
    pub fn connect_retry_counter(&self) -> u32 {
        self.connect_retry_counter
    }

    /// The connections held and their states.
    pub fn connections(&self) -> Vec<(ConnId, FsmState)> {
        self.conns.iter().map(|c| (c.id, c.state)).collect()
    }

    /// The negotiation of the most advanced connection past OpenSent.
    pub fn params(&self) -> Option<&SessionParams> {
        self.conns
            .iter()
            .filter(|c| c.params.is_some())
            .max_by_key(|c| rank(c.state))
            .and_then(|c| c.params.as_ref())
    }

    /// The timers currently set.
    pub fn armed_timers(&self) -> &[Timer] {
        &self.armed
    }

    /// Whether our next OPEN carries the graceful restart R bit (RFC 4724:
    /// this speaker has restarted and has not been Established since).
    pub fn restart_state(&self) -> bool {
        self.restart_state
    }

    /// Whether the session is held down ([`Input::HoldDown`]): Idle until
    /// [`Input::Release`].
    pub fn held_down(&self) -> bool {
        self.held_down
    }

    /// Our OPEN on a connection whose BGP Identifier is `router_id`.
    fn open_message(&self, router_id: Ipv4Addr) -> Open {
        let mut config = std::borrow::Cow::Borrowed(&self.config);
        if !self.restart_state
            && let Some(gr) = &self.config.graceful_restart
            && gr.restart_state()
        {
            let mut gr = gr.clone();
            gr.flags &= !GracefulRestart::RESTART_STATE;
            config.to_mut().graceful_restart = Some(gr);
        }
        config.open_message(router_id)
    }

    /// Processes one input.
    pub fn process(&mut self, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        self.event = self.event_of(&input);
        match input {
            // A hold-down ignores every start but its release.
            Input::ManualStart | Input::AutomaticStart | Input::IdleHoldTimerExpired
                if self.held_down => {}
            Input::ManualStart => self.start(&mut out, true),
            Input::AutomaticStart => self.start(&mut out, false),
            Input::ManualStop { reason } => self.stop(&mut out, Stop::Manual { reason }),
            Input::AdminShutdown { message } => self.stop(&mut out, Stop::Admin { message }),
            Input::Deconfigured => self.stop(&mut out, Stop::Deconfigured),
            Input::PlannedRestart { message, hard } => {
                self.stop(&mut out, Stop::Restart { message, hard })
            }
            Input::Reset { reason } => self.stop(&mut out, Stop::Reset { reason }),
            Input::HoldDown { reason, cease } => {
                self.held_down = true;
                self.stop(&mut out, Stop::HoldDown { reason, cease });
            }
            Input::Release => {
                if self.held_down {
                    self.held_down = false;
                    self.start(&mut out, true);
                }
            }
            Input::ConnectRetryTimerExpired => {
                if self.expired(Timer::ConnectRetry) {
                    self.connect_retry_expired(&mut out);
                }
            }
            Input::IdleHoldTimerExpired => {
                if self.expired(Timer::IdleHold) {
                    self.start(&mut out, false);
                }
            }
            Input::StableTimerExpired => {
                if self.expired(Timer::Stable) {
                    self.damping = 0;
                }
            }
            Input::HoldTimerExpired { conn } => {
                if self.expired(Timer::Hold { conn })
                    && let Some(idx) = self.index(conn)
                {
                    self.fail(
                        &mut out,
                        idx,
                        Some(Notification::HoldTimerExpired),
                        None,
                        DownReason::HoldTimerExpired,
                        true,
                        After::Idle,
                    );
                }
            }
            Input::KeepaliveTimerExpired { conn } => {
                if self.expired(Timer::Keepalive { conn }) {
                    self.keepalive_expired(&mut out, conn);
                }
            }
            Input::TcpCrAcked {
                conn,
                local,
                remote,
                interface_v4,
            } => self.tcp_up(&mut out, conn, Role::Active, local, remote, interface_v4),
            Input::TcpConnectionConfirmed {
                conn,
                local,
                remote,
                interface_v4,
            } => self.tcp_up(&mut out, conn, Role::Passive, local, remote, interface_v4),
            Input::TcpConnectionFails { conn } => self.tcp_fails(&mut out, conn),
            Input::MessageReceived { conn, message } => self.message(&mut out, conn, message),
            Input::DecodeError { conn, notification } => {
                self.decode_error(&mut out, conn, notification)
            }
            Input::UpdateSent { conn } => {
                if let Some(idx) = self.index(conn)
                    && self.conns[idx].state == FsmState::Established
                {
                    self.restart_keepalive(&mut out, idx);
                }
            }
            Input::SendProgress { conn, waiting } => {
                if let Some(idx) = self.index(conn) {
                    if waiting {
                        let d = self.send_hold_time(idx);
                        self.arm(&mut out, Timer::SendHold { conn }, d);
                    } else {
                        self.disarm(&mut out, Timer::SendHold { conn });
                    }
                }
            }
            Input::SendHoldTimerExpired { conn } => {
                // RFC 9687: OpenSent, OpenConfirm and Established alike
                // (every state a connection is held in here).
                if self.expired(Timer::SendHold { conn })
                    && let Some(idx) = self.index(conn)
                {
                    self.fail(
                        &mut out,
                        idx,
                        Some(Notification::SendHoldTimerExpired),
                        None,
                        DownReason::SendHoldTimerExpired,
                        true,
                        After::Idle,
                    );
                }
            }
        }
        self.sync_state(&mut out);
        out
    }

    fn event_of(&self, input: &Input) -> FsmEvent {
        let passive = self.config.passive_tcp_establishment;
        match input {
            Input::ManualStart | Input::Release if passive => {
                FsmEvent::ManualStartWithPassiveTcpEstablishment
            }
            Input::ManualStart | Input::Release => FsmEvent::ManualStart,
            Input::AutomaticStart if passive => FsmEvent::AutomaticStartWithPassiveTcpEstablishment,
            Input::AutomaticStart => FsmEvent::AutomaticStart,
            Input::ManualStop { .. }
            | Input::AdminShutdown { .. }
            | Input::Deconfigured
            | Input::PlannedRestart { .. }
            | Input::HoldDown { .. } => FsmEvent::ManualStop,
            Input::Reset { .. } => FsmEvent::AutomaticStop,
            Input::ConnectRetryTimerExpired => FsmEvent::ConnectRetryTimerExpires,
            Input::IdleHoldTimerExpired => FsmEvent::IdleHoldTimerExpires,
            Input::HoldTimerExpired { .. } => FsmEvent::HoldTimerExpires,
            Input::KeepaliveTimerExpired { .. } => FsmEvent::KeepaliveTimerExpires,
            Input::SendHoldTimerExpired { .. } => FsmEvent::SendHoldTimerExpires,
            Input::SendProgress { .. } => FsmEvent::SendProgress,
            Input::StableTimerExpired => FsmEvent::StableTimerExpires,
            Input::TcpCrAcked { .. } => FsmEvent::TcpCrAcked,
            Input::TcpConnectionConfirmed { .. } => FsmEvent::TcpConnectionConfirmed,
            Input::TcpConnectionFails { .. } => FsmEvent::TcpConnectionFails,
            Input::MessageReceived { message, .. } => match message {
                Message::Open(_) => FsmEvent::BgpOpen,
                Message::Update(_) => FsmEvent::UpdateMsg,
                Message::Notification(Notification::UnsupportedVersionNumber { .. }) => {
                    FsmEvent::NotifMsgVerErr
                }
                Message::Notification(_) => FsmEvent::NotifMsg,
                Message::Keepalive => FsmEvent::KeepAliveMsg,
                Message::RouteRefresh(_) => FsmEvent::RouteRefreshMsg,
            },
            Input::DecodeError { notification, .. } => match notification.code() {
                error_code::OPEN_MESSAGE => FsmEvent::BgpOpenMsgErr,
                error_code::UPDATE_MESSAGE => FsmEvent::UpdateMsgErr,
                _ => FsmEvent::BgpHeaderErr,
            },
            Input::UpdateSent { .. } => FsmEvent::UpdateSent,
        }
    }

    // ------------------------------------------------------------ helpers

    fn index(&self, conn: ConnId) -> Option<usize> {
        self.conns.iter().position(|c| c.id == conn)
    }

    fn sync_state(&mut self, out: &mut Vec<Output>) {
        let now = self.state();
        if now != self.reported {
            out.push(Output::StateChanged {
                from: self.reported,
                to: now,
                reason: self.event,
            });
            self.reported = now;
        }
    }

    fn arm(&mut self, out: &mut Vec<Output>, timer: Timer, duration: Duration) {
        if !self.armed.contains(&timer) {
            self.armed.push(timer);
        }
        out.push(Output::SetTimer { timer, duration });
    }

    fn disarm(&mut self, out: &mut Vec<Output>, timer: Timer) {
        if let Some(i) = self.armed.iter().position(|t| *t == timer) {
            self.armed.swap_remove(i);
            out.push(Output::CancelTimer { timer });
        }
    }

    /// Whether `timer` was set: an expiry of a timer that is not (it was
    /// cancelled, or never set in this state) is stale and ignored.
    fn expired(&mut self, timer: Timer) -> bool {
        match self.armed.iter().position(|t| *t == timer) {
            Some(i) => {
                self.armed.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// The delay of the next connection attempt, advancing the schedule.
    fn next_delay(&mut self) -> Duration {
        let d = self.config.connect_retry_delay(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        d
    }

    /// The delay of the latest attempt: the pause before the next one.
    fn current_delay(&self) -> Duration {
        self.config
            .connect_retry_delay(self.attempt.saturating_sub(1))
    }

    fn connect(&mut self, out: &mut Vec<Output>) {
        let conn = ConnId::active(self.next_active_seq);
        self.next_active_seq += 1;
        self.pending_connect = Some(conn);
        out.push(Output::Connect { conn });
    }

    fn abandon_connect(&mut self, out: &mut Vec<Output>) {
        if let Some(conn) = self.pending_connect.take() {
            out.push(Output::CloseConnection { conn });
        }
    }

    /// Arms the automatic restart after an error, when allowed.
    fn schedule_restart(&mut self, out: &mut Vec<Output>) {
        if self.auto_restart && self.config.allow_automatic_start {
            let d = self
                .current_delay()
                .max(restart_damping_delay(self.damping));
            self.arm(out, Timer::IdleHold, d);
        }
    }

    /// Removes a connection: sends `notification` on it first, stops its
    /// timers, closes it.
    fn remove_conn(
        &mut self,
        out: &mut Vec<Output>,
        idx: usize,
        notification: Option<Notification>,
    ) -> Conn {
        let c = self.conns.remove(idx);
        if let Some(n) = notification {
            out.push(Output::Send {
                conn: c.id,
                message: Message::Notification(n),
            });
        }
        self.disarm(out, Timer::Hold { conn: c.id });
        self.disarm(out, Timer::Keepalive { conn: c.id });
        self.disarm(out, Timer::SendHold { conn: c.id });
        out.push(Output::CloseConnection { conn: c.id });
        c
    }

    /// Ends connection `idx` on an error or a close. When it was the last
    /// one, the session goes to `after` (Idle or Active); a session that
    /// was Established, or that had no other connection, reports
    /// [`Output::SessionDown`].
    #[allow(clippy::too_many_arguments)]
    fn fail(
        &mut self,
        out: &mut Vec<Output>,
        idx: usize,
        sent: Option<Notification>,
        received: Option<Notification>,
        reason: DownReason,
        count: bool,
        after: After,
    ) {
        let c = self.remove_conn(out, idx, sent.clone());
        let was_established = c.state == FsmState::Established;
        let last = self.conns.is_empty();
        if !last && !was_established {
            // Another connection carries the session on.
            return;
        }
        if was_established {
            self.disarm(out, Timer::Stable);
        }
        if sent.as_ref().or(received.as_ref()).is_some_and(damps) {
            self.damping = self.damping.saturating_add(1);
        }
        out.push(Output::SessionDown {
            conn: c.id,
            reason,
            notification: sent
                .map(NotificationEvent::sent)
                .or(received.map(NotificationEvent::received)),
            was_established,
        });
        if !last {
            return;
        }
        if count {
            self.connect_retry_counter = self.connect_retry_counter.saturating_add(1);
        }
        self.disarm(out, Timer::ConnectRetry);
        match after {
            After::Active => {
                // Still connecting when an attempt of ours is under way.
                self.base = if self.pending_connect.is_some() {
                    FsmState::Connect
                } else {
                    FsmState::Active
                };
                let d = self.next_delay();
                let d = if self.pending_connect.is_some() {
                    d.max(MIN_HANDSHAKE_TIME)
                } else {
                    d
                };
                self.arm(out, Timer::ConnectRetry, d);
            }
            After::Idle => {
                self.base = FsmState::Idle;
                self.abandon_connect(out);
                self.schedule_restart(out);
            }
        }
    }

    // ------------------------------------------------------------- events

    fn start(&mut self, out: &mut Vec<Output>, manual: bool) {
        if self.state() != FsmState::Idle {
            return;
        }
        if manual {
            self.attempt = 0;
            self.damping = 0;
        }
        if self.event != FsmEvent::IdleHoldTimerExpires {
            self.connect_retry_counter = 0;
        }
        self.auto_restart = true;
        self.disarm(out, Timer::IdleHold);
        let d = self.next_delay();
        let d = if self.config.passive_tcp_establishment {
            self.base = FsmState::Active;
            d
        } else {
            self.base = FsmState::Connect;
            self.connect(out);
            d.max(MIN_HANDSHAKE_TIME)
        };
        self.arm(out, Timer::ConnectRetry, d);
    }

    fn stop(&mut self, out: &mut Vec<Output>, stop: Stop) {
        let automatic = matches!(stop, Stop::Reset { .. });
        if !automatic {
            self.auto_restart = false;
            self.disarm(out, Timer::IdleHold);
        }
        let state = self.state();
        if state == FsmState::Idle {
            return;
        }
        if !self.conns.is_empty() {
            let primary = self
                .conns
                .iter()
                .enumerate()
                .max_by_key(|(_, c)| rank(c.state))
                .map(|(i, _)| i)
                .unwrap_or(0);
            let primary_id = self.conns[primary].id;
            let mut down = None;
            while let Some(c) = self.conns.first() {
                let notification = stop.notification(c.params.as_ref());
                let c = self.remove_conn(out, 0, notification.clone());
                if c.id == primary_id {
                    down = Some((c, notification));
                }
            }
            if let Some((c, notification)) = down {
                out.push(Output::SessionDown {
                    conn: c.id,
                    reason: stop.reason(),
                    notification: notification.map(NotificationEvent::sent),
                    was_established: c.state == FsmState::Established,
                });
            }
        }
        self.abandon_connect(out);
        self.disarm(out, Timer::ConnectRetry);
        self.disarm(out, Timer::Stable);
        self.base = FsmState::Idle;
        if automatic {
            self.connect_retry_counter = self.connect_retry_counter.saturating_add(1);
            self.schedule_restart(out);
        } else {
            self.connect_retry_counter = 0;
        }
    }

    fn connect_retry_expired(&mut self, out: &mut Vec<Output>) {
        match self.state() {
            FsmState::Connect => {
                self.abandon_connect(out);
                self.connect(out);
                let d = self.next_delay().max(MIN_HANDSHAKE_TIME);
                self.arm(out, Timer::ConnectRetry, d);
            }
            FsmState::Active => {
                self.base = FsmState::Connect;
                self.connect(out);
                let d = self.next_delay().max(MIN_HANDSHAKE_TIME);
                self.arm(out, Timer::ConnectRetry, d);
            }
            _ => {}
        }
    }

    fn keepalive_expired(&mut self, out: &mut Vec<Output>, conn: ConnId) {
        let Some(idx) = self.index(conn) else {
            return;
        };
        if matches!(
            self.conns[idx].state,
            FsmState::OpenConfirm | FsmState::Established
        ) {
            out.push(Output::Send {
                conn,
                message: Message::Keepalive,
            });
            self.restart_keepalive(out, idx);
        }
    }

    fn restart_keepalive(&mut self, out: &mut Vec<Output>, idx: usize) {
        let c = &self.conns[idx];
        if let Some(p) = &c.params
            && p.keepalive_time > 0
        {
            let timer = Timer::Keepalive { conn: c.id };
            let d = Duration::from_secs(u64::from(p.keepalive_time));
            self.arm(out, timer, d);
        }
    }

    /// The SendHoldTime of connection `idx`: from the negotiated hold
    /// time once the peer's OPEN is accepted, ours before.
    fn send_hold_time(&self, idx: usize) -> Duration {
        let hold = match &self.conns[idx].params {
            Some(p) => p.hold_time,
            None => self.config.hold_time().seconds(),
        };
        self.config.send_hold_duration(hold)
    }

    fn restart_hold(&mut self, out: &mut Vec<Output>, idx: usize) {
        let c = &self.conns[idx];
        if let Some(p) = &c.params
            && p.hold_time > 0
        {
            let timer = Timer::Hold { conn: c.id };
            let d = Duration::from_secs(u64::from(p.hold_time));
            self.arm(out, timer, d);
        }
    }

    fn tcp_up(
        &mut self,
        out: &mut Vec<Output>,
        conn: ConnId,
        role: Role,
        local: SocketAddr,
        remote: SocketAddr,
        interface_v4: Option<Ipv4Addr>,
    ) {
        if self.index(conn).is_some() {
            // Reported twice.
            return;
        }
        if conn.role != role {
            // A driver bug: an id of the wrong role.
            out.push(Output::CloseConnection { conn });
            return;
        }
        if role == Role::Active {
            if self.pending_connect != Some(conn) {
                // An attempt abandoned earlier.
                out.push(Output::CloseConnection { conn });
                return;
            }
            self.pending_connect = None;
        }
        if self.state() == FsmState::Idle {
            // Idle refuses every connection.
            out.push(Output::CloseConnection { conn });
            return;
        }
        if role == Role::Passive {
            // The peer never has two connections of its own open to us: a
            // new one means the old one (not Established) is abandoned.
            while let Some(idx) = self
                .conns
                .iter()
                .position(|c| c.id.role == Role::Passive && c.state != FsmState::Established)
            {
                self.remove_conn(out, idx, Some(Notification::ConnectionCollisionResolution));
            }
        }
        self.disarm(out, Timer::ConnectRetry);
        let id = router_id(
            self.config.router_id,
            Some(local.ip()),
            interface_v4,
            &self.config.node_name,
        );
        self.conns.push(Conn {
            id: conn,
            state: FsmState::OpenSent,
            local,
            remote,
            router_id: id,
            params: None,
        });
        out.push(Output::Send {
            conn,
            message: Message::Open(self.open_message(id)),
        });
        self.arm(out, Timer::Hold { conn }, OPEN_SENT_HOLD_TIME);
    }

    fn tcp_fails(&mut self, out: &mut Vec<Output>, conn: ConnId) {
        if self.pending_connect == Some(conn) {
            self.pending_connect = None;
            if self.state() == FsmState::Connect {
                // RFC 4271 Connect + TcpConnectionFails: Idle.
                self.disarm(out, Timer::ConnectRetry);
                self.base = FsmState::Idle;
                self.schedule_restart(out);
            }
            return;
        }
        let Some(idx) = self.index(conn) else {
            return;
        };
        let after = if self.conns[idx].state == FsmState::OpenSent {
            After::Active
        } else {
            After::Idle
        };
        let count = after == After::Idle;
        self.fail(
            out,
            idx,
            None,
            None,
            DownReason::ConnectionClosed,
            count,
            after,
        );
    }

    fn message(&mut self, out: &mut Vec<Output>, conn: ConnId, message: Message) {
        let Some(idx) = self.index(conn) else {
            return;
        };
        let state = self.conns[idx].state;
        let message_type = message.message_type() as u8;
        match message {
            Message::Notification(n) => {
                let version = matches!(n, Notification::UnsupportedVersionNumber { .. });
                // RFC 4271: NotifMsgVerErr does not count in OpenSent and
                // OpenConfirm. We never answer a NOTIFICATION (RFC 4271
                // lists NotifMsg among OpenSent's FSM errors; the peer has
                // closed the connection after sending it).
                let count = !(version && state != FsmState::Established);
                self.fail(
                    out,
                    idx,
                    None,
                    Some(n),
                    DownReason::NotificationReceived,
                    count,
                    After::Idle,
                );
            }
            Message::Open(open) if state == FsmState::OpenSent => {
                self.open_received(out, idx, open)
            }
            Message::Keepalive if state == FsmState::OpenConfirm => self.established(out, idx),
            Message::Keepalive if state == FsmState::Established => self.restart_hold(out, idx),
            Message::Update(update) if state == FsmState::Established => {
                self.restart_hold(out, idx);
                let verdict = match &self.conns[idx].params {
                    Some(p) => validate_update(&update, &p.decode),
                    None => return,
                };
                if let UpdateVerdict::SessionReset(n) = verdict {
                    self.event = FsmEvent::UpdateMsgErr;
                    self.fail(
                        out,
                        idx,
                        Some(n),
                        None,
                        DownReason::MessageError,
                        true,
                        After::Idle,
                    );
                }
            }
            Message::RouteRefresh(rr) if state == FsmState::Established => {
                self.restart_hold(out, idx);
                let c = &self.conns[idx];
                let wanted = rr.subtype == RouteRefreshSubtype::Request
                    && self.config.route_refresh
                    && c.params
                        .as_ref()
                        .is_some_and(|p| p.negotiated.has_family(rr.family));
                if wanted {
                    out.push(Output::SendInitialUpdates {
                        conn,
                        families: vec![rr.family],
                        cause: ResendCause::RouteRefresh,
                    });
                }
            }
            _ => self.unexpected(out, idx, message_type),
        }
    }

    /// A message the state does not allow: Finite State Machine Error with
    /// the state's subcode (RFC 6608).
    fn unexpected(&mut self, out: &mut Vec<Output>, idx: usize, message_type: u8) {
        let n = match self.conns[idx].state {
            FsmState::OpenSent => Notification::FsmUnexpectedInOpenSent { message_type },
            FsmState::OpenConfirm => Notification::FsmUnexpectedInOpenConfirm { message_type },
            FsmState::Established => Notification::FsmUnexpectedInEstablished { message_type },
            _ => Notification::FsmUnspecified,
        };
        self.fail(
            out,
            idx,
            Some(n),
            None,
            DownReason::UnexpectedMessage { message_type },
            true,
            After::Idle,
        );
    }

    fn decode_error(&mut self, out: &mut Vec<Output>, conn: ConnId, notification: Notification) {
        let Some(idx) = self.index(conn) else {
            return;
        };
        let state = self.conns[idx].state;
        // An UPDATE or ROUTE-REFRESH before Established is an FSM error
        // whatever its content (RFC 6608).
        let unexpected_type = match notification.code() {
            error_code::UPDATE_MESSAGE => Some(MessageType::Update as u8),
            error_code::ROUTE_REFRESH_MESSAGE => Some(MessageType::RouteRefresh as u8),
            _ => None,
        };
        if let Some(t) = unexpected_type
            && state != FsmState::Established
        {
            self.unexpected(out, idx, t);
            return;
        }
        let reason = if notification.code() == error_code::OPEN_MESSAGE {
            DownReason::OpenRejected
        } else {
            DownReason::MessageError
        };
        self.fail(
            out,
            idx,
            Some(notification),
            None,
            reason,
            true,
            After::Idle,
        );
    }

    /// Checks the peer's OPEN against the configuration (RFC 4271 6.2,
    /// RFC 6286, RFC 5492). The codec has already refused a wrong version,
    /// a hold time of 1 or 2, a zero identifier and unknown parameters.
    fn check_open(
        &self,
        conn: &Conn,
        open: &Open,
        peer: &Capabilities,
    ) -> Result<(), Notification> {
        let local_as = self.config.effective_local_as();
        check_as_trans(open)?;
        let peer_as = open.asn();
        let as_ok = match self.config.peer_as {
            PeerAs::Fixed(asn) => peer_as == asn,
            PeerAs::Internal => peer_as == local_as,
            PeerAs::External => peer_as != local_as,
        };
        if !as_ok {
            return Err(Notification::BadPeerAs);
        }
        let ibgp = peer_as == local_as;
        if open.bgp_id.is_unspecified() || (ibgp && open.bgp_id == conn.router_id) {
            return Err(Notification::BadBgpIdentifier);
        }
        let missing: Vec<_> = self
            .config
            .required_capabilities
            .iter()
            .filter(|r| !r.is_met(peer))
            .map(|r| r.capability(local_as))
            .collect();
        if !missing.is_empty() {
            let mut data = BytesMut::new();
            for cap in &missing {
                // A capability of ours always fits its 255-byte limit.
                let _ = cap.encode(&mut data);
            }
            return Err(Notification::UnsupportedCapability {
                capabilities: data.freeze(),
            });
        }
        Ok(())
    }

    fn open_received(&mut self, out: &mut Vec<Output>, idx: usize, open: Open) {
        let peer_caps = Capabilities::from_capabilities(open.capabilities());
        if let Err(n) = self.check_open(&self.conns[idx], &open, &peer_caps) {
            self.event = FsmEvent::BgpOpenMsgErr;
            self.fail(
                out,
                idx,
                Some(n),
                None,
                DownReason::OpenRejected,
                true,
                After::Idle,
            );
            return;
        }
        let this = self.conns[idx].id;
        let local_as = self.config.effective_local_as();
        let peer_as = open.asn();

        // Collision detection (RFC 4271 6.8) against the connections in
        // OpenConfirm, and Established ones (CollisionDetectEstablishedState
        // is false: an Established connection always wins, except over a
        // graceful restart, below). A connection still in OpenSent is left
        // alone until its own OPEN arrives, when this one is in
        // OpenConfirm: resolving early could drop a working connection for
        // one that never completes.
        let others: Vec<(ConnId, FsmState, bool)> = self
            .conns
            .iter()
            .filter(|c| c.id != this && c.state != FsmState::OpenSent)
            .map(|c| {
                let graceful = c
                    .params
                    .as_ref()
                    .is_some_and(|p| p.negotiated.graceful_restart.is_some());
                (c.id, c.state, graceful)
            })
            .collect();
        for (other, other_state, graceful) in others {
            if other_state == FsmState::Established && graceful && this.role == Role::Passive {
                // RFC 4724 4.2: a valid OPEN on a new connection from a
                // peer that negotiated graceful restart is the peer
                // restarted; the old session ends (without waiting for
                // our hold timer) and the new connection goes on.
                if let Some(i) = self.index(other) {
                    self.fail(
                        out,
                        i,
                        Some(Notification::ConnectionCollisionResolution),
                        None,
                        DownReason::PeerRestarted,
                        false,
                        After::Active,
                    );
                }
                continue;
            }
            let this_wins = if other_state == FsmState::Established {
                false
            } else if other.role == this.role {
                true
            } else {
                let local_id = self.conns[self.index(this).unwrap_or(idx)].router_id;
                collision_winner(local_id, open.bgp_id, local_as, peer_as) == this.role
            };
            let loser = if this_wins { other } else { this };
            if let Some(i) = self.index(loser) {
                self.remove_conn(out, i, Some(Notification::ConnectionCollisionResolution));
            }
            if !this_wins {
                self.event = FsmEvent::OpenCollisionDump;
                return;
            }
        }
        let Some(idx) = self.index(this) else {
            return;
        };

        let (hold_time, keepalive_time) = self.config.negotiate_timers(open.hold_time);
        let negotiated = negotiate(&self.config.local_capabilities(), &peer_caps);
        let ibgp = peer_as == local_as;
        let families_disabled = negotiated
            .local_only_families
            .iter()
            .map(|f| DisabledFamily {
                family: *f,
                reason: FamilyDisabled::NotSupportedByPeer,
                text: format!("peer did not offer MP {}", family_text(*f)),
            })
            .collect();
        let c = &self.conns[idx];
        let params = SessionParams {
            conn: c.id,
            local: c.local,
            remote: c.remote,
            local_as,
            peer_as,
            ibgp,
            local_id: c.router_id,
            peer_id: open.bgp_id,
            hold_time,
            keepalive_time,
            decode: negotiated.decode_context(ibgp),
            encode: negotiated.encode_context(),
            negotiated,
            peer_capabilities: peer_caps,
            families_disabled,
        };
        out.push(Output::Negotiated(Box::new(params.clone())));
        out.push(Output::Send {
            conn: this,
            message: Message::Keepalive,
        });
        let c = &mut self.conns[idx];
        c.params = Some(params);
        c.state = FsmState::OpenConfirm;
        self.disarm(out, Timer::ConnectRetry);
        if hold_time > 0 {
            self.restart_hold(out, idx);
            self.restart_keepalive(out, idx);
        } else {
            // Hold time 0: no hold timer once Established, but OpenConfirm
            // keeps a guard (OpenSent's large hold time) so that a peer
            // that never sends its KEEPALIVE cannot keep the connection
            // in OpenConfirm for ever.
            self.arm(out, Timer::Hold { conn: this }, OPEN_SENT_HOLD_TIME);
        }
    }

    fn established(&mut self, out: &mut Vec<Output>, idx: usize) {
        self.conns[idx].state = FsmState::Established;
        // The restart is over: later OPENs are reconnections, not restarts.
        self.restart_state = false;
        if self.conns[idx]
            .params
            .as_ref()
            .is_some_and(|p| p.hold_time == 0)
        {
            // OpenConfirm's guard ends; TCP keepalive watches the peer
            // (the driver, on `Negotiated` with hold time 0).
            let conn = self.conns[idx].id;
            self.disarm(out, Timer::Hold { conn });
        }
        self.restart_hold(out, idx);
        self.attempt = 0;
        if self.damping > 0 {
            self.arm(out, Timer::Stable, RESTART_DAMPING_FORGET);
        }
        self.abandon_connect(out);
        self.sync_state(out);
        let c = &self.conns[idx];
        let families = c
            .params
            .as_ref()
            .map(|p| p.negotiated.families.clone())
            .unwrap_or_default();
        let conn = c.id;
        out.push(Output::Established { conn });
        out.push(Output::SendInitialUpdates {
            conn,
            families,
            cause: ResendCause::Established,
        });
    }
}

/// Order of progress among states (Idle lowest, Established highest).
fn rank(s: FsmState) -> u8 {
    match s {
        FsmState::Idle => 0,
        FsmState::Connect => 1,
        FsmState::Active => 2,
        FsmState::OpenSent => 3,
        FsmState::OpenConfirm => 4,
        FsmState::Established => 5,
    }
}

/// "IPv6 unicast" and the like.
fn family_text(f: Family) -> String {
    match f {
        Family::IPV4_UNICAST => "IPv4 unicast".into(),
        Family::IPV6_UNICAST => "IPv6 unicast".into(),
        other => other.to_string(),
    }
}

/// RFC 6793: AS_TRANS only stands in for a 4-octet AS in the 2-octet My
/// AS field; as the 4-octet AS capability's value it names no AS (Bad Peer
/// AS). With the capability, My AS must be the capability's AS when that
/// fits 2 octets and AS_TRANS when it does not (Bad Peer AS otherwise).
fn check_as_trans(open: &Open) -> Result<(), Notification> {
    let four = open.capabilities().find_map(|c| match c {
        Capability::FourOctetAs(asn) => Some(*asn),
        _ => None,
    });
    let Some(asn) = four else {
        return Ok(());
    };
    if asn == u32::from(AS_TRANS) {
        return Err(Notification::BadPeerAs);
    }
    let expected = u16::try_from(asn).unwrap_or(AS_TRANS);
    if open.my_as != expected {
        return Err(Notification::BadPeerAs);
    }
    Ok(())
}

/// Whether a session ended by `n` counts toward restart damping: an error
/// (message header, OPEN, UPDATE, hold timer, FSM, ROUTE-REFRESH, send hold
/// timer) or a Cease that reports a failure (maximum prefixes reached, out
/// of resources, BFD down, a Hard Reset for such a cause). An administrative
/// end (shutdown, reset, peer de-configured, connection rejected, other
/// configuration change, collision resolution, unspecific) does not: a router
/// restarted or reconfigured a few times in a row is no flapping peer, and
/// damping it kept a router's restarts apart by up to 2 minutes (the lab's
/// bird-restart fault: 1, 4, 16, 59, 107 s to reconnect in five rounds).
fn damps(n: &Notification) -> bool {
    match n {
        Notification::HardReset { cause } => damps(cause),
        n if n.code() == error_code::CEASE => matches!(n.subcode(), 1 | 8 | 10),
        _ => true,
    }
}
