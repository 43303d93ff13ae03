//! The Sans-IO core: SWIM membership (foca) plus the fast path (heartbeat
//! sessions, indirect-probe confirmation, takeover, optional self-fence).
//!
//! No socket, no clock, no OS randomness: time is `u64` nanoseconds on a
//! monotonic clock with an arbitrary origin, randomness comes from a seed.
//! The caller feeds datagrams ([`Core::handle_datagram`]) and the time
//! ([`Core::tick`] at or after [`Core::next_deadline`]), and drains
//! [`Output`]s ([`Core::take_outputs`]): datagrams to send and [`Event`]s.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use foca::{Foca, Member, NoCustomBroadcast, OwnedNotification, Runtime, State, Timer};
use rand::rngs::StdRng;
use rand::seq::IteratorRandom;
use rand::{RngExt, SeedableRng};
use sha2::Digest;
use tracing::{debug, info, warn};

use crate::identity::NodeId;
use crate::wire::{
    Control, FrameError, Framer, Kind, MAX_BODY, Opened, SecretKey, Sender, Stamp, SwimCodec,
    SyncPart,
};

const NS_PER_MS: u64 = 1_000_000;

/// Settings of one member.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's name (the Kubernetes node name).
    pub name: String,
    /// The address other members reach this node at (`--ml-bindaddr`,
    /// `--ml-bindport`).
    pub addr: SocketAddr,
    /// This process's identity generation: higher than any earlier process
    /// of the same node (the edge uses the wall clock in ms at start).
    pub generation: u64,
    /// Expected cluster size for the SWIM timers at start; they follow the
    /// number of known members afterwards.
    pub cluster_size: u32,
    /// Heartbeat: BFD transmit / receive interval, ms (100).
    pub heartbeat_interval_ms: u32,
    /// Heartbeat: BFD detection multiplier (3).
    pub heartbeat_multiplier: u32,
    /// Helpers asked to confirm a loss (3).
    pub probe_helpers: usize,
    /// Deadline of one confirmation round (100 ms).
    pub probe_timeout: Duration,
    /// Rounds after the first (1).
    pub probe_retries: u8,
    /// With no helper to ask (two members), the watcher pings the owner itself
    /// for at least this long before it declares it down (500 ms: 5 rounds of
    /// `probe_timeout`). Nobody can tell a dead owner from a lost path then, so
    /// the loss must outlast the heartbeat's detection plus this: with 200 ms a
    /// loss of 350 ms moved the addresses in 24 of 60 simulated runs and the
    /// lab's two speakers answered twice for 1 s (issue 24 item 4).
    pub direct_confirmation: Duration,
    /// While a watched owner's heartbeat stays down after a path fault, a
    /// confirmation runs again this often (1 s).
    pub reconfirm_interval: Duration,
    /// A watched owner that came back after a takeover (the same process
    /// refuting: a stall or a short cut, not a restart) is confirmed with
    /// more rounds the next time, for this long after it came back (60 s):
    /// 1, 3, then 7 more (at most [`Config::max_damping_rounds`]).
    pub damping_memory: Duration,
    /// Most extra confirmation rounds of a flapping owner (7: 700 ms).
    pub max_damping_rounds: u8,
    /// Self-fence (MetalLB has none; default off).
    pub self_fence: bool,
    /// Time after losing a watcher's heartbeat within which a majority of
    /// the members must answer a direct ping, or the node fences (50 ms:
    /// with the 300 ms detection, 350 ms after the last heartbeat, before
    /// the watcher's takeover at 500 ms).
    pub fence_window: Duration,
    /// While fenced, reachability is checked again this often (1 s), and at
    /// once when the heartbeat of a speaker watching this one comes back.
    pub fence_recheck: Duration,
    /// A fenced node that reaches a majority again still waits, this long
    /// at most (2 s), until the heartbeat of every speaker watching it is
    /// back: those took its addresses over while it was cut off, and let go
    /// of them only once they hear from it. Without the wait it answered
    /// beside them when the path to them came back later than the path to
    /// the others (the lab: up to 1 s, a neighbour entry to resolve again).
    pub fence_watcher_wait: Duration,
    /// Speakers one fence check pings at most (32): beyond, a random sample
    /// of them, and the share that answers stands for the whole.
    pub fence_sample: usize,
    /// A member seen active counts among the speakers a majority is taken
    /// of this long after it was last seen (5 min), besides the speakers
    /// discovered ([`Core::set_peers`]).
    pub fence_memory: Duration,
    /// Most heartbeat sessions kept (others' requests beyond are ignored).
    pub max_sessions: usize,
    /// `--ml-wan-config`: foca's WAN timers (memberlist's WAN defaults)
    /// instead of the LAN ones.
    pub wan: bool,
    /// Full state exchange with one random member (memberlist's push-pull,
    /// 30 s, scaled up above 32 members as memberlist does).
    pub sync_interval: Duration,
}

impl Config {
    pub fn new(name: impl Into<String>, addr: SocketAddr, generation: u64) -> Config {
        Config {
            name: name.into(),
            addr,
            generation,
            cluster_size: 3,
            heartbeat_interval_ms: 100,
            heartbeat_multiplier: 3,
            probe_helpers: 3,
            probe_timeout: Duration::from_millis(100),
            probe_retries: 1,
            direct_confirmation: Duration::from_millis(500),
            reconfirm_interval: Duration::from_secs(1),
            damping_memory: Duration::from_secs(60),
            max_damping_rounds: 7,
            self_fence: false,
            fence_window: Duration::from_millis(50),
            fence_recheck: Duration::from_secs(1),
            fence_watcher_wait: Duration::from_secs(2),
            fence_sample: 32,
            fence_memory: Duration::from_secs(300),
            max_sessions: 1024,
            sync_interval: Duration::from_secs(30),
            wan: false,
        }
    }
}

/// foca's LAN timers for `n` members (memberlist's LAN defaults: probe 1 s,
/// RTT 500 ms, 3 indirect probes, suspicion 4 x max(1, log10 n) s, gossip
/// 200 ms to 3), or its WAN ones, with packets sized for our framing and
/// memberlist's retransmissions ([`retransmit_limit`]).
pub fn swim_config(n: u32, wan: bool) -> foca::Config {
    let n = NonZeroU32::new(n.max(1)).unwrap_or(NonZeroU32::MIN);
    let mut config = if wan {
        foca::Config::new_wan(n)
    } else {
        foca::Config::new_lan(n)
    };
    config.max_transmissions = retransmit_limit(n.get(), 4);
    config.max_packet_size =
        std::num::NonZeroUsize::new(MAX_BODY).unwrap_or(config.max_packet_size);
    if !wan {
        // A healed partition merges within seconds instead of foca's 65 s
        // (each side holds the other as Down and probes no Down member; the
        // announce makes the other side renew its identity and rejoin).
        // Seen in the lab: a speaker cut from its segment for 10 s stayed a
        // second owner of its addresses after the cable came back.
        config.periodic_announce_to_down_members = Some(foca::PeriodicParams {
            frequency: ANNOUNCE_TO_DOWN,
            num_members: std::num::NonZeroUsize::MIN.saturating_add(1),
        });
    }
    config
}

/// How many times each update (a suspicion, its refutation, a member down)
/// is gossiped: memberlist's `retransmitLimit`, `mult x ceil(log10(n + 1))`
/// (4 at 2-9 members, 8 at 10-99, 16 at 1,000-9,999). foca truncates
/// `mult x log10(n + 1)` instead: 1 at two members, so a suspicion and its
/// refutation travelled once each and one lost datagram let a live member
/// be declared down; with two speakers and 5 % loss they declared each other
/// down and renewed every 10-20 s (issue 24 item 4; simulation test
/// `with_two_speakers_loss_declares_nobody_down`).
pub fn retransmit_limit(n: u32, mult: u8) -> std::num::NonZeroU8 {
    let scale = f64::from(n.saturating_add(1)).log10().ceil().max(1.0);
    let limit = (f64::from(mult) * scale).min(f64::from(u8::MAX));
    std::num::NonZeroU8::new(limit as u8).unwrap_or(std::num::NonZeroU8::MIN)
}

/// How often (LAN) two members held as Down are announced to.
pub const ANNOUNCE_TO_DOWN: Duration = Duration::from_secs(1);

/// What the caller reacts to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The live speakers (Alive or Suspect, minus owners this node
    /// declared down on the fast path), this node included.
    LiveChanged(BTreeSet<String>),
    /// A watched owner was confirmed down: its heartbeat stopped and no
    /// helper reached it. `after_ns`: from its last heartbeat to now.
    OwnerDown { node: String, after_ns: u64 },
    /// A watched owner's heartbeat stopped but a helper reached it: nothing
    /// moves.
    PathFault { node: String },
    /// The heartbeat with a watched owner is Up: its loss will be detected
    /// on the fast path.
    HeartbeatUp { node: String },
    /// An owner declared down refuted (or rejoined) and is live again.
    OwnerBack { node: String },
    /// The heartbeat of a speaker that watches this node came Up: it (again)
    /// takes this node for the owner of some addresses. After a partition or
    /// a short cut it may have answered for them meanwhile, and the clients
    /// may hold its MAC: the speaker announces its own addresses again
    /// (nothing else would make it, since in its own view it never stopped
    /// owning them).
    WatcherUp { node: String },
    /// Self-fence: stop answering (true) or resume (false).
    Fence(bool),
    /// The cluster declared this node down; it rejoined with a new
    /// generation.
    Rejoined { generation: u64 },
}

/// An output of the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Send {
        to: SocketAddr,
        kind: Kind,
        datagram: Vec<u8>,
    },
    Event(Event),
}

/// Running counts, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub sent: [u64; Kind::ALL.len()],
    pub received: [u64; Kind::ALL.len()],
    pub auth_failures: u64,
    pub malformed: u64,
    /// Datagrams refused as replays: an authenticated datagram seen
    /// before or older than the replay window, or a heartbeat whose
    /// sequence is not above the last one.
    pub replays: u64,
    /// State syncs refused (the sender is not a member at the source
    /// address) or not answered (answered that source less than a second
    /// ago).
    pub sync_refused: u64,
    /// Fast-path messages from a name that is not a live member, pings
    /// meant for another process of this node (before a restart), and acks
    /// from another process than the one a relayed probe asked about.
    pub unknown_sender: u64,
    /// Heartbeat losses that no helper answered for, neither reached nor
    /// not: this node is taken to be the one cut off, nothing moves.
    pub unconfirmed: u64,
    pub owner_down: u64,
    pub path_faults: u64,
    pub fences: u64,
    pub send_too_large: u64,
}

/// Seeds a join contacts at most (each answers with its whole state).
pub const JOIN_FANOUT: usize = 3;

/// foca's runtime: collects what foca asks for.
#[derive(Default)]
struct Collect {
    sends: Vec<(NodeId, Vec<u8>)>,
    timers: Vec<(Duration, Timer<NodeId>)>,
    notes: Vec<OwnedNotification<NodeId>>,
}

impl Runtime<NodeId> for Collect {
    fn notify(&mut self, notification: foca::Notification<'_, NodeId>) {
        self.notes.push(notification.to_owned());
    }

    fn send_to(&mut self, to: NodeId, data: &[u8]) {
        self.sends.push((to, data.to_vec()));
    }

    fn submit_after(&mut self, event: Timer<NodeId>, after: Duration) {
        self.timers.push((after, event));
    }
}

#[derive(Debug)]
struct Heartbeat {
    peer: NodeId,
    session: bfd::Session,
    /// We watch the peer.
    watching: bool,
    /// The peer watches us (its last heartbeat said so).
    watched_by_peer: bool,
    last_rx_seq: Option<(u64, u64)>,
    last_rx_ns: Option<u64>,
}

