//! The BGP half of the speaker: one session per BGPPeer that runs on this
//! node, the routes of every announced Service sent to each, and BFD
//! gating. Driven by the daemon's loop (configuration, Service decisions,
//! session and BFD events); the sessions and BFD are behind two small
//! traits ([`SessionFactory`], [`BfdOps`]) so that the whole of it runs in
//! tests without a socket.
//!
//! - A configuration change keeps every session whose
//!   [`SessionSpec::bgp`] is unchanged (see [`crate::decide::sessions`]),
//!   closes removed ones with Cease/Peer De-configured and replaces changed
//!   ones; a BFD profile change re-parameterises BFD (Poll sequence) and
//!   never touches BGP.
//! - Routes: [`BgpSpeaker::set_service`] stores a Service's routes;
//!   [`BgpSpeaker::publish`] sends each session its merged list only when
//!   it differs from what it was sent last, so a change of one Service
//!   makes UPDATEs for that Service's prefixes only (the session's
//!   Adj-RIB-Out diffs), and nothing is sent when nothing changed.
//! - BFD: a peer with a profile gets a BFD session once its local address
//!   is known (`sourceAddress`, else the first BGP connection). BFD going
//!   Down holds BGP down (Cease/BFD Down) until BFD is Up again.
//! - Status: [`BgpSpeaker::take_status_changes`] gives the BGPSessionStatus
//!   of each session that changed since the last call.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::SystemTime;

use bgp::rib_out::Advertisement;
use bgp::state::FsmState;
use config::api::v1beta1::BGPSessionStatusStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::mpsc;

use crate::decide::bgp::{Route, for_peer};
use crate::decide::sessions::{BfdSpec, SessionSpec};

/// A future that closes a session (flushes its NOTIFICATION, bounded).
pub type Closing = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How a session ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Close {
    /// The BGPPeer no longer runs here: Cease/Peer De-configured.
    Deconfigured,
    /// The speaker stops: Cease/Administrative Shutdown with a message.
    Shutdown(String),
    /// The speaker stops and comes back (graceful restart: no Cease, the
    /// router keeps the routes as stale).
    PlannedRestart(String),
}

/// One running session, as the speaker drives it.
pub trait PeerSession: Send {
    /// The full list of prefixes the peer should have.
    fn set_advertisements(&self, ads: Vec<Advertisement>);
    /// Down and kept down (Cease/BFD Down) until [`PeerSession::release`].
    fn hold_down(&self, reason: &str);
    /// Ends a hold-down.
    fn release(&self);
    /// Closes for good.
    fn close(self: Box<Self>, how: Close) -> Closing;
}

/// Identifies one session of one BGPPeer: a replaced session gets a new
/// generation, so late events of the old one are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionId {
    /// The BGPPeer's name.
    pub peer: String,
    /// Incremented for every session started.
    pub generation: u64,
}

/// What a session tells the speaker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerEvent {
    /// Which session.
    pub id: SessionId,
    /// Its state now.
    pub state: FsmState,
    /// Its last error, as text (never a password).
    pub last_error: Option<String>,
    /// The local address of the connection, once connected.
    pub local: Option<SocketAddr>,
    /// Whether it is held down.
    pub held_down: bool,
}

/// Starts sessions.
pub trait SessionFactory: Send {
    /// Starts the session `id` of `spec`; it reports to `events`.
    fn spawn(
        &mut self,
        id: SessionId,
        spec: &SessionSpec,
        events: mpsc::Sender<PeerEvent>,
    ) -> Result<Box<dyn PeerSession>, String>;
}

/// A BFD client handle (the BFD runtime's client id).
pub type BfdClient = u64;

/// The BFD runtime, as the speaker uses it.
pub trait BfdOps: Send {
    /// A BFD session between `local` and `remote` (single hop: on the
    /// interface holding `local`).
    fn acquire(
        &mut self,
        local: IpAddr,
        remote: IpAddr,
        spec: &BfdSpec,
        vrf: Option<&str>,
    ) -> Result<BfdClient, String>;
    /// New parameters for a client (a Poll sequence, no reset).
    fn set_parameters(&mut self, client: BfdClient, spec: &BfdSpec) -> Result<(), String>;
    /// The client is done with the session.
    fn release(&mut self, client: BfdClient);
}

