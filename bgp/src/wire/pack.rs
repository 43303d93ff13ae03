//! Building UPDATE messages for the Adj-RIB-Out: many prefixes with the
//! same attributes, split across as few messages as the negotiated maximum
//! size allows; withdrawals likewise; End-of-RIB markers.

use bytes::{BufMut, BytesMut};

use super::attribute::{
    PathAttribute, attr_flags, attr_type, encode_attributes, write_attribute, write_mp_reach_head,
};
use super::context::{EncodeContext, HEADER_LEN};
use super::encode::{EncodeError, finish_message, patch_u16, start_message};
use super::message::MessageType;
use super::types::{Afi, Family, NextHop, Prefix};
use super::update::Update;

/// Where announced prefixes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnounceVia {
    /// The NLRI field (IPv4 only); the attributes must hold NEXT_HOP.
    Classic,
    /// MP_REACH_NLRI, written first in each message (RFC 7606 5.1).
    MpReach { family: Family, next_hop: NextHop },
}

/// Where withdrawn prefixes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithdrawVia {
    /// The Withdrawn Routes field (IPv4 only).
    Classic,
    /// MP_UNREACH_NLRI of this family.
    MpUnreach(Family),
}

/// UPDATE header, Withdrawn Routes Length and Total Path Attribute Length.
const UPDATE_FIXED: usize = HEADER_LEN + 2 + 2;
/// MP_REACH_NLRI value before the next hop: AFI, SAFI, next hop length;
/// and the reserved octet after it.
const MP_REACH_FIXED: usize = 2 + 1 + 1 + 1;
/// MP_UNREACH_NLRI value before the prefixes: AFI, SAFI.
const MP_UNREACH_FIXED: usize = 2 + 1;

fn attribute_header(value_len: usize) -> usize {
    if value_len > 255 { 4 } else { 3 }
}

/// Checks the attributes and prefixes of an announcement and encodes the
/// attributes once.
fn prepare_announcement(
    ctx: &EncodeContext,
    attributes: &[PathAttribute],
    via: &AnnounceVia,
    prefixes: &[Prefix],
) -> Result<BytesMut, EncodeError> {
    use attr_type::*;
    let expected_afi = match via {
        AnnounceVia::Classic => Afi::IPV4,
        AnnounceVia::MpReach { family, .. } => {
            if !family.has_prefix_nlri() {
                return Err(EncodeError::UnsupportedFamily(*family));
            }
            family.afi
        }
    };
    if let Some(p) = prefixes.iter().find(|p| p.afi() != expected_afi) {
        return Err(EncodeError::FamilyMismatch {
            prefix: p.to_string(),
            expected: expected_afi,
        });
    }
    for attr in attributes {
        let t = attr.type_code();
        let misplaced = matches!(t, MP_REACH_NLRI | MP_UNREACH_NLRI)
            || (t == NEXT_HOP && matches!(via, AnnounceVia::MpReach { .. }));
        if misplaced {
            return Err(EncodeError::UnexpectedAttribute(t));
        }
    }
    let mut mandatory = vec![ORIGIN, AS_PATH];
    if matches!(via, AnnounceVia::Classic) {
        mandatory.push(NEXT_HOP);
    }
    if let Some(missing) = mandatory
        .into_iter()
        .find(|t| !attributes.iter().any(|a| a.type_code() == *t))
    {
        return Err(EncodeError::MissingAttribute(missing));
    }
    let mut encoded = BytesMut::new();
    encode_attributes(attributes, ctx, &mut encoded)?;
    Ok(encoded)
}

/// Whether an announcement with `nlri_bytes` of prefixes fits in one
/// message.
fn announcement_fits(max: usize, attrs_len: usize, via: &AnnounceVia, nlri_bytes: usize) -> bool {
    let total = match via {
        AnnounceVia::Classic => UPDATE_FIXED + attrs_len + nlri_bytes,
        AnnounceVia::MpReach { next_hop, .. } => {
            let value = MP_REACH_FIXED + next_hop.wire_len() + nlri_bytes;
            UPDATE_FIXED + attrs_len + attribute_header(value) + value
        }
    };
    total <= max
}

fn withdrawal_fits(max: usize, via: &WithdrawVia, nlri_bytes: usize) -> bool {
    let total = match via {
        WithdrawVia::Classic => UPDATE_FIXED + nlri_bytes,
        WithdrawVia::MpUnreach(_) => {
            let value = MP_UNREACH_FIXED + nlri_bytes;
            UPDATE_FIXED + attribute_header(value) + value
        }
    };
    total <= max
}

/// How many of `prefixes`, from the front, fit in one message.
fn chunk_len(prefixes: &[Prefix], fits: impl Fn(usize) -> bool) -> usize {
    let mut bytes = 0;
    for (i, p) in prefixes.iter().enumerate() {
        bytes += p.wire_len();
        if !fits(bytes) {
            return i;
        }
    }
    prefixes.len()
}

