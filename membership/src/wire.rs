//! Datagram framing, authentication and the message codecs.
//!
//! Every datagram on the membership port starts with two bytes:
//!
//! ```text
//! 0      kind: 1 SWIM (foca), 2 heartbeat, 3 probe request, 4 probe reply,
//!           5 ping, 6 ack, 7 leave, 8 state sync, 9 probe nack
//! 1      mode: 0 plain, 2 sealed (XChaCha20-Poly1305)
//! sealed: 2..10 the sender's clock (ms, big-endian, monotonic within the
//!         sending process), 10..34 nonce, then the ciphertext of the body,
//!         then a 16-byte tag; bytes 0..10 are the associated data
//! plain:  2.. body
//! ```
//!
//! With a key, only sealed datagrams are accepted; without one, only plain
//! ones. A datagram that fails authentication is refused before any byte of
//! its body is read. Decoders never panic and allocate at most the
//! datagram's length (every length is bounded by what is left to read).
//!
//! Mode 1 (the sealed format before the sender's clock was added: nonce at
//! 2..26, associated data 0..2) is refused like any datagram that fails
//! authentication: speakers of both versions do not see each other, so a
//! rolling upgrade across this change splits the membership until it ends.
//! The clock and the nonce (per-process prefix, counter) let the receiver
//! refuse replays ([`Opened::stamp`], checked by the core).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Buf, BufMut};
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use foca::{Header, Member, Message, State};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::identity::{MAX_NAME_LEN, NodeId};

/// The UDP port MetalLB's memberlist uses (`--ml-bindport`).
pub const DEFAULT_PORT: u16 = 7946;
/// Largest datagram sent or accepted.
pub const MAX_DATAGRAM: usize = 1400;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const PREFIX_LEN: usize = 2;
const CLOCK_LEN: usize = 8;
/// The associated data of a sealed frame: kind, mode, sender's clock.
const AAD_LEN: usize = PREFIX_LEN + CLOCK_LEN;
/// Bytes a sealed frame adds around its body.
pub const SEALED_OVERHEAD: usize = AAD_LEN + NONCE_LEN + TAG_LEN;
/// Largest body (what foca may produce).
pub const MAX_BODY: usize = MAX_DATAGRAM - SEALED_OVERHEAD;

const MODE_PLAIN: u8 = 0;
/// Mode 1 was the sealed format without the sender's clock (refused).
const MODE_SEALED: u8 = 2;
const KEY_CONTEXT: &[u8] = b"metallb-rs membership v1\0";

/// What a datagram carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Swim = 1,
    Heartbeat = 2,
    ProbeRequest = 3,
    ProbeReply = 4,
    Ping = 5,
    Ack = 6,
    Leave = 7,
    Sync = 8,
    ProbeNack = 9,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Swim,
        Kind::Heartbeat,
        Kind::ProbeRequest,
        Kind::ProbeReply,
        Kind::Ping,
        Kind::Ack,
        Kind::Leave,
        Kind::Sync,
        Kind::ProbeNack,
    ];

    pub fn from_byte(byte: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| *kind as u8 == byte)
    }

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Swim => "swim",
            Kind::Heartbeat => "heartbeat",
            Kind::ProbeRequest => "probe_request",
            Kind::ProbeReply => "probe_reply",
            Kind::Ping => "ping",
            Kind::Ack => "ack",
            Kind::Leave => "leave",
            Kind::Sync => "sync",
            Kind::ProbeNack => "probe_nack",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize - 1
    }
}

/// The cluster key, derived from the content of the `--ml-secret-key-path`
/// file. Its Debug output never shows the key.
#[derive(Clone)]
pub struct SecretKey {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// The key file cannot be used. Never carries the key.
#[derive(Debug, Error)]
pub enum KeyError {
    #[error("the membership secret key file is empty")]
    Empty,
    #[error("failed to read memberlist secret key file {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The file MetalLB reads in the `--ml-secret-key-path` directory.
pub const KEY_FILE: &str = "secretkey";

impl SecretKey {
    /// The key from `<dir>/secretkey` (`--ml-secret-key-path`), as MetalLB
    /// reads it: the file's bytes, unmodified.
    pub fn read_dir(dir: &std::path::Path) -> Result<SecretKey, KeyError> {
        let path = dir.join(KEY_FILE);
        let secret = std::fs::read(&path).map_err(|source| KeyError::Read { path, source })?;
        SecretKey::from_secret(&secret)
    }

