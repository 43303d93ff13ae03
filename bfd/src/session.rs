//! The session state machine of RFC 5880 (asynchronous mode, with the echo
//! function), as a pure function: [`Session::handle`] takes an [`Event`] and
//! the current time and returns [`Action`]s. It owns no socket and no timer:
//! timers are actions ([`Action::ArmTimer`], [`Action::CancelTimer`]) and their
//! expiries are events ([`Event::TimerExpired`]).
//!
//! # Time
//! `now` is nanoseconds on a monotonic clock with an arbitrary origin (the
//! edge passes `Instant::now() - start`). Deadlines in actions are on the same
//! clock. Intervals on the wire are µs.
//!
//! # Timers
//! Four per session ([`Timer`]). An [`Action::ArmTimer`] replaces any pending
//! deadline of the same timer. [`Event::TimerExpired`] must be delivered with
//! `now >= deadline`; an expiry that arrives before the current deadline
//! (a stale timer) is ignored. A deadline is never armed before `now`: one
//! that a shorter detection time has put in the past is armed at `now`.
//! Events and actions are `serde` types, so a run can be recorded and
//! replayed.
//!
//! # Semantics (RFC 5880 §6.8, RFC 5881, RFC 5882)
//! - Transmit interval: `max(desired min TX in use, remote required min RX)`,
//!   jittered to 75-100 % (75-90 % when our Detect Mult is 1); nothing
//!   periodic while the remote required min RX is 0, nor in passive mode
//!   before the remote's discriminator is known, nor while the remote is in
//!   Demand mode and both sides are Up (outside a Poll Sequence).
//! - While not Up we advertise a desired min TX of at least 1 s (§6.8.3).
//!   On leaving Up, the packet already scheduled at the old rate still goes
//!   out (so the remote hears Down before its detection time expires); the
//!   slow rate applies from the next one.
//! - Detection time: `remote Detect Mult x max(required min RX in use,
//!   remote desired min TX)`; the detection timer is re-armed (not
//!   re-created) on every accepted packet. On expiry the remote is
//!   forgotten (discriminator 0, required min RX back to its initial 1 µs,
//!   no echo), in any state; Init and Up go Down with diagnostic 1.
//! - Received packets are accepted only from the key's remote address, with
//!   TTL 255 (single hop) or at least `minimumTtl` (multihop), and with a
//!   Your Discriminator of 0 or ours; others are counted and ignored.
//! - A change of the advertised desired min TX or required min RX while Up
//!   starts a Poll Sequence. Changes in the safe direction apply at once (a
//!   faster TX, a longer RX); a slower TX and a shorter RX apply when the
//!   Final arrives (§6.8.3). A change during a running Poll Sequence extends
//!   it by one round trip, so every value the remote may still use stays
//!   covered. While not Up, changes apply at once and no Poll is sent (as in
//!   FRR).
//! - Reaching Up starts a Poll Sequence for the switch from the 1 s slow
//!   rate to the configured one (the faster TX applies at once).
//! - A packet with P is answered at once with F, outside the periodic
//!   schedule. State changes otherwise do not send out of schedule, except
//!   AdminDown: one AdminDown packet at once, then periodic ones until the
//!   remote's Detect Mult of them have been sent (3 if unknown), then silence
//!   (§6.8.16; FRR sends one).
//! - Diagnostics: 1 on detection expiry, 2 on echo failure, 3 when the remote
//!   signals Down or AdminDown, 7 on local AdminDown; cleared on reaching Up,
//!   and 7 also on leaving AdminDown (AdminUp).
//! - Echo (§6.4, RFC 5881 §4): runs only when echo mode is set, the path is
//!   single-hop IPv4, the session is Up and the remote advertises a non-zero
//!   Required Min Echo RX. Echo TX interval: `max(echo interval, remote
//!   required min echo RX)`, without jitter (jitter would go below the
//!   remote's minimum). Echo detection: `our Detect Mult x echo TX interval`;
//!   expiry takes the session Down with diagnostic 2. We advertise a
//!   Required Min Echo RX of the echo interval when echo mode is on, the
//!   path allows echo and our forwarding plane loops the remote's echo
//!   packets back ([`Event::EchoLoopback`], true until told otherwise;
//!   MetalLB renders `echoInterval` as FRR's echo receive interval too),
//!   else 0: a system that cannot return echo packets must not invite
//!   them (§6.8.1, §6.8.9).
//! - While echo runs, control traffic is slowed as §6.8.3 suggests by raising
//!   the Required Min RX we advertise to at least 1 s (through a Poll). We do
//!   not raise our desired min TX: the peer may not run echo, and its
//!   detection of us rests on our control packets.
//! - RFC 5882: [`StateChange::client_action`] is `Down` only for Up -> Down
//!   not caused by the remote's AdminDown; Up -> AdminDown is no failure.
//!   Nor is a Down, while Up, that the remote did not send for a failure
//!   it detected: one with diagnostic 3 (Neighbor Signaled Session Down:
//!   we signalled nothing, we are Up), which FRR's bfdd sends when it
//!   removes a session whose last client deregistered it (bgpd does so,
//!   and registers a new one, when a neighbor's BGP session is Established
//!   and its BFD session had no source address yet, e.g. `neighbor X bfd`
//!   configured before the BGP session came up; and on `no neighbor X
//!   bfd`), and one from a new session of the remote (Your Discriminator
//!   0 and a My Discriminator other than the one we are Up with: the
//!   remote replaced its session without telling). We go Down with
//!   diagnostic 3 and through the handshake again, but the client keeps
//!   its session: packets arrive, the path works. A remote that stops
//!   hearing us sends Down with diagnostic 1 (and keeps its
//!   discriminator), so that stays a failure, as do diagnostics 2 and 4-8
//!   and a Down without diagnostic.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::packet::{ControlPacket, Diagnostic, EchoPacket, State};
use crate::params::Parameters;
use crate::path::{SessionKey, check_ttl};
use crate::rng::{SplitMix64, jittered_with_margin_ns};

