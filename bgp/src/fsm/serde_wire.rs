//! Serde for the codec's types, which derive none: the FSM's inputs and
//! outputs carry them and must serialize (replayable event logs).
//!
//! Each `with` module below converts through a private mirror type:
//!
//! - a [`Family`] is its `Display` text (`"ipv4-unicast"`, `"afi25/safi70"`);
//! - a [`Notification`] is `{code, subcode, data}` (data in hex) plus its
//!   text, which is ignored when reading;
//! - a [`Message`] is tagged by type; an OPEN keeps its fields and its
//!   capabilities as `{code, value}` (value in hex), an UPDATE keeps its
//!   prefixes as text, its attributes as `{flags, type_code, value}` and
//!   its decoding errors;
//! - [`Negotiated`], [`Capabilities`], [`GracefulRestart`], the codec
//!   contexts and [`ExtendedNextHop`] mirror their fields.
//!
//! Attribute values are written with 4-octet AS numbers and read back the
//! same way, so a value round-trips whatever the session it came from.
//! Reading uses the codec's own decoders: a log line holding a value the
//! codec would never produce (an OPEN with hold time 1, a NEXT_HOP of
//! 0.0.0.0) is refused with an error, never accepted half-way.

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::wire::{
    AddPath, Afi, Capabilities, Capability, DecodeContext, EncodeContext, ErrorSite,
    ExtendedNextHop, Family, GracefulRestart, GracefulRestartFamily, HoldTime, Message, Negotiated,
    NegotiatedGracefulRestart, Notification, Open, OptionalParameter, PathAttribute, Prefix,
    RawAttribute, RouteRefresh, RouteRefreshSubtype, Safi, UnknownCapability, Update, UpdateError,
    attr_flags,
};

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// Bytes of a hex string (either case).
pub(crate) fn unhex(s: &str) -> Result<Bytes, String> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let raw = s.as_bytes();
    if !raw.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits in {s:?}"));
    }
    raw.chunks_exact(2)
        .map(|pair| match (nibble(pair[0]), nibble(pair[1])) {
            (Some(hi), Some(lo)) => Ok((hi << 4) | lo),
            _ => Err(format!("not hex: {s:?}")),
        })
        .collect::<Result<Vec<u8>, String>>()
        .map(Bytes::from)
}

/// Parses the `Display` text of a [`Family`].
pub(crate) fn parse_family(s: &str) -> Option<Family> {
    let afi_of = |name: &str| match name {
        "ipv4" => Some(Afi::IPV4),
        "ipv6" => Some(Afi::IPV6),
        _ => name.strip_prefix("afi")?.parse().ok().map(Afi),
    };
    if let Some((afi, safi)) = s.split_once('/') {
        let safi = safi.strip_prefix("safi")?.parse().ok().map(Safi)?;
        return Some(Family::new(afi_of(afi)?, safi));
    }
    let (afi, safi) = s.split_once('-')?;
    let safi = match safi {
        "unicast" => Safi::UNICAST,
        "multicast" => Safi::MULTICAST,
        _ => return None,
    };
    Some(Family::new(afi_of(afi)?, safi))
}