    /// The key for a secret: SHA-256 of a fixed context string followed by
    /// the file's bytes, as they are (MetalLB also uses them unmodified).
    pub fn from_secret(secret: &[u8]) -> Result<SecretKey, KeyError> {
        if secret.is_empty() {
            return Err(KeyError::Empty);
        }
        let mut hash = Sha256::new();
        hash.update(KEY_CONTEXT);
        hash.update(secret);
        let digest: [u8; 32] = hash.finalize().into();
        let key = Key::from(digest);
        Ok(SecretKey {
            cipher: XChaCha20Poly1305::new(&key),
        })
    }
}

/// Why a datagram was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("datagram of {0} bytes is too short")]
    Truncated(usize),
    #[error("datagram of {0} bytes is too long")]
    TooLong(usize),
    #[error("unknown datagram kind {0}")]
    UnknownKind(u8),
    /// A sealed datagram whose tag does not verify, or a plain one when a
    /// key is configured (or the reverse).
    #[error("datagram failed authentication")]
    Authentication,
}

/// Where an authenticated datagram comes from and when it was sealed:
/// the sending process (its nonce prefix), the nonce counter (unique per
/// datagram of that process) and the sender's clock. All of it is
/// authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub process: [u8; 16],
    pub counter: u64,
    pub sent_ms: u64,
}

/// A received datagram that passed authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub kind: Kind,
    pub body: Vec<u8>,
    /// `None` for a plain datagram (no key: nothing is authenticated).
    pub stamp: Option<Stamp>,
}

/// Seals and opens datagrams. Nonces are a random 16-byte prefix drawn at
/// construction followed by a 64-bit counter, so they never repeat within a
/// process and collide across processes with negligible probability.
#[derive(Debug)]
pub struct Framer {
    key: Option<SecretKey>,
    nonce_prefix: [u8; 16],
    counter: u64,
    /// The clock written into sealed frames ([`Framer::set_clock`]).
    clock_ms: u64,
}

impl Framer {
    pub fn new(key: Option<SecretKey>, nonce_prefix: [u8; 16]) -> Framer {
        Framer {
            key,
            nonce_prefix,
            counter: 0,
            clock_ms: 0,
        }
    }

    /// The sender's clock (ms) for the next frames; it never goes back.
    pub fn set_clock(&mut self, now_ms: u64) {
        self.clock_ms = self.clock_ms.max(now_ms);
    }

    pub fn is_sealed(&self) -> bool {
        self.key.is_some()
    }

    /// A datagram with `body`; `None` when the body is too long.
    pub fn seal(&mut self, kind: Kind, body: &[u8]) -> Option<Vec<u8>> {
        if body.len() > MAX_BODY {
            return None;
        }
        let Some(key) = &self.key else {
            let mut out = Vec::with_capacity(PREFIX_LEN + body.len());
            out.extend_from_slice(&[kind as u8, MODE_PLAIN]);
            out.extend_from_slice(body);
            return Some(out);
        };
        self.counter = self.counter.wrapping_add(1);
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..16].copy_from_slice(&self.nonce_prefix);
        nonce[16..].copy_from_slice(&self.counter.to_be_bytes());
        let mut out = Vec::with_capacity(SEALED_OVERHEAD + body.len());
        out.extend_from_slice(&[kind as u8, MODE_SEALED]);
        out.extend_from_slice(&self.clock_ms.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(body);
        let (head, rest) = out.split_at_mut(AAD_LEN + NONCE_LEN);
        let tag = key
            .cipher
            .encrypt_inout_detached(&XNonce::from(nonce), &head[..AAD_LEN], rest.into())
            .ok()?;
        out.extend_from_slice(&tag);
        Some(out)
    }

    /// The kind and body of a received datagram (decrypted when sealed).
    pub fn open(&self, datagram: &[u8]) -> Result<Opened, FrameError> {
        if datagram.len() > MAX_DATAGRAM {
            return Err(FrameError::TooLong(datagram.len()));
        }
        let [kind, mode, rest @ ..] = datagram else {
            return Err(FrameError::Truncated(datagram.len()));
        };
        let kind = Kind::from_byte(*kind).ok_or(FrameError::UnknownKind(*kind))?;
        match (&self.key, *mode) {
            (None, MODE_PLAIN) => Ok(Opened {
                kind,
                body: rest.to_vec(),
                stamp: None,
            }),
            (Some(key), MODE_SEALED) => {
                if rest.len() < CLOCK_LEN + NONCE_LEN + TAG_LEN {
                    return Err(FrameError::Authentication);
                }
                let (clock, rest) = rest.split_at(CLOCK_LEN);
                let (nonce, rest) = rest.split_at(NONCE_LEN);
                let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
                let sent_ms = u64::from_be_bytes(
                    <[u8; CLOCK_LEN]>::try_from(clock).map_err(|_| FrameError::Authentication)?,
                );
                let mut process = [0u8; 16];
                process.copy_from_slice(&nonce[..16]);
                let counter = u64::from_be_bytes(
                    <[u8; 8]>::try_from(&nonce[16..]).map_err(|_| FrameError::Authentication)?,
                );
                let nonce = XNonce::try_from(nonce).map_err(|_| FrameError::Authentication)?;
                let tag = Tag::try_from(tag).map_err(|_| FrameError::Authentication)?;
                let mut body = ciphertext.to_vec();
                key.cipher
                    .decrypt_inout_detached(
                        &nonce,
                        &datagram[..AAD_LEN],
                        body.as_mut_slice().into(),
                        &tag,
                    )
                    .map_err(|_| FrameError::Authentication)?;
                Ok(Opened {
                    kind,
                    body,
                    stamp: Some(Stamp {
                        process,
                        counter,
                        sent_ms,
                    }),
                })
            }
            _ => Err(FrameError::Authentication),
        }
    }
}

