//! Path attributes (RFC 4271 section 5, RFC 1997, 4760, 6793, 8092).
//!
//! Decoding one attribute yields the attribute or the NOTIFICATION RFC 4271
//! would send for it; what to do about that error (RFC 7606) is decided in
//! [`super::validate`].

use std::fmt;
use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};

use super::capability::AS_TRANS;
use super::context::{DecodeContext, EncodeContext};
use super::encode::EncodeError;
use super::notification::Notification;
use super::reader::Reader;
use super::types::{Afi, Family, NextHop, Prefix, Safi, decode_prefixes};

/// Attribute type codes (IANA "BGP Path Attributes").
pub mod attr_type {
    pub const ORIGIN: u8 = 1;
    pub const AS_PATH: u8 = 2;
    pub const NEXT_HOP: u8 = 3;
    pub const MULTI_EXIT_DISC: u8 = 4;
    pub const LOCAL_PREF: u8 = 5;
    pub const ATOMIC_AGGREGATE: u8 = 6;
    pub const AGGREGATOR: u8 = 7;
    pub const COMMUNITIES: u8 = 8;
    pub const MP_REACH_NLRI: u8 = 14;
    pub const MP_UNREACH_NLRI: u8 = 15;
    pub const AS4_PATH: u8 = 17;
    pub const AS4_AGGREGATOR: u8 = 18;
    pub const LARGE_COMMUNITIES: u8 = 32;
}

/// Attribute flag bits.
pub mod attr_flags {
    pub const OPTIONAL: u8 = 0x80;
    pub const TRANSITIVE: u8 = 0x40;
    pub const PARTIAL: u8 = 0x20;
    pub const EXTENDED_LENGTH: u8 = 0x10;
}

use attr_flags::{EXTENDED_LENGTH, OPTIONAL, PARTIAL, TRANSITIVE};

const WELL_KNOWN: u8 = TRANSITIVE;
const OPTIONAL_TRANSITIVE: u8 = OPTIONAL | TRANSITIVE;
const OPTIONAL_NON_TRANSITIVE: u8 = OPTIONAL;

/// The name of an attribute type for messages, e.g. `NEXT_HOP (3)`.
pub fn type_name(type_code: u8) -> String {
    use attr_type::*;
    let name = match type_code {
        ORIGIN => "ORIGIN",
        AS_PATH => "AS_PATH",
        NEXT_HOP => "NEXT_HOP",
        MULTI_EXIT_DISC => "MULTI_EXIT_DISC",
        LOCAL_PREF => "LOCAL_PREF",
        ATOMIC_AGGREGATE => "ATOMIC_AGGREGATE",
        AGGREGATOR => "AGGREGATOR",
        COMMUNITIES => "COMMUNITIES",
        MP_REACH_NLRI => "MP_REACH_NLRI",
        MP_UNREACH_NLRI => "MP_UNREACH_NLRI",
        AS4_PATH => "AS4_PATH",
        AS4_AGGREGATOR => "AS4_AGGREGATOR",
        LARGE_COMMUNITIES => "LARGE_COMMUNITIES",
        other => return format!("attribute {other}"),
    };
    format!("{name} ({type_code})")
}

/// ORIGIN values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    Igp = 0,
    Egp = 1,
    Incomplete = 2,
}

/// AS_PATH segment types (RFC 4271, RFC 5065).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentType {
    AsSet = 1,
    AsSequence = 2,
    ConfedSequence = 3,
    ConfedSet = 4,
}

impl SegmentType {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => SegmentType::AsSet,
            2 => SegmentType::AsSequence,
            3 => SegmentType::ConfedSequence,
            4 => SegmentType::ConfedSet,
            _ => return None,
        })
    }

    pub fn is_confed(self) -> bool {
        matches!(self, SegmentType::ConfedSequence | SegmentType::ConfedSet)
    }
}

/// One AS_PATH segment. Encoding splits segments longer than 255 ASes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AsSegment {
    pub kind: SegmentType,
    pub asns: Vec<u32>,
}

/// An AS_PATH or AS4_PATH, always held with 4-octet AS numbers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct AsPath {
    pub segments: Vec<AsSegment>,
}