/// Generates a `with` module converting through a mirror type.
macro_rules! via_mirror {
    ($(#[$doc:meta])* $module:ident, $ty:ty, $mirror:ty, $to:path, $from:path) => {
        $(#[$doc])*
        pub(crate) mod $module {
            use super::*;

            // Serde passes the field itself (`&Vec<_>` for lists).
            #[allow(clippy::ptr_arg)]
            pub(crate) fn serialize<S: Serializer>(value: &$ty, s: S) -> Result<S::Ok, S::Error> {
                $to(value).map_err(S::Error::custom)?.serialize(s)
            }

            pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                let mirror = <$mirror>::deserialize(d)?;
                $from(mirror).map_err(D::Error::custom)
            }
        }
    };
}

// ---------------------------------------------------------------- families

fn family_to(f: &Family) -> Result<String, String> {
    Ok(f.to_string())
}

fn family_from(s: String) -> Result<Family, String> {
    parse_family(&s).ok_or_else(|| format!("unknown address family {s:?}"))
}

fn families_to(fs: &[Family]) -> Result<Vec<String>, String> {
    Ok(fs.iter().map(Family::to_string).collect())
}

fn families_from(v: Vec<String>) -> Result<Vec<Family>, String> {
    v.into_iter().map(family_from).collect()
}

via_mirror!(
    /// A [`Family`] as its text.
    family, Family, String, family_to, family_from
);
via_mirror!(
    /// A list of [`Family`] as text.
    families, Vec<Family>, Vec<String>, families_to, families_from
);

// ------------------------------------------------------------- notification

#[derive(Serialize, Deserialize)]
struct NotificationMirror {
    code: u8,
    subcode: u8,
    /// The Data field in hex.
    #[serde(default)]
    data: String,
    /// The text operators see; ignored when reading.
    #[serde(default, skip_deserializing)]
    text: String,
}

fn notification_to(n: &Notification) -> Result<NotificationMirror, String> {
    Ok(NotificationMirror {
        code: n.code(),
        subcode: n.subcode(),
        data: hex(&n.data()),
        text: n.to_string(),
    })
}

fn notification_from(m: NotificationMirror) -> Result<Notification, String> {
    Ok(Notification::from_wire(m.code, m.subcode, &unhex(&m.data)?))
}

via_mirror!(
    /// A [`Notification`] as code, subcode, hex data and text.
    notification, Notification, NotificationMirror, notification_to, notification_from
);

// ------------------------------------------------------------- capabilities

#[derive(Serialize, Deserialize)]
struct CapabilityMirror {
    code: u8,
    /// The value in hex.
    #[serde(default)]
    value: String,
}

fn capability_to(c: &Capability) -> Result<CapabilityMirror, String> {
    let mut out = BytesMut::new();
    c.encode(&mut out).map_err(|e| e.to_string())?;
    Ok(CapabilityMirror {
        code: c.code(),
        value: hex(&out[2..]),
    })
}

fn capability_from(m: CapabilityMirror) -> Result<Capability, String> {
    Capability::decode(m.code, unhex(&m.value)?).map_err(|n| format!("capability {}: {n}", m.code))
}

#[derive(Serialize, Deserialize)]
struct ExtendedNextHopMirror {
    nlri_afi: u16,
    nlri_safi: u16,
    next_hop_afi: u16,
}

impl From<&ExtendedNextHop> for ExtendedNextHopMirror {
    fn from(t: &ExtendedNextHop) -> Self {
        Self {
            nlri_afi: t.nlri_afi.0,
            nlri_safi: t.nlri_safi,
            next_hop_afi: t.next_hop_afi.0,
        }
    }
}

impl ExtendedNextHopMirror {
    fn into_wire(self) -> ExtendedNextHop {
        ExtendedNextHop {
            nlri_afi: Afi(self.nlri_afi),
            nlri_safi: self.nlri_safi,
            next_hop_afi: Afi(self.next_hop_afi),
        }
    }
}

fn enh_list_to(v: &[ExtendedNextHop]) -> Result<Vec<ExtendedNextHopMirror>, String> {
    Ok(v.iter().map(ExtendedNextHopMirror::from).collect())
}

fn enh_list_from(v: Vec<ExtendedNextHopMirror>) -> Result<Vec<ExtendedNextHop>, String> {
    Ok(v.into_iter()
        .map(ExtendedNextHopMirror::into_wire)
        .collect())
}

via_mirror!(
    /// A list of [`ExtendedNextHop`] tuples.
    extended_next_hops,
    Vec<ExtendedNextHop>,
    Vec<ExtendedNextHopMirror>,
    enh_list_to,
    enh_list_from
);

#[derive(Serialize, Deserialize)]
struct GrFamilyMirror {
    family: String,
    flags: u8,
}

fn gr_families_to(v: &[GracefulRestartFamily]) -> Vec<GrFamilyMirror> {
    v.iter()
        .map(|f| GrFamilyMirror {
            family: f.family.to_string(),
            flags: f.flags,
        })
        .collect()
}

fn gr_families_from(v: Vec<GrFamilyMirror>) -> Result<Vec<GracefulRestartFamily>, String> {
    v.into_iter()
        .map(|m| {
            Ok(GracefulRestartFamily {
                family: family_from(m.family)?,
                flags: m.flags,
            })
        })
        .collect()
}

#[derive(Serialize, Deserialize)]
struct GracefulRestartMirror {
    flags: u8,
    restart_time: u16,
    families: Vec<GrFamilyMirror>,
}

fn gr_to(gr: &GracefulRestart) -> GracefulRestartMirror {
    GracefulRestartMirror {
        flags: gr.flags,
        restart_time: gr.restart_time,
        families: gr_families_to(&gr.families),
    }
}

fn gr_from(m: GracefulRestartMirror) -> Result<GracefulRestart, String> {
    Ok(GracefulRestart {
        flags: m.flags,
        restart_time: m.restart_time,
        families: gr_families_from(m.families)?,
    })
}

fn opt_gr_to(gr: &Option<GracefulRestart>) -> Result<Option<GracefulRestartMirror>, String> {
    Ok(gr.as_ref().map(gr_to))
}

fn opt_gr_from(m: Option<GracefulRestartMirror>) -> Result<Option<GracefulRestart>, String> {
    m.map(gr_from).transpose()
}

via_mirror!(
    /// An optional [`GracefulRestart`] capability.
    opt_graceful_restart,
    Option<GracefulRestart>,
    Option<GracefulRestartMirror>,
    opt_gr_to,
    opt_gr_from
);

#[derive(Serialize, Deserialize)]
struct UnknownCapabilityMirror {
    code: u8,
    value: String,
}

fn unknown_to(v: &[UnknownCapability]) -> Vec<UnknownCapabilityMirror> {
    v.iter()
        .map(|u| UnknownCapabilityMirror {
            code: u.code,
            value: hex(&u.value),
        })
        .collect()
}

fn unknown_from(v: Vec<UnknownCapabilityMirror>) -> Result<Vec<UnknownCapability>, String> {
    v.into_iter()
        .map(|m| {
            Ok(UnknownCapability {
                code: m.code,
                value: unhex(&m.value)?,
            })
        })
        .collect()
}

#[derive(Serialize, Deserialize)]
struct CapabilitiesMirror {
    multiprotocol: Vec<String>,
    route_refresh: bool,
    route_refresh_old: bool,
    enhanced_route_refresh: bool,
    four_octet_as: Option<u32>,
    graceful_restart: Option<GracefulRestartMirror>,
    extended_message: bool,
    extended_next_hop: Vec<ExtendedNextHopMirror>,
    unknown: Vec<UnknownCapabilityMirror>,
}

fn capabilities_to(c: &Capabilities) -> Result<CapabilitiesMirror, String> {
    Ok(CapabilitiesMirror {
        multiprotocol: families_to(&c.multiprotocol)?,
        route_refresh: c.route_refresh,
        route_refresh_old: c.route_refresh_old,
        enhanced_route_refresh: c.enhanced_route_refresh,
        four_octet_as: c.four_octet_as,
        graceful_restart: c.graceful_restart.as_ref().map(gr_to),
        extended_message: c.extended_message,
        extended_next_hop: enh_list_to(&c.extended_next_hop)?,
        unknown: unknown_to(&c.unknown),
    })
}

fn capabilities_from(m: CapabilitiesMirror) -> Result<Capabilities, String> {
    Ok(Capabilities {
        multiprotocol: families_from(m.multiprotocol)?,
        route_refresh: m.route_refresh,
        route_refresh_old: m.route_refresh_old,
        enhanced_route_refresh: m.enhanced_route_refresh,
        four_octet_as: m.four_octet_as,
        graceful_restart: m.graceful_restart.map(gr_from).transpose()?,
        extended_message: m.extended_message,
        extended_next_hop: enh_list_from(m.extended_next_hop)?,
        unknown: unknown_from(m.unknown)?,
    })
}

via_mirror!(
    /// [`Capabilities`] field by field.
    capabilities, Capabilities, CapabilitiesMirror, capabilities_to, capabilities_from
);

#[derive(Serialize, Deserialize)]
struct NegotiatedGrMirror {
    peer_restart_time: u16,
    peer_restart_state: bool,
    notification: bool,
    peer_families: Vec<GrFamilyMirror>,
}

#[derive(Serialize, Deserialize)]
struct NegotiatedMirror {
    families: Vec<String>,
    local_only_families: Vec<String>,
    four_octet_as: bool,
    route_refresh: bool,
    enhanced_route_refresh: bool,
    extended_message: bool,
    graceful_restart: Option<NegotiatedGrMirror>,
    extended_next_hop: Vec<ExtendedNextHopMirror>,
    peer_unknown: Vec<UnknownCapabilityMirror>,
}

fn negotiated_to(n: &Negotiated) -> Result<NegotiatedMirror, String> {
    Ok(NegotiatedMirror {
        families: families_to(&n.families)?,
        local_only_families: families_to(&n.local_only_families)?,
        four_octet_as: n.four_octet_as,
        route_refresh: n.route_refresh,
        enhanced_route_refresh: n.enhanced_route_refresh,
        extended_message: n.extended_message,
        graceful_restart: n.graceful_restart.as_ref().map(|gr| NegotiatedGrMirror {
            peer_restart_time: gr.peer_restart_time,
            peer_restart_state: gr.peer_restart_state,
            notification: gr.notification,
            peer_families: gr_families_to(&gr.peer_families),
        }),
        extended_next_hop: enh_list_to(&n.extended_next_hop)?,
        peer_unknown: unknown_to(&n.peer_unknown),
    })
}

fn negotiated_from(m: NegotiatedMirror) -> Result<Negotiated, String> {
    Ok(Negotiated {
        families: families_from(m.families)?,
        local_only_families: families_from(m.local_only_families)?,
        four_octet_as: m.four_octet_as,
        route_refresh: m.route_refresh,
        enhanced_route_refresh: m.enhanced_route_refresh,
        extended_message: m.extended_message,
        graceful_restart: m
            .graceful_restart
            .map(|gr| {
                Ok::<_, String>(NegotiatedGracefulRestart {
                    peer_restart_time: gr.peer_restart_time,
                    peer_restart_state: gr.peer_restart_state,
                    notification: gr.notification,
                    peer_families: gr_families_from(gr.peer_families)?,
                })
            })
            .transpose()?,
        extended_next_hop: enh_list_from(m.extended_next_hop)?,
        peer_unknown: unknown_from(m.peer_unknown)?,
    })
}

via_mirror!(
    /// [`Negotiated`] field by field.
    negotiated, Negotiated, NegotiatedMirror, negotiated_to, negotiated_from
);

// ----------------------------------------------------------------- contexts

#[derive(Serialize, Deserialize)]
struct DecodeContextMirror {
    four_octet_as: bool,
    extended_message: bool,
    ibgp: bool,
}

fn decode_context_to(c: &DecodeContext) -> Result<DecodeContextMirror, String> {
    match c.add_path {
        AddPath::None => {}
    }
    Ok(DecodeContextMirror {
        four_octet_as: c.four_octet_as,
        extended_message: c.extended_message,
        ibgp: c.ibgp,
    })
}

fn decode_context_from(m: DecodeContextMirror) -> Result<DecodeContext, String> {
    Ok(DecodeContext {
        four_octet_as: m.four_octet_as,
        extended_message: m.extended_message,
        ibgp: m.ibgp,
        add_path: AddPath::None,
    })
}

#[derive(Serialize, Deserialize)]
struct EncodeContextMirror {
    four_octet_as: bool,
    extended_message: bool,
}

fn encode_context_to(c: &EncodeContext) -> Result<EncodeContextMirror, String> {
    match c.add_path {
        AddPath::None => {}
    }
    Ok(EncodeContextMirror {
        four_octet_as: c.four_octet_as,
        extended_message: c.extended_message,
    })
}

fn encode_context_from(m: EncodeContextMirror) -> Result<EncodeContext, String> {
    Ok(EncodeContext {
        four_octet_as: m.four_octet_as,
        extended_message: m.extended_message,
        add_path: AddPath::None,
    })
}

via_mirror!(
    /// A [`DecodeContext`] (ADD-PATH is never negotiated).
    decode_context, DecodeContext, DecodeContextMirror, decode_context_to, decode_context_from
);
via_mirror!(
    /// An [`EncodeContext`] (ADD-PATH is never negotiated).
    encode_context, EncodeContext, EncodeContextMirror, encode_context_to, encode_context_from
);

// ----------------------------------------------------------------- messages

/// The context attribute values are written and read with: 4-octet AS
/// numbers, so that no value is narrowed to AS_TRANS.
const WIDE_ENCODE: EncodeContext = EncodeContext {
    four_octet_as: true,
    extended_message: true,
    add_path: AddPath::None,
};
const WIDE_DECODE: DecodeContext = DecodeContext {
    four_octet_as: true,
    extended_message: true,
    ibgp: true,
    add_path: AddPath::None,
};

#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum MessageMirror {
    Open(OpenMirror),
    Update(UpdateMirror),
    Notification(NotificationMirror),
    Keepalive,
    RouteRefresh(RouteRefreshMirror),
}

