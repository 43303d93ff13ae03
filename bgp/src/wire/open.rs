//! The OPEN message (RFC 4271 section 4.2), with capabilities as optional
//! parameters (RFC 5492) and extended optional parameters (RFC 9072).

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};

use super::capability::{AS_TRANS, Capability};
use super::encode::EncodeError;
use super::notification::Notification;
use super::reader::Reader;

/// The BGP version we speak.
pub const BGP_VERSION: u8 = 4;

/// Optional parameter type of capabilities (RFC 5492).
pub const PARAM_CAPABILITIES: u8 = 2;
/// Marks the extended optional parameters format (RFC 9072).
pub const PARAM_EXTENDED_LENGTH: u8 = 255;

/// A hold time in seconds: 0 (no keepalives) or at least 3 (RFC 4271:
/// 1 and 2 are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HoldTime(u16);

impl HoldTime {
    pub const DISABLED: HoldTime = HoldTime(0);
    pub const DEFAULT: HoldTime = HoldTime(90);

    /// `None` for 1 and 2 seconds.
    pub const fn new(seconds: u16) -> Option<Self> {
        match seconds {
            1 | 2 => None,
            s => Some(HoldTime(s)),
        }
    }

    pub const fn seconds(self) -> u16 {
        self.0
    }
}

/// One optional parameter. Capabilities are the only kind BGP uses today;
/// any other type is refused on decode (Unsupported Optional Parameter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionalParameter {
    Capabilities(Vec<Capability>),
}

/// An OPEN message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    pub version: u8,
    /// The 2-octet My Autonomous System field: AS_TRANS when our AS does not
    /// fit (the real one is in the 4-octet AS capability).
    pub my_as: u16,
    pub hold_time: HoldTime,
    pub bgp_id: Ipv4Addr,
    /// Parameters as sent: some speakers send one capability per parameter,
    /// others all in one; both re-encode byte for byte.
    pub parameters: Vec<OptionalParameter>,
    /// Use the RFC 9072 encoding even when the parameters fit in 255 bytes
    /// (set when a received OPEN used it). It is always used when they do
    /// not fit.
    pub extended_parameters: bool,
}

impl Open {
    /// An OPEN for `asn` carrying `capabilities` in one parameter; `my_as`
    /// is AS_TRANS when `asn` does not fit in 2 octets. The 4-octet AS
    /// capability is the caller's to include.
    pub fn new(
        asn: u32,
        hold_time: HoldTime,
        bgp_id: Ipv4Addr,
        capabilities: Vec<Capability>,
    ) -> Self {
        let parameters = if capabilities.is_empty() {
            Vec::new()
        } else {
            vec![OptionalParameter::Capabilities(capabilities)]
        };
        Open {
            version: BGP_VERSION,
            my_as: u16::try_from(asn).unwrap_or(AS_TRANS),
            hold_time,
            bgp_id,
            parameters,
            extended_parameters: false,
        }
    }

    /// All capabilities of all parameters, in order.
    pub fn capabilities(&self) -> impl Iterator<Item = &Capability> {
        self.parameters.iter().flat_map(|p| match p {
            OptionalParameter::Capabilities(caps) => caps.iter(),
        })
    }

    /// The sender's AS: the 4-octet AS capability if present, else My AS.
    pub fn asn(&self) -> u32 {
        self.capabilities()
            .find_map(|c| match c {
                Capability::FourOctetAs(asn) => Some(*asn),
                _ => None,
            })
            .unwrap_or(u32::from(self.my_as))
    }

