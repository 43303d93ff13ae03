//! A simulated network of membership cores: a fake clock (ns), an
//! in-memory network with per-link drop rules and a fixed latency plus
//! seeded jitter, nodes that can be killed (silent), paused (datagrams
//! wait in a bounded socket buffer) and resumed. No sockets.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use membership::{Config, Core, Event, Kind, Output, SecretKey};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

pub const MS: u64 = 1_000_000;
pub const SEC: u64 = 1_000 * MS;
/// Datagrams a paused node's socket holds.
const SOCKET_BUFFER: usize = 1000;

pub struct Node {
    pub core: Core,
    pub addr: SocketAddr,
    pub killed: bool,
    pub paused: bool,
    backlog: VecDeque<(SocketAddr, Vec<u8>)>,
    pub events: Vec<(u64, Event)>,
}

/// A datagram sent: from, to, kind, bytes.
pub type Recorded = (usize, usize, Kind, Vec<u8>);

/// A datagram on the wire: from, to, kind, bytes.
type InFlight = (SocketAddr, SocketAddr, Kind, Vec<u8>);

/// Which datagrams [`Sim::record`] keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordOnly {
    /// Every datagram sent.
    #[default]
    All,
    /// Those from or to this node (a large cluster's others are not kept).
    Node(usize),
}

pub struct Sim {
    pub now: u64,
    pub nodes: Vec<Node>,
    queue: BTreeMap<(u64, u64), InFlight>,
    seq: u64,
    /// Node index by address.
    by_addr: HashMap<SocketAddr, usize>,
    /// The next deadline of every running node with one, (at, index): kept
    /// in step with the cores the loop touches, rebuilt at each
    /// [`Sim::run_for`] (a test may have touched a core directly).
    deadlines: BTreeSet<(u64, usize)>,
    /// Each node's entry in `deadlines`.
    deadline_of: Vec<Option<u64>>,
    rng: StdRng,
    pub latency: u64,
    pub jitter: u64,
    /// Directed links that drop everything.
    pub blocked: BTreeSet<(usize, usize)>,
    /// Share of every datagram dropped at random (0.0: none).
    pub loss: f64,
    /// Datagrams sent per node and kind since the last reset (every one
    /// the core put out, whether the network then dropped it or not).
    pub sent: Vec<BTreeMap<Kind, u64>>,
    /// Datagrams that reached each node's socket per kind since the last
    /// reset (handled, or queued while paused; not those to a killed node).
    pub received: Vec<BTreeMap<Kind, u64>>,
    /// When set, every datagram sent (see `record_only`).
    pub record: Option<Vec<Recorded>>,
    pub record_only: RecordOnly,
    /// Keep `LiveChanged` events in the nodes' logs (each a copy of the
    /// whole live set: O(n^2) memory per node while a large cluster
    /// converges; off in the tests at size).
    pub log_live_sets: bool,
}

pub fn name(i: usize) -> String {
    format!("node-{i}")
}

/// Node `i`'s address: 192.0.2.1-254 for the first 254, then 198.18.0.0/15
/// (the benchmark prefix) for larger clusters.
pub fn addr(i: usize) -> SocketAddr {
    let ip = match u8::try_from(i + 1) {
        Ok(host) if host < 255 => Ipv4Addr::new(192, 0, 2, host),
        _ => {
            let k = u32::try_from(i).expect("fewer than 2^17 nodes");
            assert!(k < 1 << 17, "fewer than 2^17 nodes");
            Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + k)
        }
    };
    SocketAddr::new(IpAddr::V4(ip), 7946)
}