impl AsPath {
    /// The empty path (iBGP origination).
    pub fn empty() -> Self {
        AsPath::default()
    }

    /// One AS_SEQUENCE of `asns` (empty path when there are none).
    pub fn sequence(asns: impl IntoIterator<Item = u32>) -> Self {
        let asns: Vec<u32> = asns.into_iter().collect();
        if asns.is_empty() {
            return AsPath::empty();
        }
        AsPath {
            segments: vec![AsSegment {
                kind: SegmentType::AsSequence,
                asns,
            }],
        }
    }

    /// Path length as the decision process counts it (RFC 4271 9.1.2.2: a
    /// set counts one, confederation segments nothing).
    pub fn path_len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s.kind {
                SegmentType::AsSequence => s.asns.len(),
                SegmentType::AsSet => 1,
                SegmentType::ConfedSequence | SegmentType::ConfedSet => 0,
            })
            .sum()
    }

    pub fn has_confed(&self) -> bool {
        self.segments.iter().any(|s| s.kind.is_confed())
    }

    /// Every AS number in order.
    pub fn asns(&self) -> impl Iterator<Item = u32> + '_ {
        self.segments.iter().flat_map(|s| s.asns.iter().copied())
    }

    /// Whether any AS number needs 4 octets.
    pub fn needs_four_octets(&self) -> bool {
        self.asns().any(|a| a > u32::from(u16::MAX))
    }

    fn without_confed(&self) -> AsPath {
        AsPath {
            segments: self
                .segments
                .iter()
                .filter(|s| !s.kind.is_confed())
                .cloned()
                .collect(),
        }
    }

    fn decode(value: &[u8], as_len: usize) -> Option<AsPath> {
        let mut segments = Vec::new();
        let mut rest = value;
        while !rest.is_empty() {
            // RFC 7606 7.2: unknown type, zero length, overrun, or a lone
            // trailing octet make the path malformed.
            let [t, count, tail @ ..] = rest else {
                return None;
            };
            let kind = SegmentType::from_u8(*t)?;
            let n = usize::from(*count);
            if n == 0 {
                return None;
            }
            let body = tail.get(..n * as_len)?;
            let asns = body
                .chunks_exact(as_len)
                .map(|c| match *c {
                    [a, b] => u32::from(u16::from_be_bytes([a, b])),
                    [a, b, c, d] => u32::from_be_bytes([a, b, c, d]),
                    _ => 0,
                })
                .collect::<Vec<u32>>();
            if asns.contains(&0) {
                // RFC 7607: AS 0 makes the path malformed.
                return None;
            }
            segments.push(AsSegment { kind, asns });
            rest = &tail[n * as_len..];
        }
        Some(AsPath { segments })
    }

    fn encode(&self, four_octets: bool, out: &mut BytesMut) {
        for seg in &self.segments {
            for chunk in seg.asns.chunks(255) {
                out.put_u8(seg.kind as u8);
                // chunks(255) bounds the count.
                out.put_u8(u8::try_from(chunk.len()).unwrap_or(u8::MAX));
                for &asn in chunk {
                    if four_octets {
                        out.put_u32(asn);
                    } else {
                        out.put_u16(u16::try_from(asn).unwrap_or(AS_TRANS));
                    }
                }
            }
        }
    }
}

impl fmt::Display for AsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for seg in &self.segments {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            let (open, close) = match seg.kind {
                SegmentType::AsSequence => ("", ""),
                SegmentType::AsSet => ("{", "}"),
                SegmentType::ConfedSequence => ("(", ")"),
                SegmentType::ConfedSet => ("[", "]"),
            };
            f.write_str(open)?;
            for (i, asn) in seg.asns.iter().enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                write!(f, "{asn}")?;
            }
            f.write_str(close)?;
        }
        Ok(())
    }
}

