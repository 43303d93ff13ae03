//! The UPDATE message (RFC 4271 section 4.3).
//!
//! Decoding is lenient in the RFC 7606 sense: everything that can be located
//! is decoded, and each problem is recorded as an [`UpdateError`] beside the
//! parsed parts. Only a message whose length fields cannot be trusted
//! (withdrawn routes or total attribute length overrunning the message)
//! fails outright, with Malformed Attribute List.

use bytes::{BufMut, Bytes, BytesMut};

use super::attribute::{
    AsPath, MpReach, MpUnreach, PathAttribute, attr_flags, decode_attribute, encode_attributes,
    reconstruct_as_path,
};
use super::context::{DecodeContext, EncodeContext};
use super::encode::{EncodeError, finish_message, patch_u16, start_message};
use super::notification::Notification;
use super::reader::Reader;
use super::types::{Afi, Family, Prefix, decode_prefixes};

/// Where in an UPDATE a problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorSite {
    /// The Withdrawn Routes field has a syntax error.
    WithdrawnRoutes,
    /// The attribute list could not be walked to its end (RFC 7606
    /// section 4): an attribute overruns the Total Path Attribute Length,
    /// or too few octets remain for an attribute header.
    AttributeList,
    /// This attribute is malformed.
    Attribute { type_code: u8, flags: u8 },
    /// A second instance of this attribute type (RFC 7606 section 3.g);
    /// it was not decoded.
    DuplicateAttribute { type_code: u8 },
    /// The NLRI field has a syntax error.
    Nlri,
}

/// One problem found while decoding an UPDATE: where, and the NOTIFICATION
/// RFC 4271 would have sent for it. What to do about it is the business of
/// [`super::validate_update`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateError {
    pub site: ErrorSite,
    pub notification: Notification,
}

/// An UPDATE message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Update {
    /// IPv4 prefixes of the Withdrawn Routes field.
    pub withdrawn: Vec<Prefix>,
    /// Well-formed attributes in wire order (no duplicates).
    pub attributes: Vec<PathAttribute>,
    /// IPv4 prefixes of the NLRI field.
    pub nlri: Vec<Prefix>,
    /// Problems found by the decoder; empty for a clean message. The
    /// encoder ignores this field.
    pub errors: Vec<UpdateError>,
}

impl Update {
    /// The End-of-RIB marker for `family` (RFC 4724 section 2): an empty
    /// UPDATE for IPv4 unicast, an empty MP_UNREACH_NLRI otherwise.
    pub fn end_of_rib(family: Family) -> Update {
        if family == Family::IPV4_UNICAST {
            return Update::default();
        }
        Update {
            attributes: vec![PathAttribute::MpUnreach(MpUnreach {
                family,
                withdrawn: Vec::new(),
            })],
            ..Update::default()
        }
    }

    /// The family this UPDATE marks the end of the initial sync of, if it
    /// is an End-of-RIB marker.
    pub fn end_of_rib_family(&self) -> Option<Family> {
        if !self.withdrawn.is_empty() || !self.nlri.is_empty() || !self.errors.is_empty() {
            return None;
        }
        match self.attributes.as_slice() {
            [] => Some(Family::IPV4_UNICAST),
            [PathAttribute::MpUnreach(m)] if m.withdrawn.is_empty() => Some(m.family),
            _ => None,
        }
    }

    /// The first attribute with this type code.
    pub fn attribute(&self, type_code: u8) -> Option<&PathAttribute> {
        self.attributes.iter().find(|a| a.type_code() == type_code)
    }

    pub fn mp_reach(&self) -> Option<&MpReach> {
        self.attributes.iter().find_map(|a| match a {
            PathAttribute::MpReach(m) => Some(m),
            _ => None,
        })
    }

    pub fn mp_unreach(&self) -> Option<&MpUnreach> {
        self.attributes.iter().find_map(|a| match a {
            PathAttribute::MpUnreach(m) => Some(m),
            _ => None,
        })
    }

    /// The AS path with 4-octet AS numbers: AS_PATH, merged with AS4_PATH
    /// when present (RFC 6793 4.2.3; AS4_PATH is ignored when an AGGREGATOR
    /// that is not AS_TRANS is present, as that RFC says).
    pub fn effective_as_path(&self) -> Option<AsPath> {
        let mut as_path = None;
        let mut as4_path = None;
        let mut aggregator_not_trans = false;
        for a in &self.attributes {
            match a {
                PathAttribute::AsPath(p) => as_path = Some(p),
                PathAttribute::As4Path(p) => as4_path = Some(p),
                PathAttribute::Aggregator(g) => {
                    aggregator_not_trans = g.asn != u32::from(super::capability::AS_TRANS);
                }
                _ => {}
            }
        }
        let as_path = as_path?;
        match as4_path {
            Some(p4) if !aggregator_not_trans => Some(reconstruct_as_path(as_path, p4)),
            _ => Some(as_path.clone()),
        }
    }

