//! The one error type of the codec: a BGP NOTIFICATION, one variant per
//! code/subcode we can send or receive (RFC 4271, 4486, 5492, 6608, 7313,
//! 8203/9003, 8538, 9384, 9687), each carrying its data. Decoders return it
//! directly; a received NOTIFICATION message decodes to the same type.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

use super::types::{Afi, Family, Safi};

/// NOTIFICATION error codes (IANA "BGP Error (Notification) Codes").
pub mod error_code {
    pub const MESSAGE_HEADER: u8 = 1;
    pub const OPEN_MESSAGE: u8 = 2;
    pub const UPDATE_MESSAGE: u8 = 3;
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    pub const FSM: u8 = 5;
    pub const CEASE: u8 = 6;
    pub const ROUTE_REFRESH_MESSAGE: u8 = 7;
    pub const SEND_HOLD_TIMER_EXPIRED: u8 = 8;
}

/// The longest Shutdown Communication (RFC 9003; RFC 8203 allowed 128).
pub const MAX_SHUTDOWN_COMMUNICATION: usize = 255;

/// The data of Cease/Maximum Number of Prefixes Reached (RFC 4486).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixLimit {
    pub family: Family,
    pub limit: u32,
}

/// A BGP NOTIFICATION. `Display` renders the text operators see, e.g.
/// `Cease/Administrative Shutdown: "maintenance"`.
///
/// A code/subcode we do not model, or whose data does not have the format
/// its RFC gives, is kept as [`Notification::Other`], so that
/// `from_wire(c, s, d)` always gives back `c`, `s` and `d`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Notification {
    /// 1/0.
    #[error("Message Header Error/Unspecific")]
    MessageHeaderUnspecific,
    /// 1/1: the marker is not all ones.
    #[error("Message Header Error/Connection Not Synchronized")]
    ConnectionNotSynchronized,
    /// 1/2: data is the erroneous Length field.
    #[error("Message Header Error/Bad Message Length: {length}")]
    BadMessageLength { length: u16 },
    /// 1/3: data is the erroneous Type field.
    #[error("Message Header Error/Bad Message Type: {message_type}")]
    BadMessageType { message_type: u8 },
    /// 2/0.
    #[error("OPEN Message Error/Unspecific")]
    OpenUnspecific,
    /// 2/1: data is the largest version the sender supports.
    #[error("OPEN Message Error/Unsupported Version Number: {version}")]
    UnsupportedVersionNumber { version: u16 },
    /// 2/2.
    #[error("OPEN Message Error/Bad Peer AS")]
    BadPeerAs,
    /// 2/3.
    #[error("OPEN Message Error/Bad BGP Identifier")]
    BadBgpIdentifier,
    /// 2/4.
    #[error("OPEN Message Error/Unsupported Optional Parameter")]
    UnsupportedOptionalParameter,
    /// 2/6.
    #[error("OPEN Message Error/Unacceptable Hold Time")]
    UnacceptableHoldTime,
    /// 2/7 (RFC 5492): data is the unsupported capabilities.
    #[error("OPEN Message Error/Unsupported Capability{}", data_suffix(.capabilities))]
    UnsupportedCapability { capabilities: Bytes },
    /// 3/0.
    #[error("UPDATE Message Error/Unspecific")]
    UpdateUnspecific,
    /// 3/1.
    #[error("UPDATE Message Error/Malformed Attribute List")]
    MalformedAttributeList,
    /// 3/2: data is the attribute (flags, type, length, value).
    #[error("UPDATE Message Error/Unrecognized Well-known Attribute{}", data_suffix(.attribute))]
    UnrecognizedWellKnownAttribute { attribute: Bytes },
    /// 3/3: data is the missing attribute's type code.
    #[error("UPDATE Message Error/Missing Well-known Attribute: {}", super::attribute::type_name(*.type_code))]
    MissingWellKnownAttribute { type_code: u8 },
    /// 3/4: data is the attribute.
    #[error("UPDATE Message Error/Attribute Flags Error{}", data_suffix(.attribute))]
    AttributeFlagsError { attribute: Bytes },
    /// 3/5: data is the attribute.
    #[error("UPDATE Message Error/Attribute Length Error{}", data_suffix(.attribute))]
    AttributeLengthError { attribute: Bytes },
    /// 3/6: data is the attribute.
    #[error("UPDATE Message Error/Invalid ORIGIN Attribute{}", data_suffix(.attribute))]
    InvalidOriginAttribute { attribute: Bytes },
    /// 3/8: data is the attribute.
    #[error("UPDATE Message Error/Invalid NEXT_HOP Attribute{}", data_suffix(.attribute))]
    InvalidNextHopAttribute { attribute: Bytes },
    /// 3/9: data is the attribute.
    #[error("UPDATE Message Error/Optional Attribute Error{}", data_suffix(.attribute))]
    OptionalAttributeError { attribute: Bytes },
    /// 3/10.
    #[error("UPDATE Message Error/Invalid Network Field")]
    InvalidNetworkField,
    /// 3/11.
    #[error("UPDATE Message Error/Malformed AS_PATH")]
    MalformedAsPath,
    /// 4/0.
    #[error("Hold Timer Expired")]
    HoldTimerExpired,
    /// 5/0 (RFC 6608).
    #[error("Finite State Machine Error/Unspecified Error")]
    FsmUnspecified,
    /// 5/1: data is the type of the unexpected message.
    #[error("Finite State Machine Error/Receive Unexpected Message in OpenSent State: {}", message_type_name(*.message_type))]
    FsmUnexpectedInOpenSent { message_type: u8 },
    /// 5/2: data is the type of the unexpected message.
    #[error("Finite State Machine Error/Receive Unexpected Message in OpenConfirm State: {}", message_type_name(*.message_type))]
    FsmUnexpectedInOpenConfirm { message_type: u8 },
    /// 5/3: data is the type of the unexpected message.
    #[error("Finite State Machine Error/Receive Unexpected Message in Established State: {}", message_type_name(*.message_type))]
    FsmUnexpectedInEstablished { message_type: u8 },
    /// 6/0.
    #[error("Cease/Unspecific")]
    CeaseUnspecific,
    /// 6/1 (RFC 4486): optional AFI, SAFI and upper bound.
    #[error("Cease/Maximum Number of Prefixes Reached{}", limit_suffix(.limit))]
    MaximumPrefixesReached { limit: Option<PrefixLimit> },
    /// 6/2 with an optional Shutdown Communication (RFC 9003).
    #[error("Cease/Administrative Shutdown{}", message_suffix(.message))]
    AdministrativeShutdown { message: Option<String> },
    /// 6/3.
    #[error("Cease/Peer De-configured")]
    PeerDeconfigured,
    /// 6/4 with an optional Shutdown Communication (RFC 9003).
    #[error("Cease/Administrative Reset{}", message_suffix(.message))]
    AdministrativeReset { message: Option<String> },
    /// 6/5.
    #[error("Cease/Connection Rejected")]
    ConnectionRejected,
    /// 6/6.
    #[error("Cease/Other Configuration Change")]
    OtherConfigurationChange,
    /// 6/7.
    #[error("Cease/Connection Collision Resolution")]
    ConnectionCollisionResolution,
    /// 6/8.
    #[error("Cease/Out of Resources")]
    OutOfResources,
    /// 6/9 (RFC 8538): data is the code, subcode and data of the cause.
    #[error("Cease/Hard Reset ({cause})")]
    HardReset { cause: Box<Notification> },
    /// 6/10 (RFC 9384).
    #[error("Cease/BFD Down")]
    BfdDown,
    /// 7/1 (RFC 7313): data is the complete ROUTE-REFRESH message.
    #[error("ROUTE-REFRESH Message Error/Invalid Message Length{}", data_suffix(.message))]
    InvalidRouteRefreshLength { message: Bytes },
    /// 8/0 (RFC 9687).
    #[error("Send Hold Timer Expired")]
    SendHoldTimerExpired,
    /// Any other code/subcode, or a known one whose data is malformed.
    #[error("{}", other_text(*.code, *.subcode, .data))]
    Other { code: u8, subcode: u8, data: Bytes },
}