#[derive(Serialize, Deserialize)]
struct OpenMirror {
    version: u8,
    my_as: u16,
    hold_time: u16,
    bgp_id: Ipv4Addr,
    /// One list of capabilities per optional parameter.
    parameters: Vec<Vec<CapabilityMirror>>,
    #[serde(default)]
    extended_parameters: bool,
}

#[derive(Serialize, Deserialize)]
struct UpdateMirror {
    #[serde(default)]
    withdrawn: Vec<String>,
    #[serde(default)]
    attributes: Vec<AttributeMirror>,
    #[serde(default)]
    nlri: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    errors: Vec<UpdateErrorMirror>,
}

#[derive(Serialize, Deserialize)]
struct AttributeMirror {
    flags: u8,
    type_code: u8,
    /// The value in hex.
    value: String,
    /// An attribute the codec keeps uninterpreted ([`PathAttribute::Other`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    raw: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ErrorSiteMirror {
    WithdrawnRoutes,
    AttributeList,
    Attribute { type_code: u8, flags: u8 },
    DuplicateAttribute { type_code: u8 },
    Nlri,
}

#[derive(Serialize, Deserialize)]
struct UpdateErrorMirror {
    site: ErrorSiteMirror,
    notification: NotificationMirror,
}

#[derive(Serialize, Deserialize)]
struct RouteRefreshMirror {
    family: String,
    subtype: u8,
}

