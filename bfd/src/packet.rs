//! Wire formats: the RFC 5880 §4.1 control packet, and our own echo packet.
//!
//! Control packet layout (RFC 5880 §4.1), all integers in network byte order:
//!
//! ```text
//! byte 0      version (3 bits) | diagnostic (5 bits)
//! byte 1      state (2 bits) | P | F | C | A | D | M
//! byte 2      detect mult
//! byte 3      length (whole packet, including any authentication section)
//! bytes 4-7   my discriminator
//! bytes 8-11  your discriminator
//! bytes 12-15 desired min TX interval (µs)
//! bytes 16-19 required min RX interval (µs)
//! bytes 20-23 required min echo RX interval (µs)
//! bytes 24-   authentication section when A is set: type, length, data
//! ```
//!
//! [`ControlPacket::decode`] applies every reception check of RFC 5880 §6.8.6
//! that needs only the packet; [`ControlPacket::parse`] does the same except the
//! last one (our sessions use no authentication, so a packet with the A bit is
//! refused). Neither panics nor allocates. The length is not a field of
//! [`ControlPacket`]: the encoder derives it, the decoder checks it.
//!
//! Echo packets ([`EchoPacket`]) are only ever read by ourselves (the peer's
//! forwarding plane loops them back), so their format is ours: see
//! [`EchoPacket`].

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The only protocol version (RFC 5880 §4.1).
pub const VERSION: u8 = 1;
/// Length of the mandatory section.
pub const HEADER_LEN: usize = 24;
/// Smallest valid Length when the A bit is set (RFC 5880 §6.8.6).
pub const MIN_AUTH_PACKET_LEN: usize = 26;
/// Largest authentication section of the types RFC 5880 defines (Keyed SHA1).
pub const MAX_AUTH_LEN: usize = 28;
/// Largest control packet [`ControlPacket::encode`] can produce.
pub const MAX_PACKET_LEN: usize = HEADER_LEN + MAX_AUTH_LEN;

const FLAG_P: u8 = 0x20;
const FLAG_F: u8 = 0x10;
const FLAG_C: u8 = 0x08;
const FLAG_A: u8 = 0x04;
const FLAG_D: u8 = 0x02;
const FLAG_M: u8 = 0x01;

/// Session state (RFC 5880 §4.1 "Sta"), in wire order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum State {
    AdminDown = 0,
    Down = 1,
    Init = 2,
    Up = 3,
}

impl State {
    /// All states, in wire order.
    pub const ALL: [State; 4] = [State::AdminDown, State::Down, State::Init, State::Up];

    /// The state of a 2-bit field value (higher bits are ignored).
    pub const fn from_bits(bits: u8) -> State {
        match bits & 0x3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }

    /// The 2-bit field value.
    pub const fn bits(self) -> u8 {
        self as u8
    }