impl Notification {
    /// Cease/Administrative Shutdown with an RFC 9003 message (truncated to
    /// 255 bytes at a character boundary; empty means none).
    pub fn administrative_shutdown(message: &str) -> Self {
        Notification::AdministrativeShutdown {
            message: shutdown_text(message),
        }
    }

    /// Cease/Administrative Reset with an RFC 9003 message.
    pub fn administrative_reset(message: &str) -> Self {
        Notification::AdministrativeReset {
            message: shutdown_text(message),
        }
    }

    /// Cease/Hard Reset wrapping `cause` (RFC 8538).
    pub fn hard_reset(cause: Notification) -> Self {
        Notification::HardReset {
            cause: Box::new(cause),
        }
    }

    /// The Shutdown Communication of an Administrative Shutdown or Reset.
    pub fn shutdown_message(&self) -> Option<&str> {
        match self {
            Notification::AdministrativeShutdown { message }
            | Notification::AdministrativeReset { message } => message.as_deref(),
            _ => None,
        }
    }

    pub fn code(&self) -> u8 {
        use Notification::*;
        use error_code::*;
        match self {
            MessageHeaderUnspecific
            | ConnectionNotSynchronized
            | BadMessageLength { .. }
            | BadMessageType { .. } => MESSAGE_HEADER,
            OpenUnspecific
            | UnsupportedVersionNumber { .. }
            | BadPeerAs
            | BadBgpIdentifier
            | UnsupportedOptionalParameter
            | UnacceptableHoldTime
            | UnsupportedCapability { .. } => OPEN_MESSAGE,
            UpdateUnspecific
            | MalformedAttributeList
            | UnrecognizedWellKnownAttribute { .. }
            | MissingWellKnownAttribute { .. }
            | AttributeFlagsError { .. }
            | AttributeLengthError { .. }
            | InvalidOriginAttribute { .. }
            | InvalidNextHopAttribute { .. }
            | OptionalAttributeError { .. }
            | InvalidNetworkField
            | MalformedAsPath => UPDATE_MESSAGE,
            HoldTimerExpired => HOLD_TIMER_EXPIRED,
            FsmUnspecified
            | FsmUnexpectedInOpenSent { .. }
            | FsmUnexpectedInOpenConfirm { .. }
            | FsmUnexpectedInEstablished { .. } => FSM,
            CeaseUnspecific
            | MaximumPrefixesReached { .. }
            | AdministrativeShutdown { .. }
            | PeerDeconfigured
            | AdministrativeReset { .. }
            | ConnectionRejected
            | OtherConfigurationChange
            | ConnectionCollisionResolution
            | OutOfResources
            | HardReset { .. }
            | BfdDown => CEASE,
            InvalidRouteRefreshLength { .. } => ROUTE_REFRESH_MESSAGE,
            SendHoldTimerExpired => SEND_HOLD_TIMER_EXPIRED,
            Other { code, .. } => *code,
        }
    }