fn attribute_to(a: &PathAttribute) -> Result<AttributeMirror, String> {
    if let PathAttribute::Other(raw) = a {
        return Ok(AttributeMirror {
            flags: raw.flags,
            type_code: raw.type_code,
            value: hex(&raw.value),
            raw: true,
        });
    }
    let mut out = BytesMut::new();
    a.encode(&WIDE_ENCODE, &mut out)
        .map_err(|e| e.to_string())?;
    let flags = out.first().copied().unwrap_or_default();
    let header = if flags & attr_flags::EXTENDED_LENGTH != 0 {
        4
    } else {
        3
    };
    Ok(AttributeMirror {
        flags: flags & !attr_flags::EXTENDED_LENGTH,
        type_code: a.type_code(),
        value: hex(out.get(header..).unwrap_or_default()),
        raw: false,
    })
}

fn attribute_from(m: AttributeMirror) -> Result<PathAttribute, String> {
    let value = unhex(&m.value)?;
    if m.raw {
        return Ok(PathAttribute::Other(RawAttribute {
            flags: m.flags,
            type_code: m.type_code,
            value,
        }));
    }
    // Decode through the codec: an UPDATE body holding just this attribute.
    let len = u16::try_from(value.len()).map_err(|_| "attribute value too long".to_owned())?;
    let mut body = BytesMut::new();
    body.put_u16(0);
    let attr_len = 4 + usize::from(len);
    body.put_u16(u16::try_from(attr_len).map_err(|_| "attribute value too long".to_owned())?);
    body.put_u8(m.flags | attr_flags::EXTENDED_LENGTH);
    body.put_u8(m.type_code);
    body.put_u16(len);
    body.put_slice(&value);
    let mut update = Update::decode(body.freeze(), &WIDE_DECODE).map_err(|n| n.to_string())?;
    if let Some(e) = update.errors.first() {
        return Err(format!("attribute {}: {}", m.type_code, e.notification));
    }
    match update.attributes.pop() {
        Some(PathAttribute::Other(_)) | None => Err(format!(
            "attribute {} is not one the codec interprets: mark it raw",
            m.type_code
        )),
        Some(a) => Ok(a),
    }
}