    /// Decodes an OPEN body (after the header).
    pub fn decode(body: Bytes) -> Result<Open, Notification> {
        let mut r = Reader::new(body);
        let short = || Notification::OpenUnspecific;
        let version = r.u8().ok_or_else(short)?;
        if version != BGP_VERSION {
            return Err(Notification::UnsupportedVersionNumber {
                version: u16::from(BGP_VERSION),
            });
        }
        let my_as = r.u16().ok_or_else(short)?;
        if my_as == 0 {
            // RFC 7607.
            return Err(Notification::BadPeerAs);
        }
        let hold = r.u16().ok_or_else(short)?;
        let hold_time = HoldTime::new(hold).ok_or(Notification::UnacceptableHoldTime)?;
        let bgp_id = Ipv4Addr::from(r.array::<4>().ok_or_else(short)?);
        if bgp_id.is_unspecified() {
            // RFC 6286: the identifier is a non-zero 4-octet number.
            return Err(Notification::BadBgpIdentifier);
        }
        let opt_len = r.u8().ok_or_else(short)?;
        let extended = opt_len != 0 && r.peek().first() == Some(&PARAM_EXTENDED_LENGTH);
        let params = if extended {
            let _marker = r.u8();
            let ext_len = r.u16().ok_or_else(short)?;
            r.take(usize::from(ext_len)).ok_or_else(short)?
        } else {
            r.take(usize::from(opt_len)).ok_or_else(short)?
        };
        if !r.is_empty() {
            // Bytes after the declared parameters.
            return Err(Notification::OpenUnspecific);
        }
        let mut parameters = Vec::new();
        let mut p = Reader::new(params);
        while !p.is_empty() {
            let param_type = p.u8().ok_or_else(short)?;
            let len = if extended {
                p.u16().ok_or_else(short)?
            } else {
                u16::from(p.u8().ok_or_else(short)?)
            };
            let value = p.take(usize::from(len)).ok_or_else(short)?;
            if param_type != PARAM_CAPABILITIES {
                return Err(Notification::UnsupportedOptionalParameter);
            }
            let mut caps = Vec::new();
            let mut c = Reader::new(value);
            while !c.is_empty() {
                let code = c.u8().ok_or_else(short)?;
                let len = c.u8().ok_or_else(short)?;
                let value = c.take(usize::from(len)).ok_or_else(short)?;
                caps.push(Capability::decode(code, value)?);
            }
            parameters.push(OptionalParameter::Capabilities(caps));
        }
        Ok(Open {
            version,
            my_as,
            hold_time,
            bgp_id,
            parameters,
            extended_parameters: extended,
        })
    }

    /// Writes the body (after the header). The RFC 9072 format is used when
    /// asked for or when the parameters do not fit the RFC 4271 one.
    pub(crate) fn encode_body(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let mut values = Vec::with_capacity(self.parameters.len());
        for p in &self.parameters {
            let OptionalParameter::Capabilities(caps) = p;
            let mut value = BytesMut::new();
            for c in caps {
                c.encode(&mut value)?;
            }
            values.push(value);
        }
        let classic_len: usize = values.iter().map(|v| 2 + v.len()).sum();
        let extended =
            self.extended_parameters || classic_len > 255 || values.iter().any(|v| v.len() > 255);
        out.put_u8(self.version);
        out.put_u16(self.my_as);
        out.put_u16(self.hold_time.seconds());
        out.put_slice(&self.bgp_id.octets());
        if extended {
            let total = values.iter().map(|v| 3 + v.len()).sum();
            let total = checked_len(total)?;
            out.put_u8(PARAM_EXTENDED_LENGTH);
            out.put_u8(PARAM_EXTENDED_LENGTH);
            out.put_u16(total);
            for v in &values {
                out.put_u8(PARAM_CAPABILITIES);
                out.put_u16(checked_len(v.len())?);
                out.put_slice(v);
            }
        } else {
            // Both bounded by 255 above.
            out.put_u8(u8::try_from(classic_len).unwrap_or(u8::MAX));
            for v in &values {
                out.put_u8(PARAM_CAPABILITIES);
                out.put_u8(u8::try_from(v.len()).unwrap_or(u8::MAX));
                out.put_slice(v);
            }
        }
        Ok(())
    }
}

fn checked_len(length: usize) -> Result<u16, EncodeError> {
    u16::try_from(length).map_err(|_| EncodeError::OptionalParametersTooLong { length })
}