    pub fn subcode(&self) -> u8 {
        use Notification::*;
        match self {
            MessageHeaderUnspecific
            | OpenUnspecific
            | UpdateUnspecific
            | HoldTimerExpired
            | FsmUnspecified
            | CeaseUnspecific
            | SendHoldTimerExpired => 0,
            ConnectionNotSynchronized
            | UnsupportedVersionNumber { .. }
            | MalformedAttributeList
            | FsmUnexpectedInOpenSent { .. }
            | MaximumPrefixesReached { .. }
            | InvalidRouteRefreshLength { .. } => 1,
            BadMessageLength { .. }
            | BadPeerAs
            | UnrecognizedWellKnownAttribute { .. }
            | FsmUnexpectedInOpenConfirm { .. }
            | AdministrativeShutdown { .. } => 2,
            BadMessageType { .. }
            | BadBgpIdentifier
            | MissingWellKnownAttribute { .. }
            | FsmUnexpectedInEstablished { .. }
            | PeerDeconfigured => 3,
            UnsupportedOptionalParameter
            | AttributeFlagsError { .. }
            | AdministrativeReset { .. } => 4,
            AttributeLengthError { .. } | ConnectionRejected => 5,
            UnacceptableHoldTime | InvalidOriginAttribute { .. } | OtherConfigurationChange => 6,
            UnsupportedCapability { .. } | ConnectionCollisionResolution => 7,
            InvalidNextHopAttribute { .. } | OutOfResources => 8,
            OptionalAttributeError { .. } | HardReset { .. } => 9,
            InvalidNetworkField | BfdDown => 10,
            MalformedAsPath => 11,
            Other { subcode, .. } => *subcode,
        }
    }