/// Desired min TX advertised while not Up (RFC 5880 §6.8.3), µs.
pub const SLOW_TX_INTERVAL_US: u32 = 1_000_000;
/// Smallest Required Min RX advertised while echo runs (§6.8.3), µs.
pub const ECHO_ACTIVE_MIN_RX_US: u32 = 1_000_000;
/// AdminDown packets sent when the remote's Detect Mult is unknown.
pub const DEFAULT_ADMIN_DOWN_PACKETS: u8 = 3;
/// A returning echo packet is accepted if it is one of the last this many
/// sent.
pub const ECHO_SEQUENCE_WINDOW: u32 = 1024;

const NS_PER_US: u64 = 1_000;

/// The timers of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Timer {
    /// Periodic control packet transmission.
    Tx,
    /// Control detection time.
    Detect,
    /// Periodic echo transmission.
    EchoTx,
    /// Echo detection time.
    EchoDetect,
}

impl Timer {
    pub const ALL: [Timer; 4] = [Timer::Tx, Timer::Detect, Timer::EchoTx, Timer::EchoDetect];

    const fn index(self) -> usize {
        self as usize
    }
}

/// An input of the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A control packet for this session (the registry has demultiplexed
    /// it), with the source address and TTL / hop limit it arrived with.
    Received {
        packet: ControlPacket,
        source: IpAddr,
        ttl: u8,
    },
    /// One of our echo packets came back.
    EchoReceived(EchoPacket),
    /// A timer reached its deadline.
    TimerExpired(Timer),
    /// Administratively enable the session (RFC 5880 §6.8.16).
    AdminUp,
    /// Administratively disable the session.
    AdminDown,
    /// New parameters (already validated and merged), applied without a flap.
    ParametersChanged(Parameters),
    /// Whether this system's forwarding plane loops the remote's echo
    /// packets back to it (for IPv4 on Linux: forwarding on the
    /// interface). Without it the Required Min Echo RX we advertise is 0,
    /// so the remote sends us no echo packets; it does not affect our own
    /// echo. Initially true.
    EchoLoopback(bool),
}

/// At most this much before its deadline may the edge send a periodic
/// packet (4 % of the interval below 50 ms): the jitter is drawn that far
/// inside the 75-100 % band, so the interval stays inside it, and a packet
/// due soon leaves with the wakeup of another instead of costing its own.
pub const TX_EARLY_MAX_NS: u64 = 2_000_000;

/// The early-send margin for a transmission interval.
pub fn tx_margin_ns(interval_ns: u64) -> u64 {
    TX_EARLY_MAX_NS.min(interval_ns / 25)
}

/// An output of the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Send this control packet to the session's remote.
    SendControl(ControlPacket),
    /// Send this echo packet (single-hop IPv4: to our own address, through
    /// the remote's forwarding plane).
    SendEcho(EchoPacket),
    /// Arm (or re-arm) a timer at an absolute deadline, ns. The edge may
    /// deliver it up to `early_ns` before `at_ns` (as if at `at_ns`), to
    /// send with a transmission or reception already being handled instead
    /// of waking for it; non-zero only for [`Timer::Tx`], where the jitter
    /// was drawn that far inside the band (see [`TX_EARLY_MAX_NS`]).
    ArmTimer {
        timer: Timer,
        at_ns: u64,
        early_ns: u64,
    },
    /// Disarm a timer.
    CancelTimer(Timer),
    /// The session changed state.
    StateChanged(StateChange),
}