/// Rebuilds the real AS path from an AS_PATH received over a 2-octet session
/// and the AS4_PATH beside it (RFC 6793 section 4.2.3): when AS4_PATH is not
/// longer, the leading ASes of AS_PATH followed by AS4_PATH.
pub fn reconstruct_as_path(as_path: &AsPath, as4_path: &AsPath) -> AsPath {
    let len = as_path.path_len();
    let len4 = as4_path.path_len();
    if len < len4 {
        return as_path.clone();
    }
    let mut keep = len - len4;
    let mut segments = Vec::new();
    for seg in &as_path.segments {
        if keep == 0 && !seg.kind.is_confed() {
            break;
        }
        match seg.kind {
            SegmentType::AsSequence => {
                let take = keep.min(seg.asns.len());
                segments.push(AsSegment {
                    kind: seg.kind,
                    asns: seg.asns[..take].to_vec(),
                });
                keep -= take;
            }
            SegmentType::AsSet => {
                segments.push(seg.clone());
                keep -= 1;
            }
            SegmentType::ConfedSequence | SegmentType::ConfedSet => segments.push(seg.clone()),
        }
    }
    segments.extend(as4_path.segments.iter().cloned());
    AsPath { segments }
}

/// AGGREGATOR / AS4_AGGREGATOR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Aggregator {
    pub asn: u32,
    pub address: Ipv4Addr,
}

/// A standard community (RFC 1997).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Community(pub u32);

impl Community {
    pub const NO_EXPORT: Community = Community(0xffff_ff01);
    pub const NO_ADVERTISE: Community = Community(0xffff_ff02);
    pub const NO_EXPORT_SUBCONFED: Community = Community(0xffff_ff03);

    pub const fn new(asn: u16, value: u16) -> Self {
        Community(((asn as u32) << 16) | value as u32)
    }
}

impl fmt::Display for Community {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0 >> 16, self.0 & 0xffff)
    }
}

/// A large community (RFC 8092).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LargeCommunity {
    pub global_admin: u32,
    pub local_data1: u32,
    pub local_data2: u32,
}

impl fmt::Display for LargeCommunity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.global_admin, self.local_data1, self.local_data2
        )
    }
}

/// MP_REACH_NLRI for a family with prefix NLRI.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpReach {
    pub family: Family,
    pub next_hop: NextHop,
    pub nlri: Vec<Prefix>,
}

/// MP_UNREACH_NLRI for a family with prefix NLRI. No prefixes: End-of-RIB.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpUnreach {
    pub family: Family,
    pub withdrawn: Vec<Prefix>,
}

/// An attribute this codec does not interpret: an unknown optional type,
/// or MP_REACH/MP_UNREACH of a family without prefix NLRI. `flags` never
/// has the Extended Length bit (an encoding detail); the encoder sets the
/// Partial bit on optional transitive ones it passes on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawAttribute {
    pub flags: u8,
    pub type_code: u8,
    pub value: Bytes,
}

/// One path attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathAttribute {
    Origin(Origin),
    AsPath(AsPath),
    NextHop(Ipv4Addr),
    MultiExitDisc(u32),
    LocalPref(u32),
    AtomicAggregate,
    Aggregator(Aggregator),
    Communities(Vec<Community>),
    LargeCommunities(Vec<LargeCommunity>),
    As4Path(AsPath),
    As4Aggregator(Aggregator),
    MpReach(MpReach),
    MpUnreach(MpUnreach),
    Other(RawAttribute),
}

impl PathAttribute {
    pub fn type_code(&self) -> u8 {
        use attr_type::*;
        match self {
            PathAttribute::Origin(_) => ORIGIN,
            PathAttribute::AsPath(_) => AS_PATH,
            PathAttribute::NextHop(_) => NEXT_HOP,
            PathAttribute::MultiExitDisc(_) => MULTI_EXIT_DISC,
            PathAttribute::LocalPref(_) => LOCAL_PREF,
            PathAttribute::AtomicAggregate => ATOMIC_AGGREGATE,
            PathAttribute::Aggregator(_) => AGGREGATOR,
            PathAttribute::Communities(_) => COMMUNITIES,
            PathAttribute::LargeCommunities(_) => LARGE_COMMUNITIES,
            PathAttribute::As4Path(_) => AS4_PATH,
            PathAttribute::As4Aggregator(_) => AS4_AGGREGATOR,
            PathAttribute::MpReach(_) => MP_REACH_NLRI,
            PathAttribute::MpUnreach(_) => MP_UNREACH_NLRI,
            PathAttribute::Other(raw) => raw.type_code,
        }
    }