    /// The Data field as sent on the wire.
    pub fn data(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.write_data(&mut out);
        out.freeze()
    }

    pub(crate) fn write_data(&self, out: &mut BytesMut) {
        use Notification::*;
        match self {
            BadMessageLength { length } => out.put_u16(*length),
            BadMessageType { message_type }
            | FsmUnexpectedInOpenSent { message_type }
            | FsmUnexpectedInOpenConfirm { message_type }
            | FsmUnexpectedInEstablished { message_type } => out.put_u8(*message_type),
            UnsupportedVersionNumber { version } => out.put_u16(*version),
            MissingWellKnownAttribute { type_code } => out.put_u8(*type_code),
            UnsupportedCapability { capabilities: data }
            | UnrecognizedWellKnownAttribute { attribute: data }
            | AttributeFlagsError { attribute: data }
            | AttributeLengthError { attribute: data }
            | InvalidOriginAttribute { attribute: data }
            | InvalidNextHopAttribute { attribute: data }
            | OptionalAttributeError { attribute: data }
            | InvalidRouteRefreshLength { message: data }
            | Other { data, .. } => out.put_slice(data),
            MaximumPrefixesReached { limit: Some(l) } => {
                out.put_u16(l.family.afi.0);
                out.put_u8(l.family.safi.0);
                out.put_u32(l.limit);
            }
            AdministrativeShutdown { message: Some(m) }
            | AdministrativeReset { message: Some(m) } => {
                let text = truncate_utf8(m, MAX_SHUTDOWN_COMMUNICATION);
                // Bounded by MAX_SHUTDOWN_COMMUNICATION (255).
                out.put_u8(u8::try_from(text.len()).unwrap_or(u8::MAX));
                out.put_slice(text.as_bytes());
            }
            HardReset { cause } => {
                out.put_u8(cause.code());
                out.put_u8(cause.subcode());
                cause.write_data(out);
            }
            MessageHeaderUnspecific
            | ConnectionNotSynchronized
            | OpenUnspecific
            | BadPeerAs
            | BadBgpIdentifier
            | UnsupportedOptionalParameter
            | UnacceptableHoldTime
            | UpdateUnspecific
            | MalformedAttributeList
            | InvalidNetworkField
            | MalformedAsPath
            | HoldTimerExpired
            | FsmUnspecified
            | CeaseUnspecific
            | MaximumPrefixesReached { limit: None }
            | AdministrativeShutdown { message: None }
            | PeerDeconfigured
            | AdministrativeReset { message: None }
            | ConnectionRejected
            | OtherConfigurationChange
            | ConnectionCollisionResolution
            | OutOfResources
            | BfdDown
            | SendHoldTimerExpired => {}
        }
    }

    /// Builds the notification a peer sent. Never fails: anything not in the
    /// format its RFC gives becomes [`Notification::Other`].
    pub fn from_wire(code: u8, subcode: u8, data: &[u8]) -> Self {
        from_wire_at(code, subcode, data, 0)
    }
}