impl Sim {
    /// `n` nodes sharing `secret` (None: unauthenticated), seeded.
    pub fn new(n: usize, secret: Option<&[u8]>, seed: u64, tweak: impl Fn(&mut Config)) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = Config::new(name(i), addr(i), 1_000 + i as u64);
                cfg.cluster_size = u32::try_from(n).unwrap();
                tweak(&mut cfg);
                let key = secret.map(|s| SecretKey::from_secret(s).unwrap());
                let mut core = Core::new(cfg, key, rng.random());
                // the speakers' discovery: every Pod is listed
                core.set_peers((0..n).map(addr));
                Node {
                    core,
                    addr: addr(i),
                    killed: false,
                    paused: false,
                    backlog: VecDeque::new(),
                    events: Vec::new(),
                }
            })
            .collect();
        Sim {
            now: 0,
            by_addr: (0..n).map(|i| (addr(i), i)).collect(),
            deadlines: BTreeSet::new(),
            deadline_of: vec![None; n],
            nodes,
            queue: BTreeMap::new(),
            seq: 0,
            rng,
            latency: 200_000,
            jitter: 100_000,
            blocked: BTreeSet::new(),
            loss: 0.0,
            sent: vec![BTreeMap::new(); n],
            received: vec![BTreeMap::new(); n],
            record: None,
            record_only: RecordOnly::All,
            log_live_sets: true,
        }
    }

    pub fn index_of(&self, addr: SocketAddr) -> Option<usize> {
        self.by_addr
            .get(&addr)
            .copied()
            .filter(|i| self.nodes.get(*i).is_some_and(|n| n.addr == addr))
    }

    /// Puts node `i`'s next deadline in the index (none if not running).
    fn reindex(&mut self, i: usize) {
        let at = if self.running(i) {
            self.nodes[i].core.next_deadline()
        } else {
            None
        };
        if self.deadline_of[i] == at {
            return;
        }
        if let Some(old) = self.deadline_of[i] {
            self.deadlines.remove(&(old, i));
        }
        if let Some(at) = at {
            self.deadlines.insert((at, i));
        }
        self.deadline_of[i] = at;
    }

    fn reindex_all(&mut self) {
        self.deadlines.clear();
        self.deadline_of = vec![None; self.nodes.len()];
        for i in 0..self.nodes.len() {
            self.reindex(i);
        }
    }

    /// Every node joins through node 0, then the cluster runs until every
    /// node sees every other (panics after `limit`).
    pub fn converge(&mut self, limit: u64) {
        let seeds = [addr(0)];
        for i in 1..self.nodes.len() {
            self.nodes[i].core.join(&seeds, self.now);
            self.flush(i);
        }
        let deadline = self.now + limit;
        let n = self.nodes.len();
        while self.now < deadline {
            self.run_for(100 * MS);
            if self.nodes.iter().all(|node| node.core.live().len() == n) {
                return;
            }
        }
        let sizes: Vec<usize> = self.nodes.iter().map(|n| n.core.live().len()).collect();
        panic!("cluster of {n} did not converge: {sizes:?}");
    }

    pub fn watch(&mut self, watcher: usize, owners: &[usize]) {
        let set = owners.iter().map(|i| name(*i)).collect();
        self.nodes[watcher].core.watch_owners(set, self.now);
        self.flush(watcher);
    }

    /// Node `i`'s process is replaced by a new one (same name and address,
    /// generation `generation`, `secret` as the others) that has not joined
    /// yet: it answers what reaches its socket, it knows no member.
    pub fn restart_unjoined(&mut self, i: usize, generation: u64, secret: Option<&[u8]>) {
        let mut cfg = Config::new(name(i), addr(i), generation);
        cfg.cluster_size = u32::try_from(self.nodes.len()).unwrap();
        let key = secret.map(|s| SecretKey::from_secret(s).unwrap());
        let seed = self.rng.random();
        let n = self.nodes.len();
        let node = &mut self.nodes[i];
        node.core = Core::new(cfg, key, seed);
        node.core.set_peers((0..n).map(addr));
        node.killed = false;
        node.paused = false;
        node.backlog.clear();
    }

    pub fn kill(&mut self, i: usize) {
        self.nodes[i].killed = true;
    }

    pub fn pause(&mut self, i: usize) {
        self.nodes[i].paused = true;
    }

    pub fn resume(&mut self, i: usize) {
        self.nodes[i].paused = false;
        let now = self.now;
        self.nodes[i].core.tick(now);
        while let Some((from, data)) = self.nodes[i].backlog.pop_front() {
            self.nodes[i].core.handle_datagram(from, &data, now);
        }
        self.flush(i);
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut(&mut self, a: usize, b: usize) {
        self.blocked.insert((a, b));
        self.blocked.insert((b, a));
    }

    /// Isolates `a` from every other node.
    pub fn isolate(&mut self, a: usize) {
        for b in 0..self.nodes.len() {
            if a != b {
                self.cut(a, b);
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    fn running(&self, i: usize) -> bool {
        !self.nodes[i].killed && !self.nodes[i].paused
    }

    /// Moves outputs of node `i` into the network and its event log.
    pub fn flush(&mut self, i: usize) {
        let outputs = self.nodes[i].core.take_outputs();
        for output in outputs {
            match output {
                Output::Send { to, kind, datagram } => {
                    // every test: foca keeps a node's identities from
                    // before a renewal as Down members at its own address
                    // and announces to Down members; those datagrams
                    // made the node tell itself to rejoin, once a second
                    assert_ne!(
                        to,
                        self.nodes[i].addr,
                        "{} sends {kind:?} to itself",
                        name(i)
                    );
                    *self.sent[i].entry(kind).or_default() += 1;
                    let Some(j) = self.index_of(to) else {
                        continue;
                    };
                    if let Some(record) = &mut self.record {
                        let keep = match self.record_only {
                            RecordOnly::All => true,
                            RecordOnly::Node(k) => i == k || j == k,
                        };
                        if keep {
                            record.push((i, j, kind, datagram.clone()));
                        }
                    }
                    if self.blocked.contains(&(i, j)) {
                        continue;
                    }
                    if self.loss > 0.0 && self.rng.random_bool(self.loss) {
                        continue;
                    }
                    let at = self.now + self.latency + self.rng.random_range(0..=self.jitter);
                    self.seq += 1;
                    self.queue
                        .insert((at, self.seq), (self.nodes[i].addr, to, kind, datagram));
                }
                Output::Event(Event::LiveChanged(_)) if !self.log_live_sets => {}
                Output::Event(event) => self.nodes[i].events.push((self.now, event)),
            }
        }
        self.reindex(i);
    }

    /// Injects a raw datagram for node `to` from `from` (now + latency).
    pub fn inject(&mut self, from: SocketAddr, to: usize, datagram: Vec<u8>) {
        self.seq += 1;
        let at = self.now + self.latency;
        let kind = datagram
            .first()
            .and_then(|b| Kind::from_byte(*b))
            .unwrap_or(Kind::Swim);
        self.queue
            .insert((at, self.seq), (from, self.nodes[to].addr, kind, datagram));
    }

    /// Runs the whole cluster until `now + duration`: the earliest of the
    /// next datagram and the next deadline of a running node, a datagram
    /// first at a tie, then the lowest node index.
    pub fn run_for(&mut self, duration: u64) {
        let end = self.now + duration;
        self.reindex_all();
        loop {
            let packet = self.queue.keys().next().map(|(at, _)| *at);
            let timer = self.deadlines.first().copied();
            let next = match (packet, timer) {
                (Some(p), Some((t, _))) => p.min(t),
                (Some(p), None) => p,
                (None, Some((t, _))) => t,
                (None, None) => end,
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            if packet == Some(next) {
                let (_, (from, to, kind, data)) = self.queue.pop_first().unwrap();
                let Some(j) = self.index_of(to) else {
                    continue;
                };
                if self.nodes[j].killed {
                    continue;
                }
                *self.received[j].entry(kind).or_default() += 1;
                if self.nodes[j].paused {
                    if self.nodes[j].backlog.len() < SOCKET_BUFFER {
                        self.nodes[j].backlog.push_back((from, data));
                    }
                    continue;
                }
                let now = self.now;
                self.nodes[j].core.handle_datagram(from, &data, now);
                self.flush(j);
            } else if let Some((_, i)) = timer {
                let now = self.now;
                self.nodes[i].core.tick(now);
                self.flush(i);
            }
        }
        self.now = end;
    }

    /// The first event of node `i` at or after `since` matching `pred`.
    pub fn first_event(
        &self,
        i: usize,
        since: u64,
        pred: impl Fn(&Event) -> bool,
    ) -> Option<(u64, Event)> {
        self.nodes[i]
            .events
            .iter()
            .find(|(at, e)| *at >= since && pred(e))
            .cloned()
    }

    pub fn reset_counts(&mut self) {
        for counts in self.sent.iter_mut().chain(self.received.iter_mut()) {
            counts.clear();
        }
    }
}