    /// The flags this encoder writes (before the Extended Length bit).
    pub fn flags(&self) -> u8 {
        match self {
            PathAttribute::Origin(_)
            | PathAttribute::AsPath(_)
            | PathAttribute::NextHop(_)
            | PathAttribute::LocalPref(_)
            | PathAttribute::AtomicAggregate => WELL_KNOWN,
            PathAttribute::MultiExitDisc(_)
            | PathAttribute::MpReach(_)
            | PathAttribute::MpUnreach(_) => OPTIONAL_NON_TRANSITIVE,
            PathAttribute::Aggregator(_)
            | PathAttribute::Communities(_)
            | PathAttribute::LargeCommunities(_)
            | PathAttribute::As4Path(_)
            | PathAttribute::As4Aggregator(_) => OPTIONAL_TRANSITIVE,
            PathAttribute::Other(raw) => {
                let f = raw.flags & !EXTENDED_LENGTH;
                if f & OPTIONAL_TRANSITIVE == OPTIONAL_TRANSITIVE {
                    f | PARTIAL
                } else {
                    f
                }
            }
        }
    }

    /// Writes flags, type, length and value. The Extended Length bit is set
    /// exactly when the value is longer than 255 bytes.
    pub(crate) fn encode(
        &self,
        ctx: &EncodeContext,
        out: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        write_attribute(out, self.flags(), self.type_code(), |out| {
            self.encode_value(ctx, out);
        })
    }

    fn encode_value(&self, ctx: &EncodeContext, out: &mut BytesMut) {
        match self {
            PathAttribute::Origin(o) => out.put_u8(*o as u8),
            PathAttribute::AsPath(p) => p.encode(ctx.four_octet_as, out),
            PathAttribute::NextHop(a) => out.put_slice(&a.octets()),
            PathAttribute::MultiExitDisc(v) | PathAttribute::LocalPref(v) => out.put_u32(*v),
            PathAttribute::AtomicAggregate => {}
            PathAttribute::Aggregator(a) => {
                if ctx.four_octet_as {
                    out.put_u32(a.asn);
                } else {
                    out.put_u16(u16::try_from(a.asn).unwrap_or(AS_TRANS));
                }
                out.put_slice(&a.address.octets());
            }
            PathAttribute::Communities(cs) => {
                for c in cs {
                    out.put_u32(c.0);
                }
            }
            PathAttribute::LargeCommunities(cs) => {
                for c in cs {
                    out.put_u32(c.global_admin);
                    out.put_u32(c.local_data1);
                    out.put_u32(c.local_data2);
                }
            }
            PathAttribute::As4Path(p) => p.encode(true, out),
            PathAttribute::As4Aggregator(a) => {
                out.put_u32(a.asn);
                out.put_slice(&a.address.octets());
            }
            PathAttribute::MpReach(m) => {
                write_mp_reach_head(m.family, &m.next_hop, out);
                for p in &m.nlri {
                    p.encode(out);
                }
            }
            PathAttribute::MpUnreach(m) => {
                out.put_u16(m.family.afi.0);
                out.put_u8(m.family.safi.0);
                for p in &m.withdrawn {
                    p.encode(out);
                }
            }
            PathAttribute::Other(raw) => out.put_slice(&raw.value),
        }
    }
}

pub(crate) fn write_mp_reach_head(family: Family, next_hop: &NextHop, out: &mut BytesMut) {
    out.put_u16(family.afi.0);
    out.put_u8(family.safi.0);
    // At most 32.
    out.put_u8(u8::try_from(next_hop.wire_len()).unwrap_or(u8::MAX));
    next_hop.encode(out);
    out.put_u8(0); // reserved
}

/// Writes one attribute whose value `value` appends; chooses the length
/// encoding from the value's size.
pub(crate) fn write_attribute(
    out: &mut BytesMut,
    flags: u8,
    type_code: u8,
    value: impl FnOnce(&mut BytesMut),
) -> Result<(), EncodeError> {
    let start = out.len();
    out.put_u8(flags | EXTENDED_LENGTH);
    out.put_u8(type_code);
    out.put_u16(0);
    value(out);
    let length = out.len() - start - 4;
    if length <= 255 {
        // Short form: drop the second length octet.
        out[start] = flags & !EXTENDED_LENGTH;
        out[start + 2] = length as u8;
        out.copy_within(start + 4.., start + 3);
        out.truncate(out.len() - 1);
        return Ok(());
    }
    match u16::try_from(length) {
        Ok(l) => {
            out[start + 2..start + 4].copy_from_slice(&l.to_be_bytes());
            Ok(())
        }
        Err(_) => {
            out.truncate(start);
            Err(EncodeError::AttributeTooLong { type_code, length })
        }
    }
}