#[derive(Debug)]
struct Confirmation {
    owner: NodeId,
    round: u8,
    /// The request ids of every round so far (a late answer still counts).
    ids: Vec<u64>,
    deadline: u64,
    last_rx_ns: Option<u64>,
    /// A helper answered that it could not reach the owner either: this
    /// node is not the one cut off.
    nacked: bool,
    /// No helper to ask (two members): the owner itself is pinged, and
    /// its silence counts.
    direct: bool,
}

#[derive(Debug)]
struct Relay {
    requester: SocketAddr,
    request_id: u64,
    target: String,
    /// The process of `target` asked about: an ack from another (a
    /// restart at the same address) is not an answer.
    target_generation: u64,
    /// When the requester is told the target did not answer (if it has not).
    nack_at: Option<u64>,
    expires: u64,
}

#[derive(Debug)]
struct FenceCheck {
    /// Ping id -> the speaker's address pinged.
    ids: BTreeMap<u64, SocketAddr>,
    /// Speakers that answered.
    acks: BTreeSet<SocketAddr>,
    deadline: u64,
    /// The speakers a majority is taken of, this node included.
    population: usize,
    /// Of the others, those pinged (all, or a sample).
    sampled: usize,
    /// The lowest address of the population: with all pinged, an exact half
    /// holding it keeps answering (the other half fences).
    lowest: SocketAddr,
    /// Fenced: the speakers watching this node that have not answered yet
    /// (pinged besides the sample; see [`Config::fence_watcher_wait`]).
    watchers: BTreeSet<SocketAddr>,
    /// Ping id -> the watcher pinged outside the sample.
    watcher_ids: BTreeMap<u64, SocketAddr>,
}

impl FenceCheck {
    /// A majority of the speakers answered (this node counts for itself).
    /// Two speakers or fewer: always (there is no majority to lose; the
    /// fence would only take the survivor of a crash dark). A sample: the
    /// share that answered against the share a majority needs.
    fn majority(&self, me: SocketAddr) -> bool {
        let d = self.population;
        if d <= 2 {
            return true;
        }
        let others = d - 1;
        // acks from others for more than half: acks + 1 > d / 2
        let needed = d / 2;
        if self.sampled < others {
            return self.acks.len() * others >= needed * self.sampled;
        }
        self.acks.len() >= needed
            || (d.is_multiple_of(2)
                && self.acks.len() + 1 == d / 2
                && (self.lowest == me || self.acks.contains(&self.lowest)))
    }
}

/// The generation of a ping that any process at the address may answer:
/// the self-fence's, which asks whether a speaker is there at all.
pub const ANY_GENERATION: u64 = 0;

/// Most pending relays (helper side) kept at once.
const MAX_RELAYS: usize = 1024;

/// The membership core of one node.
pub struct Core {
    cfg: Config,
    foca: Foca<NodeId, SwimCodec, StdRng, NoCustomBroadcast>,
    framer: Framer,
    rng: StdRng,
    /// Where the next join starts in the (sorted) seeds.
    join_cursor: Option<usize>,
    runtime: Collect,
    timers: BTreeMap<(u64, u64), Timer<NodeId>>,
    timer_seq: u64,
    swim_size: u32,
    sessions: BTreeMap<String, Heartbeat>,
    heartbeat_seq: u64,
    watched: BTreeSet<String>,
    confirmations: BTreeMap<String, Confirmation>,
    reconfirm: BTreeMap<String, u64>,
    relays: BTreeMap<u64, Relay>,
    /// Owners declared down on the fast path; live again once they are heard
    /// from (see [`FastDown`]).
    fast_down: BTreeMap<String, FastDown>,
    /// Owners that came back after a takeover: how many times lately, and
    /// when last ([`Core::damping_rounds`]).
    flaps: BTreeMap<String, (u8, u64)>,
    fence_check: Option<FenceCheck>,
    fenced: bool,
    fence_next: Option<u64>,
    /// Fenced, a majority reached again since then, but not every watcher
    /// (see [`Config::fence_watcher_wait`]).
    fence_lift_wait: Option<u64>,
    /// When the last fence check started.
    fence_started: Option<u64>,
    /// The watchers the last fence check waited for.
    fence_pending: BTreeSet<SocketAddr>,
    /// The speakers discovered ([`Core::set_peers`]).
    peers: BTreeSet<SocketAddr>,
    /// Members' addresses, and when each was last seen active (self-fence).
    seen: BTreeMap<SocketAddr, u64>,
    /// The live set as computed; with self-fence on, a shrink is published
    /// only once a majority answered or the node fenced.
    wanted_live: BTreeSet<String>,
    /// Bumped at each change of `wanted_live`.
    wanted_version: u64,
    /// `live` is `wanted_live` at this version (None: it may differ).
    live_version: Option<u64>,
    /// foca's active set (a notification) or the owners declared down
    /// changed since `wanted_live` was computed.
    members_changed: bool,
    sync_next: Option<u64>,
    /// Watched owners whose heartbeat is down behind a path fault.
    path_faulty: BTreeSet<String>,
    live: BTreeSet<String>,
    left: bool,
    outputs: Vec<Output>,
    counters: Counters,
    /// Authenticated datagrams seen lately, per sending process.
    replay: ReplayGuard,
    /// When each source address was last sent our state in answer to a
    /// sync (one answer a second per source).
    sync_answered: BTreeMap<SocketAddr, u64>,
    /// When each member held Down that was heard from was last told so
    /// (see [`Core::heard_from_down_member`]).
    rejoin_told: BTreeMap<String, u64>,
    /// When each suspected member that was heard from was last told so
    /// (see [`Core::heard_from_suspect`]).
    suspect_told: BTreeMap<String, u64>,
    /// A whole state of another member has been applied ([`Core::synced`]).
    synced: bool,
    /// Until then: the parts of whole states received, per sending process
    /// (address, generation): their count and the indexes seen.
    sync_parts: BTreeMap<(SocketAddr, u64), (u16, BTreeSet<u16>)>,
    /// Until then: the addresses of members asked for their whole state, and
    /// when.
    state_asked: BTreeMap<SocketAddr, u64>,
}

/// Senders whose parts of a whole state are tracked at once while not
/// synced (beyond, a new sender's parts wait for one of those to end).
const SYNC_SENDERS_TRACKED: usize = 8;

/// A member heard before this node is synced is asked for its whole state
/// at most this often (its answers are paced at one a second per source).
const ASK_STATE_EVERY_NS: u64 = 500_000_000;

/// A fenced node that hears from a speaker watching it checks for a
/// majority at most this often.
const FENCE_HEARD_CHECK_EVERY_NS: u64 = 250_000_000;

/// Whether `name` may be told again (not told within `every`); if so, now is
/// recorded as the last time.
fn pace(told: &mut BTreeMap<String, u64>, name: &str, now: u64, every: u64) -> bool {
    if told
        .get(name)
        .is_some_and(|at| now.saturating_sub(*at) < every)
    {
        return false;
    }
    told.retain(|_, at| now.saturating_sub(*at) < every);
    told.insert(name.to_owned(), now);
    true
}

/// A member held Down that sends to this node is told so at most this
/// often.
const TELL_DOWN_EVERY_NS: u64 = 1_000_000_000;

/// How far (ms, on the sender's clock) an authenticated datagram may be
/// older than the newest one seen from its sending process. Within the
/// window every datagram is remembered (its nonce counter) and accepted
/// once; below it, refused.
pub const REPLAY_WINDOW_MS: u64 = 5_000;
/// Datagrams remembered per sending process (beyond, the oldest are
/// forgotten and everything up to them is refused).
const REPLAY_MAX_PER_PROCESS: usize = 1024;
/// Sending processes remembered (the least recently heard is forgotten).
const REPLAY_MAX_PROCESSES: usize = 4096;
/// A source address is sent our state in answer to a sync at most this
/// often.
pub const SYNC_ANSWER_EVERY_NS: u64 = 1_000_000_000;

/// What one sending process sent lately (see [`ReplayGuard`]).
#[derive(Debug, Default)]
struct SeenFrom {
    newest_ms: u64,
    /// Nonce counters at or below this are refused (forgotten ones).
    floor_counter: Option<u64>,
    /// Nonce counter -> the sender's clock, within the window.
    seen: BTreeMap<u64, u64>,
    heard_ns: u64,
}

/// Refuses authenticated datagrams seen before. Every sealed datagram
/// carries its sender's nonce prefix (one per process), a counter unique
/// within that process and the sender's clock, all authenticated. The
/// receiver keeps, per process, the counters of the last
/// [`REPLAY_WINDOW_MS`] of the sender's clock: a datagram older than that
/// or seen before is refused. No clock synchronisation is needed (the
/// window is on the sender's own clock). A process not heard from since
/// this node started (or forgotten) has no history: its first datagram is
/// accepted, so a capture can be replayed once to a node that restarted.
#[derive(Debug, Default)]
struct ReplayGuard {
    processes: BTreeMap<[u8; 16], SeenFrom>,
}

impl ReplayGuard {
    fn accept(&mut self, stamp: Stamp, now: u64) -> bool {
        if !self.processes.contains_key(&stamp.process)
            && self.processes.len() >= REPLAY_MAX_PROCESSES
        {
            let oldest = self
                .processes
                .iter()
                .min_by_key(|(_, seen)| seen.heard_ns)
                .map(|(process, _)| *process);
            if let Some(oldest) = oldest {
                self.processes.remove(&oldest);
            }
        }
        let seen = self.processes.entry(stamp.process).or_default();
        let too_old = stamp.sent_ms < seen.newest_ms.saturating_sub(REPLAY_WINDOW_MS);
        let forgotten = seen.floor_counter.is_some_and(|c| stamp.counter <= c);
        if too_old || forgotten || seen.seen.contains_key(&stamp.counter) {
            return false;
        }
        seen.heard_ns = now;
        seen.seen.insert(stamp.counter, stamp.sent_ms);
        seen.newest_ms = seen.newest_ms.max(stamp.sent_ms);
        // counters grow with the sender's clock: the oldest come first
        let cutoff = seen.newest_ms.saturating_sub(REPLAY_WINDOW_MS);
        while seen
            .seen
            .first_key_value()
            .is_some_and(|(_, sent)| *sent < cutoff)
        {
            seen.seen.pop_first();
        }
        while seen.seen.len() > REPLAY_MAX_PER_PROCESS {
            if let Some((counter, _)) = seen.seen.pop_first() {
                seen.floor_counter = Some(counter);
            }
        }
        true
    }
}

/// An owner this node declared down on the fast path.
#[derive(Clone, Debug)]
struct FastDown {
    /// The identity it had.
    id: NodeId,
    /// The foca incarnation it was suspected at.
    incarnation: u16,
    /// An authenticated datagram came from its address since.
    heard: bool,
    /// Times foca showed a newer incarnation that was not followed by any
    /// word from the owner, and the suspicion was raised again at it.
    resuspects: u8,
    /// When this node last sent the owner its full state (which holds the
    /// owner's suspicion), on hearing from it.
    told_ns: Option<u64>,
}

/// How often an owner declared down that this node hears from is sent this
/// node's full state (its suspicion among it) so that it refutes at once.
/// Without it the owner learns it is suspected only if the suspicion's
/// gossip is still running (it is not after a cut of a second or more: foca
/// spends its transmissions while the cable is cut) or at the next full
/// sync (30 s): the lab saw a 27 s failback after a 2 s cut.
const TELL_SUSPECT_EVERY_NS: u64 = 1_000_000_000;