/// What made the session change state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Cause {
    /// Local administrative enable.
    AdminUp,
    /// Local administrative disable.
    AdminDown,
    /// A packet from the remote in this state.
    Received(State),
    /// No valid packet for a detection time.
    DetectionTimeExpired,
    /// Our echo packets stopped coming back.
    EchoFailed,
    /// While Up, a Down from the remote saying that we signalled Down
    /// (diagnostic 3): we did not, so the remote detected no failure; it
    /// is removing its session. FRR's bfdd sends one such packet when the
    /// last client of a session deregisters it (bgpd re-registering a
    /// neighbor's session with the BGP connection's source address once
    /// BGP is Established, or `no neighbor X bfd`), then frees it.
    RemoteSessionRemoved,
    /// While Up, a Down from another session of the remote (a new My
    /// Discriminator, not addressed to us): the remote replaced its
    /// session without telling. Packets arrive, so the path works.
    RemoteSessionReplaced,
}

/// What a client (BGP) should do about a state change (RFC 5882 §3.2, §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClientAction {
    /// Nothing: not a change of liveness the client should act on.
    None,
    /// The path is up.
    Up,
    /// The path failed: tear down what depends on it.
    Down,
}

/// A state transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateChange {
    pub from: State,
    pub to: State,
    /// Our diagnostic after the change.
    pub diag: Diagnostic,
    pub cause: Cause,
    pub at_ns: u64,
}

impl StateChange {
    /// RFC 5882: Up is reported; leaving Up is a failure unless it is our
    /// own AdminDown, the remote's AdminDown, or the remote removing or
    /// replacing its session ([`Cause::RemoteSessionRemoved`],
    /// [`Cause::RemoteSessionReplaced`]: its packets arrive, so the path
    /// works).
    pub fn client_action(&self) -> ClientAction {
        match (self.from, self.to, self.cause) {
            (_, State::Up, _) => ClientAction::Up,
            (
                State::Up,
                State::Down,
                Cause::Received(State::AdminDown)
                | Cause::RemoteSessionRemoved
                | Cause::RemoteSessionReplaced,
            ) => ClientAction::None,
            (State::Up, State::Down, _) => ClientAction::Down,
            _ => ClientAction::None,
        }
    }
}

/// Packet and transition counters of a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Control packets accepted (including those discarded in AdminDown).
    pub control_in: u64,
    /// Control packets sent (periodic, Final, AdminDown).
    pub control_out: u64,
    /// Control packets dropped by the session: TTL, source address, Your
    /// Discriminator, or field checks.
    pub control_dropped: u64,
    /// Echo packets that came back in time.
    pub echo_in: u64,
    /// Echo packets sent.
    pub echo_out: u64,
    /// Echo packets refused (echo not running, unknown sequence).
    pub echo_dropped: u64,
    /// Transitions to Up.
    pub up_events: u64,
    /// Transitions from Up.
    pub down_events: u64,
}

/// What we last heard from the remote (RFC 5880 §6.8.1 `bfd.Remote*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteInfo {
    /// 0 until heard from, and again after a detection time of silence.
    pub discr: u32,
    pub state: State,
    pub diag: Diagnostic,
    pub demand: bool,
    pub detect_mult: u8,
    pub desired_min_tx_us: u32,
    pub required_min_rx_us: u32,
    pub required_min_echo_rx_us: u32,
}

impl RemoteInfo {
    const INITIAL: RemoteInfo = RemoteInfo {
        discr: 0,
        state: State::Down,
        diag: Diagnostic::None,
        demand: false,
        detect_mult: 0,
        desired_min_tx_us: 0,
        // RFC 5880 §6.8.1: initialised to 1.
        required_min_rx_us: 1,
        required_min_echo_rx_us: 0,
    };
}

/// A snapshot of a session for status and metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStatus {
    pub key: SessionKey,
    pub local_discr: u32,
    pub state: State,
    pub local_diag: Diagnostic,
    pub remote: RemoteInfo,
    /// Parameters in force (merged over the clients).
    pub params: Parameters,
    /// Values we advertise, µs.
    pub advertised_min_tx_us: u32,
    pub advertised_min_rx_us: u32,
    pub advertised_min_echo_rx_us: u32,
    /// Periodic transmit interval before jitter, µs.
    pub tx_interval_us: u64,
    /// Whether periodic control transmission is allowed now.
    pub transmitting: bool,
    /// Interval we expect the remote to send at, µs.
    pub rx_interval_us: u64,
    /// Control detection time, µs (0 before the remote is heard).
    pub detection_time_us: u64,
    pub poll_in_progress: bool,
    pub echo_active: bool,
    /// Echo transmit interval and detection time, µs (0 while echo is off).
    pub echo_tx_interval_us: u64,
    pub echo_detection_time_us: u64,
    pub last_echo_rtt_ns: Option<u64>,
    /// When the last of our echo packets came back (accepted).
    pub last_echo_rx_ns: Option<u64>,
    pub last_transition_ns: Option<u64>,
    pub last_rx_ns: Option<u64>,
    pub counters: Counters,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Poll {
    Idle,
    Active,
    /// A parameter changed while the Poll was running: the next Final only
    /// restarts it.
    Restart,
}

