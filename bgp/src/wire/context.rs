//! What the codec must know about the session to decode and encode: the
//! result of capability negotiation, plus the peer type.

/// Size of the message header (marker, length, type).
pub const HEADER_LEN: usize = 19;
/// The largest message without the extended message capability (RFC 4271).
pub const MAX_MESSAGE_LEN: usize = 4096;
/// The largest message once extended messages are negotiated (RFC 8654).
pub const MAX_EXTENDED_MESSAGE_LEN: usize = 65535;

/// ADD-PATH (RFC 7911) mode. We never advertise the capability, so NLRI
/// never carry path identifiers; the field exists so that the contexts
/// already have their final shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddPath {
    #[default]
    None,
}

/// How to read messages from one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeContext {
    /// 4-octet AS numbers in AS_PATH and AGGREGATOR (RFC 6793).
    pub four_octet_as: bool,
    /// Messages up to 65535 bytes (RFC 8654).
    pub extended_message: bool,
    /// The peer is in our AS (LOCAL_PREF accepted, confederation checks).
    pub ibgp: bool,
    pub add_path: AddPath,
}

impl DecodeContext {
    pub fn max_message_len(&self) -> usize {
        max_len(self.extended_message)
    }
}

/// How to write messages to one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EncodeContext {
    /// Write 4-octet AS numbers; otherwise AS_TRANS with AS4_PATH and
    /// AS4_AGGREGATOR (RFC 6793).
    pub four_octet_as: bool,
    /// Messages up to 65535 bytes (RFC 8654).
    pub extended_message: bool,
    pub add_path: AddPath,
}

impl EncodeContext {
    pub fn max_message_len(&self) -> usize {
        max_len(self.extended_message)
    }
}

fn max_len(extended: bool) -> usize {
    if extended {
        MAX_EXTENDED_MESSAGE_LEN
    } else {
        MAX_MESSAGE_LEN
    }
}