    /// The RFC's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::AdminDown => "AdminDown",
            State::Down => "Down",
            State::Init => "Init",
            State::Up => "Up",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Diagnostic code (RFC 5880 §4.1 "Diag", 5 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Diagnostic {
    /// 0: No Diagnostic.
    None,
    /// 1: Control Detection Time Expired.
    ControlDetectionTimeExpired,
    /// 2: Echo Function Failed.
    EchoFunctionFailed,
    /// 3: Neighbor Signaled Session Down.
    NeighborSignaledSessionDown,
    /// 4: Forwarding Plane Reset.
    ForwardingPlaneReset,
    /// 5: Path Down.
    PathDown,
    /// 6: Concatenated Path Down.
    ConcatenatedPathDown,
    /// 7: Administratively Down.
    AdministrativelyDown,
    /// 8: Reverse Concatenated Path Down.
    ReverseConcatenatedPathDown,
    /// 9-31: reserved for future use; kept as received. Build it with
    /// [`Diagnostic::from_code`] so that a code of 0-8 gets its own variant.
    Reserved(u8),
}

impl Diagnostic {
    /// The diagnostic of a 5-bit field value (higher bits are ignored).
    pub const fn from_code(code: u8) -> Diagnostic {
        match code & 0x1f {
            0 => Diagnostic::None,
            1 => Diagnostic::ControlDetectionTimeExpired,
            2 => Diagnostic::EchoFunctionFailed,
            3 => Diagnostic::NeighborSignaledSessionDown,
            4 => Diagnostic::ForwardingPlaneReset,
            5 => Diagnostic::PathDown,
            6 => Diagnostic::ConcatenatedPathDown,
            7 => Diagnostic::AdministrativelyDown,
            8 => Diagnostic::ReverseConcatenatedPathDown,
            other => Diagnostic::Reserved(other),
        }
    }

    /// The 5-bit field value.
    pub const fn code(self) -> u8 {
        match self {
            Diagnostic::None => 0,
            Diagnostic::ControlDetectionTimeExpired => 1,
            Diagnostic::EchoFunctionFailed => 2,
            Diagnostic::NeighborSignaledSessionDown => 3,
            Diagnostic::ForwardingPlaneReset => 4,
            Diagnostic::PathDown => 5,
            Diagnostic::ConcatenatedPathDown => 6,
            Diagnostic::AdministrativelyDown => 7,
            Diagnostic::ReverseConcatenatedPathDown => 8,
            Diagnostic::Reserved(code) => code & 0x1f,
        }
    }

    /// A short English description, as in the RFC.
    pub const fn as_str(self) -> &'static str {
        match self {
            Diagnostic::None => "No Diagnostic",
            Diagnostic::ControlDetectionTimeExpired => "Control Detection Time Expired",
            Diagnostic::EchoFunctionFailed => "Echo Function Failed",
            Diagnostic::NeighborSignaledSessionDown => "Neighbor Signaled Session Down",
            Diagnostic::ForwardingPlaneReset => "Forwarding Plane Reset",
            Diagnostic::PathDown => "Path Down",
            Diagnostic::ConcatenatedPathDown => "Concatenated Path Down",
            Diagnostic::AdministrativelyDown => "Administratively Down",
            Diagnostic::ReverseConcatenatedPathDown => "Reverse Concatenated Path Down",
            Diagnostic::Reserved(_) => "Reserved",
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.code())
    }
}

/// Authentication type (RFC 5880 §4.1 "Auth Type").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuthType {
    SimplePassword = 1,
    KeyedMd5 = 2,
    MeticulousKeyedMd5 = 3,
    KeyedSha1 = 4,
    MeticulousKeyedSha1 = 5,
}

impl AuthType {
    /// The type of a field value; `None` for 0 (reserved) and 6-255.
    pub const fn from_code(code: u8) -> Option<AuthType> {
        match code {
            1 => Some(AuthType::SimplePassword),
            2 => Some(AuthType::KeyedMd5),
            3 => Some(AuthType::MeticulousKeyedMd5),
            4 => Some(AuthType::KeyedSha1),
            5 => Some(AuthType::MeticulousKeyedSha1),
            _ => None,
        }
    }

    /// The field value.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Whether `auth_len` is the right Auth Len for this type (RFC 5880
    /// §4.2-4.4): 4-19 for a simple password (key ID and 1-16 bytes of
    /// password), 24 for MD5, 28 for SHA1.
    pub const fn valid_len(self, auth_len: u8) -> bool {
        match self {
            AuthType::SimplePassword => auth_len >= 4 && auth_len <= 19,
            AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => auth_len == 24,
            AuthType::KeyedSha1 | AuthType::MeticulousKeyedSha1 => auth_len == 28,
        }
    }
}

/// A structurally valid authentication section, kept byte for byte (it is
/// never verified: our sessions use no authentication).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuthSection {
    bytes: [u8; MAX_AUTH_LEN],
    len: u8,
}

impl AuthSection {
    /// Parses the section at the start of `buf` (which must hold at least the
    /// whole section; trailing bytes are ignored).
    pub fn parse(buf: &[u8]) -> Result<AuthSection, PacketError> {
        let (&code, &auth_len) = match buf {
            [code, auth_len, ..] => (code, auth_len),
            _ => {
                return Err(PacketError::AuthSectionTruncated {
                    auth_len: 0,
                    available: buf.len(),
                });
            }
        };
        let auth_type = AuthType::from_code(code).ok_or(PacketError::UnknownAuthType(code))?;
        if !auth_type.valid_len(auth_len) {
            return Err(PacketError::BadAuthLength {
                auth_type,
                auth_len,
            });
        }
        let len = usize::from(auth_len);
        let section = buf.get(..len).ok_or(PacketError::AuthSectionTruncated {
            auth_len,
            available: buf.len(),
        })?;
        let mut bytes = [0u8; MAX_AUTH_LEN];
        bytes[..len].copy_from_slice(section);
        Ok(AuthSection {
            bytes,
            len: auth_len,
        })
    }

    /// The authentication type.
    pub fn auth_type(&self) -> AuthType {
        // Checked by `parse`, the only constructor.
        AuthType::from_code(self.bytes[0]).unwrap_or(AuthType::SimplePassword)
    }

