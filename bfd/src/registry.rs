//! The set of sessions of one speaker: lookup by local discriminator and by
//! [`SessionKey`], shared use by several clients (reference counted, with
//! their parameters merged), and demultiplexing of received packets. Pure:
//! every method takes `now` and returns the session's actions.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::packet::{AuthType, ControlPacket, EchoError, EchoPacket, PacketError};
use crate::params::{ParamError, Parameters};
use crate::path::{Hop, SessionKey};
use crate::rng::SplitMix64;
use crate::session::{Action, Event, Session};

/// One user of a session (e.g. one BGP peer). Allocated by
/// [`Registry::acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClientId(pub u64);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client-{}", self.0)
    }
}

/// Control packets one session accepts per second (a fixed one-second
/// window from its first packet); the rest are dropped before the session
/// sees them ([`RxDrop::RateLimited`]). A peer sends at most one packet per
/// 10 ms ([`crate::params::INTERVAL_MS_MIN`]), 7.5 ms with jitter, plus a
/// few Poll and Final packets: this is about twice that, and bounds what
/// a flood (or a looping peer) costs the runtime thread per session.
pub const MAX_CONTROL_PER_SECOND: u32 = 250;

const RATE_WINDOW_NS: u64 = 1_000_000_000;

/// Where a control packet arrived: the edge fills it from the socket
/// (destination port, `IP_PKTINFO`, `IP_RECVTTL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxMeta<'a> {
    /// From the destination port (3784 or 4784).
    pub hop: Hop,
    /// Ingress interface, when known.
    pub interface: Option<&'a str>,
    pub source: IpAddr,
    pub destination: IpAddr,
    /// TTL / hop limit.
    pub ttl: u8,
}

/// Why a received packet went to no session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum RxDrop {
    #[error("malformed control packet: {0}")]
    Malformed(PacketError),
    #[error("authenticated control packet ({0:?}) refused")]
    Authenticated(AuthType),
    #[error("no session with discriminator {0}")]
    UnknownDiscriminator(u32),
    #[error("no session for this path")]
    UnknownPath,
    #[error("packet for session {0} arrived on another path type or interface")]
    WrongPath(u32),
    #[error("echo packet: {0}")]
    MalformedEcho(EchoError),
    #[error("session {0} already accepted its control packets for this second")]
    RateLimited(u32),
}

/// Registry-wide counters of received packets that reached no session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryCounters {
    pub control_malformed: u64,
    pub control_authenticated: u64,
    pub control_unknown_discriminator: u64,
    pub control_unknown_path: u64,
    pub control_wrong_path: u64,
    pub echo_malformed: u64,
    pub echo_unknown_discriminator: u64,
    /// Control packets for a session over [`MAX_CONTROL_PER_SECOND`].
    pub control_rate_limited: u64,
}

/// Errors of client operations.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RegistryError {
    #[error("invalid parameters: {0}")]
    InvalidParameters(#[from] ParamError),
    #[error("unknown {0}")]
    UnknownClient(ClientId),
}

/// The result of [`Registry::acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub client: ClientId,
    pub discriminator: u32,
    /// Whether this call created the session.
    pub created: bool,
    pub actions: Vec<Action>,
}

/// The result of [`Registry::release`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    pub discriminator: u32,
    /// Whether the last client left and the session is gone.
    pub removed: bool,
    pub actions: Vec<Action>,
}

#[derive(Debug)]
struct Entry {
    session: Session,
    clients: BTreeMap<ClientId, Parameters>,
    /// Start of the current rate window and the control packets accepted
    /// in it ([`MAX_CONTROL_PER_SECOND`]).
    rx_window: (u64, u32),
    /// Control packets dropped over the rate.
    rate_limited: u64,
}

/// All sessions of a speaker.
#[derive(Debug)]
pub struct Registry {
    sessions: HashMap<u32, Entry>,
    by_key: HashMap<SessionKey, u32>,
    clients: HashMap<ClientId, u32>,
    next_client: u64,
    rng: SplitMix64,
    counters: RegistryCounters,
}

impl Registry {
    /// An empty registry; `seed` draws discriminators and each session's
    /// jitter seed (the edge passes OS randomness, tests a constant).
    pub fn new(seed: u64) -> Registry {
        Registry {
            sessions: HashMap::new(),
            by_key: HashMap::new(),
            clients: HashMap::new(),
            next_client: 1,
            rng: SplitMix64::new(seed),
            counters: RegistryCounters::default(),
        }
    }