/// One BFD session.
#[derive(Clone, Debug)]
pub struct Session {
    key: SessionKey,
    local_discr: u32,
    params: Parameters,
    rng: SplitMix64,
    state: State,
    local_diag: Diagnostic,
    remote: RemoteInfo,
    /// Advertised Desired Min TX / Required Min RX / Required Min Echo RX.
    adv_tx_us: u32,
    adv_rx_us: u32,
    adv_echo_rx_us: u32,
    /// Values used for our transmit interval and detection time; they lag
    /// the advertised ones during a Poll Sequence (§6.8.3).
    tx_in_use_us: u32,
    rx_in_use_us: u32,
    poll: Poll,
    admin_down_left: u8,
    echo_active: bool,
    /// See [`Event::EchoLoopback`].
    echo_loopback: bool,
    last_echo_seq: Option<u32>,
    deadlines: [Option<u64>; 4],
    /// The Tx / EchoTx timer just expired: send now.
    tx_fired: bool,
    echo_tx_fired: bool,
    last_tx: Option<u64>,
    last_echo_tx: Option<u64>,
    /// Time of the last accepted packet, for the detection timer (cleared
    /// when the detection time expires).
    detect_anchor: Option<u64>,
    echo_anchor: Option<u64>,
    last_rx: Option<u64>,
    last_transition: Option<u64>,
    last_echo_rtt_ns: Option<u64>,
    last_echo_rx: Option<u64>,
    counters: Counters,
}

impl Session {
    /// A session in AdminDown that sends nothing until [`Session::start`]
    /// (or [`Event::AdminUp`]). `local_discr` must be non-zero and unique
    /// among the system's sessions (a zero is replaced by 1); `seed` feeds
    /// the transmit jitter.
    pub fn new(key: SessionKey, local_discr: u32, params: Parameters, seed: u64) -> Session {
        let mut session = Session {
            key,
            local_discr: local_discr.max(1),
            params,
            rng: SplitMix64::new(seed),
            state: State::AdminDown,
            local_diag: Diagnostic::None,
            remote: RemoteInfo::INITIAL,
            adv_tx_us: 0,
            adv_rx_us: 0,
            adv_echo_rx_us: 0,
            tx_in_use_us: 0,
            rx_in_use_us: 0,
            poll: Poll::Idle,
            admin_down_left: 0,
            echo_active: false,
            echo_loopback: true,
            last_echo_seq: None,
            deadlines: [None; 4],
            tx_fired: false,
            echo_tx_fired: false,
            last_tx: None,
            last_echo_tx: None,
            detect_anchor: None,
            echo_anchor: None,
            last_rx: None,
            last_transition: None,
            last_echo_rtt_ns: None,
            last_echo_rx: None,
            counters: Counters::default(),
        };
        session.refresh_advertised();
        session
    }

    /// Enables the session: AdminDown -> Down, and transmission starts.
    pub fn start(&mut self, now: u64) -> Vec<Action> {
        self.handle(Event::AdminUp, now)
    }

    /// For a session about to be destroyed: AdminDown (one AdminDown packet
    /// goes out at once) and every timer cancelled.
    pub fn shutdown(&mut self, now: u64) -> Vec<Action> {
        let mut out = self.handle(Event::AdminDown, now);
        self.admin_down_left = 0;
        for timer in Timer::ALL {
            self.set_timer(timer, None, &mut out);
        }
        out
    }