    /// Decodes an UPDATE body (after the header).
    pub fn decode(body: Bytes, ctx: &DecodeContext) -> Result<Update, Notification> {
        let mut r = Reader::new(body);
        let malformed = || Notification::MalformedAttributeList;
        let withdrawn_len = r.u16().ok_or_else(malformed)?;
        let withdrawn_field = r.take(usize::from(withdrawn_len)).ok_or_else(malformed)?;
        let attr_len = r.u16().ok_or_else(malformed)?;
        let attr_field = r.take(usize::from(attr_len)).ok_or_else(malformed)?;
        let nlri_field = r.rest();

        let mut update = Update::default();
        if decode_prefixes(&withdrawn_field, Afi::IPV4, &mut update.withdrawn).is_err() {
            update.errors.push(UpdateError {
                site: ErrorSite::WithdrawnRoutes,
                notification: Notification::InvalidNetworkField,
            });
        }
        decode_attribute_list(attr_field, ctx, &mut update);
        if decode_prefixes(&nlri_field, Afi::IPV4, &mut update.nlri).is_err() {
            update.errors.push(UpdateError {
                site: ErrorSite::Nlri,
                notification: Notification::InvalidNetworkField,
            });
        }
        Ok(update)
    }

    /// Writes the whole message (header included). Classic withdrawn routes
    /// and NLRI must be IPv4.
    pub fn encode(&self, ctx: &EncodeContext, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = start_message(out, super::message::MessageType::Update as u8);
        let result = self.encode_body(ctx, out);
        match result {
            Ok(()) => finish_message(out, start, ctx.max_message_len()),
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }

    fn encode_body(&self, ctx: &EncodeContext, out: &mut BytesMut) -> Result<(), EncodeError> {
        let too_long = |length| EncodeError::MessageTooLong {
            length,
            max: ctx.max_message_len(),
        };
        let at = out.len();
        out.put_u16(0);
        write_ipv4_prefixes(&self.withdrawn, out)?;
        patch_u16(out, at).ok_or_else(|| too_long(out.len()))?;
        let at = out.len();
        out.put_u16(0);
        encode_attributes(&self.attributes, ctx, out)?;
        patch_u16(out, at).ok_or_else(|| too_long(out.len()))?;
        write_ipv4_prefixes(&self.nlri, out)
    }
}

pub(crate) fn write_ipv4_prefixes(
    prefixes: &[Prefix],
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    for p in prefixes {
        if !p.is_ipv4() {
            return Err(EncodeError::FamilyMismatch {
                prefix: p.to_string(),
                expected: Afi::IPV4,
            });
        }
        p.encode(out);
    }
    Ok(())
}

fn decode_attribute_list(field: Bytes, ctx: &DecodeContext, update: &mut Update) {
    let mut seen = [false; 256];
    let mut r = Reader::new(field.clone());
    while !r.is_empty() {
        let offset = field.len() - r.remaining();
        let header = r.peek();
        let (flags, type_code) = match header {
            [f, t, ..] => (*f, *t),
            _ => return list_error(update),
        };
        let extended = flags & attr_flags::EXTENDED_LENGTH != 0;
        let header_len = if extended { 4 } else { 3 };
        let Some(len) = (match (extended, header) {
            (true, [_, _, a, b, ..]) => Some(usize::from(u16::from_be_bytes([*a, *b]))),
            (false, [_, _, a, ..]) => Some(usize::from(*a)),
            _ => None,
        }) else {
            return list_error(update);
        };
        if r.remaining() < header_len + len {
            return list_error(update);
        }
        let raw = field.slice(offset..offset + header_len + len);
        let _ = r.take(header_len);
        let Some(value) = r.take(len) else {
            return list_error(update);
        };
        let first = !std::mem::replace(&mut seen[usize::from(type_code)], true);
        if !first {
            update.errors.push(UpdateError {
                site: ErrorSite::DuplicateAttribute { type_code },
                notification: Notification::MalformedAttributeList,
            });
            continue;
        }
        match decode_attribute(flags, type_code, value, &raw, ctx) {
            Ok(attr) => update.attributes.push(attr),
            Err(notification) => update.errors.push(UpdateError {
                site: ErrorSite::Attribute { type_code, flags },
                notification,
            }),
        }
    }
}

fn list_error(update: &mut Update) {
    update.errors.push(UpdateError {
        site: ErrorSite::AttributeList,
        notification: Notification::MalformedAttributeList,
    });
}