/// A body that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("truncated message")]
    Truncated,
    #[error("invalid {0}")]
    Invalid(&'static str),
    #[error("trailing bytes")]
    Trailing,
    #[error("value does not fit")]
    TooLarge,
}

// ---- primitive readers over a contiguous buffer ----

fn need(buf: &impl Buf, n: usize) -> Result<(), DecodeError> {
    if buf.remaining() < n {
        Err(DecodeError::Truncated)
    } else {
        Ok(())
    }
}

fn get_u8(buf: &mut impl Buf) -> Result<u8, DecodeError> {
    need(buf, 1)?;
    Ok(buf.get_u8())
}

fn get_u16(buf: &mut impl Buf) -> Result<u16, DecodeError> {
    need(buf, 2)?;
    Ok(buf.get_u16())
}

fn get_u64(buf: &mut impl Buf) -> Result<u64, DecodeError> {
    need(buf, 8)?;
    Ok(buf.get_u64())
}

fn get_name(buf: &mut impl Buf, allow_empty: bool) -> Result<String, DecodeError> {
    let len = usize::from(get_u8(buf)?);
    if len == 0 && !allow_empty {
        return Err(DecodeError::Invalid("empty name"));
    }
    need(buf, len)?;
    let mut bytes = vec![0u8; len];
    buf.copy_to_slice(&mut bytes);
    String::from_utf8(bytes).map_err(|_| DecodeError::Invalid("name"))
}

fn put_name(buf: &mut impl BufMut, name: &str) -> Result<(), DecodeError> {
    let len = u8::try_from(name.len()).map_err(|_| DecodeError::TooLarge)?;
    if name.len() > MAX_NAME_LEN {
        return Err(DecodeError::TooLarge);
    }
    buf.put_u8(len);
    buf.put_slice(name.as_bytes());
    Ok(())
}

fn get_addr(buf: &mut impl Buf) -> Result<SocketAddr, DecodeError> {
    let ip = match get_u8(buf)? {
        4 => {
            need(buf, 4)?;
            let mut octets = [0u8; 4];
            buf.copy_to_slice(&mut octets);
            IpAddr::V4(Ipv4Addr::from(octets))
        }
        6 => {
            need(buf, 16)?;
            let mut octets = [0u8; 16];
            buf.copy_to_slice(&mut octets);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return Err(DecodeError::Invalid("address family")),
    };
    Ok(SocketAddr::new(ip, get_u16(buf)?))
}

fn addr_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => 1 + 4 + 2,
        SocketAddr::V6(_) => 1 + 16 + 2,
    }
}

fn put_addr(buf: &mut impl BufMut, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => {
            buf.put_u8(4);
            buf.put_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            buf.put_u8(6);
            buf.put_slice(&ip.octets());
        }
    }
    buf.put_u16(addr.port());
}

fn node_len(id: &NodeId) -> usize {
    1 + id.name.len() + addr_len(&id.addr) + 8
}

fn put_node(buf: &mut impl BufMut, id: &NodeId) -> Result<(), DecodeError> {
    if buf.remaining_mut() < node_len(id) {
        return Err(DecodeError::TooLarge);
    }
    put_name(buf, &id.name)?;
    put_addr(buf, &id.addr);
    buf.put_u64(id.generation);
    Ok(())
}

fn get_node(buf: &mut impl Buf, allow_seed: bool) -> Result<NodeId, DecodeError> {
    let name = get_name(buf, allow_seed)?;
    let addr = get_addr(buf)?;
    let generation = get_u64(buf)?;
    Ok(NodeId::new(name, addr, generation))
}

// ---- foca's codec ----

/// Foca's wire format. It knows the local node name so that an announce
/// addressed to a seed (empty name, see [`NodeId::seed`]) is read as
/// addressed to us; foca accepts an announce whose destination has our
/// name.
#[derive(Clone, Debug)]
pub struct SwimCodec {
    local_name: String,
}

impl SwimCodec {
    pub fn new(local_name: impl Into<String>) -> SwimCodec {
        SwimCodec {
            local_name: local_name.into(),
        }
    }
}