    /// Registers a client of the session on `key`, creating and starting the
    /// session if it is the first one, and otherwise merging `params` into
    /// the session's (see [`Parameters::merge`]).
    pub fn acquire(
        &mut self,
        key: SessionKey,
        params: Parameters,
        now: u64,
    ) -> Result<Acquired, RegistryError> {
        self.acquire_with(key, params, &[], now)
    }

    /// [`Registry::acquire`], with events a newly created session handles
    /// before it starts (what the edge knows of the path, e.g.
    /// [`Event::EchoLoopback`], so that the first packet already says it);
    /// they are not delivered to an existing session.
    pub fn acquire_with(
        &mut self,
        key: SessionKey,
        params: Parameters,
        initial: &[Event],
        now: u64,
    ) -> Result<Acquired, RegistryError> {
        params.validate()?;
        let client = ClientId(self.next_client);
        self.next_client += 1;
        if let Some(&discriminator) = self.by_key.get(&key) {
            self.clients.insert(client, discriminator);
            let entry = self.entry_mut(discriminator);
            entry.clients.insert(client, params);
            let actions = Self::apply_merged(entry, now);
            return Ok(Acquired {
                client,
                discriminator,
                created: false,
                actions,
            });
        }
        let discriminator = loop {
            let candidate = self.rng.next_nonzero_u32();
            if !self.sessions.contains_key(&candidate) {
                break candidate;
            }
        };
        let mut session = Session::new(key.clone(), discriminator, params, self.rng.next_u64());
        // In AdminDown nothing is sent nor armed: only the state changes.
        let mut actions: Vec<Action> = initial
            .iter()
            .flat_map(|event| session.handle(event.clone(), now))
            .collect();
        actions.extend(session.start(now));
        self.sessions.insert(
            discriminator,
            Entry {
                session,
                clients: BTreeMap::from([(client, params)]),
                rx_window: (now, 0),
                rate_limited: 0,
            },
        );
        self.by_key.insert(key, discriminator);
        self.clients.insert(client, discriminator);
        Ok(Acquired {
            client,
            discriminator,
            created: true,
            actions,
        })
    }

    /// Unregisters a client. The last one's release shuts the session down
    /// (one AdminDown packet, every timer cancelled) and removes it; earlier
    /// ones re-merge the remaining clients' parameters.
    pub fn release(&mut self, client: ClientId, now: u64) -> Result<Released, RegistryError> {
        let discriminator = self
            .clients
            .remove(&client)
            .ok_or(RegistryError::UnknownClient(client))?;
        let entry = self.entry_mut(discriminator);
        entry.clients.remove(&client);
        if !entry.clients.is_empty() {
            let actions = Self::apply_merged(entry, now);
            return Ok(Released {
                discriminator,
                removed: false,
                actions,
            });
        }
        let actions = entry.session.shutdown(now);
        if let Some(entry) = self.sessions.remove(&discriminator) {
            self.by_key.remove(entry.session.key());
        }
        Ok(Released {
            discriminator,
            removed: true,
            actions,
        })
    }

    /// Changes a client's parameters (applied by Poll Sequence, no flap).
    pub fn set_parameters(
        &mut self,
        client: ClientId,
        params: Parameters,
        now: u64,
    ) -> Result<(u32, Vec<Action>), RegistryError> {
        params.validate()?;
        let discriminator = *self
            .clients
            .get(&client)
            .ok_or(RegistryError::UnknownClient(client))?;
        let entry = self.entry_mut(discriminator);
        entry.clients.insert(client, params);
        Ok((discriminator, Self::apply_merged(entry, now)))
    }

    /// Delivers an event (a timer expiry, admin up/down) to a session;
    /// `None` if there is no such session.
    pub fn handle(&mut self, discriminator: u32, event: Event, now: u64) -> Option<Vec<Action>> {
        let entry = self.sessions.get_mut(&discriminator)?;
        Some(entry.session.handle(event, now))
    }