/// Encodes a list of attributes for an UPDATE. Over a 2-octet session, an
/// AS_PATH or AGGREGATOR holding a 4-octet AS is written with AS_TRANS and
/// followed by the AS4_PATH / AS4_AGGREGATOR that carries the real value,
/// unless the list already has one; between 4-octet speakers AS4_PATH and
/// AS4_AGGREGATOR are never sent (RFC 6793 section 4.1).
pub(crate) fn encode_attributes(
    attrs: &[PathAttribute],
    ctx: &EncodeContext,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let has_as4_path = attrs.iter().any(|a| matches!(a, PathAttribute::As4Path(_)));
    let has_as4_aggregator = attrs
        .iter()
        .any(|a| matches!(a, PathAttribute::As4Aggregator(_)));
    for attr in attrs {
        match attr {
            PathAttribute::As4Path(_) | PathAttribute::As4Aggregator(_) if ctx.four_octet_as => {
                continue;
            }
            PathAttribute::AsPath(path) => {
                attr.encode(ctx, out)?;
                if !ctx.four_octet_as && !has_as4_path && path.needs_four_octets() {
                    PathAttribute::As4Path(path.without_confed()).encode(ctx, out)?;
                }
            }
            PathAttribute::Aggregator(agg) => {
                attr.encode(ctx, out)?;
                if !ctx.four_octet_as && !has_as4_aggregator && agg.asn > u32::from(u16::MAX) {
                    PathAttribute::As4Aggregator(*agg).encode(ctx, out)?;
                }
            }
            _ => attr.encode(ctx, out)?,
        }
    }
    Ok(())
}