fn site_to(s: &ErrorSite) -> ErrorSiteMirror {
    match *s {
        ErrorSite::WithdrawnRoutes => ErrorSiteMirror::WithdrawnRoutes,
        ErrorSite::AttributeList => ErrorSiteMirror::AttributeList,
        ErrorSite::Attribute { type_code, flags } => {
            ErrorSiteMirror::Attribute { type_code, flags }
        }
        ErrorSite::DuplicateAttribute { type_code } => {
            ErrorSiteMirror::DuplicateAttribute { type_code }
        }
        ErrorSite::Nlri => ErrorSiteMirror::Nlri,
    }
}

fn site_from(s: ErrorSiteMirror) -> ErrorSite {
    match s {
        ErrorSiteMirror::WithdrawnRoutes => ErrorSite::WithdrawnRoutes,
        ErrorSiteMirror::AttributeList => ErrorSite::AttributeList,
        ErrorSiteMirror::Attribute { type_code, flags } => {
            ErrorSite::Attribute { type_code, flags }
        }
        ErrorSiteMirror::DuplicateAttribute { type_code } => {
            ErrorSite::DuplicateAttribute { type_code }
        }
        ErrorSiteMirror::Nlri => ErrorSite::Nlri,
    }
}

fn prefixes_from(v: Vec<String>) -> Result<Vec<Prefix>, String> {
    v.into_iter()
        .map(|s| s.parse::<Prefix>().map_err(|e| e.to_string()))
        .collect()
}