/// Appends to `out` the UPDATEs announcing `prefixes` with `attributes`,
/// as many prefixes per message as fit in the negotiated maximum. Returns
/// the number of messages written (0 for no prefixes). On error nothing is
/// appended.
///
/// `attributes` must hold ORIGIN and AS_PATH, plus NEXT_HOP for
/// [`AnnounceVia::Classic`], and no MP_REACH/MP_UNREACH (nor NEXT_HOP with
/// MP_REACH).
pub fn encode_announcements(
    out: &mut BytesMut,
    ctx: &EncodeContext,
    attributes: &[PathAttribute],
    via: &AnnounceVia,
    prefixes: &[Prefix],
) -> Result<usize, EncodeError> {
    let attrs = prepare_announcement(ctx, attributes, via, prefixes)?;
    let start = out.len();
    let result = write_announcements(out, ctx.max_message_len(), &attrs, via, prefixes);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn write_announcements(
    out: &mut BytesMut,
    max: usize,
    attrs: &[u8],
    via: &AnnounceVia,
    prefixes: &[Prefix],
) -> Result<usize, EncodeError> {
    let mut rest = prefixes;
    let mut messages = 0;
    while !rest.is_empty() {
        let n = chunk_len(rest, |bytes| {
            announcement_fits(max, attrs.len(), via, bytes)
        });
        if n == 0 {
            return Err(EncodeError::AttributesTooLarge { max });
        }
        let (chunk, tail) = rest.split_at(n);
        let msg = start_message(out, MessageType::Update as u8);
        out.put_u16(0); // no withdrawn routes
        let attr_len_at = out.len();
        out.put_u16(0);
        match via {
            AnnounceVia::Classic => {
                out.put_slice(attrs);
                patch_u16(out, attr_len_at);
                for p in chunk {
                    p.encode(out);
                }
            }
            AnnounceVia::MpReach { family, next_hop } => {
                // Cannot exceed 65535: the whole message fits in `max`.
                write_attribute(out, attr_flags::OPTIONAL, attr_type::MP_REACH_NLRI, |out| {
                    write_mp_reach_head(*family, next_hop, out);
                    for p in chunk {
                        p.encode(out);
                    }
                })?;
                out.put_slice(attrs);
                patch_u16(out, attr_len_at);
            }
        }
        finish_message(out, msg, max)?;
        messages += 1;
        rest = tail;
    }
    Ok(messages)
}

/// Appends to `out` the UPDATEs withdrawing `prefixes`, as many per message
/// as fit. Returns the number of messages written (0 for no prefixes).
pub fn encode_withdrawals(
    out: &mut BytesMut,
    ctx: &EncodeContext,
    via: &WithdrawVia,
    prefixes: &[Prefix],
) -> Result<usize, EncodeError> {
    let expected_afi = match via {
        WithdrawVia::Classic => Afi::IPV4,
        WithdrawVia::MpUnreach(family) => {
            if !family.has_prefix_nlri() {
                return Err(EncodeError::UnsupportedFamily(*family));
            }
            family.afi
        }
    };
    if let Some(p) = prefixes.iter().find(|p| p.afi() != expected_afi) {
        return Err(EncodeError::FamilyMismatch {
            prefix: p.to_string(),
            expected: expected_afi,
        });
    }
    let start = out.len();
    let result = write_withdrawals(out, ctx.max_message_len(), via, prefixes);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn write_withdrawals(
    out: &mut BytesMut,
    max: usize,
    via: &WithdrawVia,
    prefixes: &[Prefix],
) -> Result<usize, EncodeError> {
    let mut rest = prefixes;
    let mut messages = 0;
    while !rest.is_empty() {
        // Always at least one: a prefix is at most 17 bytes.
        let n = chunk_len(rest, |bytes| withdrawal_fits(max, via, bytes)).max(1);
        let (chunk, tail) = rest.split_at(n);
        let msg = start_message(out, MessageType::Update as u8);
        match via {
            WithdrawVia::Classic => {
                let at = out.len();
                out.put_u16(0);
                for p in chunk {
                    p.encode(out);
                }
                patch_u16(out, at);
                out.put_u16(0); // no attributes
            }
            WithdrawVia::MpUnreach(family) => {
                out.put_u16(0); // no withdrawn routes
                let at = out.len();
                out.put_u16(0);
                write_attribute(
                    out,
                    attr_flags::OPTIONAL,
                    attr_type::MP_UNREACH_NLRI,
                    |out| {
                        out.put_u16(family.afi.0);
                        out.put_u8(family.safi.0);
                        for p in chunk {
                            p.encode(out);
                        }
                    },
                )?;
                patch_u16(out, at);
            }
        }
        finish_message(out, msg, max)?;
        messages += 1;
        rest = tail;
    }
    Ok(messages)
}

/// Appends the End-of-RIB marker for `family` (RFC 4724 section 2).
pub fn encode_end_of_rib(
    out: &mut BytesMut,
    ctx: &EncodeContext,
    family: Family,
) -> Result<(), EncodeError> {
    Update::end_of_rib(family).encode(ctx, out)
}

/// How many prefixes of `prefix_len` bits fit in one UPDATE with these
/// attributes: the packing limit. For /32 with ORIGIN, a one-AS AS_PATH and
/// NEXT_HOP over a 4-octet session in 4096 bytes this is 810.
pub fn prefixes_per_update(
    ctx: &EncodeContext,
    attributes: &[PathAttribute],
    via: &AnnounceVia,
    prefix_len: u8,
) -> Result<usize, EncodeError> {
    let attrs = prepare_announcement(ctx, attributes, via, &[])?;
    let max = ctx.max_message_len();
    let size = 1 + usize::from(prefix_len).div_ceil(8);
    let mut n = 0;
    while announcement_fits(max, attrs.len(), via, (n + 1) * size) {
        n += 1;
    }
    Ok(n)
}

/// How many prefixes of `prefix_len` bits one withdrawal UPDATE holds.
pub fn withdrawals_per_update(ctx: &EncodeContext, via: &WithdrawVia, prefix_len: u8) -> usize {
    let max = ctx.max_message_len();
    let size = 1 + usize::from(prefix_len).div_ceil(8);
    let mut n = 0;
    while withdrawal_fits(max, via, (n + 1) * size) {
        n += 1;
    }
    n
}