/// BFD state words of a BGPSessionStatus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BfdState {
    Up,
    Down,
    Init,
    AdminDown,
}

impl BfdState {
    /// As written in `bfdStatus`.
    pub fn as_str(self) -> &'static str {
        match self {
            BfdState::Up => "Up",
            BfdState::Down => "Down",
            BfdState::Init => "Init",
            BfdState::AdminDown => "AdminDown",
        }
    }
}

struct Bfd {
    spec: BfdSpec,
    client: Option<BfdClient>,
    state: BfdState,
    /// BGP is held down because BFD went down.
    holding: bool,
    error: Option<String>,
}

struct Running {
    spec: SessionSpec,
    generation: u64,
    session: Box<dyn PeerSession>,
    /// What it was sent last.
    sent: Option<Vec<Advertisement>>,
    state: FsmState,
    last_error: Option<String>,
    since: SystemTime,
    local: Option<IpAddr>,
    bfd: Option<Bfd>,
}

/// The BGP sessions and routes of this node.
pub struct BgpSpeaker<F: SessionFactory, B: BfdOps> {
    node: String,
    factory: F,
    bfd: B,
    events: mpsc::Sender<PeerEvent>,
    generation: u64,
    sessions: BTreeMap<String, Running>,
    /// Routes of every announced Service, by Service key.
    services: BTreeMap<String, Vec<Route>>,
    /// BGPPeers whose status changed (`None` in the output: removed).
    dirty: BTreeSet<String>,
    /// Sessions that could not start, with why.
    failed: BTreeMap<String, String>,
}

impl<F: SessionFactory, B: BfdOps> BgpSpeaker<F, B> {
    /// A speaker for `node` with no session yet; sessions report to
    /// `events` (the caller feeds them back with [`BgpSpeaker::on_event`]).
    pub fn new(
        node: impl Into<String>,
        factory: F,
        bfd: B,
        events: mpsc::Sender<PeerEvent>,
    ) -> Self {
        Self {
            node: node.into(),
            factory,
            bfd,
            events,
            generation: 0,
            sessions: BTreeMap::new(),
            services: BTreeMap::new(),
            dirty: BTreeSet::new(),
            failed: BTreeMap::new(),
        }
    }

    /// Runs exactly the sessions of `specs` (by BGPPeer name). Returns the
    /// closings of the sessions ended (for the caller to await or spawn).
    pub fn set_sessions(&mut self, specs: BTreeMap<String, SessionSpec>) -> Vec<Closing> {
        let mut closing = Vec::new();
        let gone: Vec<String> = self
            .sessions
            .keys()
            .filter(|k| !specs.contains_key(*k))
            .cloned()
            .collect();
        for name in gone {
            if let Some(r) = self.sessions.remove(&name) {
                tracing::info!(
                    peer = name,
                    "BGPPeer no longer runs on this node: closing its session"
                );
                closing.push(self.end(r, Close::Deconfigured));
            }
            self.dirty.insert(name);
        }
        let dropped: Vec<String> = self
            .failed
            .keys()
            .filter(|k| !specs.contains_key(*k))
            .cloned()
            .collect();
        for name in dropped {
            self.failed.remove(&name);
            self.dirty.insert(name);
        }
        let mut started = false;
        for (name, spec) in specs {
            match self.sessions.get_mut(&name) {
                Some(r) if r.spec.bgp == spec.bgp => {
                    // Same session; BFD may differ.
                    let old_bfd = r.spec.bfd.clone();
                    r.spec = spec.clone();
                    if old_bfd != spec.bfd {
                        Self::update_bfd(&mut self.bfd, r, &spec);
                        self.dirty.insert(name.clone());
                    }
                }
                Some(_) => {
                    let r = self.sessions.remove(&name).expect("present");
                    tracing::info!(
                        peer = name,
                        "BGPPeer's session settings changed: restarting its session"
                    );
                    closing.push(self.end(r, Close::Deconfigured));
                    started |= self.start(&name, spec);
                }
                None => started |= self.start(&name, spec),
            }
        }
        if started {
            self.publish();
        }
        closing
    }

    /// BGPPeers selected for this node that cannot run here (e.g. unnumbered
    /// peering): each gets a BGPSessionStatus saying why (Idle, `lastError`).
    /// Call after [`BgpSpeaker::set_sessions`].
    pub fn set_unrunnable(&mut self, peers: impl IntoIterator<Item = (String, String)>) {
        for (name, why) in peers {
            if self.failed.get(&name) != Some(&why) {
                self.failed.insert(name.clone(), why);
                self.dirty.insert(name);
            }
        }
    }