fn from_wire_at(code: u8, subcode: u8, data: &[u8], depth: u8) -> Notification {
    use Notification::*;
    let empty = data.is_empty();
    let u8_data = || <[u8; 1]>::try_from(data).ok().map(|[b]| b);
    let u16_data = || <[u8; 2]>::try_from(data).ok().map(u16::from_be_bytes);
    let bytes = || Bytes::copy_from_slice(data);
    let known = match (code, subcode) {
        (1, 0) if empty => Some(MessageHeaderUnspecific),
        (1, 1) if empty => Some(ConnectionNotSynchronized),
        (1, 2) => u16_data().map(|length| BadMessageLength { length }),
        (1, 3) => u8_data().map(|message_type| BadMessageType { message_type }),
        (2, 0) if empty => Some(OpenUnspecific),
        (2, 1) => u16_data().map(|version| UnsupportedVersionNumber { version }),
        (2, 2) if empty => Some(BadPeerAs),
        (2, 3) if empty => Some(BadBgpIdentifier),
        (2, 4) if empty => Some(UnsupportedOptionalParameter),
        (2, 6) if empty => Some(UnacceptableHoldTime),
        (2, 7) => Some(UnsupportedCapability {
            capabilities: bytes(),
        }),
        (3, 0) if empty => Some(UpdateUnspecific),
        (3, 1) if empty => Some(MalformedAttributeList),
        (3, 2) => Some(UnrecognizedWellKnownAttribute { attribute: bytes() }),
        (3, 3) => u8_data().map(|type_code| MissingWellKnownAttribute { type_code }),
        (3, 4) => Some(AttributeFlagsError { attribute: bytes() }),
        (3, 5) => Some(AttributeLengthError { attribute: bytes() }),
        (3, 6) => Some(InvalidOriginAttribute { attribute: bytes() }),
        (3, 8) => Some(InvalidNextHopAttribute { attribute: bytes() }),
        (3, 9) => Some(OptionalAttributeError { attribute: bytes() }),
        (3, 10) if empty => Some(InvalidNetworkField),
        (3, 11) if empty => Some(MalformedAsPath),
        (4, 0) if empty => Some(HoldTimerExpired),
        (5, 0) if empty => Some(FsmUnspecified),
        (5, 1) => u8_data().map(|message_type| FsmUnexpectedInOpenSent { message_type }),
        (5, 2) => u8_data().map(|message_type| FsmUnexpectedInOpenConfirm { message_type }),
        (5, 3) => u8_data().map(|message_type| FsmUnexpectedInEstablished { message_type }),
        (6, 0) if empty => Some(CeaseUnspecific),
        (6, 1) if empty => Some(MaximumPrefixesReached { limit: None }),
        (6, 1) => <[u8; 7]>::try_from(data)
            .ok()
            .map(|d| MaximumPrefixesReached {
                limit: Some(PrefixLimit {
                    family: Family::new(Afi(u16::from_be_bytes([d[0], d[1]])), Safi(d[2])),
                    limit: u32::from_be_bytes([d[3], d[4], d[5], d[6]]),
                }),
            }),
        (6, 2) => parse_shutdown(data).map(|message| AdministrativeShutdown { message }),
        (6, 3) if empty => Some(PeerDeconfigured),
        (6, 4) => parse_shutdown(data).map(|message| AdministrativeReset { message }),
        (6, 5) if empty => Some(ConnectionRejected),
        (6, 6) if empty => Some(OtherConfigurationChange),
        (6, 7) if empty => Some(ConnectionCollisionResolution),
        (6, 8) if empty => Some(OutOfResources),
        // A Hard Reset inside a Hard Reset is kept raw: no recursion on
        // untrusted input.
        (6, 9) if depth == 0 => match data {
            [inner_code, inner_subcode, rest @ ..] => Some(HardReset {
                cause: Box::new(from_wire_at(*inner_code, *inner_subcode, rest, depth + 1)),
            }),
            _ => None,
        },
        (6, 10) if empty => Some(BfdDown),
        (7, 1) => Some(InvalidRouteRefreshLength { message: bytes() }),
        (8, 0) if empty => Some(SendHoldTimerExpired),
        _ => None,
    };
    known.unwrap_or_else(|| Other {
        code,
        subcode,
        data: bytes(),
    })
}