    /// The whole section as on the wire (type, length, data).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Auth Len.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Always false: a section has at least its type, length and key ID.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Auth Key ID.
    pub fn key_id(&self) -> u8 {
        self.bytes[2]
    }

    /// The sequence number of the keyed types; `None` for a simple password.
    pub fn sequence(&self) -> Option<u32> {
        match self.auth_type() {
            AuthType::SimplePassword => None,
            _ => Some(u32::from_be_bytes([
                self.bytes[4],
                self.bytes[5],
                self.bytes[6],
                self.bytes[7],
            ])),
        }
    }

    /// The password (simple password) or the digest/hash (keyed types).
    pub fn data(&self) -> &[u8] {
        let start = match self.auth_type() {
            AuthType::SimplePassword => 3,
            _ => 8,
        };
        &self.bytes[start..usize::from(self.len)]
    }
}

impl fmt::Debug for AuthSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a password.
        f.debug_struct("AuthSection")
            .field("auth_type", &self.auth_type())
            .field("len", &self.len)
            .field("key_id", &self.key_id())
            .field("sequence", &self.sequence())
            .finish_non_exhaustive()
    }
}

/// Why a received control packet is discarded. Each variant is one check of
/// RFC 5880 §6.8.6 (or of the authentication section's structure).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum PacketError {
    #[error("packet of {len} bytes is too short to read")]
    Truncated { len: usize },
    #[error("version {0} is not 1")]
    BadVersion(u8),
    #[error("Length {length} is below the minimum of {min}")]
    LengthTooShort { length: u8, min: u8 },
    #[error("Length {length} exceeds the {payload}-byte payload")]
    LengthExceedsPayload { length: u8, payload: usize },
    #[error("Detect Mult is zero")]
    ZeroDetectMult,
    #[error("Multipoint (M) bit is set")]
    Multipoint,
    #[error("My Discriminator is zero")]
    ZeroMyDiscriminator,
    #[error("Your Discriminator is zero in state {state}")]
    ZeroYourDiscriminator { state: State },
    #[error("both Poll (P) and Final (F) bits are set")]
    PollAndFinal,
    #[error("unknown authentication type {0}")]
    UnknownAuthType(u8),
    #[error("Auth Len {auth_len} is invalid for {auth_type:?}")]
    BadAuthLength { auth_type: AuthType, auth_len: u8 },
    #[error(
        "authentication section of {auth_len} bytes does not fit in the {available} bytes left"
    )]
    AuthSectionTruncated { auth_len: u8, available: usize },
    #[error("authenticated packet ({auth_type:?}) but the session uses no authentication")]
    Authenticated { auth_type: AuthType },
}

impl PacketError {
    /// A stable label for counters and logs.
    pub const fn label(&self) -> &'static str {
        match self {
            PacketError::Truncated { .. } => "truncated",
            PacketError::BadVersion(_) => "bad_version",
            PacketError::LengthTooShort { .. } => "length_too_short",
            PacketError::LengthExceedsPayload { .. } => "length_exceeds_payload",
            PacketError::ZeroDetectMult => "zero_detect_mult",
            PacketError::Multipoint => "multipoint",
            PacketError::ZeroMyDiscriminator => "zero_my_discriminator",
            PacketError::ZeroYourDiscriminator { .. } => "zero_your_discriminator",
            PacketError::PollAndFinal => "poll_and_final",
            PacketError::UnknownAuthType(_) => "unknown_auth_type",
            PacketError::BadAuthLength { .. } => "bad_auth_length",
            PacketError::AuthSectionTruncated { .. } => "auth_section_truncated",
            PacketError::Authenticated { .. } => "authenticated",
        }
    }
}

/// The output buffer is smaller than [`ControlPacket::encoded_len`] or
/// [`EchoPacket::LEN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("buffer of {available} bytes, {needed} needed")]
pub struct BufferTooSmall {
    pub needed: usize,
    pub available: usize,
}

/// A BFD control packet (RFC 5880 §4.1). The version is always [`VERSION`],
/// the A bit is `auth.is_some()`, and the Length is derived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ControlPacket {
    pub diag: Diagnostic,
    pub state: State,
    /// P: Poll.
    pub poll: bool,
    /// F: Final.
    pub final_: bool,
    /// C: Control Plane Independent.
    pub control_plane_independent: bool,
    /// D: Demand.
    pub demand: bool,
    /// M: Multipoint (must be zero; [`ControlPacket::decode`] refuses it).
    pub multipoint: bool,
    pub detect_mult: u8,
    pub my_discr: u32,
    pub your_discr: u32,
    /// Desired Min TX Interval, µs.
    pub desired_min_tx_us: u32,
    /// Required Min RX Interval, µs.
    pub required_min_rx_us: u32,
    /// Required Min Echo RX Interval, µs.
    pub required_min_echo_rx_us: u32,
    /// Present exactly when the A bit is set.
    pub auth: Option<AuthSection>,
}

fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

impl ControlPacket {
    /// Decodes a received packet and applies every reception check of RFC
    /// 5880 §6.8.6 that needs only the packet, in the RFC's order, with the
    /// A bit refused last ([`PacketError::Authenticated`]).
    ///
    /// The checks that need a session (demultiplexing by Your Discriminator,
    /// TTL, source) are the registry's and the session's.
    pub fn decode(buf: &[u8]) -> Result<ControlPacket, PacketError> {
        let packet = ControlPacket::parse(buf)?;
        match packet.auth {
            Some(auth) => Err(PacketError::Authenticated {
                auth_type: auth.auth_type(),
            }),
            None => Ok(packet),
        }
    }

    /// Like [`ControlPacket::decode`] but keeps a structurally valid
    /// authentication section instead of refusing it.
    pub fn parse(buf: &[u8]) -> Result<ControlPacket, PacketError> {
        let Some(&b0) = buf.first() else {
            return Err(PacketError::Truncated { len: 0 });
        };
        let version = b0 >> 5;
        if version != VERSION {
            return Err(PacketError::BadVersion(version));
        }
        let (b1, length) = match buf {
            [_, b1, _, length, ..] => (*b1, *length),
            _ => return Err(PacketError::Truncated { len: buf.len() }),
        };
        let has_auth = b1 & FLAG_A != 0;
        let min = if has_auth {
            MIN_AUTH_PACKET_LEN
        } else {
            HEADER_LEN
        } as u8;
        if length < min {
            return Err(PacketError::LengthTooShort { length, min });
        }
        if usize::from(length) > buf.len() {
            return Err(PacketError::LengthExceedsPayload {
                length,
                payload: buf.len(),
            });
        }
        // From here on buf holds at least `length` >= 24 bytes.
        let buf = &buf[..usize::from(length)];
        let mut packet = ControlPacket {
            diag: Diagnostic::from_code(b0),
            state: State::from_bits(b1 >> 6),
            poll: b1 & FLAG_P != 0,
            final_: b1 & FLAG_F != 0,
            control_plane_independent: b1 & FLAG_C != 0,
            demand: b1 & FLAG_D != 0,
            multipoint: b1 & FLAG_M != 0,
            detect_mult: buf[2],
            my_discr: be32(buf, 4),
            your_discr: be32(buf, 8),
            desired_min_tx_us: be32(buf, 12),
            required_min_rx_us: be32(buf, 16),
            required_min_echo_rx_us: be32(buf, 20),
            auth: None,
        };
        packet.check_fields()?;
        if has_auth {
            packet.auth = Some(AuthSection::parse(&buf[HEADER_LEN..])?);
        }
        Ok(packet)
    }

    /// The reception checks of RFC 5880 §6.8.6 on the fields of a packet
    /// already in memory: [`ControlPacket::decode`]'s, after the buffer-level
    /// ones (version, Length). Sessions apply it again to whatever they are
    /// handed.
    pub fn check(&self) -> Result<(), PacketError> {
        self.check_fields()?;
        match self.auth {
            Some(auth) => Err(PacketError::Authenticated {
                auth_type: auth.auth_type(),
            }),
            None => Ok(()),
        }
    }

    fn check_fields(&self) -> Result<(), PacketError> {
        if self.detect_mult == 0 {
            return Err(PacketError::ZeroDetectMult);
        }
        if self.multipoint {
            return Err(PacketError::Multipoint);
        }
        if self.my_discr == 0 {
            return Err(PacketError::ZeroMyDiscriminator);
        }
        if self.your_discr == 0 && !matches!(self.state, State::Down | State::AdminDown) {
            return Err(PacketError::ZeroYourDiscriminator { state: self.state });
        }
        if self.poll && self.final_ {
            return Err(PacketError::PollAndFinal);
        }
        Ok(())
    }