fn message_len(message: &Message<NodeId>) -> usize {
    1 + match message {
        Message::Ping(_) | Message::Ack(_) => 1,
        Message::PingReq { target: id, .. }
        | Message::IndirectPing { origin: id, .. }
        | Message::IndirectAck { target: id, .. }
        | Message::ForwardedAck { origin: id, .. } => node_len(id) + 1,
        Message::Announce
        | Message::Feed
        | Message::Gossip
        | Message::Broadcast
        | Message::TurnUndead => 0,
    }
}

impl foca::Codec<NodeId> for SwimCodec {
    type Error = DecodeError;

    fn encode_header(
        &mut self,
        header: &Header<NodeId>,
        mut buf: impl BufMut,
    ) -> Result<(), DecodeError> {
        let len = node_len(&header.src) + 2 + node_len(&header.dst) + message_len(&header.message);
        if buf.remaining_mut() < len {
            return Err(DecodeError::TooLarge);
        }
        put_node(&mut buf, &header.src)?;
        buf.put_u16(header.src_incarnation);
        put_node(&mut buf, &header.dst)?;
        let (tag, id, probe) = match &header.message {
            Message::Ping(n) => (0, None, Some(*n)),
            Message::Ack(n) => (1, None, Some(*n)),
            Message::PingReq {
                target,
                probe_number,
            } => (2, Some(target), Some(*probe_number)),
            Message::IndirectPing {
                origin,
                probe_number,
            } => (3, Some(origin), Some(*probe_number)),
            Message::IndirectAck {
                target,
                probe_number,
            } => (4, Some(target), Some(*probe_number)),
            Message::ForwardedAck {
                origin,
                probe_number,
            } => (5, Some(origin), Some(*probe_number)),
            Message::Announce => (6, None, None),
            Message::Feed => (7, None, None),
            Message::Gossip => (8, None, None),
            Message::Broadcast => (9, None, None),
            Message::TurnUndead => (10, None, None),
        };
        buf.put_u8(tag);
        if let Some(id) = id {
            put_node(&mut buf, id)?;
        }
        if let Some(probe) = probe {
            buf.put_u8(probe);
        }
        Ok(())
    }

    fn decode_header(&mut self, mut buf: impl Buf) -> Result<Header<NodeId>, DecodeError> {
        let src = get_node(&mut buf, false)?;
        let src_incarnation = get_u16(&mut buf)?;
        let mut dst = get_node(&mut buf, true)?;
        let tag = get_u8(&mut buf)?;
        let message = match tag {
            0 => Message::Ping(get_u8(&mut buf)?),
            1 => Message::Ack(get_u8(&mut buf)?),
            2..=5 => {
                let id = get_node(&mut buf, false)?;
                let probe_number = get_u8(&mut buf)?;
                match tag {
                    2 => Message::PingReq {
                        target: id,
                        probe_number,
                    },
                    3 => Message::IndirectPing {
                        origin: id,
                        probe_number,
                    },
                    4 => Message::IndirectAck {
                        target: id,
                        probe_number,
                    },
                    _ => Message::ForwardedAck {
                        origin: id,
                        probe_number,
                    },
                }
            }
            6 => Message::Announce,
            7 => Message::Feed,
            8 => Message::Gossip,
            9 => Message::Broadcast,
            10 => Message::TurnUndead,
            _ => return Err(DecodeError::Invalid("message type")),
        };
        if dst.is_seed() {
            if message != Message::Announce {
                return Err(DecodeError::Invalid("empty name"));
            }
            dst.name = std::sync::Arc::from(self.local_name.as_str());
        }
        Ok(Header {
            src,
            src_incarnation,
            dst,
            message,
        })
    }

    fn encode_member(
        &mut self,
        member: &Member<NodeId>,
        mut buf: impl BufMut,
    ) -> Result<(), DecodeError> {
        if buf.remaining_mut() < node_len(member.id()) + 3 {
            return Err(DecodeError::TooLarge);
        }
        put_node(&mut buf, member.id())?;
        buf.put_u16(member.incarnation());
        buf.put_u8(match member.state() {
            State::Alive => 0,
            State::Suspect => 1,
            State::Down => 2,
        });
        Ok(())
    }

    fn decode_member(&mut self, mut buf: impl Buf) -> Result<Member<NodeId>, DecodeError> {
        let id = get_node(&mut buf, false)?;
        let incarnation = get_u16(&mut buf)?;
        let state = match get_u8(&mut buf)? {
            0 => State::Alive,
            1 => State::Suspect,
            2 => State::Down,
            _ => return Err(DecodeError::Invalid("member state")),
        };
        Ok(Member::new(id, incarnation, state))
    }
}

// ---- the fast path's messages ----

/// Who sent a fast-path message (inside the authenticated body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sender {
    pub name: String,
    pub generation: u64,
}