/// RFC 9003: no data means no communication; otherwise a length octet and
/// exactly that many bytes of UTF-8. Anything else is malformed (`None`).
fn parse_shutdown(data: &[u8]) -> Option<Option<String>> {
    let Some((&len, text)) = data.split_first() else {
        return Some(None);
    };
    if text.len() != usize::from(len) {
        return None;
    }
    String::from_utf8(text.to_vec()).ok().map(Some)
}

fn shutdown_text(message: &str) -> Option<String> {
    (!message.is_empty()).then(|| truncate_utf8(message, MAX_SHUTDOWN_COMMUNICATION).to_owned())
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn message_suffix(message: &Option<String>) -> String {
    match message {
        Some(m) => format!(": {m:?}"),
        None => String::new(),
    }
}

fn limit_suffix(limit: &Option<PrefixLimit>) -> String {
    match limit {
        Some(l) => format!(": {} limit {}", l.family, l.limit),
        None => String::new(),
    }
}

/// At most this many data bytes are shown in text.
const SHOWN_DATA: usize = 64;

fn data_suffix(data: &[u8]) -> String {
    if data.is_empty() {
        return String::new();
    }
    let mut s = String::from(" (data ");
    for b in data.iter().take(SHOWN_DATA) {
        let _ = write!(s, "{b:02x}");
    }
    if data.len() > SHOWN_DATA {
        let _ = write!(s, "... {} bytes", data.len());
    }
    s.push(')');
    s
}

pub(crate) fn message_type_name(t: u8) -> String {
    match t {
        1 => "OPEN".into(),
        2 => "UPDATE".into(),
        3 => "NOTIFICATION".into(),
        4 => "KEEPALIVE".into(),
        5 => "ROUTE-REFRESH".into(),
        other => format!("type {other}"),
    }
}

fn code_name(code: u8) -> Option<&'static str> {
    Some(match code {
        1 => "Message Header Error",
        2 => "OPEN Message Error",
        3 => "UPDATE Message Error",
        4 => "Hold Timer Expired",
        5 => "Finite State Machine Error",
        6 => "Cease",
        7 => "ROUTE-REFRESH Message Error",
        8 => "Send Hold Timer Expired",
        _ => return None,
    })
}

fn subcode_name(code: u8, subcode: u8) -> Option<&'static str> {
    Some(match (code, subcode) {
        (1..=3 | 6, 0) => "Unspecific",
        (5, 0) => "Unspecified Error",
        (1, 1) => "Connection Not Synchronized",
        (1, 2) => "Bad Message Length",
        (1, 3) => "Bad Message Type",
        (2, 1) => "Unsupported Version Number",
        (2, 2) => "Bad Peer AS",
        (2, 3) => "Bad BGP Identifier",
        (2, 4) => "Unsupported Optional Parameter",
        (2, 5) => "Authentication Failure (deprecated)",
        (2, 6) => "Unacceptable Hold Time",
        (2, 7) => "Unsupported Capability",
        (2, 11) => "Role Mismatch",
        (3, 1) => "Malformed Attribute List",
        (3, 2) => "Unrecognized Well-known Attribute",
        (3, 3) => "Missing Well-known Attribute",
        (3, 4) => "Attribute Flags Error",
        (3, 5) => "Attribute Length Error",
        (3, 6) => "Invalid ORIGIN Attribute",
        (3, 7) => "AS Routing Loop (deprecated)",
        (3, 8) => "Invalid NEXT_HOP Attribute",
        (3, 9) => "Optional Attribute Error",
        (3, 10) => "Invalid Network Field",
        (3, 11) => "Malformed AS_PATH",
        (5, 1) => "Receive Unexpected Message in OpenSent State",
        (5, 2) => "Receive Unexpected Message in OpenConfirm State",
        (5, 3) => "Receive Unexpected Message in Established State",
        (6, 1) => "Maximum Number of Prefixes Reached",
        (6, 2) => "Administrative Shutdown",
        (6, 3) => "Peer De-configured",
        (6, 4) => "Administrative Reset",
        (6, 5) => "Connection Rejected",
        (6, 6) => "Other Configuration Change",
        (6, 7) => "Connection Collision Resolution",
        (6, 8) => "Out of Resources",
        (6, 9) => "Hard Reset",
        (6, 10) => "BFD Down",
        (7, 1) => "Invalid Message Length",
        _ => return None,
    })
}

