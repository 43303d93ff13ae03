//! Encoding errors and the helpers that write headers and back-patch
//! lengths.

use bytes::{BufMut, BytesMut};

use super::context::HEADER_LEN;
use super::types::{Afi, Family};

/// Why a message could not be encoded. Nothing is left in the output buffer
/// when an encoder returns one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("message of {length} bytes exceeds the maximum of {max}")]
    MessageTooLong { length: usize, max: usize },
    #[error("attribute {type_code} value of {length} bytes exceeds 65535")]
    AttributeTooLong { type_code: u8, length: usize },
    #[error("capability {code} value of {length} bytes exceeds 255")]
    CapabilityTooLong { code: u8, length: usize },
    #[error("optional parameters of {length} bytes exceed 65535")]
    OptionalParametersTooLong { length: usize },
    #[error("{prefix} does not belong to address family {expected:?}")]
    FamilyMismatch { prefix: String, expected: Afi },
    #[error("family {0} has no prefix NLRI this encoder can write")]
    UnsupportedFamily(Family),
    #[error("the attributes leave no room for a single prefix in a {max}-byte message")]
    AttributesTooLarge { max: usize },
    #[error("path attribute {0} must not be given here (the encoder writes it)")]
    UnexpectedAttribute(u8),
    #[error("well-known mandatory attribute {0} is missing")]
    MissingAttribute(u8),
}

pub(crate) const MARKER: [u8; 16] = [0xff; 16];

/// Writes a header with a zero length; returns the message start for
/// [`finish_message`].
pub(crate) fn start_message(out: &mut BytesMut, message_type: u8) -> usize {
    let start = out.len();
    out.put_slice(&MARKER);
    out.put_u16(0);
    out.put_u8(message_type);
    start
}

/// Patches the length of the message begun at `start`, or removes it and
/// fails when it is longer than `max`.
pub(crate) fn finish_message(
    out: &mut BytesMut,
    start: usize,
    max: usize,
) -> Result<(), EncodeError> {
    let length = out.len() - start;
    debug_assert!(length >= HEADER_LEN);
    match u16::try_from(length) {
        Ok(len16) if length <= max => {
            out[start + 16..start + 18].copy_from_slice(&len16.to_be_bytes());
            Ok(())
        }
        _ => {
            out.truncate(start);
            Err(EncodeError::MessageTooLong { length, max })
        }
    }
}

/// Patches a 2-byte length field at `at` with the bytes written since
/// `at + 2`.
pub(crate) fn patch_u16(out: &mut BytesMut, at: usize) -> Option<usize> {
    let length = out.len() - at - 2;
    let len16 = u16::try_from(length).ok()?;
    out[at..at + 2].copy_from_slice(&len16.to_be_bytes());
    Some(length)
}