/// Decodes the value of one attribute. `raw` is the whole attribute (flags,
/// type, length, value): the data of the NOTIFICATION on error.
pub(crate) fn decode_attribute(
    flags: u8,
    type_code: u8,
    value: Bytes,
    raw: &Bytes,
    ctx: &DecodeContext,
) -> Result<PathAttribute, Notification> {
    use attr_type::*;
    let attribute = || raw.clone();
    let flags_error = || Notification::AttributeFlagsError {
        attribute: attribute(),
    };
    let length_error = || Notification::AttributeLengthError {
        attribute: attribute(),
    };
    let optional_error = || Notification::OptionalAttributeError {
        attribute: attribute(),
    };
    // RFC 7606 3.c: only the Optional and Transitive bits are checked.
    let expect = |want: u8| {
        if flags & OPTIONAL_TRANSITIVE == want {
            Ok(())
        } else {
            Err(flags_error())
        }
    };
    let v: &[u8] = &value;
    let attr = match type_code {
        ORIGIN => {
            expect(WELL_KNOWN)?;
            let [o] = *v else { return Err(length_error()) };
            PathAttribute::Origin(match o {
                0 => Origin::Igp,
                1 => Origin::Egp,
                2 => Origin::Incomplete,
                _ => {
                    return Err(Notification::InvalidOriginAttribute {
                        attribute: attribute(),
                    });
                }
            })
        }
        AS_PATH => {
            expect(WELL_KNOWN)?;
            let as_len = if ctx.four_octet_as { 4 } else { 2 };
            PathAttribute::AsPath(AsPath::decode(v, as_len).ok_or(Notification::MalformedAsPath)?)
        }
        NEXT_HOP => {
            expect(WELL_KNOWN)?;
            let octets: [u8; 4] = v.try_into().map_err(|_| length_error())?;
            let addr = Ipv4Addr::from(octets);
            // RFC 4271 6.3: the next hop must be a valid host address.
            if addr.is_unspecified() || addr.is_multicast() || addr.is_broadcast() {
                return Err(Notification::InvalidNextHopAttribute {
                    attribute: attribute(),
                });
            }
            PathAttribute::NextHop(addr)
        }
        MULTI_EXIT_DISC => {
            expect(OPTIONAL_NON_TRANSITIVE)?;
            let b: [u8; 4] = v.try_into().map_err(|_| length_error())?;
            PathAttribute::MultiExitDisc(u32::from_be_bytes(b))
        }
        LOCAL_PREF => {
            expect(WELL_KNOWN)?;
            let b: [u8; 4] = v.try_into().map_err(|_| length_error())?;
            PathAttribute::LocalPref(u32::from_be_bytes(b))
        }
        ATOMIC_AGGREGATE => {
            expect(WELL_KNOWN)?;
            if !v.is_empty() {
                return Err(length_error());
            }
            PathAttribute::AtomicAggregate
        }
        AGGREGATOR => {
            expect(OPTIONAL_TRANSITIVE)?;
            let agg = match (ctx.four_octet_as, v) {
                (true, [a, b, c, d, rest @ ..]) if rest.len() == 4 => Aggregator {
                    asn: u32::from_be_bytes([*a, *b, *c, *d]),
                    address: Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3]),
                },
                (false, [a, b, rest @ ..]) if rest.len() == 4 => Aggregator {
                    asn: u32::from(u16::from_be_bytes([*a, *b])),
                    address: Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3]),
                },
                _ => return Err(length_error()),
            };
            if agg.asn == 0 {
                // RFC 7607.
                return Err(optional_error());
            }
            PathAttribute::Aggregator(agg)
        }
        COMMUNITIES => {
            expect(OPTIONAL_TRANSITIVE)?;
            if v.is_empty() || !v.len().is_multiple_of(4) {
                return Err(length_error());
            }
            PathAttribute::Communities(
                v.chunks_exact(4)
                    .map(|c| Community(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            )
        }
        LARGE_COMMUNITIES => {
            expect(OPTIONAL_TRANSITIVE)?;
            if v.is_empty() || !v.len().is_multiple_of(12) {
                return Err(length_error());
            }
            PathAttribute::LargeCommunities(
                v.chunks_exact(12)
                    .map(|c| LargeCommunity {
                        global_admin: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                        local_data1: u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
                        local_data2: u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
                    })
                    .collect(),
            )
        }
        AS4_PATH => {
            expect(OPTIONAL_TRANSITIVE)?;
            let path = AsPath::decode(v, 4).ok_or_else(optional_error)?;
            if path.has_confed() {
                // RFC 6793: AS4_PATH never carries confederation segments.
                return Err(optional_error());
            }
            PathAttribute::As4Path(path)
        }
        AS4_AGGREGATOR => {
            expect(OPTIONAL_TRANSITIVE)?;
            let [a, b, c, d, e, f, g, h] = *v else {
                return Err(length_error());
            };
            let asn = u32::from_be_bytes([a, b, c, d]);
            if asn == 0 {
                return Err(optional_error());
            }
            PathAttribute::As4Aggregator(Aggregator {
                asn,
                address: Ipv4Addr::new(e, f, g, h),
            })
        }
        MP_REACH_NLRI => {
            expect(OPTIONAL_NON_TRANSITIVE)?;
            let mut r = Reader::new(value.clone());
            let (Some(afi), Some(safi), Some(nh_len)) = (r.u16(), r.u8(), r.u8()) else {
                return Err(length_error());
            };
            let family = Family::new(Afi(afi), Safi(safi));
            if !family.has_prefix_nlri() {
                return Ok(other(flags, type_code, value));
            }
            let nh = r.take(usize::from(nh_len)).ok_or_else(optional_error)?;
            let next_hop = NextHop::decode(&nh).ok_or_else(optional_error)?;
            if family.afi == Afi::IPV6 && matches!(next_hop, NextHop::V4(_)) {
                return Err(optional_error());
            }
            let _reserved = r.u8().ok_or_else(optional_error)?;
            let mut nlri = Vec::new();
            decode_prefixes(r.peek(), family.afi, &mut nlri).map_err(|_| optional_error())?;
            PathAttribute::MpReach(MpReach {
                family,
                next_hop,
                nlri,
            })
        }
        MP_UNREACH_NLRI => {
            expect(OPTIONAL_NON_TRANSITIVE)?;
            let mut r = Reader::new(value.clone());
            let (Some(afi), Some(safi)) = (r.u16(), r.u8()) else {
                return Err(length_error());
            };
            let family = Family::new(Afi(afi), Safi(safi));
            if !family.has_prefix_nlri() {
                return Ok(other(flags, type_code, value));
            }
            let mut withdrawn = Vec::new();
            decode_prefixes(r.peek(), family.afi, &mut withdrawn).map_err(|_| optional_error())?;
            PathAttribute::MpUnreach(MpUnreach { family, withdrawn })
        }
        _ => {
            if flags & OPTIONAL == 0 {
                return Err(Notification::UnrecognizedWellKnownAttribute {
                    attribute: attribute(),
                });
            }
            other(flags, type_code, value)
        }
    };
    Ok(attr)
}