    fn start(&mut self, name: &str, spec: SessionSpec) -> bool {
        self.generation += 1;
        let id = SessionId {
            peer: name.to_owned(),
            generation: self.generation,
        };
        self.dirty.insert(name.to_owned());
        match self.factory.spawn(id, &spec, self.events.clone()) {
            Ok(session) => {
                self.failed.remove(name);
                let bfd = spec.bfd.clone().map(|s| Bfd {
                    spec: s,
                    client: None,
                    state: BfdState::Down,
                    holding: false,
                    error: None,
                });
                let mut r = Running {
                    local: spec.bgp.source,
                    spec,
                    generation: self.generation,
                    session,
                    sent: None,
                    state: FsmState::Idle,
                    last_error: None,
                    since: SystemTime::now(),
                    bfd,
                };
                Self::acquire_bfd(&mut self.bfd, &mut r);
                tracing::info!(peer = name, address = %r.spec.bgp.peer, "BGP session started");
                self.sessions.insert(name.to_owned(), r);
                true
            }
            Err(e) => {
                tracing::error!(peer = name, error = e, "the BGP session could not start");
                self.failed.insert(name.to_owned(), e);
                false
            }
        }
    }

    fn end(&mut self, mut r: Running, how: Close) -> Closing {
        if let Some(b) = r.bfd.as_mut()
            && let Some(c) = b.client.take()
        {
            self.bfd.release(c);
        }
        r.session.close(how)
    }

    fn acquire_bfd(bfd: &mut B, r: &mut Running) {
        let (Some(local), Some(b)) = (r.local, r.bfd.as_mut()) else {
            return;
        };
        if b.client.is_some() {
            return;
        }
        match bfd.acquire(
            local,
            r.spec.bgp.peer.ip(),
            &b.spec,
            r.spec.bgp.vrf.as_deref(),
        ) {
            Ok(c) => {
                b.client = Some(c);
                b.error = None;
            }
            Err(e) => {
                tracing::error!(
                    peer = r.spec.name,
                    error = e,
                    "the BFD session could not start"
                );
                b.error = Some(format!("BFD: {e}"));
            }
        }
    }

    fn update_bfd(bfd: &mut B, r: &mut Running, spec: &SessionSpec) {
        match (r.bfd.as_mut(), &spec.bfd) {
            (Some(b), Some(new)) => {
                b.spec = new.clone();
                if let Some(c) = b.client
                    && let Err(e) = bfd.set_parameters(c, new)
                {
                    tracing::error!(peer = spec.name, error = e, "new BFD parameters refused");
                }
            }
            (Some(b), None) => {
                if let Some(c) = b.client.take() {
                    bfd.release(c);
                }
                if b.holding {
                    r.session.release();
                }
                r.bfd = None;
            }
            (None, Some(new)) => {
                r.bfd = Some(Bfd {
                    spec: new.clone(),
                    client: None,
                    state: BfdState::Down,
                    holding: false,
                    error: None,
                });
                Self::acquire_bfd(bfd, r);
            }
            (None, None) => {}
        }
    }

    /// Stores the routes of the Service `key` (`None`: it announces
    /// nothing). Returns whether they changed; call
    /// [`BgpSpeaker::publish`] after a batch.
    pub fn set_service(&mut self, key: &str, routes: Option<Vec<Route>>) -> bool {
        match routes {
            Some(r) if !r.is_empty() => {
                if self.services.get(key) == Some(&r) {
                    return false;
                }
                self.services.insert(key.to_owned(), r);
                true
            }
            _ => self.services.remove(key).is_some(),
        }
    }

    /// Sends each session its routes when they differ from what it was
    /// sent last. Returns how many sessions were sent a new list.
    pub fn publish(&mut self) -> usize {
        let mut n = 0;
        for (name, r) in &mut self.sessions {
            let ads = for_peer(name, self.services.values().flatten());
            if r.sent.as_ref() != Some(&ads) {
                r.session.set_advertisements(ads.clone());
                r.sent = Some(ads);
                n += 1;
            }
        }
        n
    }