fn other_text(code: u8, subcode: u8, data: &[u8]) -> String {
    let mut s = match code_name(code) {
        Some(name) => name.to_owned(),
        None => format!("Error code {code}"),
    };
    match subcode_name(code, subcode) {
        Some(sub) => {
            let _ = write!(s, "/{sub}");
        }
        // Codes without subcodes (Hold Timer Expired) read best bare.
        None if subcode == 0 && matches!(code, 4 | 8) => {}
        None => {
            let _ = write!(s, "/subcode {subcode}");
        }
    }
    s.push_str(&data_suffix(data));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_texts() {
        assert_eq!(
            Notification::administrative_shutdown("maintenance").to_string(),
            "Cease/Administrative Shutdown: \"maintenance\""
        );
        assert_eq!(
            Notification::BadPeerAs.to_string(),
            "OPEN Message Error/Bad Peer AS"
        );
        assert_eq!(
            Notification::BadMessageLength { length: 5000 }.to_string(),
            "Message Header Error/Bad Message Length: 5000"
        );
        assert_eq!(
            Notification::MissingWellKnownAttribute { type_code: 3 }.to_string(),
            "UPDATE Message Error/Missing Well-known Attribute: NEXT_HOP (3)"
        );
        assert_eq!(
            Notification::InvalidOriginAttribute {
                attribute: Bytes::from_static(&[0x40, 1, 1, 7])
            }
            .to_string(),
            "UPDATE Message Error/Invalid ORIGIN Attribute (data 40010107)"
        );
        assert_eq!(
            Notification::hard_reset(Notification::administrative_reset("bye")).to_string(),
            "Cease/Hard Reset (Cease/Administrative Reset: \"bye\")"
        );
        assert_eq!(
            Notification::FsmUnexpectedInOpenSent { message_type: 2 }.to_string(),
            "Finite State Machine Error/Receive Unexpected Message in OpenSent State: UPDATE"
        );
        assert_eq!(
            Notification::from_wire(6, 2, &[5, b'a']).to_string(),
            "Cease/Administrative Shutdown (data 0561)"
        );
        assert_eq!(
            Notification::from_wire(4, 0, &[]).to_string(),
            "Hold Timer Expired"
        );
        assert_eq!(
            Notification::from_wire(9, 3, &[]).to_string(),
            "Error code 9/subcode 3"
        );
        assert_eq!(
            Notification::from_wire(2, 11, &[]).to_string(),
            "OPEN Message Error/Role Mismatch"
        );
        assert_eq!(
            Notification::from_wire(6, 1, &[0, 2, 1, 0, 0, 0, 100]).to_string(),
            "Cease/Maximum Number of Prefixes Reached: ipv6-unicast limit 100"
        );
        let long = Notification::from_wire(3, 9, &[0xab; 100]).to_string();
        assert!(long.ends_with("... 100 bytes)"), "{long}");
    }

    #[test]
    fn shutdown_communication_is_truncated_at_255_bytes_on_a_char_boundary() {
        let text = "é".repeat(200); // 400 bytes
        let n = Notification::administrative_shutdown(&text);
        let data = n.data();
        assert_eq!(usize::from(data[0]), data.len() - 1);
        assert_eq!(data.len() - 1, 254);
        assert_eq!(Notification::from_wire(6, 2, &data), n);
        assert_eq!(
            Notification::administrative_shutdown(""),
            Notification::AdministrativeShutdown { message: None }
        );
    }

    #[test]
    fn nested_hard_reset_does_not_recurse() {
        let n = Notification::from_wire(6, 9, &[6, 9, 6, 2]);
        assert_eq!(
            n,
            Notification::HardReset {
                cause: Box::new(Notification::Other {
                    code: 6,
                    subcode: 9,
                    data: Bytes::from_static(&[6, 2]),
                })
            }
        );
        assert_eq!(n.data().as_ref(), &[6, 9, 6, 2]);
    }
}