    /// Decodes a received control packet, finds its session (RFC 5880
    /// §6.8.6: by Your Discriminator when non-zero, else by path, which
    /// `decode` allows only for Down and AdminDown packets) and runs it.
    /// The session checks the TTL and the source address.
    pub fn receive_control(
        &mut self,
        bytes: &[u8],
        meta: &RxMeta<'_>,
        now: u64,
    ) -> Result<(u32, Vec<Action>), RxDrop> {
        let packet = match ControlPacket::decode(bytes) {
            Ok(packet) => packet,
            Err(PacketError::Authenticated { auth_type }) => {
                self.counters.control_authenticated += 1;
                return Err(RxDrop::Authenticated(auth_type));
            }
            Err(error) => {
                self.counters.control_malformed += 1;
                return Err(RxDrop::Malformed(error));
            }
        };
        let discriminator = if packet.your_discr != 0 {
            let Some(entry) = self.sessions.get(&packet.your_discr) else {
                self.counters.control_unknown_discriminator += 1;
                return Err(RxDrop::UnknownDiscriminator(packet.your_discr));
            };
            let key = entry.session.key();
            let same_interface = match (key.hop, &key.interface, meta.interface) {
                (Hop::SingleHop, Some(ours), Some(theirs)) => ours == theirs,
                _ => true,
            };
            if key.hop != meta.hop || !same_interface {
                self.counters.control_wrong_path += 1;
                return Err(RxDrop::WrongPath(packet.your_discr));
            }
            packet.your_discr
        } else {
            let Some(discriminator) = self.find_path(meta) else {
                self.counters.control_unknown_path += 1;
                return Err(RxDrop::UnknownPath);
            };
            discriminator
        };
        let entry = self.entry_mut(discriminator);
        let (start, accepted) = &mut entry.rx_window;
        if now.saturating_sub(*start) >= RATE_WINDOW_NS {
            (*start, *accepted) = (now, 0);
        }
        if *accepted >= MAX_CONTROL_PER_SECOND {
            entry.rate_limited += 1;
            self.counters.control_rate_limited += 1;
            return Err(RxDrop::RateLimited(discriminator));
        }
        *accepted += 1;
        let event = Event::Received {
            packet,
            source: meta.source,
            ttl: meta.ttl,
        };
        let actions = entry.session.handle(event, now);
        Ok((discriminator, actions))
    }

    /// Decodes one of our echo packets come back and runs its session.
    pub fn receive_echo(&mut self, bytes: &[u8], now: u64) -> Result<(u32, Vec<Action>), RxDrop> {
        let echo = EchoPacket::decode(bytes).map_err(|error| {
            self.counters.echo_malformed += 1;
            RxDrop::MalformedEcho(error)
        })?;
        let Some(entry) = self.sessions.get_mut(&echo.discriminator) else {
            self.counters.echo_unknown_discriminator += 1;
            return Err(RxDrop::UnknownDiscriminator(echo.discriminator));
        };
        Ok((
            echo.discriminator,
            entry.session.handle(Event::EchoReceived(echo), now),
        ))
    }

    /// The session with this local discriminator.
    pub fn session(&self, discriminator: u32) -> Option<&Session> {
        self.sessions.get(&discriminator).map(|e| &e.session)
    }

    /// The local discriminator of the session on `key`.
    pub fn find(&self, key: &SessionKey) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// The session a client uses.
    pub fn client_session(&self, client: ClientId) -> Option<u32> {
        self.clients.get(&client).copied()
    }

    /// The clients sharing a session, in id order.
    pub fn clients(&self, discriminator: u32) -> Vec<ClientId> {
        self.sessions
            .get(&discriminator)
            .map_or_else(Vec::new, |e| e.clients.keys().copied().collect())
    }

    /// Control packets of a session dropped over
    /// [`MAX_CONTROL_PER_SECOND`].
    pub fn rate_limited(&self, discriminator: u32) -> u64 {
        self.sessions
            .get(&discriminator)
            .map_or(0, |e| e.rate_limited)
    }

    /// How many clients share a session.
    pub fn client_count(&self, discriminator: u32) -> usize {
        self.sessions
            .get(&discriminator)
            .map_or(0, |e| e.clients.len())
    }

    /// All sessions, in no particular order.
    pub fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values().map(|e| &e.session)
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn counters(&self) -> &RegistryCounters {
        &self.counters
    }

    fn entry_mut(&mut self, discriminator: u32) -> &mut Entry {
        // Every discriminator in `by_key` and `clients` has an entry.
        self.sessions
            .get_mut(&discriminator)
            .expect("registry maps are consistent")
    }

    fn apply_merged(entry: &mut Entry, now: u64) -> Vec<Action> {
        match Parameters::merge(entry.clients.values()) {
            Some(merged) if merged != *entry.session.params() => {
                entry.session.handle(Event::ParametersChanged(merged), now)
            }
            _ => Vec::new(),
        }
    }

    /// The session for a packet with Your Discriminator 0. Multihop
    /// sessions not bound to an interface match any ingress interface.
    fn find_path(&self, meta: &RxMeta<'_>) -> Option<u32> {
        let mut key = SessionKey {
            interface: meta.interface.map(str::to_owned),
            local: meta.destination,
            remote: meta.source,
            hop: meta.hop,
        };
        if let Some(&discriminator) = self.by_key.get(&key) {
            return Some(discriminator);
        }
        if meta.hop == Hop::MultiHop && key.interface.is_some() {
            key.interface = None;
            return self.by_key.get(&key).copied();
        }
        None
    }
}

#[cfg(test)]
mod tests;