/// A non-SWIM message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// One BFD control packet of the heartbeat session between the two
    /// nodes. `seq` grows with every heartbeat a process sends (replays
    /// are refused); `watching`: the sender watches the receiver.
    Heartbeat {
        from: Sender,
        seq: u64,
        watching: bool,
        packet: bfd::ControlPacket,
    },
    /// Please ping `target` at `target_addr` and tell me if it answers.
    /// `target_generation`: the process of `target` meant; another process
    /// at that address (a restart) does not count as reaching it.
    ProbeRequest {
        from: Sender,
        id: u64,
        target: String,
        target_addr: SocketAddr,
        target_generation: u64,
    },
    /// `target` answered the ping of request `id`.
    ProbeReply {
        from: Sender,
        id: u64,
        target: String,
    },
    /// `target` did not answer the ping of request `id` in time (Lifeguard's
    /// indirect-probe NACK): the requester reaches this helper, so it is not
    /// the one cut off.
    ProbeNack {
        from: Sender,
        id: u64,
        target: String,
    },
    /// Answered with an [`Control::Ack`] only by the process of
    /// `target_generation` (a restarted process at the address of a dead
    /// one must not answer for it).
    Ping {
        from: Sender,
        id: u64,
        target_generation: u64,
    },
    Ack {
        from: Sender,
        id: u64,
    },
    /// The sender leaves the cluster (graceful shutdown).
    Leave {
        from: Sender,
    },
    /// Part of the sender's full membership state (memberlist's push-pull:
    /// gossip alone may never tell a member about every other in a large
    /// join). `reply`: answer with your own state. `part`: which datagram of
    /// the sender's whole state this is (None: a few records only, not the
    /// whole state).
    Sync {
        from: Sender,
        reply: bool,
        part: Option<SyncPart>,
        members: Vec<Member<NodeId>>,
    },
}

/// A datagram's place in a whole state sent as `count` datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncPart {
    /// 0-based, below `count`.
    pub index: u16,
    /// At least 1.
    pub count: u16,
}

/// A [`Control::Sync`]'s flags: answer with your state.
const SYNC_REPLY: u8 = 1;
/// A [`Control::Sync`]'s flags: a [`SyncPart`] follows.
const SYNC_PART: u8 = 2;

/// Bytes of a [`Control::Sync`] body besides its members, at most.
pub const SYNC_OVERHEAD: usize = 1 + MAX_NAME_LEN + 8 + 1 + 4 + 2;

/// Encoded length of a member in a [`Control::Sync`].
pub fn member_len(member: &Member<NodeId>) -> usize {
    node_len(member.id()) + 3
}

impl Control {
    pub fn kind(&self) -> Kind {
        match self {
            Control::Heartbeat { .. } => Kind::Heartbeat,
            Control::ProbeRequest { .. } => Kind::ProbeRequest,
            Control::ProbeReply { .. } => Kind::ProbeReply,
            Control::ProbeNack { .. } => Kind::ProbeNack,
            Control::Ping { .. } => Kind::Ping,
            Control::Ack { .. } => Kind::Ack,
            Control::Leave { .. } => Kind::Leave,
            Control::Sync { .. } => Kind::Sync,
        }
    }

    pub fn from(&self) -> &Sender {
        match self {
            Control::Heartbeat { from, .. }
            | Control::ProbeRequest { from, .. }
            | Control::ProbeReply { from, .. }
            | Control::ProbeNack { from, .. }
            | Control::Ping { from, .. }
            | Control::Ack { from, .. }
            | Control::Leave { from }
            | Control::Sync { from, .. } => from,
        }
    }

    /// The body (what follows the frame prefix).
    pub fn encode(&self) -> Result<Vec<u8>, DecodeError> {
        let mut buf = Vec::with_capacity(64);
        let from = self.from();
        put_name(&mut buf, &from.name)?;
        buf.put_u64(from.generation);
        match self {
            Control::Heartbeat {
                seq,
                watching,
                packet,
                ..
            } => {
                buf.put_u64(*seq);
                buf.put_u8(u8::from(*watching));
                buf.extend_from_slice(&packet.to_vec());
            }
            Control::ProbeRequest {
                id,
                target,
                target_addr,
                target_generation,
                ..
            } => {
                buf.put_u64(*id);
                put_name(&mut buf, target)?;
                put_addr(&mut buf, target_addr);
                buf.put_u64(*target_generation);
            }
            Control::ProbeReply { id, target, .. } | Control::ProbeNack { id, target, .. } => {
                buf.put_u64(*id);
                put_name(&mut buf, target)?;
            }
            Control::Ping {
                id,
                target_generation,
                ..
            } => {
                buf.put_u64(*id);
                buf.put_u64(*target_generation);
            }
            Control::Ack { id, .. } => buf.put_u64(*id),
            Control::Leave { .. } => {}
            Control::Sync {
                reply,
                part,
                members,
                ..
            } => {
                let mut flags = if *reply { SYNC_REPLY } else { 0 };
                if part.is_some() {
                    flags |= SYNC_PART;
                }
                buf.put_u8(flags);
                if let Some(part) = part {
                    buf.put_u16(part.index);
                    buf.put_u16(part.count);
                }
                let count = u16::try_from(members.len()).map_err(|_| DecodeError::TooLarge)?;
                buf.put_u16(count);
                let mut codec = SwimCodec::new("");
                for member in members {
                    foca::Codec::encode_member(&mut codec, member, &mut buf)?;
                }
            }
        }
        Ok(buf)
    }