/// A newer incarnation of an owner declared down, learnt only through
/// other members' gossip, is taken as stale news (the suspicion is raised
/// again at it) this many times; after that it counts as a refutation.
/// Seen in the lab: another member's gossip carried the owner's earlier
/// refutation (incarnation 1) 230 ms after a suspicion at incarnation 0,
/// while the owner's link was cut.
const MAX_RESUSPECTS: u8 = 3;

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("identity", self.foca.identity())
            .field("live", &self.live)
            .field("watched", &self.watched)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// A member that knows nobody yet; [`Core::join`] contacts seeds.
    pub fn new(cfg: Config, key: Option<SecretKey>, seed: u64) -> Core {
        let identity = NodeId::new(cfg.name.clone(), cfg.addr, cfg.generation);
        let mut rng = StdRng::seed_from_u64(seed);
        let foca_rng = StdRng::seed_from_u64(rng.random());
        // unique per identity even if two processes drew the same seed
        let mut hash = sha2::Sha256::new();
        hash.update(rng.random::<[u8; 16]>());
        hash.update(cfg.name.as_bytes());
        hash.update(cfg.generation.to_be_bytes());
        let digest: [u8; 32] = hash.finalize().into();
        let mut nonce_prefix = [0u8; 16];
        nonce_prefix.copy_from_slice(&digest[..16]);
        let swim_size = cfg.cluster_size.max(1);
        let foca = Foca::new(
            identity,
            swim_config(swim_size, cfg.wan),
            foca_rng,
            SwimCodec::new(cfg.name.clone()),
        );
        let live = BTreeSet::from([cfg.name.clone()]);
        Core {
            cfg,
            foca,
            framer: Framer::new(key, nonce_prefix),
            rng,
            join_cursor: None,
            runtime: Collect::default(),
            timers: BTreeMap::new(),
            timer_seq: 0,
            swim_size,
            sessions: BTreeMap::new(),
            heartbeat_seq: 0,
            watched: BTreeSet::new(),
            confirmations: BTreeMap::new(),
            reconfirm: BTreeMap::new(),
            relays: BTreeMap::new(),
            fast_down: BTreeMap::new(),
            flaps: BTreeMap::new(),
            fence_check: None,
            fenced: false,
            fence_next: None,
            fence_lift_wait: None,
            fence_started: None,
            fence_pending: BTreeSet::new(),
            peers: BTreeSet::new(),
            seen: BTreeMap::new(),
            wanted_live: live.clone(),
            wanted_version: 0,
            live_version: Some(0),
            members_changed: true,
            sync_next: None,
            path_faulty: BTreeSet::new(),
            live,
            left: false,
            outputs: Vec::new(),
            replay: ReplayGuard::default(),
            sync_answered: BTreeMap::new(),
            rejoin_told: BTreeMap::new(),
            suspect_told: BTreeMap::new(),
            synced: false,
            sync_parts: BTreeMap::new(),
            state_asked: BTreeMap::new(),
            counters: Counters::default(),
        }
    }

    // ---- accessors ----

    pub fn identity(&self) -> &NodeId {
        self.foca.identity()
    }

    pub fn live(&self) -> &BTreeSet<String> {
        &self.live
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// Whether this node has applied the whole state of another member (every
    /// datagram of it): its view is then as complete as that member's. A
    /// member heard before that (one that pulled this node back in, a seed
    /// answering its join) is asked for its whole state. The speaker decides
    /// layer 2 only once synced (or alone, or after its join wait): a view of
    /// only the first member heard made a restarted speaker claim, for ~25 ms,
    /// the addresses of a member it had not heard of yet (issue 24 item 1).
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Every member foca knows, with its state (Down ones included).
    pub fn members(&self) -> Vec<(NodeId, State, u16)> {
        self.foca
            .iter_membership_state()
            .map(|m| (m.id().clone(), m.state(), m.incarnation()))
            .collect()
    }

    /// How many other members are Alive, Suspect and Down.
    pub fn member_counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for member in self.foca.iter_membership_state() {
            match member.state() {
                State::Alive => counts.0 += 1,
                State::Suspect => counts.1 += 1,
                State::Down => counts.2 += 1,
            }
        }
        counts
    }

    /// How many owners this node watches.
    pub fn watched_count(&self) -> usize {
        self.watched.len()
    }

    /// The heartbeat session with `peer` is Up.
    pub fn heartbeat_up(&self, peer: &str) -> bool {
        self.sessions
            .get(peer)
            .is_some_and(|hb| hb.session.state() == bfd::State::Up)
    }

    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outputs)
    }

    /// The earliest time [`Core::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let foca = self.timers.keys().next().map(|(at, _)| *at);
        let sessions = self
            .sessions
            .values()
            .filter_map(|hb| hb.session.next_deadline().map(|(_, at)| at))
            .min();
        let confirm = self.confirmations.values().map(|c| c.deadline).min();
        let reconfirm = self.reconfirm.values().copied().min();
        let relays = self
            .relays
            .values()
            .map(|r| r.nack_at.unwrap_or(r.expires))
            .min();
        let fence = self.fence_check.as_ref().map(|f| f.deadline);
        [
            foca,
            sessions,
            confirm,
            reconfirm,
            relays,
            fence,
            self.fence_next,
            self.sync_next,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ---- inputs ----

    /// The speakers discovered (their Pod IPs at the membership port): with
    /// the members seen lately, the speakers a self-fence majority is taken
    /// of. Unlike the members still active, it does not shrink as the other
    /// side of a partition goes Down.
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = SocketAddr>) {
        self.peers = peers.into_iter().filter(|a| *a != self.cfg.addr).collect();
    }

    /// Announces this node to seed addresses (speaker Pod IPs), at most
    /// [`JOIN_FANOUT`] of them picked at random, and asks those for their
    /// whole state; their names are learned from the answers, everybody
    /// else from that state and foca's gossip. Asking every seed made a
    /// joining node pull the whole cluster's state from each member: about
    /// a million datagrams into one node at 5,000 members (issue 25 item
    /// 5). Called again (the edge's rejoin tick), it picks others.
    pub fn join(&mut self, seeds: &[SocketAddr], now: u64) {
        self.clock(now);
        let seeds: Vec<SocketAddr> = seeds
            .iter()
            .filter(|seed| **seed != self.cfg.addr)
            .copied()
            .collect::<BTreeSet<SocketAddr>>()
            .into_iter()
            .collect();
        // the next few in turn from a random start: every seed is asked
        // within len / JOIN_FANOUT calls, and joiners spread their asks
        let start = *self.join_cursor.get_or_insert_with(|| {
            // from the name, not the rng: the start differs per node, and
            // the rest of the protocol's random draws stay as they were
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            self.cfg.name.hash(&mut h);
            h.finish() as usize
        });
        let picked: Vec<SocketAddr> = (0..JOIN_FANOUT.min(seeds.len()))
            .map(|k| seeds[start.wrapping_add(k) % seeds.len()])
            .collect();
        self.join_cursor = Some(start.wrapping_add(picked.len()));
        for seed in &picked {
            let result = self.foca.announce(NodeId::seed(*seed), &mut self.runtime);
            self.after_foca(result, now);
            // and ask for the seed's whole state
            self.send_state(*seed, true);
        }
        if self.sync_next.is_none() {
            self.sync_next = Some(now.saturating_add(self.sync_interval_ns()));
        }
    }

    /// An authenticated datagram came from the address of a member this
    /// node holds Down (and of no live member): a partition longer than the
    /// suspicion has healed, and the sender most likely holds this node
    /// Down too. Each side tells the other at once, in a sync of two
    /// records: itself (Alive) and the other as it holds it (Down). The
    /// other, told it is Down, renews its identity (foca's rejoin) and tells
    /// back with its new identity, which the first takes in; being told it
    /// is Down in turn, the first renews too, and its new identity goes out
    /// in foca's gossip. Without it, the two sides met again only through
    /// foca's announces to Down members, each renewing one side: 10-15 s
    /// after the heal in the simulation, 17-20 s in the lab. Only the two
    /// records travel: this node's view of the others may be the stale one
    /// (it may be the node that was cut off), and it must not spread it.
    fn heard_from_down_member(&mut self, from: SocketAddr, now: u64) {
        let mut down: Option<Member<NodeId>> = None;
        for member in self.foca.iter_membership_state() {
            if member.id().addr != from {
                continue;
            }
            if member.state() != State::Down {
                // a live identity at that address (a restart, a renewal)
                return;
            }
            if down
                .as_ref()
                .is_none_or(|d| d.id().generation < member.id().generation)
            {
                down = Some(member.clone());
            }
        }
        let Some(down) = down else {
            return;
        };
        let name = down.id().name.to_string();
        // this node's own identity before a renewal (foca keeps it Down)
        if name == self.cfg.name || self.member(&name).is_some() {
            return;
        }
        if !pace(&mut self.rejoin_told, &name, now, TELL_DOWN_EVERY_NS) {
            return;
        }
        info!(node = %name, "heard from a member held down: telling it, so that both rejoin");
        self.tell_record(from, down);
    }

    /// Tells the member at `to` how this node holds it (`record`), in a sync of
    /// two records: this node (Alive) and it.
    fn tell_record(&mut self, to: SocketAddr, record: Member<NodeId>) {
        let own = Member::new(self.foca.identity().clone(), 0, State::Alive);
        let control = Control::Sync {
            from: self.sender(),
            reply: false,
            part: None,
            members: vec![own, record],
        };
        self.send_control(to, &control);
    }

    /// The clock sealed into the datagrams sent from now on.
    fn clock(&mut self, now: u64) {
        self.framer.set_clock(now / NS_PER_MS);
    }

    /// memberlist's push-pull interval, scaled above 32 members.
    fn sync_interval_ns(&self) -> u64 {
        let n = self.foca.num_members() + 1;
        let scale = if n <= 32 {
            1
        } else {
            ((n as f64).log2() - 32f64.log2()).ceil() as u64 + 1
        };
        u64::try_from(self.cfg.sync_interval.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_mul(scale)
    }

    /// Sends our whole membership state in as many datagrams as it takes,
    /// each starting with our own record (the receiver checks the source
    /// address against it) and numbered (part k of n: the receiver knows
    /// when it has the whole); only the first asks for a reply (one full
    /// state back, not one per datagram).
    fn send_state(&mut self, to: SocketAddr, reply: bool) {
        let own = Member::new(self.foca.identity().clone(), 0, State::Alive);
        let others: Vec<Member<NodeId>> = self.foca.iter_membership_state().cloned().collect();
        let from = self.sender();
        let budget = MAX_BODY - crate::wire::SYNC_OVERHEAD;
        let own_len = crate::wire::member_len(&own);
        let mut chunks = vec![vec![own.clone()]];
        let mut used = own_len;
        for member in others {
            let len = crate::wire::member_len(&member);
            if used + len > budget && chunks.last().is_some_and(|c| c.len() > 1) {
                chunks.push(vec![own.clone()]);
                used = own_len;
            }
            used += len;
            if let Some(chunk) = chunks.last_mut() {
                chunk.push(member);
            }
        }
        let Ok(count) = u16::try_from(chunks.len()) else {
            self.counters.send_too_large += 1;
            return;
        };
        for (index, members) in (0..count).zip(chunks) {
            self.send_control(
                to,
                &Control::Sync {
                    from: from.clone(),
                    reply: reply && index == 0,
                    part: Some(SyncPart { index, count }),
                    members,
                },
            );
        }
    }

    /// Before this node is synced: a member heard at `from` is asked for its
    /// whole state (paced per address). Runs after every datagram until then:
    /// the pace is checked before the member list is searched, so the datagrams
    /// of a member asked a moment ago cost a map lookup.
    fn ask_state_if_unsynced(&mut self, from: SocketAddr, now: u64) {
        if self.synced || self.left {
            return;
        }
        if self
            .state_asked
            .get(&from)
            .is_some_and(|at| now.saturating_sub(*at) < ASK_STATE_EVERY_NS)
        {
            return;
        }
        let Some(name) = self
            .foca
            .iter_members()
            .find(|m| m.id().addr == from && m.state() != State::Down)
            .map(|m| m.id().name.to_string())
        else {
            return;
        };
        self.state_asked
            .retain(|_, at| now.saturating_sub(*at) < ASK_STATE_EVERY_NS);
        self.state_asked.insert(from, now);
        debug!(node = %name, "heard a member before holding a whole state: asking it for its state");
        self.send_state(from, true);
    }

    /// A part of a whole state was applied: synced once every part of one
    /// sender's whole state was.
    fn note_sync_part(&mut self, from_addr: SocketAddr, generation: u64, part: SyncPart) {
        if self.synced {
            return;
        }
        let key = (from_addr, generation);
        if !self.sync_parts.contains_key(&key) && self.sync_parts.len() >= SYNC_SENDERS_TRACKED {
            return;
        }
        let entry = self
            .sync_parts
            .entry(key)
            .or_insert_with(|| (part.count, BTreeSet::new()));
        if entry.0 != part.count {
            // a later state of another size: start over with it
            *entry = (part.count, BTreeSet::new());
        }
        entry.1.insert(part.index);
        if entry.1.len() == usize::from(entry.0) {
            self.synced = true;
            self.sync_parts.clear();
            self.state_asked.clear();
            info!(from = %from_addr, parts = part.count, members = self.live.len(), "membership: a whole state applied");
        }
    }

    /// The owners this node must watch (it is their next candidate).
    pub fn watch_owners(&mut self, owners: BTreeSet<String>, now: u64) {
        self.clock(now);
        let mut owners = owners;
        owners.remove(&self.cfg.name);
        self.watched = owners;
        self.reconcile_sessions(now);
    }

    /// Leaves the cluster: tells every member at once, declares itself down
    /// through foca's gossip and stops the heartbeats.
    pub fn leave(&mut self, now: u64) {
        if self.left {
            return;
        }
        self.clock(now);
        let from = self.sender();
        let members: Vec<SocketAddr> = self.foca.iter_members().map(|m| m.id().addr).collect();
        for addr in members {
            self.send_control(addr, &Control::Leave { from: from.clone() });
        }
        let result = self.foca.leave_cluster(&mut self.runtime);
        self.after_foca(result, now);
        let names: Vec<String> = self.sessions.keys().cloned().collect();
        for name in names {
            self.drop_session(&name, true, now);
        }
        self.watched.clear();
        self.confirmations.clear();
        self.reconfirm.clear();
        self.left = true;
    }

    /// A datagram from `from`.
    pub fn handle_datagram(&mut self, from: SocketAddr, datagram: &[u8], now: u64) {
        if self.left || from == self.cfg.addr {
            return;
        }
        self.clock(now);
        let (kind, body) = match self.framer.open(datagram) {
            Ok(Opened { stamp, .. }) if stamp.is_some_and(|s| !self.replay.accept(s, now)) => {
                self.counters.replays += 1;
                debug!(%from, "membership datagram refused: a replay");
                return;
            }
            Ok(Opened { kind, body, .. }) => (kind, body),
            Err(FrameError::Authentication) => {
                self.counters.auth_failures += 1;
                debug!(%from, "membership datagram failed authentication");
                return;
            }
            Err(error) => {
                self.counters.malformed += 1;
                debug!(%from, %error, "membership datagram refused");
                return;
            }
        };
        self.counters.received[kind.index()] += 1;
        let mut tell = false;
        for down in self.fast_down.values_mut() {
            if down.id.addr == from {
                down.heard = true;
                if down
                    .told_ns
                    .is_none_or(|at| now.saturating_sub(at) >= TELL_SUSPECT_EVERY_NS)
                {
                    down.told_ns = Some(now);
                    tell = true;
                }
            }
        }
        if tell {
            debug!(%from, "an owner declared down is heard: telling it it is suspected");
            self.send_state(from, false);
        }
        // fenced, and a speaker watching this node is heard: the path may be
        // back, ask now rather than at the next re-check
        // (a watcher the last check waited for: as soon as the check before
        // is over)
        if self.fenced && self.fence_check.is_none() {
            let every = if self.fence_pending.contains(&from) {
                0
            } else {
                FENCE_HEARD_CHECK_EVERY_NS
            };
            if self
                .fence_started
                .is_none_or(|at| now.saturating_sub(at) >= every)
                && self
                    .sessions
                    .values()
                    .any(|hb| hb.watched_by_peer && hb.peer.addr == from)
            {
                self.fence_start(now);
            }
        }
        if kind == Kind::Swim {
            let result = self.foca.handle_data(&body, &mut self.runtime);
            if let Err(error) = &result {
                if matches!(error, foca::Error::Decode(_) | foca::Error::MalformedPacket) {
                    self.counters.malformed += 1;
                }
                debug!(%from, %error, "SWIM datagram not handled");
            }
            self.after_foca(Ok(()), now);
        } else {
            match Control::decode(kind, &body) {
                Ok(control) => self.on_control(from, control, now),
                Err(error) => {
                    self.counters.malformed += 1;
                    debug!(%from, %error, "membership message refused");
                    return;
                }
            }
        }
        // after the datagram is handled: it may have renewed this node's
        // identity or brought the sender's new one
        self.heard_from_down_member(from, now);
        self.heard_from_suspect(from, now);
        self.ask_state_if_unsynced(from, now);
    }

    /// An authenticated datagram came from a member this node suspects: it
    /// is told at once, in a sync of two records (this node, and it as
    /// Suspect), so that it refutes. After a cut shorter than the
    /// suspicion, the suspicions raised during it were gossiped only into
    /// the cut (a few transmissions each): nothing told the suspects after
    /// the heal, and the timers declared them down, each renewing its
    /// identity and its addresses moving (5.9 s after a 2.5 s cut in the
    /// simulation and the lab).
    fn heard_from_suspect(&mut self, from: SocketAddr, now: u64) {
        let Some(suspect) = self
            .foca
            .iter_members()
            .find(|m| m.id().addr == from && m.state() == State::Suspect)
            .cloned()
        else {
            return;
        };
        let name = suspect.id().name.to_string();
        if self.fast_down.contains_key(&name) {
            // told with the whole state on hearing it (see handle_datagram)
            return;
        }
        if !pace(&mut self.suspect_told, &name, now, TELL_SUSPECT_EVERY_NS) {
            return;
        }
        debug!(node = %name, "heard from a suspected member: telling it, so that it refutes");
        self.tell_record(from, suspect);
    }

    /// Runs everything due at `now`.
    pub fn tick(&mut self, now: u64) {
        self.clock(now);
        // foca timers
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let timer = entry.remove();
            if self.left || self.stale_suspicion(&timer) {
                continue;
            }
            let result = self.foca.handle_timer(timer, &mut self.runtime);
            self.after_foca(result, now);
        }
        // heartbeat sessions
        let names: Vec<String> = self.sessions.keys().cloned().collect();
        for name in names {
            while let Some(hb) = self.sessions.get_mut(&name) {
                let Some((timer, at)) = hb.session.next_deadline() else {
                    break;
                };
                if at > now {
                    break;
                }
                let actions = hb.session.handle(bfd::Event::TimerExpired(timer), now);
                self.session_actions(&name, actions, now);
            }
        }
        // confirmations
        let due: Vec<String> = self
            .confirmations
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            self.confirmation_expired(&name, now);
        }
        let due: Vec<String> = self
            .reconfirm
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            self.reconfirm.remove(&name);
            let still_down = self
                .sessions
                .get(&name)
                .is_some_and(|hb| hb.watching && hb.session.state() != bfd::State::Up);
            if still_down && !self.fast_down.contains_key(&name) {
                let last = self.sessions.get(&name).and_then(|hb| hb.last_rx_ns);
                self.start_confirmation(&name, last, now);
            }
        }
        let nacks: Vec<(SocketAddr, u64, String)> = self
            .relays
            .values_mut()
            .filter(|relay| relay.nack_at.is_some_and(|at| at <= now))
            .map(|relay| {
                relay.nack_at = None;
                (relay.requester, relay.request_id, relay.target.clone())
            })
            .collect();
        for (requester, id, target) in nacks {
            let nack = Control::ProbeNack {
                from: self.sender(),
                id,
                target,
            };
            self.send_control(requester, &nack);
        }
        self.relays.retain(|_, relay| relay.expires > now);
        if self.fence_check.as_ref().is_some_and(|f| f.deadline <= now) {
            self.fence_decide(now);
        }
        if self.fence_next.is_some_and(|at| at <= now) {
            self.fence_next = None;
            self.fence_start(now);
        }
        if self.sync_next.is_some_and(|at| at <= now) && !self.left {
            let peer = self
                .foca
                .iter_members()
                .map(|m| m.id().addr)
                .choose(&mut self.rng);
            if let Some(peer) = peer {
                self.send_state(peer, true);
            }
            self.sync_next = Some(now.saturating_add(self.sync_interval_ns()));
        }
    }

    // ---- foca plumbing ----

    fn after_foca(&mut self, result: Result<(), foca::Error>, now: u64) {
        if let Err(error) = result {
            debug!(%error, "foca");
        }
        let runtime = std::mem::take(&mut self.runtime);
        for (to, data) in runtime.sends {
            match self.framer.seal(Kind::Swim, &data) {
                Some(datagram) => self.push_send(to.addr, Kind::Swim, datagram),
                None => self.counters.send_too_large += 1,
            }
        }
        for (after, timer) in runtime.timers {
            let at = now.saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX));
            self.timer_seq += 1;
            self.timers.insert((at, self.timer_seq), timer);
        }
        for note in runtime.notes {
            if !matches!(note, OwnedNotification::Active | OwnedNotification::Idle) {
                self.members_changed = true;
            }
            match note {
                OwnedNotification::MemberUp(id) => debug!(member = %id, "member up"),
                OwnedNotification::MemberDown(id) => info!(member = %id, "member down"),
                OwnedNotification::Rename(old, new) => {
                    debug!(%old, %new, "member renewed its identity")
                }
                OwnedNotification::Rejoin(id) => {
                    warn!(identity = %id, "declared down by the cluster; rejoined");
                    // members held Down are told again, with the new identity
                    self.rejoin_told.clear();
                    self.outputs.push(Output::Event(Event::Rejoined {
                        generation: id.generation,
                    }));
                }
                OwnedNotification::Defunct => warn!("membership identity defunct"),
                OwnedNotification::Active | OwnedNotification::Idle => {}
            }
        }
        self.resize_swim();
        self.refresh_live(now);
        self.reconcile_sessions(now);
    }

    /// Follows the cluster size with foca's size-dependent timers.
    fn resize_swim(&mut self) {
        let n = u32::try_from(self.foca.num_members() + 1).unwrap_or(u32::MAX);
        let n = n.max(self.cfg.cluster_size);
        let band = |n: u32| (f64::from(n).log10() * 4.0) as u32;
        if band(n) != band(self.swim_size) {
            self.swim_size = n;
            if self.foca.set_config(swim_config(n, self.cfg.wan)).is_err() {
                warn!("foca refused the resized configuration");
            }
        }
    }

    fn refresh_live(&mut self, now: u64) {
        // only owners declared down need foca's incarnations
        let state: BTreeMap<String, (NodeId, State, u16)> = if self.fast_down.is_empty() {
            BTreeMap::new()
        } else {
            self.foca
                .iter_membership_state()
                .filter(|m| self.fast_down.contains_key(&*m.id().name))
                .map(|m| {
                    (
                        m.id().name.to_string(),
                        (m.id().clone(), m.state(), m.incarnation()),
                    )
                })
                .collect()
        };
        let mut back = Vec::new();
        let mut resuspect = Vec::new();
        let tracked = self.fast_down.len();
        self.fast_down.retain(|name, down| {
            match state.get(name) {
                // a new identity: the owner restarted (not a flap: a crash
                // loop is paced by the kubelet's restart backoff)
                Some((current, State::Alive | State::Suspect, _)) if *current != down.id => {
                    back.push((name.clone(), false));
                    false
                }
                // the same process refuted: it was alive all along (a stall,
                // a short cut): a flap
                Some((current, State::Alive | State::Suspect, inc)) if *inc > down.incarnation => {
                    if down.heard || down.resuspects >= MAX_RESUSPECTS {
                        back.push((name.clone(), true));
                        return false;
                    }
                    // only others' word for it: suspect it again at the newer one
                    down.resuspects += 1;
                    down.incarnation = *inc;
                    resuspect.push(Member::new(current.clone(), *inc, State::Suspect));
                    true
                }
                Some((_, State::Alive | State::Suspect, _)) => true,
                // foca agrees (Down) or forgot it: nothing left to track
                _ => false,
            }
        });
        if self.fast_down.len() != tracked {
            self.members_changed = true;
        }
        if !resuspect.is_empty() {
            for m in &resuspect {
                info!(
                    node = %m.id().name,
                    incarnation = m.incarnation(),
                    "a newer incarnation of an owner declared down came only through gossip: suspected again"
                );
            }
            let result = self
                .foca
                .apply_many(resuspect.into_iter(), true, &mut self.runtime)
                .and_then(|()| self.foca.gossip(&mut self.runtime));
            // sends the suspicion and recomputes (no second round: the
            // incarnations are now the ones foca holds)
            self.after_foca(result, now);
            return;
        }
        let memory = u64::try_from(self.cfg.damping_memory.as_nanos()).unwrap_or(u64::MAX);
        self.flaps
            .retain(|_, (_, at)| now.saturating_sub(*at) <= memory);
        for (node, flap) in back {
            if flap {
                let flaps = self.flaps.entry(node.clone()).or_insert((0, now));
                *flaps = (flaps.0.saturating_add(1), now);
                info!(%node, flaps = flaps.0, "owner declared down refuted: live again");
            } else {
                info!(%node, "owner declared down restarted: live again");
            }
            self.outputs.push(Output::Event(Event::OwnerBack { node }));
        }
        // This runs after every datagram and timer foca handled: the set
        // (a string per member) is rebuilt only when foca's active set or
        // the owners declared down may have changed.
        if self.members_changed {
            self.members_changed = false;
            let mut live: BTreeSet<String> = self
                .foca
                .iter_members()
                .map(|m| m.id().name.to_string())
                .filter(|name| !self.fast_down.contains_key(name))
                .collect();
            live.insert(self.cfg.name.clone());
            if live != self.wanted_live {
                self.wanted_live = live;
                self.wanted_version += 1;
            }
        }
        if !self.cfg.self_fence {
            self.publish_live();
            return;
        }
        self.note_seen(now);
        let shrinks = self.live_version != Some(self.wanted_version)
            && self
                .live
                .iter()
                .any(|name| !self.wanted_live.contains(name));
        if self.fenced || self.left || !shrinks {
            self.publish_live();
            return;
        }
        // A member gone from the live set may give this node addresses: it
        // wins them only once a majority of the speakers answers (else it
        // fences first). Members that came are published at once.
        let grown: BTreeSet<String> = self.live.union(&self.wanted_live).cloned().collect();
        if grown != self.live {
            self.live = grown;
            self.live_version = None;
            self.outputs
                .push(Output::Event(Event::LiveChanged(self.live.clone())));
        }
        if self.fence_check.is_none() {
            self.fence_start(now);
        }
    }

    fn member(&self, name: &str) -> Option<Member<NodeId>> {
        self.foca
            .iter_members()
            .find(|m| &*m.id().name == name)
            .cloned()
    }

    // ---- heartbeat sessions ----

    fn heartbeat_params(&self) -> bfd::Parameters {
        bfd::Parameters {
            receive_interval_ms: self.cfg.heartbeat_interval_ms,
            transmit_interval_ms: self.cfg.heartbeat_interval_ms,
            detect_multiplier: self.cfg.heartbeat_multiplier,
            minimum_ttl: 1,
            ..bfd::Parameters::default()
        }
    }

    fn new_session(&mut self, peer: NodeId, watching: bool, now: u64) {
        if self.sessions.len() >= self.cfg.max_sessions {
            return;
        }
        let key = bfd::SessionKey::multi_hop(self.cfg.addr.ip(), peer.addr.ip());
        let discr = self.rng.random::<u32>().max(1);
        let mut session = bfd::Session::new(key, discr, self.heartbeat_params(), self.rng.random());
        let actions = session.start(now);
        let name = peer.name.to_string();
        self.sessions.insert(
            name.clone(),
            Heartbeat {
                peer,
                session,
                watching,
                watched_by_peer: false,
                last_rx_seq: None,
                last_rx_ns: None,
            },
        );
        self.session_actions(&name, actions, now);
    }

    /// Ends a session; `notify`: the peer gets an AdminDown (not after a
    /// detection timeout, when the peer may be alive behind a fault that
    /// is about to heal: its session must not go down without a failure).
    fn drop_session(&mut self, name: &str, notify: bool, now: u64) {
        if let Some(mut hb) = self.sessions.remove(name) {
            let actions = hb.session.shutdown(now);
            let peer = hb.peer.addr;
            for action in actions {
                if let bfd::Action::SendControl(packet) = action
                    && notify
                {
                    self.send_heartbeat(peer, hb.watching, packet);
                }
            }
        }
        self.confirmations.remove(name);
        self.reconfirm.remove(name);
        self.path_faulty.remove(name);
    }

    /// Sessions follow the watched set and the membership: one per watched
    /// live owner, the peer's identity kept current.
    fn reconcile_sessions(&mut self, now: u64) {
        if self.left {
            return;
        }
        let names: Vec<String> = self.sessions.keys().cloned().collect();
        for name in names {
            let member = self.member(&name);
            let Some(hb) = self.sessions.get_mut(&name) else {
                continue;
            };
            hb.watching = self.watched.contains(&name);
            let stale = match &member {
                None => true,
                Some(m) => m.id() != &hb.peer,
            };
            if stale || (!hb.watching && !hb.watched_by_peer) {
                self.drop_session(&name, true, now);
            }
        }
        let watched: Vec<String> = self.watched.iter().cloned().collect();
        for name in watched {
            if self.sessions.contains_key(&name) {
                continue;
            }
            if let Some(member) = self.member(&name) {
                self.new_session(member.id().clone(), true, now);
            }
        }
    }

    fn session_actions(&mut self, name: &str, actions: Vec<bfd::Action>, now: u64) {
        for action in actions {
            match action {
                bfd::Action::SendControl(packet) => {
                    if let Some(hb) = self.sessions.get(name) {
                        let (addr, watching) = (hb.peer.addr, hb.watching);
                        self.send_heartbeat(addr, watching, packet);
                    }
                }
                bfd::Action::StateChanged(change) => self.session_changed(name, change, now),
                bfd::Action::SendEcho(_)
                | bfd::Action::ArmTimer { .. }
                | bfd::Action::CancelTimer(_) => {}
            }
        }
    }

    fn session_changed(&mut self, name: &str, change: bfd::StateChange, now: u64) {
        let Some(hb) = self.sessions.get(name) else {
            return;
        };
        let (watching, watched_by_peer, last_rx) = (hb.watching, hb.watched_by_peer, hb.last_rx_ns);
        debug!(peer = name, from = %change.from, to = %change.to, "heartbeat");
        match change.client_action() {
            bfd::ClientAction::Down => {}
            bfd::ClientAction::Up => {
                self.path_faulty.remove(name);
                // a watcher is back: a fenced node asks at once whether it
                // may answer again (rather than at its next re-check)
                if watched_by_peer && self.fenced && self.fence_check.is_none() {
                    self.fence_start(now);
                }
                if watching {
                    self.outputs.push(Output::Event(Event::HeartbeatUp {
                        node: name.to_string(),
                    }));
                }
                if watched_by_peer {
                    self.outputs.push(Output::Event(Event::WatcherUp {
                        node: name.to_string(),
                    }));
                }
                return;
            }
            bfd::ClientAction::None => return,
        }
        if watching && !self.fast_down.contains_key(name) {
            self.start_confirmation(name, last_rx, now);
        }
        if watched_by_peer && self.cfg.self_fence && !self.fenced && self.fence_check.is_none() {
            self.fence_start(now);
        }
        if !watching && !self.cfg.self_fence {
            // the peer that watched us is gone: nothing to keep
            self.drop_session(name, false, now);
        }
    }

    fn send_heartbeat(&mut self, to: SocketAddr, watching: bool, packet: bfd::ControlPacket) {
        self.heartbeat_seq += 1;
        let control = Control::Heartbeat {
            from: self.sender(),
            seq: self.heartbeat_seq,
            watching,
            packet,
        };
        self.send_control(to, &control);
    }

    fn on_heartbeat(
        &mut self,
        from: Sender,
        seq: u64,
        watching: bool,
        packet: bfd::ControlPacket,
        now: u64,
    ) {
        let Some(member) = self.member(&from.name) else {
            self.counters.unknown_sender += 1;
            return;
        };
        if member.id().generation != from.generation {
            self.counters.unknown_sender += 1;
            return;
        }
        match self.sessions.get(&from.name) {
            Some(hb) if hb.peer == *member.id() => {}
            Some(_) => {
                self.drop_session(&from.name, true, now);
                self.new_session(member.id().clone(), self.watched.contains(&from.name), now);
            }
            None => {
                if packet.state == bfd::State::AdminDown {
                    return;
                }
                self.new_session(member.id().clone(), self.watched.contains(&from.name), now);
            }
        }
        let Some(hb) = self.sessions.get_mut(&from.name) else {
            return;
        };
        if let Some((generation, last)) = hb.last_rx_seq
            && generation == from.generation
            && seq <= last
        {
            self.counters.replays += 1;
            return;
        }
        hb.last_rx_seq = Some((from.generation, seq));
        hb.last_rx_ns = Some(now);
        hb.watched_by_peer = watching;
        let source = hb.session.key().remote;
        let actions = hb.session.handle(
            bfd::Event::Received {
                packet,
                source,
                ttl: 255,
            },
            now,
        );
        self.session_actions(&from.name, actions, now);
        if let Some(hb) = self.sessions.get(&from.name)
            && !hb.watching
            && !hb.watched_by_peer
            && hb.session.state() != bfd::State::Up
        {
            self.drop_session(&from.name, false, now);
        }
    }

    // ---- confirmation and takeover ----

    fn start_confirmation(&mut self, owner: &str, last_rx: Option<u64>, now: u64) {
        let Some(member) = self.member(owner) else {
            return;
        };
        let confirmation = Confirmation {
            owner: member.id().clone(),
            round: 0,
            ids: Vec::new(),
            deadline: now,
            last_rx_ns: last_rx,
            nacked: false,
            direct: false,
        };
        self.confirmations.insert(owner.to_string(), confirmation);
        if !self.probe_round(owner, now) {
            self.confirmations.remove(owner);
        }
    }

    /// Sends one round of probe requests to helpers, or with no helper (two
    /// members) a ping to the owner itself; false when the owner is gone.
    fn probe_round(&mut self, owner: &str, now: u64) -> bool {
        let helpers: Vec<SocketAddr> = self
            .foca
            .iter_members()
            .filter(|m| &*m.id().name != owner && !self.fast_down.contains_key(&*m.id().name))
            .map(|m| m.id().addr)
            .sample(&mut self.rng, self.cfg.probe_helpers);
        let id: u64 = self.rng.random();
        let timeout = u64::try_from(self.cfg.probe_timeout.as_nanos()).unwrap_or(u64::MAX);
        let from = self.sender();
        let Some(confirmation) = self.confirmations.get_mut(owner) else {
            return false;
        };
        confirmation.ids.push(id);
        confirmation.round += 1;
        confirmation.deadline = now.saturating_add(timeout);
        if helpers.is_empty() {
            confirmation.direct = true;
            let (addr, generation) = (confirmation.owner.addr, confirmation.owner.generation);
            let ping = Control::Ping {
                from,
                id,
                target_generation: generation,
            };
            self.send_control(addr, &ping);
            return true;
        }
        let control = Control::ProbeRequest {
            from,
            id,
            target: owner.to_string(),
            target_addr: confirmation.owner.addr,
            target_generation: confirmation.owner.generation,
        };
        for helper in helpers {
            self.send_control(helper, &control);
        }
        true
    }

    /// Extra confirmation rounds for an owner that came back after a
    /// takeover within [`Config::damping_memory`]: 2^flaps - 1, capped.
    fn damping_rounds(&self, owner: &str, now: u64) -> u8 {
        let memory = u64::try_from(self.cfg.damping_memory.as_nanos()).unwrap_or(u64::MAX);
        match self.flaps.get(owner) {
            Some((count, at)) if now.saturating_sub(*at) <= memory => {
                let rounds = (1u32 << u32::from((*count).min(8))) - 1;
                u8::try_from(rounds)
                    .unwrap_or(u8::MAX)
                    .min(self.cfg.max_damping_rounds)
            }
            _ => 0,
        }
    }

    /// A suspicion's timer that must not run: the member refuted it (a newer
    /// incarnation), renewed its identity, or is gone. foca 2.0 does nothing
    /// else then, except that it still sends the member `TurnUndead` (its
    /// `apply_existing_if` yields a summary whether or not the condition
    /// held), and the member, told it is down, renews its identity: every
    /// refuted suspicion became a rejoin 4 s later, which moved the addresses
    /// of two speakers under 5 % loss every 10-20 s (issue 24 item 4;
    /// simulation test `with_two_speakers_loss_declares_nobody_down`).
    fn stale_suspicion(&self, timer: &foca::Timer<NodeId>) -> bool {
        let foca::Timer::ChangeSuspectToDown {
            member_id,
            incarnation,
            ..
        } = timer
        else {
            return false;
        };
        // foca's condition (the incarnation suspected), and not Alive: a
        // suspicion is refuted only by a newer incarnation
        !self.foca.iter_membership_state().any(|m| {
            m.id() == member_id && m.incarnation() == *incarnation && m.state() != State::Alive
        })
    }

    /// Rounds after the first that span [`Config::direct_confirmation`].
    fn direct_rounds(&self) -> u8 {
        let round = self.cfg.probe_timeout.as_nanos().max(1);
        let total = self.cfg.direct_confirmation.as_nanos().div_ceil(round);
        u8::try_from(total.saturating_sub(1)).unwrap_or(u8::MAX)
    }

    fn confirmation_expired(&mut self, owner: &str, now: u64) {
        let Some(confirmation) = self.confirmations.get(owner) else {
            return;
        };
        let (round, nacked, direct) =
            (confirmation.round, confirmation.nacked, confirmation.direct);
        let mut rounds = self
            .cfg
            .probe_retries
            .saturating_add(self.damping_rounds(owner, now));
        if direct {
            rounds = rounds.max(self.direct_rounds());
        }
        if round <= rounds && self.probe_round(owner, now) {
            return;
        }
        if nacked || direct {
            self.declare_down(owner, now);
        } else {
            self.unconfirmed(owner, now);
        }
    }

    /// No helper answered at all, not even that it could not reach the
    /// owner: this node is most likely the one cut off (its own link flaps)
    /// and must not take every address it is next for. Nothing moves; the
    /// check runs again after `reconfirm_interval` while the heartbeat
    /// stays down. (With no helper at all, two members, the owner itself is
    /// pinged for [`Config::direct_confirmation`] and a loss that outlasts
    /// it is taken as down: nobody can tell the two cases apart.)
    fn unconfirmed(&mut self, owner: &str, now: u64) {
        self.confirmations.remove(owner);
        self.counters.unconfirmed += 1;
        warn!(
            node = owner,
            "heartbeat lost and no helper answered: this node is likely cut off, nothing moves"
        );
        let again = u64::try_from(self.cfg.reconfirm_interval.as_nanos()).unwrap_or(u64::MAX);
        self.reconfirm
            .insert(owner.to_string(), now.saturating_add(again));
    }

    fn on_probe_nack(&mut self, id: u64, target: &str) {
        if let Some(confirmation) = self.confirmations.get_mut(target)
            && confirmation.ids.contains(&id)
        {
            confirmation.nacked = true;
        }
    }

    fn declare_down(&mut self, owner: &str, now: u64) {
        let Some(confirmation) = self.confirmations.remove(owner) else {
            return;
        };
        let id = confirmation.owner;
        let incarnation = self
            .foca
            .iter_membership_state()
            .find(|m| *m.id() == id)
            .map_or(0, |m| m.incarnation());
        let after_ns = confirmation
            .last_rx_ns
            .map_or(0, |at| now.saturating_sub(at));
        info!(
            node = owner,
            after_ms = after_ns / NS_PER_MS,
            "owner confirmed down"
        );
        self.counters.owner_down += 1;
        self.members_changed = true;
        self.fast_down.insert(
            owner.to_string(),
            FastDown {
                id: id.clone(),
                incarnation,
                heard: false,
                resuspects: 0,
                told_ns: None,
            },
        );
        let suspect = Member::new(id, incarnation, State::Suspect);
        let result = self
            .foca
            .apply_many(std::iter::once(suspect), true, &mut self.runtime);
        // spread the suspicion now rather than at the next gossip tick
        let result = result.and_then(|()| self.foca.gossip(&mut self.runtime));
        // the live set (without the owner) comes out before the event
        self.after_foca(result, now);
        self.outputs.push(Output::Event(Event::OwnerDown {
            node: owner.to_string(),
            after_ns,
        }));
    }

    fn on_probe_reply(&mut self, id: u64, target: &str, now: u64) {
        let Some(confirmation) = self.confirmations.get(target) else {
            return;
        };
        if !confirmation.ids.contains(&id) {
            return;
        }
        self.confirmations.remove(target);
        // reported once per loss of the heartbeat, not at every re-check
        if self.path_faulty.insert(target.to_string()) {
            self.counters.path_faults += 1;
            warn!(
                node = target,
                "heartbeat lost but a helper reached the owner: path fault, nothing moves"
            );
            self.outputs.push(Output::Event(Event::PathFault {
                node: target.to_string(),
            }));
        }
        let again = u64::try_from(self.cfg.reconfirm_interval.as_nanos()).unwrap_or(u64::MAX);
        self.reconfirm
            .insert(target.to_string(), now.saturating_add(again));
    }

    // ---- self-fence ----

    /// The speakers a majority is taken of: those discovered, the members
    /// active now and those seen within [`Config::fence_memory`], this node.
    fn fence_population(&mut self, now: u64) -> BTreeSet<SocketAddr> {
        self.note_seen(now);
        let memory = u64::try_from(self.cfg.fence_memory.as_nanos()).unwrap_or(u64::MAX);
        self.seen.retain(|_, at| now.saturating_sub(*at) <= memory);
        let mut population: BTreeSet<SocketAddr> = self.peers.clone();
        population.extend(self.seen.keys().copied());
        population.insert(self.cfg.addr);
        population
    }

    fn note_seen(&mut self, now: u64) {
        for member in self.foca.iter_members() {
            self.seen.insert(member.id().addr, now);
        }
    }

    /// Pings the other speakers (a sample of [`Config::fence_sample`] at
    /// most); decided as soon as a majority answered, else at the end of
    /// [`Config::fence_window`].
    fn fence_start(&mut self, now: u64) {
        let population = self.fence_population(now);
        let lowest = population.first().copied().unwrap_or(self.cfg.addr);
        let others: Vec<SocketAddr> = population
            .iter()
            .copied()
            .filter(|a| *a != self.cfg.addr)
            .collect();
        let sample: Vec<SocketAddr> = if others.len() > self.cfg.fence_sample.max(1) {
            others
                .iter()
                .copied()
                .sample(&mut self.rng, self.cfg.fence_sample.max(1))
        } else {
            others.clone()
        };
        let window = u64::try_from(self.cfg.fence_window.as_nanos()).unwrap_or(u64::MAX);
        let mut check = FenceCheck {
            ids: BTreeMap::new(),
            acks: BTreeSet::new(),
            deadline: now.saturating_add(window),
            population: population.len(),
            sampled: sample.len(),
            lowest,
            watchers: BTreeSet::new(),
            watcher_ids: BTreeMap::new(),
        };
        // fenced: the watchers must answer too before the fence is lifted
        // (an answer means a watcher heard this node, so it lets go of the
        // addresses it took over)
        if self.fenced {
            check.watchers = self
                .sessions
                .values()
                .filter(|hb| hb.watched_by_peer)
                .map(|hb| hb.peer.addr)
                .collect();
        }
        self.fence_started = Some(now);
        // the process we know at that address; any process there for a
        // speaker we hold Down or only discovered (generation 0)
        let generations: BTreeMap<SocketAddr, u64> = self
            .foca
            .iter_members()
            .map(|m| (m.id().addr, m.id().generation))
            .collect();
        let from = self.sender();
        let settled = check.majority(self.cfg.addr) && check.watchers.is_empty();
        if !settled {
            // the sample, then the watchers outside it (their answers count
            // for the watchers only, not in the sample's share)
            let extra: Vec<SocketAddr> = check
                .watchers
                .iter()
                .copied()
                .filter(|w| !sample.contains(w))
                .collect();
            let targets = sample
                .into_iter()
                .map(|a| (a, true))
                .chain(extra.into_iter().map(|a| (a, false)));
            for (addr, sampled) in targets {
                let id: u64 = self.rng.random();
                if sampled {
                    check.ids.insert(id, addr);
                } else {
                    check.watcher_ids.insert(id, addr);
                }
                self.send_control(
                    addr,
                    &Control::Ping {
                        from: from.clone(),
                        id,
                        target_generation: generations
                            .get(&addr)
                            .copied()
                            .unwrap_or(ANY_GENERATION),
                    },
                );
            }
        }
        self.fence_check = Some(check);
        if settled {
            self.fence_decide(now);
        }
    }

    fn fence_decide(&mut self, now: u64) {
        let Some(check) = self.fence_check.take() else {
            return;
        };
        let majority = check.majority(self.cfg.addr);
        let mut fence = !majority;
        let wait = u64::try_from(self.cfg.fence_watcher_wait.as_nanos()).unwrap_or(u64::MAX);
        let mut lift_at = None;
        if self.fenced && majority {
            let waiting = &check.watchers;
            if !waiting.is_empty() {
                let since = *self.fence_lift_wait.get_or_insert(now);
                if now.saturating_sub(since) < wait {
                    debug!(
                        watchers = ?waiting,
                        "self-fence: a majority answers; waiting for the watchers' heartbeats"
                    );
                    fence = true;
                    lift_at = Some(since.saturating_add(wait));
                }
            }
        }
        if !fence || !majority {
            self.fence_lift_wait = None;
        }
        self.fence_pending = if lift_at.is_some() {
            check.watchers.clone()
        } else {
            BTreeSet::new()
        };
        let reached = check.acks.len() + 1;
        if fence != self.fenced {
            self.fenced = fence;
            if fence {
                self.counters.fences += 1;
                warn!(
                    reached,
                    pinged = check.sampled,
                    speakers = check.population,
                    "self-fence: no majority of the speakers answers, stop answering"
                );
            } else {
                info!(
                    reached,
                    pinged = check.sampled,
                    speakers = check.population,
                    "self-fence lifted"
                );
            }
            self.outputs.push(Output::Event(Event::Fence(fence)));
        }
        self.fence_next = if self.fenced {
            let again = u64::try_from(self.cfg.fence_recheck.as_nanos()).unwrap_or(u64::MAX);
            let next = now.saturating_add(again);
            Some(lift_at.map_or(next, |at| at.min(next)))
        } else {
            None
        };
        // after the fence: a shrink held for the check goes out now
        self.publish_live();
    }

    fn publish_live(&mut self) {
        if self.live_version == Some(self.wanted_version) {
            return;
        }
        if self.wanted_live != self.live {
            self.live = self.wanted_live.clone();
            self.outputs
                .push(Output::Event(Event::LiveChanged(self.live.clone())));
        }
        self.live_version = Some(self.wanted_version);
    }

    // ---- control messages ----

    /// A part of another member's state. Taken only from a member at the
    /// address it sends from: the address we know for its identity, or, for
    /// an identity we do not know yet (a join, a restart, a renewal), the
    /// address of its own record in the sync. Answered (our whole state,
    /// tens of datagrams at 1,000 members) at most once a second per
    /// source, and only to that source.
    fn on_sync(
        &mut self,
        from_addr: SocketAddr,
        from: &Sender,
        reply: bool,
        part: Option<SyncPart>,
        members: Vec<Member<NodeId>>,
        now: u64,
    ) {
        let known = self
            .foca
            .iter_membership_state()
            .find(|m| *m.id().name == *from.name)
            .map(|m| m.id().clone());
        let claimed = match &known {
            Some(id) if id.generation > from.generation => None,
            Some(id) if id.generation == from.generation => Some(id.addr),
            _ => members
                .iter()
                .find(|m| *m.id().name == *from.name && m.id().generation == from.generation)
                .map(|m| m.id().addr),
        };
        if claimed != Some(from_addr) {
            self.counters.sync_refused += 1;
            debug!(%from_addr, node = %from.name, "state sync refused: not a member at that address");
            return;
        }
        let result = self
            .foca
            .apply_many(members.into_iter(), true, &mut self.runtime);
        let applied = result.is_ok();
        // the members it brought are in the live set before this node
        // counts as synced
        self.after_foca(result, now);
        if let Some(part) = part.filter(|_| applied) {
            self.note_sync_part(from_addr, from.generation, part);
        }
        if !reply {
            return;
        }
        if self
            .sync_answered
            .get(&from_addr)
            .is_some_and(|at| now.saturating_sub(*at) < SYNC_ANSWER_EVERY_NS)
        {
            self.counters.sync_refused += 1;
            debug!(%from_addr, "state sync not answered: answered less than a second ago");
            return;
        }
        self.sync_answered
            .retain(|_, at| now.saturating_sub(*at) < SYNC_ANSWER_EVERY_NS);
        self.sync_answered.insert(from_addr, now);
        self.send_state(from_addr, false);
    }

    fn sender(&self) -> Sender {
        Sender {
            name: self.cfg.name.clone(),
            generation: self.foca.identity().generation,
        }
    }

    fn send_control(&mut self, to: SocketAddr, control: &Control) {
        let Ok(body) = control.encode() else {
            self.counters.send_too_large += 1;
            return;
        };
        match self.framer.seal(control.kind(), &body) {
            Some(datagram) => self.push_send(to, control.kind(), datagram),
            None => self.counters.send_too_large += 1,
        }
    }

    fn push_send(&mut self, to: SocketAddr, kind: Kind, datagram: Vec<u8>) {
        // foca keeps this node's identities from before a renewal as Down
        // members, and announces to Down members: never to itself
        if to == self.cfg.addr {
            return;
        }
        self.counters.sent[kind.index()] += 1;
        self.outputs.push(Output::Send { to, kind, datagram });
    }

    fn on_control(&mut self, from_addr: SocketAddr, control: Control, now: u64) {
        if control.from().name == self.cfg.name {
            return;
        }
        match control {
            Control::Heartbeat {
                from,
                seq,
                watching,
                packet,
            } => self.on_heartbeat(from, seq, watching, packet, now),
            Control::ProbeRequest {
                id,
                target,
                target_addr,
                target_generation,
                ..
            } => {
                // only towards a member, at the address we know it by (no
                // reflection to arbitrary addresses)
                let known = self.member(&target).map(|m| m.id().addr);
                if known != Some(target_addr) {
                    // A member this node already holds Down there (SWIM got
                    // there first): it cannot reach it either, and says so at
                    // once. Silence would leave the asker "unconfirmed", taking
                    // itself for the one cut off, until its own SWIM catches up.
                    let down = self.foca.iter_membership_state().any(|m| {
                        m.state() == State::Down
                            && *m.id().name == *target
                            && m.id().addr == target_addr
                    });
                    if down {
                        let nack = Control::ProbeNack {
                            from: self.sender(),
                            id,
                            target,
                        };
                        self.send_control(from_addr, &nack);
                    }
                    return;
                }
                if self.relays.len() >= MAX_RELAYS {
                    return;
                }
                let ping_id: u64 = self.rng.random();
                let timeout = u64::try_from(self.cfg.probe_timeout.as_nanos()).unwrap_or(0);
                self.relays.insert(
                    ping_id,
                    Relay {
                        requester: from_addr,
                        request_id: id,
                        target,
                        target_generation,
                        // within the requester's round (Lifeguard: 80 %)
                        nack_at: Some(now.saturating_add(timeout / 5 * 4)),
                        expires: now.saturating_add(2 * timeout),
                    },
                );
                let ping = Control::Ping {
                    from: self.sender(),
                    id: ping_id,
                    target_generation,
                };
                self.send_control(target_addr, &ping);
            }
            Control::ProbeReply { id, target, .. } => self.on_probe_reply(id, &target, now),
            Control::ProbeNack { id, target, .. } => self.on_probe_nack(id, &target),
            Control::Ping {
                id,
                target_generation,
                ..
            } => {
                // a ping meant for another process of this node (the one
                // before a restart) is not ours to answer: the asker must
                // learn that that process is gone
                if target_generation != self.foca.identity().generation
                    && target_generation != ANY_GENERATION
                {
                    self.counters.unknown_sender += 1;
                    return;
                }
                let ack = Control::Ack {
                    from: self.sender(),
                    id,
                };
                self.send_control(from_addr, &ack);
            }
            Control::Ack { from, id } => {
                if let Some(relay) = self.relays.get(&id) {
                    if relay.target != from.name || relay.target_generation != from.generation {
                        // another process than the one asked about
                        self.counters.unknown_sender += 1;
                        return;
                    }
                    let Some(relay) = self.relays.remove(&id) else {
                        return;
                    };
                    let reply = Control::ProbeReply {
                        from: self.sender(),
                        id: relay.request_id,
                        target: relay.target,
                    };
                    self.send_control(relay.requester, &reply);
                } else if let Some(owner) = self
                    .confirmations
                    .iter()
                    .find(|(_, c)| c.direct && c.ids.contains(&id))
                    .map(|(name, c)| (name.clone(), c.owner.generation))
                {
                    // the owner itself answered a direct ping
                    if from.name == owner.0 && from.generation == owner.1 {
                        self.on_probe_reply(id, &owner.0, now);
                    } else {
                        self.counters.unknown_sender += 1;
                    }
                } else if let Some(check) = &mut self.fence_check
                    && let Some(addr) = check
                        .ids
                        .remove(&id)
                        .inspect(|a| {
                            check.acks.insert(*a);
                        })
                        .or_else(|| check.watcher_ids.remove(&id))
                {
                    check.watchers.remove(&addr);
                    if check.majority(self.cfg.addr) && check.watchers.is_empty() {
                        self.fence_decide(now);
                    }
                }
            }
            Control::Sync {
                from,
                reply,
                part,
                members,
            } => self.on_sync(from_addr, &from, reply, part, members, now),
            Control::Leave { from } => {
                let Some(member) = self.member(&from.name) else {
                    return;
                };
                if member.id().generation != from.generation {
                    return;
                }
                info!(node = %from.name, "member leaves");
                let down = Member::new(member.id().clone(), member.incarnation(), State::Down);
                let result = self
                    .foca
                    .apply_many(std::iter::once(down), true, &mut self.runtime);
                self.after_foca(result, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"dW5pdC10ZXN0LXNlY3JldA";
    const MS: u64 = NS_PER_MS;

    fn key() -> Option<SecretKey> {
        Some(SecretKey::from_secret(SECRET).unwrap())
    }

    fn addr(host: &str) -> SocketAddr {
        format!("{host}:7946").parse().unwrap()
    }

    /// memberlist's retransmitLimit, not foca's truncation (once at two).
    #[test]
    fn updates_are_sent_as_often_as_memberlist_sends_them() {
        let limits: Vec<u8> = [1, 2, 9, 10, 99, 100, 999, 1000, 5000]
            .iter()
            .map(|n| retransmit_limit(*n, 4).get())
            .collect();
        assert_eq!(limits, [4, 4, 4, 8, 8, 12, 12, 16, 16]);
        assert_eq!(swim_config(2, false).max_transmissions.get(), 4);
        assert_eq!(swim_config(2, true).max_transmissions.get(), 4);
    }

    /// The core under test: node-0 at 192.0.2.1.
    fn core() -> Core {
        Core::new(Config::new("node-0", addr("192.0.2.1"), 1), key(), 7)
    }

    /// Another process, sealing datagrams as a member would.
    struct Peer {
        sender: Sender,
        addr: SocketAddr,
        framer: Framer,
    }

    impl Peer {
        fn new(name: &str, host: &str, prefix: u8) -> Peer {
            Peer {
                sender: Sender {
                    name: name.into(),
                    generation: 1,
                },
                addr: addr(host),
                framer: Framer::new(key(), [prefix; 16]),
            }
        }

        fn id(&self) -> NodeId {
            NodeId::new(self.sender.name.clone(), self.addr, self.sender.generation)
        }

        fn seal(&mut self, control: &Control, at_ms: u64) -> Vec<u8> {
            self.framer.set_clock(at_ms);
            self.framer
                .seal(control.kind(), &control.encode().unwrap())
                .unwrap()
        }

        /// A sync with its own record first, then `others`, as
        /// `send_state` sends it.
        fn sync(&mut self, reply: bool, others: &[NodeId], at_ms: u64) -> Vec<u8> {
            self.sync_part(reply, Some(SyncPart { index: 0, count: 1 }), others, at_ms)
        }

        /// A sync as [`Peer::sync`], with the part given (None: a tell).
        fn sync_part(
            &mut self,
            reply: bool,
            part: Option<SyncPart>,
            others: &[NodeId],
            at_ms: u64,
        ) -> Vec<u8> {
            let members = std::iter::once(self.id())
                .chain(others.iter().cloned())
                .map(|id| Member::new(id, 0, State::Alive))
                .collect();
            let control = Control::Sync {
                from: self.sender.clone(),
                reply,
                part,
                members,
            };
            self.seal(&control, at_ms)
        }
    }

    fn sends(core: &mut Core, to: SocketAddr, kind: Kind) -> usize {
        core.take_outputs()
            .iter()
            .filter(|o| matches!(o, Output::Send { to: t, kind: k, .. } if *t == to && *k == kind))
            .count()
    }

    fn is_member(core: &Core, name: &str) -> bool {
        core.members().iter().any(|(id, ..)| &*id.name == name)
    }

    /// Issue 24 item 1: synced only once every part of one member's whole state is
    /// applied; a tell (a few records) or a part is not the whole. A member heard
    /// before is asked for its state (once per pace); after, nobody is.
    #[test]
    fn synced_needs_every_part_of_a_whole_state() {
        let mut core = core();
        let mut peer = Peer::new("node-1", "192.0.2.2", 1);
        let third = NodeId::new("node-3", addr("192.0.2.4"), 1);
        let fourth = NodeId::new("node-4", addr("192.0.2.5"), 1);
        // a tell: the member is heard, but it is no whole state
        let tell = peer.sync_part(false, None, &[], 1_000);
        core.handle_datagram(peer.addr, &tell, 1_000 * MS);
        assert!(!core.synced());
        assert!(core.live().contains("node-1"));
        let asks = |core: &mut Core, to| {
            core.take_outputs()
                .iter()
                .filter_map(|o| match o {
                    Output::Send {
                        to: t,
                        kind: Kind::Sync,
                        datagram,
                    } if *t == to => Some(datagram.clone()),
                    _ => None,
                })
                .filter(|d| {
                    let framer = Framer::new(key(), [9; 16]);
                    let opened = framer.open(d).unwrap();
                    matches!(
                        Control::decode(Kind::Sync, &opened.body),
                        Ok(Control::Sync { reply: true, .. })
                    )
                })
                .count()
        };
        assert_eq!(asks(&mut core, peer.addr), 1, "asked for its whole state");
        // part 1 of 2 first: not whole
        let part = |index| Some(SyncPart { index, count: 2 });
        let second = peer.sync_part(false, part(1), std::slice::from_ref(&fourth), 1_001);
        core.handle_datagram(peer.addr, &second, 1_001 * MS);
        assert!(!core.synced(), "one part of two");
        // heard again within the pace: not asked again
        let again = peer.sync_part(false, None, &[], 1_002);
        core.handle_datagram(peer.addr, &again, 1_002 * MS);
        assert_eq!(asks(&mut core, peer.addr), 0, "paced");
        let first = peer.sync_part(false, part(0), std::slice::from_ref(&third), 1_003);
        core.handle_datagram(peer.addr, &first, 1_003 * MS);
        assert!(core.synced(), "both parts");
        let live: Vec<&str> = core.live().iter().map(String::as_str).collect();
        assert_eq!(live, ["node-0", "node-1", "node-3", "node-4"]);
        // synced: a member heard later is not asked
        let late = peer.sync_part(false, None, &[], 2_000);
        core.handle_datagram(peer.addr, &late, 2_000 * MS);
        assert_eq!(asks(&mut core, peer.addr), 0, "synced: no ask");
    }

    /// The parts count per sending process: two halves from two members are not
    /// one whole.
    #[test]
    fn parts_of_two_members_states_are_not_one_whole() {
        let mut core = core();
        let mut a = Peer::new("node-1", "192.0.2.2", 1);
        let mut b = Peer::new("node-2", "192.0.2.3", 2);
        let d0 = a.sync_part(false, Some(SyncPart { index: 0, count: 2 }), &[], 1_000);
        let d1 = b.sync_part(false, Some(SyncPart { index: 1, count: 2 }), &[], 1_000);
        core.handle_datagram(a.addr, &d0, 1_000 * MS);
        core.handle_datagram(b.addr, &d1, 1_000 * MS);
        assert!(!core.synced());
        let whole = b.sync(false, &[], 1_001);
        core.handle_datagram(b.addr, &whole, 1_001 * MS);
        assert!(core.synced());
    }

    #[test]
    fn a_sync_from_another_address_than_the_senders_is_refused() {
        let mut core = core();
        let mut peer = Peer::new("node-1", "192.0.2.2", 1);
        let third = NodeId::new("node-3", addr("192.0.2.4"), 1);
        // a (replayed or forged) sync whose source is not the sender's
        // address: no answer to the source, nothing applied
        let victim = addr("203.0.113.9");
        let datagram = peer.sync(true, std::slice::from_ref(&third), 1_000);
        core.handle_datagram(victim, &datagram, 1_000 * MS);
        assert_eq!(sends(&mut core, victim, Kind::Sync), 0, "no answer");
        assert!(!is_member(&core, "node-1") && !is_member(&core, "node-3"));
        assert_eq!(core.counters().sync_refused, 1);
        // a sync that does not carry its sender's record, from a non-member
        let bare = Control::Sync {
            from: peer.sender.clone(),
            reply: true,
            part: None,
            members: vec![Member::new(third.clone(), 0, State::Alive)],
        };
        let datagram = peer.seal(&bare, 1_001);
        core.handle_datagram(peer.addr, &datagram, 1_001 * MS);
        assert_eq!(sends(&mut core, peer.addr, Kind::Sync), 0);
        assert!(!is_member(&core, "node-3"));
        assert_eq!(core.counters().sync_refused, 2);
        // the sender at its own address: applied and answered there
        let datagram = peer.sync(true, std::slice::from_ref(&third), 1_002);
        core.handle_datagram(peer.addr, &datagram, 1_002 * MS);
        assert!(sends(&mut core, peer.addr, Kind::Sync) >= 1, "answered");
        assert!(is_member(&core, "node-1") && is_member(&core, "node-3"));
        // once a member, it is known at that address only
        let datagram = peer.sync(true, &[], 3_000);
        core.handle_datagram(victim, &datagram, 3_000 * MS);
        assert_eq!(sends(&mut core, victim, Kind::Sync), 0);
        assert_eq!(core.counters().sync_refused, 3);
    }

    #[test]
    fn sync_answers_are_limited_to_one_a_second_per_source() {
        let mut core = core();
        let mut peer = Peer::new("node-1", "192.0.2.2", 1);
        let mut answers = Vec::new();
        for at_ms in [1_000, 1_100, 1_500, 1_999, 2_000, 2_300, 3_100] {
            let datagram = peer.sync(true, &[], at_ms);
            core.handle_datagram(peer.addr, &datagram, at_ms * MS);
            if sends(&mut core, peer.addr, Kind::Sync) > 0 {
                answers.push(at_ms);
            }
        }
        assert_eq!(answers, [1_000, 2_000, 3_100]);
        assert_eq!(core.counters().sync_refused, 4);
        // the limit is per source: another member is answered meanwhile
        let mut other = Peer::new("node-2", "192.0.2.3", 2);
        let datagram = other.sync(true, &[], 3_200);
        core.handle_datagram(other.addr, &datagram, 3_200 * MS);
        assert!(sends(&mut core, other.addr, Kind::Sync) >= 1);
        // a sync that asks for no answer is still applied
        let third = NodeId::new("node-3", addr("192.0.2.4"), 1);
        let datagram = peer.sync(false, &[third], 3_300);
        core.handle_datagram(peer.addr, &datagram, 3_300 * MS);
        assert!(is_member(&core, "node-3"));
    }

    #[test]
    fn replayed_datagrams_are_refused() {
        let mut core = core();
        let mut peer = Peer::new("node-1", "192.0.2.2", 1);
        let ping = |id| Control::Ping {
            from: Sender {
                name: "node-1".into(),
                generation: 1,
            },
            id,
            target_generation: 1,
        };
        // the same datagram twice: one answer
        let datagram = peer.seal(&ping(1), 1_000);
        core.handle_datagram(peer.addr, &datagram, 1_000 * MS);
        assert_eq!(sends(&mut core, peer.addr, Kind::Ack), 1);
        core.handle_datagram(peer.addr, &datagram, 1_100 * MS);
        assert_eq!(sends(&mut core, peer.addr, Kind::Ack), 0, "replay");
        assert_eq!(core.counters().replays, 1);
        // datagrams reordered within the window are all taken, once
        let early = peer.seal(&ping(2), 1_200);
        let late = peer.seal(&ping(3), 1_300);
        core.handle_datagram(peer.addr, &late, 1_300 * MS);
        core.handle_datagram(peer.addr, &early, 1_301 * MS);
        assert_eq!(sends(&mut core, peer.addr, Kind::Ack), 2);
        // a datagram never seen but older than the window (on the sender's
        // clock) is refused: a capture kept for later
        let kept = peer.seal(&ping(4), 2_000);
        let newer = peer.seal(&ping(5), 2_000 + REPLAY_WINDOW_MS + 1);
        core.handle_datagram(peer.addr, &newer, 2_000 * MS);
        core.handle_datagram(peer.addr, &kept, 2_001 * MS);
        assert_eq!(sends(&mut core, peer.addr, Kind::Ack), 1);
        assert_eq!(core.counters().replays, 2);
        // another process of the same node has its own history
        let mut restarted = Peer::new("node-1", "192.0.2.2", 9);
        let datagram = restarted.seal(&ping(6), 10);
        core.handle_datagram(peer.addr, &datagram, 2_002 * MS);
        assert_eq!(sends(&mut core, peer.addr, Kind::Ack), 1);
        // a replayed sync is neither applied nor answered again
        let third = NodeId::new("node-3", addr("192.0.2.4"), 1);
        let sync = peer.sync(true, &[third], 9_000);
        core.handle_datagram(peer.addr, &sync, 9_000 * MS);
        assert!(sends(&mut core, peer.addr, Kind::Sync) >= 1);
        core.handle_datagram(peer.addr, &sync, 12_000 * MS);
        assert_eq!(sends(&mut core, peer.addr, Kind::Sync), 0);
        assert_eq!(core.counters().replays, 3);
    }

    #[test]
    fn the_replay_guard_forgets_within_its_bounds() {
        let mut guard = ReplayGuard::default();
        let stamp = |process: u8, counter: u64, sent_ms: u64| Stamp {
            process: [process; 16],
            counter,
            sent_ms,
        };
        // a fast sender: at most REPLAY_MAX_PER_PROCESS kept; the forgotten
        // ones are refused
        for c in 0..(REPLAY_MAX_PER_PROCESS as u64 + 10) {
            assert!(guard.accept(stamp(1, c, 100), c));
        }
        assert_eq!(guard.processes[&[1; 16]].seen.len(), REPLAY_MAX_PER_PROCESS);
        assert!(!guard.accept(stamp(1, 3, 100), 0));
        assert!(!guard.accept(stamp(1, REPLAY_MAX_PER_PROCESS as u64, 100), 0));
        // many processes: the least recently heard is forgotten
        let process = |p: usize| {
            let mut prefix = [0xffu8; 16];
            prefix[..8].copy_from_slice(&(p as u64).to_be_bytes());
            prefix
        };
        for p in 0..=REPLAY_MAX_PROCESSES {
            let s = Stamp {
                process: process(p),
                counter: 1,
                sent_ms: 5,
            };
            assert!(guard.accept(s, 10_000 + p as u64));
        }
        assert_eq!(guard.processes.len(), REPLAY_MAX_PROCESSES);
        // the fast sender, heard first, then process 0
        assert!(!guard.processes.contains_key(&[1; 16]));
        assert!(!guard.processes.contains_key(&process(0)));
        assert!(guard.processes.contains_key(&process(1)));
        assert!(guard.processes.contains_key(&process(REPLAY_MAX_PROCESSES)));
    }
}