    /// Runs the state machine on one event.
    pub fn handle(&mut self, event: Event, now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        let mut send_final = false;
        let mut send_admin_down = false;
        match event {
            Event::Received {
                packet,
                source,
                ttl,
            } => {
                send_final = self.on_control(&packet, source, ttl, now, &mut out);
            }
            Event::EchoReceived(echo) => self.on_echo(&echo, now),
            Event::TimerExpired(timer) => self.on_timer(timer, now, &mut out),
            Event::AdminUp => {
                if self.state == State::AdminDown {
                    self.admin_down_left = 0;
                    // Diagnostic 7 described the AdminDown just left.
                    if self.local_diag == Diagnostic::AdministrativelyDown {
                        self.local_diag = Diagnostic::None;
                    }
                    self.change_state(State::Down, Cause::AdminUp, now, &mut out);
                }
            }
            Event::AdminDown => {
                if self.state != State::AdminDown {
                    self.local_diag = Diagnostic::AdministrativelyDown;
                    self.change_state(State::AdminDown, Cause::AdminDown, now, &mut out);
                    self.detect_anchor = None;
                    self.admin_down_left = match self.remote.detect_mult {
                        0 => DEFAULT_ADMIN_DOWN_PACKETS,
                        mult => mult,
                    };
                    send_admin_down = true;
                }
            }
            Event::ParametersChanged(params) => self.params = params,
            Event::EchoLoopback(on) => self.echo_loopback = on,
        }
        self.update_echo_activity(now);
        self.refresh_advertised();
        if send_final {
            let packet = self.build_packet(false, true);
            self.counters.control_out += 1;
            out.push(Action::SendControl(packet));
        }
        if send_admin_down && self.tx_allowed() {
            self.send_periodic(now, &mut out);
            let next = self
                .tx_allowed()
                .then(|| now + self.jitter(self.tx_interval_ns()));
            self.set_timer(Timer::Tx, next, &mut out);
        }
        self.schedule_tx(now, &mut out);
        self.schedule_detect(now, &mut out);
        self.schedule_echo(now, &mut out);
        out
    }