    /// Decodes the body of a datagram of `kind` (not [`Kind::Swim`]).
    pub fn decode(kind: Kind, body: &[u8]) -> Result<Control, DecodeError> {
        let mut buf = body;
        let from = Sender {
            name: get_name(&mut buf, false)?,
            generation: get_u64(&mut buf)?,
        };
        let control = match kind {
            Kind::Swim => return Err(DecodeError::Invalid("kind")),
            Kind::Heartbeat => {
                let seq = get_u64(&mut buf)?;
                let watching = match get_u8(&mut buf)? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Invalid("flags")),
                };
                let packet = bfd::ControlPacket::decode(buf)
                    .map_err(|_| DecodeError::Invalid("BFD control packet"))?;
                let len = packet.encoded_len();
                buf = buf.get(len..).ok_or(DecodeError::Truncated)?;
                Control::Heartbeat {
                    from,
                    seq,
                    watching,
                    packet,
                }
            }
            Kind::ProbeRequest => Control::ProbeRequest {
                from,
                id: get_u64(&mut buf)?,
                target: get_name(&mut buf, false)?,
                target_addr: get_addr(&mut buf)?,
                target_generation: get_u64(&mut buf)?,
            },
            Kind::ProbeReply => Control::ProbeReply {
                from,
                id: get_u64(&mut buf)?,
                target: get_name(&mut buf, false)?,
            },
            Kind::ProbeNack => Control::ProbeNack {
                from,
                id: get_u64(&mut buf)?,
                target: get_name(&mut buf, false)?,
            },
            Kind::Ping => Control::Ping {
                from,
                id: get_u64(&mut buf)?,
                target_generation: get_u64(&mut buf)?,
            },
            Kind::Ack => Control::Ack {
                from,
                id: get_u64(&mut buf)?,
            },
            Kind::Leave => Control::Leave { from },
            Kind::Sync => {
                let flags = get_u8(&mut buf)?;
                if flags & !(SYNC_REPLY | SYNC_PART) != 0 {
                    return Err(DecodeError::Invalid("flags"));
                }
                let reply = flags & SYNC_REPLY != 0;
                let part = if flags & SYNC_PART != 0 {
                    let index = get_u16(&mut buf)?;
                    let count = get_u16(&mut buf)?;
                    if index >= count {
                        return Err(DecodeError::Invalid("sync part"));
                    }
                    Some(SyncPart { index, count })
                } else {
                    None
                };
                let count = usize::from(get_u16(&mut buf)?);
                // every member takes at least 20 bytes: no allocation
                // beyond what the datagram can hold
                if count > buf.len() / 20 {
                    return Err(DecodeError::Truncated);
                }
                let mut codec = SwimCodec::new("");
                let mut members = Vec::with_capacity(count);
                for _ in 0..count {
                    members.push(foca::Codec::decode_member(&mut codec, &mut buf)?);
                }
                Control::Sync {
                    from,
                    reply,
                    part,
                    members,
                }
            }
        };
        if !buf.is_empty() {
            return Err(DecodeError::Trailing);
        }
        Ok(control)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foca::Codec;
    use proptest::prelude::*;

    fn key(secret: &[u8]) -> Option<SecretKey> {
        Some(SecretKey::from_secret(secret).unwrap())
    }

    fn sender() -> Sender {
        Sender {
            name: "node-a".into(),
            generation: 42,
        }
    }

    #[test]
    fn sealed_round_trip_and_tamper() {
        let mut framer = Framer::new(key(b"s3cret"), [7; 16]);
        framer.set_clock(0x0102);
        let datagram = framer.seal(Kind::Ping, b"hello").unwrap();
        assert_eq!(datagram.len(), SEALED_OVERHEAD + 5);
        assert_eq!(&datagram[..10], &[5, 2, 0, 0, 0, 0, 0, 0, 1, 2]);
        assert!(
            !datagram.windows(5).any(|w| w == b"hello"),
            "body encrypted"
        );
        let opened = framer.open(&datagram).unwrap();
        assert_eq!((opened.kind, opened.body), (Kind::Ping, b"hello".to_vec()));
        assert_eq!(
            opened.stamp,
            Some(Stamp {
                process: [7; 16],
                counter: 1,
                sent_ms: 0x0102
            })
        );
        // the earlier sealed format (mode 1, no clock) is refused
        let mut old = datagram.clone();
        old[1] = 1;
        assert_eq!(framer.open(&old), Err(FrameError::Authentication));
        // the clock does not go back
        framer.set_clock(5);
        let later = framer.seal(Kind::Ping, b"hello").unwrap();
        assert_eq!(framer.open(&later).unwrap().stamp.unwrap().sent_ms, 0x0102);
        // every single-byte change is refused
        for i in 0..datagram.len() {
            let mut bad = datagram.clone();
            bad[i] ^= 0x01;
            assert!(framer.open(&bad).is_err(), "byte {i}");
        }
        // another key
        let other = Framer::new(key(b"other"), [7; 16]);
        assert_eq!(other.open(&datagram), Err(FrameError::Authentication));
        // plain receiver refuses sealed, sealed receiver refuses plain
        let mut plain = Framer::new(None, [0; 16]);
        assert_eq!(plain.open(&datagram), Err(FrameError::Authentication));
        let clear = plain.seal(Kind::Ping, b"hello").unwrap();
        assert_eq!(framer.open(&clear), Err(FrameError::Authentication));
        assert_eq!(plain.open(&clear).unwrap().body, b"hello");
        assert_eq!(plain.open(&clear).unwrap().stamp, None);
        // nonces do not repeat
        let again = framer.seal(Kind::Ping, b"hello").unwrap();
        assert_ne!(datagram[10..34], again[10..34]);
    }

    #[test]
    fn key_debug_hides_secret_and_empty_key_refused() {
        let key = SecretKey::from_secret(b"topsecretvalue").unwrap();
        let text = format!("{key:?} {:?}", Framer::new(Some(key.clone()), [0; 16]));
        assert!(!text.contains("topsecret"));
        assert!(matches!(
            SecretKey::from_secret(b"").unwrap_err(),
            KeyError::Empty
        ));
    }

    #[test]
    fn key_from_the_secret_directory() {
        let dir = std::env::temp_dir().join(format!("membership-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(KEY_FILE), b"AAECAwQFBgcICQoLDA0ODw").unwrap();
        let from_dir = SecretKey::read_dir(&dir).unwrap();
        let mut sealer = Framer::new(Some(from_dir), [1; 16]);
        let same = Framer::new(key(b"AAECAwQFBgcICQoLDA0ODw"), [2; 16]);
        let datagram = sealer.seal(Kind::Ack, b"x").unwrap();
        assert_eq!(same.open(&datagram).unwrap().body, b"x");
        std::fs::remove_file(dir.join(KEY_FILE)).unwrap();
        let error = SecretKey::read_dir(&dir).unwrap_err().to_string();
        assert!(
            error.starts_with("failed to read memberlist secret key file"),
            "{error}"
        );
        assert!(!error.contains("AAECAwQF"));
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn control_round_trips() {
        let packet = bfd::ControlPacket::decode(&[
            0x20, 0x40, 3, 24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0x01, 0x86, 0xa0, 0, 0x01, 0x86, 0xa0, 0,
            0, 0, 0,
        ])
        .unwrap();
        let all = [
            Control::Heartbeat {
                from: sender(),
                seq: 9,
                watching: true,
                packet,
            },
            Control::ProbeRequest {
                from: sender(),
                id: 5,
                target: "node-b".into(),
                target_addr: "[2001:db8::2]:7946".parse().unwrap(),
                target_generation: 77,
            },
            Control::ProbeReply {
                from: sender(),
                id: 5,
                target: "node-b".into(),
            },
            Control::ProbeNack {
                from: sender(),
                id: 6,
                target: "node-b".into(),
            },
            Control::Ping {
                from: sender(),
                id: 1,
                target_generation: 43,
            },
            Control::Ack {
                from: sender(),
                id: 1,
            },
            Control::Leave { from: sender() },
            Control::Sync {
                from: sender(),
                reply: false,
                part: None,
                members: vec![Member::new(
                    NodeId::new("node-c", "192.0.2.3:7946".parse().unwrap(), 1),
                    3,
                    State::Alive,
                )],
            },
            Control::Sync {
                from: sender(),
                reply: true,
                part: Some(SyncPart { index: 2, count: 3 }),
                members: vec![
                    Member::new(
                        NodeId::new("node-c", "192.0.2.3:7946".parse().unwrap(), 1),
                        3,
                        State::Alive,
                    ),
                    Member::new(
                        NodeId::new("node-d", "[2001:db8::4]:7946".parse().unwrap(), 2),
                        0,
                        State::Down,
                    ),
                ],
            },
        ];
        for control in all {
            let body = control.encode().unwrap();
            assert_eq!(Control::decode(control.kind(), &body).unwrap(), control);
            for cut in 0..body.len() {
                assert!(Control::decode(control.kind(), &body[..cut]).is_err());
            }
            let mut long = body.clone();
            long.push(0);
            assert!(Control::decode(control.kind(), &long).is_err());
        }
    }

    /// A sync's flags and part: unknown flags and a part beyond its count are
    /// refused, not taken for a whole state.
    #[test]
    fn sync_flags_and_part_are_checked() {
        let body = |flags: u8, part: &[u8]| {
            let mut buf = Vec::new();
            put_name(&mut buf, "node-a").unwrap();
            buf.put_u64(1);
            buf.put_u8(flags);
            buf.extend_from_slice(part);
            buf.put_u16(0);
            buf
        };
        let decode = |b: Vec<u8>| Control::decode(Kind::Sync, &b);
        let part = |c: Control| match c {
            Control::Sync { reply, part, .. } => (reply, part),
            _ => unreachable!(),
        };
        assert_eq!(part(decode(body(0, &[])).unwrap()), (false, None));
        assert_eq!(part(decode(body(1, &[])).unwrap()), (true, None));
        assert_eq!(
            part(decode(body(3, &[0, 1, 0, 2])).unwrap()),
            (true, Some(SyncPart { index: 1, count: 2 }))
        );
        assert!(matches!(
            decode(body(4, &[])),
            Err(DecodeError::Invalid("flags"))
        ));
        assert!(matches!(
            decode(body(2, &[0, 2, 0, 2])),
            Err(DecodeError::Invalid("sync part"))
        ));
        assert!(matches!(
            decode(body(2, &[0, 0, 0, 0])),
            Err(DecodeError::Invalid("sync part"))
        ));
        assert!(decode(body(2, &[0, 0])).is_err());
    }

    #[test]
    fn swim_header_round_trip_and_seed_announce() {
        let mut codec = SwimCodec::new("node-b");
        let src = NodeId::new("node-a", "192.0.2.1:7946".parse().unwrap(), 3);
        let header = Header {
            src: src.clone(),
            src_incarnation: 2,
            dst: NodeId::seed("192.0.2.2:7946".parse().unwrap()),
            message: Message::Announce,
        };
        let mut buf = Vec::new();
        codec.encode_header(&header, &mut buf).unwrap();
        let decoded = codec.decode_header(buf.as_slice()).unwrap();
        assert_eq!(decoded.src, src);
        assert_eq!(&*decoded.dst.name, "node-b");
        // a seed destination is only valid for an announce
        let ping = Header {
            message: Message::Ping(1),
            ..header
        };
        let mut buf = Vec::new();
        codec.encode_header(&ping, &mut buf).unwrap();
        assert!(codec.decode_header(buf.as_slice()).is_err());
        let member = Member::new(src, 4, State::Suspect);
        let mut buf = Vec::new();
        codec.encode_member(&member, &mut buf).unwrap();
        assert_eq!(codec.decode_member(buf.as_slice()).unwrap(), member);
        // encoding into a full buffer fails without writing
        let mut small = [0u8; 10];
        let mut slice = &mut small[..];
        assert!(codec.encode_member(&member, &mut slice).is_err());
        assert_eq!(small, [0u8; 10]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1600)) {
            let plain = Framer::new(None, [0; 16]);
            let sealed = Framer::new(key(b"k"), [0; 16]);
            let _ = sealed.open(&data);
            if let Ok(Opened { kind, body, .. }) = plain.open(&data) {
                prop_assert!(body.len() <= data.len());
                if kind == Kind::Swim {
                    let mut codec = SwimCodec::new("me");
                    let mut buf = body.as_slice();
                    let _ = codec.decode_header(&mut buf);
                    let _ = codec.decode_member(&mut buf);
                } else {
                    let _ = Control::decode(kind, &body);
                }
            }
            let mut codec = SwimCodec::new("me");
            let _ = codec.decode_header(data.as_slice());
            let _ = codec.decode_member(data.as_slice());
            for kind in Kind::ALL {
                let _ = Control::decode(kind, &data);
            }
        }

        #[test]
        fn structured_control_mutations(id in any::<u64>(), flip in any::<usize>(), byte in any::<u8>()) {
            let control = Control::ProbeRequest {
                from: sender(),
                id,
                target: "node-b".into(),
                target_addr: "198.51.100.7:7946".parse().unwrap(),
                target_generation: id,
            };
            let mut body = control.encode().unwrap();
            let at = flip % body.len();
            body[at] = byte;
            let _ = Control::decode(Kind::ProbeRequest, &body);
        }
    }
}