    /// A session's report.
    pub fn on_event(&mut self, ev: PeerEvent) {
        let Some(r) = self.sessions.get_mut(&ev.id.peer) else {
            return;
        };
        if r.generation != ev.id.generation {
            return;
        }
        if r.state != ev.state {
            r.state = ev.state;
            r.since = SystemTime::now();
            self.dirty.insert(ev.id.peer.clone());
        }
        if ev.last_error.is_some() && r.last_error != ev.last_error {
            r.last_error = ev.last_error;
            self.dirty.insert(ev.id.peer.clone());
        }
        if r.local.is_none()
            && let Some(local) = ev.local
        {
            r.local = Some(local.ip());
            Self::acquire_bfd(&mut self.bfd, r);
            self.dirty.insert(ev.id.peer.clone());
        }
    }

    /// A BFD transition of the session shared by `clients`: `Down` (from
    /// Up) holds the BGP sessions of those clients down; `Up` releases
    /// them.
    pub fn on_bfd(&mut self, clients: &[BfdClient], state: BfdState, path_down: bool) {
        for (name, r) in &mut self.sessions {
            let Some(b) = r.bfd.as_mut() else { continue };
            if !b.client.is_some_and(|c| clients.contains(&c)) {
                continue;
            }
            if b.state != state {
                b.state = state;
                r.since = SystemTime::now();
                self.dirty.insert(name.clone());
            }
            if state == BfdState::Up && b.holding {
                tracing::info!(peer = name, "BFD is Up again: the BGP session may come up");
                b.holding = false;
                r.session.release();
            } else if path_down && !b.holding {
                tracing::warn!(
                    peer = name,
                    "BFD went Down: the BGP session is held down until BFD is Up"
                );
                b.holding = true;
                r.session.hold_down("BFD Down");
            }
        }
    }

    /// The BGPPeer names of the sessions running here, sorted.
    pub fn peers(&self) -> impl Iterator<Item = &str> {
        self.sessions.keys().map(String::as_str)
    }

    /// Whether any Service is announced.
    pub fn announces(&self, key: &str) -> bool {
        self.services.contains_key(key)
    }

    /// The BGPSessionStatus of each session that changed since the last
    /// call (`None`: the session no longer runs: delete its object).
    pub fn take_status_changes(&mut self) -> Vec<(String, Option<BGPSessionStatusStatus>)> {
        let dirty = std::mem::take(&mut self.dirty);
        dirty
            .into_iter()
            .map(|name| {
                let s = self.status_of(&name);
                (name, s)
            })
            .collect()
    }

    /// The BGPSessionStatus of the BGPPeer `name` on this node.
    pub fn status_of(&self, name: &str) -> Option<BGPSessionStatusStatus> {
        if let Some(e) = self.failed.get(name) {
            return Some(BGPSessionStatusStatus {
                node: self.node.clone(),
                peer: name.to_owned(),
                bgp_status: FsmState::Idle.as_str().to_owned(),
                bfd_status: "N/A".to_owned(),
                last_error: e.clone(),
                ..Default::default()
            });
        }
        let r = self.sessions.get(name)?;
        let mut last_error = r.last_error.clone().unwrap_or_default();
        if let Some(e) = r.bfd.as_ref().and_then(|b| b.error.as_ref()) {
            last_error = e.clone();
        }
        Some(BGPSessionStatusStatus {
            node: self.node.clone(),
            peer: name.to_owned(),
            vrf: r.spec.bgp.vrf.clone().unwrap_or_default(),
            bgp_status: r.state.as_str().to_owned(),
            bfd_status: r
                .bfd
                .as_ref()
                .map_or("N/A", |b| b.state.as_str())
                .to_owned(),
            last_transition_time: Some(time_of(r.since)),
            last_error,
        })
    }

    /// Ends every session: graceful-restart peers get a planned restart
    /// (the router keeps our routes as stale until the next speaker
    /// re-announces), the others a Cease so that routers withdraw at once.
    pub fn shutdown(mut self) -> Vec<Closing> {
        let sessions = std::mem::take(&mut self.sessions);
        sessions
            .into_values()
            .map(|r| {
                let how = if r.spec.graceful_restart {
                    Close::PlannedRestart("speaker restarting".into())
                } else {
                    Close::Shutdown("speaker shutting down".into())
                };
                self.end(r, how)
            })
            .collect()
    }
}