    // ---- accessors ----

    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    pub fn local_discr(&self) -> u32 {
        self.local_discr
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn local_diag(&self) -> Diagnostic {
        self.local_diag
    }

    pub fn remote(&self) -> &RemoteInfo {
        &self.remote
    }

    pub fn params(&self) -> &Parameters {
        &self.params
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The pending deadline of a timer.
    pub fn deadline(&self, timer: Timer) -> Option<u64> {
        self.deadlines[timer.index()]
    }

    /// The earliest pending timer.
    pub fn next_deadline(&self) -> Option<(Timer, u64)> {
        Timer::ALL
            .into_iter()
            .filter_map(|t| self.deadline(t).map(|at| (t, at)))
            .min_by_key(|&(t, at)| (at, t))
    }

    /// Whether a Poll Sequence is running.
    pub fn poll_in_progress(&self) -> bool {
        self.poll != Poll::Idle
    }

    /// Whether the echo function is running.
    pub fn echo_active(&self) -> bool {
        self.echo_active
    }

    /// What the last [`Event::EchoLoopback`] said (true before any).
    pub fn echo_loopback(&self) -> bool {
        self.echo_loopback
    }

    /// Periodic transmit interval before jitter, µs (§6.8.2 / §6.8.7).
    pub fn tx_interval_us(&self) -> u64 {
        u64::from(self.tx_in_use_us.max(self.remote.required_min_rx_us))
    }

    /// Control detection time, µs (§6.8.4); 0 before the remote is heard.
    pub fn detection_time_us(&self) -> u64 {
        u64::from(self.remote.detect_mult) * self.rx_interval_us()
    }

    /// Echo transmit interval, µs: `max(echo interval, remote required min
    /// echo RX)`.
    pub fn echo_tx_interval_us(&self) -> u64 {
        u64::from(
            self.params
                .echo_interval_us()
                .max(self.remote.required_min_echo_rx_us),
        )
    }

    /// Echo detection time, µs: our Detect Mult x echo transmit interval.
    pub fn echo_detection_time_us(&self) -> u64 {
        u64::from(self.params.detect_mult()) * self.echo_tx_interval_us()
    }

    pub fn status(&self) -> SessionStatus {
        SessionStatus {
            key: self.key.clone(),
            local_discr: self.local_discr,
            state: self.state,
            local_diag: self.local_diag,
            remote: self.remote,
            params: self.params,
            advertised_min_tx_us: self.adv_tx_us,
            advertised_min_rx_us: self.adv_rx_us,
            advertised_min_echo_rx_us: self.adv_echo_rx_us,
            tx_interval_us: self.tx_interval_us(),
            transmitting: self.tx_allowed(),
            rx_interval_us: self.rx_interval_us(),
            detection_time_us: self.detection_time_us(),
            poll_in_progress: self.poll_in_progress(),
            echo_active: self.echo_active,
            echo_tx_interval_us: if self.echo_active {
                self.echo_tx_interval_us()
            } else {
                0
            },
            echo_detection_time_us: if self.echo_active {
                self.echo_detection_time_us()
            } else {
                0
            },
            last_echo_rtt_ns: self.last_echo_rtt_ns,
            last_echo_rx_ns: self.last_echo_rx,
            last_transition_ns: self.last_transition,
            last_rx_ns: self.last_rx,
            counters: self.counters,
        }
    }

    // ---- event handlers ----

    /// RFC 5880 §6.8.6 from "If the Your Discriminator field is nonzero"
    /// on. Returns whether a Final must be sent.
    fn on_control(
        &mut self,
        packet: &ControlPacket,
        source: IpAddr,
        ttl: u8,
        now: u64,
        out: &mut Vec<Action>,
    ) -> bool {
        let acceptable = source == self.key.remote
            && check_ttl(self.key.hop, ttl, self.params.min_ttl()).is_ok()
            && (packet.your_discr == 0 || packet.your_discr == self.local_discr)
            && packet.check().is_ok();
        if !acceptable {
            self.counters.control_dropped += 1;
            return false;
        }
        self.counters.control_in += 1;
        self.last_rx = Some(now);
        // Another session of the remote: it does not know us yet (Your
        // Discriminator 0) and has a discriminator other than the one we are
        // Up with. Its Down says it starts over, not that the path failed
        // (the one we were Up with would keep its discriminator, §6.8.1).
        let replaced = packet.your_discr == 0
            && self.remote.discr != 0
            && packet.my_discr != self.remote.discr;
        self.remote = RemoteInfo {
            discr: packet.my_discr,
            state: packet.state,
            diag: packet.diag,
            demand: packet.demand,
            detect_mult: packet.detect_mult,
            desired_min_tx_us: packet.desired_min_tx_us,
            required_min_rx_us: packet.required_min_rx_us,
            required_min_echo_rx_us: packet.required_min_echo_rx_us,
        };
        if packet.final_ {
            self.on_final();
        }
        if self.state == State::AdminDown {
            return false;
        }
        self.detect_anchor = Some(now);
        let cause = Cause::Received(packet.state);
        match (self.state, packet.state) {
            (State::Up, State::Down) if replaced => {
                self.local_diag = Diagnostic::NeighborSignaledSessionDown;
                self.change_state(State::Down, Cause::RemoteSessionReplaced, now, out);
            }
            (State::Up, State::Down) if packet.diag == Diagnostic::NeighborSignaledSessionDown => {
                self.local_diag = Diagnostic::NeighborSignaledSessionDown;
                self.change_state(State::Down, Cause::RemoteSessionRemoved, now, out);
            }
            (State::Init | State::Up, State::AdminDown) | (State::Up, State::Down) => {
                self.local_diag = Diagnostic::NeighborSignaledSessionDown;
                self.change_state(State::Down, cause, now, out);
            }
            (State::Down, State::Down) => self.change_state(State::Init, cause, now, out),
            (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
                self.change_state(State::Up, cause, now, out);
            }
            _ => {}
        }
        packet.poll
    }

    fn on_final(&mut self) {
        match self.poll {
            Poll::Idle => {}
            Poll::Restart => self.poll = Poll::Active,
            Poll::Active => {
                self.poll = Poll::Idle;
                self.tx_in_use_us = self.adv_tx_us;
                self.rx_in_use_us = self.adv_rx_us;
            }
        }
    }

    fn on_echo(&mut self, echo: &EchoPacket, now: u64) {
        let in_window = self
            .last_echo_seq
            .is_some_and(|last| last.wrapping_sub(echo.sequence) < ECHO_SEQUENCE_WINDOW);
        if !self.echo_active || echo.discriminator != self.local_discr || !in_window {
            self.counters.echo_dropped += 1;
            return;
        }
        self.counters.echo_in += 1;
        self.echo_anchor = Some(now);
        self.last_echo_rtt_ns = now.checked_sub(echo.tx_time_ns);
        self.last_echo_rx = Some(now);
    }

    fn on_timer(&mut self, timer: Timer, now: u64, out: &mut Vec<Action>) {
        let slot = &mut self.deadlines[timer.index()];
        if !slot.is_some_and(|at| now >= at) {
            return; // stale or cancelled
        }
        *slot = None;
        match timer {
            // The schedulers send and re-arm.
            Timer::Tx => self.tx_fired = true,
            Timer::EchoTx => self.echo_tx_fired = true,
            Timer::Detect => {
                self.detect_anchor = None;
                self.remote = RemoteInfo {
                    diag: self.remote.diag,
                    detect_mult: self.remote.detect_mult,
                    desired_min_tx_us: self.remote.desired_min_tx_us,
                    ..RemoteInfo::INITIAL
                };
                if matches!(self.state, State::Init | State::Up) {
                    self.local_diag = Diagnostic::ControlDetectionTimeExpired;
                    self.change_state(State::Down, Cause::DetectionTimeExpired, now, out);
                }
            }
            Timer::EchoDetect => {
                self.echo_anchor = None;
                if self.echo_active && self.state == State::Up {
                    self.local_diag = Diagnostic::EchoFunctionFailed;
                    self.change_state(State::Down, Cause::EchoFailed, now, out);
                }
            }
        }
    }

    fn change_state(&mut self, to: State, cause: Cause, now: u64, out: &mut Vec<Action>) {
        let from = self.state;
        if from == to {
            return;
        }
        self.state = to;
        if to == State::Up {
            self.local_diag = Diagnostic::None;
            self.counters.up_events += 1;
        }
        if from == State::Up {
            self.counters.down_events += 1;
        }
        self.last_transition = Some(now);
        out.push(Action::StateChanged(StateChange {
            from,
            to,
            diag: self.local_diag,
            cause,
            at_ns: now,
        }));
    }

    // ---- derived state ----

    fn update_echo_activity(&mut self, now: u64) {
        let wanted = self.params.echo_mode
            && self.key.echo_capable()
            && self.state == State::Up
            && self.remote.required_min_echo_rx_us != 0;
        if wanted && !self.echo_active {
            self.echo_active = true;
            // The first echo gets a full detection time.
            self.echo_anchor = Some(now);
        } else if !wanted && self.echo_active {
            self.echo_active = false;
            self.echo_anchor = None;
        }
    }

    /// Recomputes the advertised intervals; starts or extends a Poll
    /// Sequence when they change while Up (§6.8.3).
    fn refresh_advertised(&mut self) {
        let up = self.state == State::Up;
        let tx = self.params.transmit_interval_us();
        let rx = self.params.receive_interval_us();
        let adv_tx = if up { tx } else { tx.max(SLOW_TX_INTERVAL_US) };
        let adv_rx = if self.echo_active {
            rx.max(ECHO_ACTIVE_MIN_RX_US)
        } else {
            rx
        };
        self.adv_echo_rx_us =
            if self.params.echo_mode && self.key.echo_capable() && self.echo_loopback {
                self.params.echo_interval_us()
            } else {
                0
            };
        let changed = adv_tx != self.adv_tx_us || adv_rx != self.adv_rx_us;
        self.adv_tx_us = adv_tx;
        self.adv_rx_us = adv_rx;
        if !up {
            self.tx_in_use_us = adv_tx;
            self.rx_in_use_us = adv_rx;
            self.poll = Poll::Idle;
        } else if changed {
            self.tx_in_use_us = self.tx_in_use_us.min(adv_tx);
            self.rx_in_use_us = self.rx_in_use_us.max(adv_rx);
            self.poll = match self.poll {
                Poll::Idle => Poll::Active,
                Poll::Active | Poll::Restart => Poll::Restart,
            };
        }
    }

    /// §6.8.7 and §6.8.16: whether periodic control packets may be sent.
    fn tx_allowed(&self) -> bool {
        if self.state == State::AdminDown && self.admin_down_left == 0 {
            return false;
        }
        if self.params.passive_mode && self.remote.discr == 0 {
            return false;
        }
        if self.remote.required_min_rx_us == 0 {
            return false;
        }
        let remote_demand =
            self.remote.demand && self.state == State::Up && self.remote.state == State::Up;
        !(remote_demand && self.poll == Poll::Idle)
    }

    fn tx_interval_ns(&self) -> u64 {
        self.tx_interval_us() * NS_PER_US
    }

    fn rx_interval_us(&self) -> u64 {
        u64::from(self.rx_in_use_us.max(self.remote.desired_min_tx_us))
    }

    /// The next periodic interval: jittered inside the band by the margin
    /// the edge may send early ([`Action::ArmTimer`]'s `early_ns`).
    fn jitter(&mut self, interval_ns: u64) -> u64 {
        let random = self.rng.next_u32();
        jittered_with_margin_ns(
            interval_ns,
            self.params.detect_mult(),
            random,
            tx_margin_ns(interval_ns),
        )
    }

    /// How early the Tx deadline `at` may be delivered: the margin, and
    /// never before 75 % of the interval after the last transmission.
    fn tx_early_ns(&self, at: u64) -> u64 {
        let interval = self.tx_interval_ns();
        let floor = self
            .last_tx
            .map_or(0, |last| last + (interval - interval / 4));
        tx_margin_ns(interval).min(at.saturating_sub(floor))
    }

    fn build_packet(&self, poll: bool, final_: bool) -> ControlPacket {
        ControlPacket {
            diag: self.local_diag,
            state: self.state,
            poll,
            final_,
            control_plane_independent: false,
            demand: false,
            multipoint: false,
            detect_mult: self.params.detect_mult(),
            my_discr: self.local_discr,
            your_discr: self.remote.discr,
            desired_min_tx_us: self.adv_tx_us,
            required_min_rx_us: self.adv_rx_us,
            required_min_echo_rx_us: self.adv_echo_rx_us,
            auth: None,
        }
    }

    // ---- timers ----

    fn set_timer(&mut self, timer: Timer, at: Option<u64>, out: &mut Vec<Action>) {
        let slot = &mut self.deadlines[timer.index()];
        if *slot == at {
            return;
        }
        *slot = at;
        out.push(match at {
            Some(at_ns) => Action::ArmTimer {
                timer,
                at_ns,
                early_ns: if timer == Timer::Tx {
                    self.tx_early_ns(at_ns)
                } else {
                    0
                },
            },
            None => Action::CancelTimer(timer),
        });
    }

    fn send_periodic(&mut self, now: u64, out: &mut Vec<Action>) {
        let packet = self.build_packet(self.poll != Poll::Idle, false);
        out.push(Action::SendControl(packet));
        self.counters.control_out += 1;
        self.last_tx = Some(now);
        if self.state == State::AdminDown {
            self.admin_down_left = self.admin_down_left.saturating_sub(1);
        }
    }

    fn schedule_tx(&mut self, now: u64, out: &mut Vec<Action>) {
        let fired = std::mem::take(&mut self.tx_fired);
        if !self.tx_allowed() {
            self.set_timer(Timer::Tx, None, out);
            return;
        }
        let interval = self.tx_interval_ns();
        // The jitter band: the earliest and latest next transmission.
        let low = interval - interval / 4;
        let high = if self.params.detect_mult() == 1 {
            interval - interval / 10
        } else {
            interval
        };
        let at = match (self.deadline(Timer::Tx), self.last_tx) {
            // (Re)starting: not before the interval allows.
            (None, Some(last)) if !fired && now < last + low => last + self.jitter(interval),
            (None, _) => {
                self.send_periodic(now, out);
                if !self.tx_allowed() {
                    self.set_timer(Timer::Tx, None, out);
                    return;
                }
                now + self.jitter(interval)
            }
            (Some(at), last) => {
                // A pending deadline moves only if it is now too late (the
                // interval shrank) or earlier than the remote accepts (its
                // Required Min RX grew). When our own interval grows (e.g.
                // to 1 s on leaving Up) the packet already due goes out
                // first, so the remote hears of the change in time.
                let last = last.unwrap_or(now);
                let remote_low = u64::from(self.remote.required_min_rx_us) * NS_PER_US * 3 / 4;
                if at >= last + remote_low && at <= last + high {
                    return;
                }
                (last + self.jitter(interval)).max(now)
            }
        };
        self.set_timer(Timer::Tx, Some(at), out);
    }

    fn schedule_detect(&mut self, now: u64, out: &mut Vec<Action>) {
        let at = match (self.state, self.detect_anchor) {
            (State::AdminDown, _) | (_, None) => None,
            (_, Some(anchor)) => Some(self.not_before_now(
                Timer::Detect,
                anchor + self.detection_time_us() * NS_PER_US,
                now,
            )),
        };
        self.set_timer(Timer::Detect, at, out);
    }

    /// A deadline that a shorter time (e.g. the old RX dropped on leaving
    /// Up) has put in the past is due now; one already due stays as is.
    fn not_before_now(&self, timer: Timer, at: u64, now: u64) -> u64 {
        match self.deadline(timer) {
            _ if at > now => at,
            Some(due) if due <= now => due,
            _ => now,
        }
    }

    fn schedule_echo(&mut self, now: u64, out: &mut Vec<Action>) {
        let fired = std::mem::take(&mut self.echo_tx_fired);
        if !self.echo_active {
            self.set_timer(Timer::EchoTx, None, out);
            self.set_timer(Timer::EchoDetect, None, out);
            return;
        }
        let interval = self.echo_tx_interval_us() * NS_PER_US;
        let at = match (self.deadline(Timer::EchoTx), self.last_echo_tx) {
            (None, Some(last)) if !fired && now < last + interval => last + interval,
            (None, _) => {
                self.send_echo(now, out);
                now + interval
            }
            // No jitter: the deadline is exactly one interval after the last echo.
            (Some(_), last) => (last.unwrap_or(now) + interval).max(now),
        };
        self.set_timer(Timer::EchoTx, Some(at), out);
        let detect = self.echo_anchor.map(|anchor| {
            self.not_before_now(
                Timer::EchoDetect,
                anchor + self.echo_detection_time_us() * NS_PER_US,
                now,
            )
        });
        self.set_timer(Timer::EchoDetect, detect, out);
    }

    fn send_echo(&mut self, now: u64, out: &mut Vec<Action>) {
        let sequence = self.last_echo_seq.map_or(0, |s| s.wrapping_add(1));
        self.last_echo_seq = Some(sequence);
        self.last_echo_tx = Some(now);
        self.counters.echo_out += 1;
        out.push(Action::SendEcho(EchoPacket {
            discriminator: self.local_discr,
            sequence,
            tx_time_ns: now,
        }));
    }
}

#[cfg(test)]
mod tests;