    /// The Length field of this packet once encoded.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.auth.map_or(0, |a| usize::from(a.len()))
    }

    /// Encodes into the start of `buf` and returns the length written. Any
    /// field value is written as is (so tests can build invalid packets,
    /// e.g. with M set).
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let len = self.encoded_len();
        let available = buf.len();
        let out = buf.get_mut(..len).ok_or(BufferTooSmall {
            needed: len,
            available,
        })?;
        let mut flags = self.state.bits() << 6;
        for (set, bit) in [
            (self.poll, FLAG_P),
            (self.final_, FLAG_F),
            (self.control_plane_independent, FLAG_C),
            (self.auth.is_some(), FLAG_A),
            (self.demand, FLAG_D),
            (self.multipoint, FLAG_M),
        ] {
            if set {
                flags |= bit;
            }
        }
        out[0] = (VERSION << 5) | self.diag.code();
        out[1] = flags;
        out[2] = self.detect_mult;
        out[3] = len as u8; // at most MAX_PACKET_LEN
        for (at, value) in [
            (4, self.my_discr),
            (8, self.your_discr),
            (12, self.desired_min_tx_us),
            (16, self.required_min_rx_us),
            (20, self.required_min_echo_rx_us),
        ] {
            out[at..at + 4].copy_from_slice(&value.to_be_bytes());
        }
        if let Some(auth) = &self.auth {
            out[HEADER_LEN..].copy_from_slice(auth.as_bytes());
        }
        Ok(len)
    }

    /// Encodes into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut buf = [0u8; MAX_PACKET_LEN];
        let len = self.encode(&mut buf).map_or(0, |len| len);
        buf[..len].to_vec()
    }
}

/// An echo packet (RFC 5880 §6.4, RFC 5881 §4 port 3785). Its content is
/// opaque to the peer, which only forwards it back to us, so the format is
/// ours (24 bytes, network byte order):
///
/// ```text
/// bytes 0-3    magic "MLBE"
/// byte 4       format version (1)
/// bytes 5-7    zero (checked, so a decoded packet re-encodes exactly)
/// bytes 8-11   the sender's local discriminator (non-zero)
/// bytes 12-15  sequence number
/// bytes 16-23  transmit time, ns on the sender's monotonic clock
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EchoPacket {
    pub discriminator: u32,
    pub sequence: u32,
    pub tx_time_ns: u64,
}

/// Why a received echo packet is not ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum EchoError {
    #[error("echo packet of {len} bytes, {} needed", EchoPacket::LEN)]
    Truncated { len: usize },
    #[error("echo packet without our magic")]
    BadMagic,
    #[error("echo packet format version {0} is not 1")]
    BadVersion(u8),
    #[error("echo packet with non-zero reserved bytes")]
    ReservedNotZero,
    #[error("echo packet with a zero discriminator")]
    ZeroDiscriminator,
}

impl EchoPacket {
    /// Identifies our echo packets.
    pub const MAGIC: [u8; 4] = *b"MLBE";
    /// Format version.
    pub const VERSION: u8 = 1;
    /// Encoded length.
    pub const LEN: usize = 24;

    /// Decodes an echo packet (trailing bytes are ignored). Never panics nor
    /// allocates.
    pub fn decode(buf: &[u8]) -> Result<EchoPacket, EchoError> {
        let Some(buf) = buf.get(..Self::LEN) else {
            return Err(EchoError::Truncated { len: buf.len() });
        };
        if buf[..4] != Self::MAGIC {
            return Err(EchoError::BadMagic);
        }
        if buf[4] != Self::VERSION {
            return Err(EchoError::BadVersion(buf[4]));
        }
        if buf[5..8] != [0, 0, 0] {
            return Err(EchoError::ReservedNotZero);
        }
        let discriminator = be32(buf, 8);
        if discriminator == 0 {
            return Err(EchoError::ZeroDiscriminator);
        }
        let mut time = [0u8; 8];
        time.copy_from_slice(&buf[16..24]);
        Ok(EchoPacket {
            discriminator,
            sequence: be32(buf, 12),
            tx_time_ns: u64::from_be_bytes(time),
        })
    }

    /// Encodes into the start of `buf` and returns [`EchoPacket::LEN`].
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let available = buf.len();
        let out = buf.get_mut(..Self::LEN).ok_or(BufferTooSmall {
            needed: Self::LEN,
            available,
        })?;
        out[..4].copy_from_slice(&Self::MAGIC);
        out[4] = Self::VERSION;
        out[5..8].fill(0);
        out[8..12].copy_from_slice(&self.discriminator.to_be_bytes());
        out[12..16].copy_from_slice(&self.sequence.to_be_bytes());
        out[16..24].copy_from_slice(&self.tx_time_ns.to_be_bytes());
        Ok(Self::LEN)
    }

    /// The encoded packet.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut buf = [0u8; Self::LEN];
        // Cannot fail: the buffer has the exact size.
        let _ = self.encode(&mut buf);
        buf
    }
}

#[cfg(test)]
mod tests;