/// The longest a BGPSessionStatus of a session that is not Established
/// lags behind a change of its error or BFD state (a session coming up, or
/// going down, is written at once).
pub const DOWN_STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// What is published of a session that is not Established: the state it
/// went down to and when, kept while it stays down. Its hops between Idle,
/// Connect and Active at each connection attempt are not news (4 peers down
/// made 8 writes a minute at rest in the scale bench, issue 25); a new
/// `lastError` or BFD state is, at most every [`DOWN_STATUS_INTERVAL`].
#[derive(Debug, Default)]
pub struct DownHold {
    down: std::collections::BTreeMap<String, (String, Option<Time>)>,
}

impl DownHold {
    /// The status to publish for `peer`, and its pace (`None`: the writer's
    /// own, for a session that came up or went down).
    pub fn publish(
        &mut self,
        peer: &str,
        mut status: BGPSessionStatusStatus,
    ) -> (BGPSessionStatusStatus, Option<std::time::Duration>) {
        if status.bgp_status == FsmState::Established.as_str() {
            self.down.remove(peer);
            return (status, None);
        }
        match self.down.get(peer) {
            Some((state, since)) => {
                status.bgp_status.clone_from(state);
                status.last_transition_time.clone_from(since);
                (status, Some(DOWN_STATUS_INTERVAL))
            }
            None => {
                self.down.insert(
                    peer.to_owned(),
                    (
                        status.bgp_status.clone(),
                        status.last_transition_time.clone(),
                    ),
                );
                (status, None)
            }
        }
    }

    /// Forgets `peer` (its session removed).
    pub fn remove(&mut self, peer: &str) {
        self.down.remove(peer);
    }
}

/// `t` as a `metav1.Time`, to the second (as the API server stores it, so
/// that a written status reads back equal).
pub fn time_of(t: SystemTime) -> Time {
    use k8s_openapi::jiff::Timestamp;
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(test)]
mod pace_tests {
    use super::*;

    fn status(state: FsmState) -> BGPSessionStatusStatus {
        BGPSessionStatusStatus {
            bgp_status: state.as_str().to_owned(),
            ..Default::default()
        }
    }

    fn at(state: FsmState, secs: i64, error: &str) -> BGPSessionStatusStatus {
        BGPSessionStatusStatus {
            last_transition_time: Some(time_of(
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64),
            )),
            last_error: error.to_owned(),
            ..status(state)
        }
    }

    #[test]
    fn hops_between_down_states_are_not_published() {
        let mut hold = DownHold::default();
        // the first status, down: news, as it is
        let first = at(FsmState::Active, 10, "connection refused");
        assert_eq!(hold.publish("r1", first.clone()), (first.clone(), None));
        // Active -> Connect -> Active -> Idle with the same error: the same status
        // (nothing for the writer to write), paced
        for (i, s) in [FsmState::Connect, FsmState::Active, FsmState::Idle]
            .into_iter()
            .enumerate()
        {
            let (published, pace) = hold.publish("r1", at(s, 20 + i as i64, "connection refused"));
            assert_eq!(published, first, "{s:?}");
            assert_eq!(pace, Some(DOWN_STATUS_INTERVAL));
        }
        // a new error is published, with the state and time it went down
        let (published, pace) = hold.publish("r1", at(FsmState::Connect, 40, "no route"));
        assert_eq!(
            published,
            BGPSessionStatusStatus {
                last_error: "no route".into(),
                ..first.clone()
            }
        );
        assert_eq!(pace, Some(DOWN_STATUS_INTERVAL));
        // another peer is its own
        let other = at(FsmState::Idle, 50, "");
        assert_eq!(hold.publish("r2", other.clone()), (other, None));
        // coming up, then going down again: both as they are, at once
        let up = at(FsmState::Established, 60, "");
        assert_eq!(hold.publish("r1", up.clone()), (up, None));
        let down = at(FsmState::Active, 70, "hold timer expired");
        assert_eq!(hold.publish("r1", down.clone()), (down.clone(), None));
        assert_eq!(
            hold.publish("r1", at(FsmState::Connect, 80, "hold timer expired"))
                .0,
            down
        );
        // a removed session starts afresh
        hold.remove("r1");
        let again = at(FsmState::Connect, 90, "x");
        assert_eq!(hold.publish("r1", again.clone()), (again, None));
    }
}