fn message_to(m: &Message) -> Result<MessageMirror, String> {
    Ok(match m {
        Message::Open(o) => MessageMirror::Open(OpenMirror {
            version: o.version,
            my_as: o.my_as,
            hold_time: o.hold_time.seconds(),
            bgp_id: o.bgp_id,
            parameters: o
                .parameters
                .iter()
                .map(|p| {
                    let OptionalParameter::Capabilities(caps) = p;
                    caps.iter().map(capability_to).collect()
                })
                .collect::<Result<_, String>>()?,
            extended_parameters: o.extended_parameters,
        }),
        Message::Update(u) => MessageMirror::Update(UpdateMirror {
            withdrawn: u.withdrawn.iter().map(Prefix::to_string).collect(),
            attributes: u
                .attributes
                .iter()
                .map(attribute_to)
                .collect::<Result<_, String>>()?,
            nlri: u.nlri.iter().map(Prefix::to_string).collect(),
            errors: u
                .errors
                .iter()
                .map(|e| {
                    Ok::<_, String>(UpdateErrorMirror {
                        site: site_to(&e.site),
                        notification: notification_to(&e.notification)?,
                    })
                })
                .collect::<Result<_, String>>()?,
        }),
        Message::Notification(n) => MessageMirror::Notification(notification_to(n)?),
        Message::Keepalive => MessageMirror::Keepalive,
        Message::RouteRefresh(rr) => MessageMirror::RouteRefresh(RouteRefreshMirror {
            family: rr.family.to_string(),
            subtype: rr.subtype.to_u8(),
        }),
    })
}

fn message_from(m: MessageMirror) -> Result<Message, String> {
    Ok(match m {
        MessageMirror::Open(o) => Message::Open(Open {
            version: o.version,
            my_as: o.my_as,
            hold_time: HoldTime::new(o.hold_time)
                .ok_or_else(|| format!("hold time {} is not allowed", o.hold_time))?,
            bgp_id: o.bgp_id,
            parameters: o
                .parameters
                .into_iter()
                .map(|caps| {
                    caps.into_iter()
                        .map(capability_from)
                        .collect::<Result<Vec<_>, String>>()
                        .map(OptionalParameter::Capabilities)
                })
                .collect::<Result<_, String>>()?,
            extended_parameters: o.extended_parameters,
        }),
        MessageMirror::Update(u) => Message::Update(Update {
            withdrawn: prefixes_from(u.withdrawn)?,
            attributes: u
                .attributes
                .into_iter()
                .map(attribute_from)
                .collect::<Result<_, String>>()?,
            nlri: prefixes_from(u.nlri)?,
            errors: u
                .errors
                .into_iter()
                .map(|e| {
                    Ok::<_, String>(UpdateError {
                        site: site_from(e.site),
                        notification: notification_from(e.notification)?,
                    })
                })
                .collect::<Result<_, String>>()?,
        }),
        MessageMirror::Notification(n) => Message::Notification(notification_from(n)?),
        MessageMirror::Keepalive => Message::Keepalive,
        MessageMirror::RouteRefresh(rr) => Message::RouteRefresh(RouteRefresh {
            family: family_from(rr.family)?,
            subtype: RouteRefreshSubtype::from_u8(rr.subtype),
        }),
    })
}

via_mirror!(
    /// A [`Message`], tagged by type.
    message, Message, MessageMirror, message_to, message_from
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00AB10").unwrap().as_ref(), &[0, 0xab, 0x10]);
        assert!(unhex("abc").is_err());
        assert!(unhex("zz").is_err());
    }

    #[test]
    fn family_text_round_trips() {
        for f in [
            Family::IPV4_UNICAST,
            Family::IPV6_UNICAST,
            Family::new(Afi::IPV4, Safi::MULTICAST),
            Family::new(Afi::IPV4, Safi(4)),
            Family::new(Afi(25), Safi(70)),
        ] {
            assert_eq!(parse_family(&f.to_string()), Some(f), "{f}");
        }
        assert_eq!(parse_family("ipv4-anycast"), None);
        assert_eq!(parse_family("nonsense"), None);
    }
}