fn other(flags: u8, type_code: u8, value: Bytes) -> PathAttribute {
    PathAttribute::Other(RawAttribute {
        flags: flags & !EXTENDED_LENGTH,
        type_code,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(segments: &[(SegmentType, &[u32])]) -> AsPath {
        AsPath {
            segments: segments
                .iter()
                .map(|(kind, asns)| AsSegment {
                    kind: *kind,
                    asns: asns.to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn as_path_display_and_length() {
        use SegmentType::*;
        let p = path(&[
            (ConfedSequence, &[64512]),
            (AsSequence, &[65001, 65002]),
            (AsSet, &[1, 2]),
            (ConfedSet, &[3]),
        ]);
        assert_eq!(p.to_string(), "(64512) 65001 65002 {1 2} [3]");
        assert_eq!(p.path_len(), 3);
        assert!(p.has_confed());
    }

    #[test]
    fn reconstruct_as_path_follows_rfc6793() {
        use SegmentType::*;
        let as_path = path(&[(AsSequence, &[65001, 23456, 23456])]);
        let as4 = path(&[(AsSequence, &[4_200_000_000, 4_200_000_001])]);
        assert_eq!(
            reconstruct_as_path(&as_path, &as4),
            path(&[
                (AsSequence, &[65001]),
                (AsSequence, &[4_200_000_000, 4_200_000_001])
            ])
        );
        // AS4_PATH longer than AS_PATH: ignored.
        let short = path(&[(AsSequence, &[23456])]);
        assert_eq!(reconstruct_as_path(&short, &as4), short);
    }

    #[test]
    fn long_segments_are_split_at_255() {
        let p = AsPath::sequence(1..=300);
        let mut out = BytesMut::new();
        p.encode(true, &mut out);
        assert_eq!(out.len(), 2 + 255 * 4 + 2 + 45 * 4);
        let back = AsPath::decode(&out, 4).unwrap();
        assert_eq!(
            back.asns().collect::<Vec<_>>(),
            (1..=300).collect::<Vec<_>>()
        );
        assert_eq!(back.segments.len(), 2);
    }

    #[test]
    fn extended_length_only_above_255_bytes() {
        let ctx = EncodeContext::default();
        let mut out = BytesMut::new();
        PathAttribute::Communities((0..63).map(Community).collect())
            .encode(&ctx, &mut out)
            .unwrap();
        assert_eq!(out[0], OPTIONAL_TRANSITIVE);
        assert_eq!(out[2], 252);
        assert_eq!(out.len(), 3 + 252);
        let mut out = BytesMut::new();
        PathAttribute::Communities((0..64).map(Community).collect())
            .encode(&ctx, &mut out)
            .unwrap();
        assert_eq!(out[0], OPTIONAL_TRANSITIVE | EXTENDED_LENGTH);
        assert_eq!(&out[2..4], &256u16.to_be_bytes());
        assert_eq!(out.len(), 4 + 256);
    }

    #[test]
    fn community_display() {
        assert_eq!(Community::new(65000, 100).to_string(), "65000:100");
        assert_eq!(Community::NO_EXPORT.to_string(), "65535:65281");
        let lc = LargeCommunity {
            global_admin: 4_200_000_000,
            local_data1: 1,
            local_data2: 2,
        };
        assert_eq!(lc.to_string(), "4200000000:1:2");
    }
}
