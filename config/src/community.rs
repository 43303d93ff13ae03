//! BGP communities as MetalLB writes them: `a:b` (RFC 1997, two 16-bit
//! halves) or `large:a:b:c` (RFC 8092, three 32-bit values).

use std::fmt;

use serde::{Serialize, Serializer};

use crate::gofmt::quote;

/// A standard or large community.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Community {
    /// RFC 1997 community, `high:low`.
    Standard(u16, u16),
    /// RFC 8092 large community, `global:local1:local2`.
    Large(u32, u32, u32),
}

/// Why a community string is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommunityError {
    /// A section is not a number in range.
    #[error("{0}")]
    Value(String),
    /// Neither two nor four sections: could also be an alias not created yet.
    #[error("invalid community format: {0}")]
    Format(String),
}

impl Community {
    /// Parses `a:b` or `large:a:b:c` with MetalLB's error texts.
    pub fn parse(c: &str) -> Result<Self, CommunityError> {
        let fs: Vec<&str> = c.split(':').collect();
        match fs.len() {
            2 => {
                let a = parse_section::<u16>(fs[0], c, 16)?;
                let b = parse_section::<u16>(fs[1], c, 16)?;
                Ok(Community::Standard(a, b))
            }
            4 => {
                if fs[0] != "large" {
                    return Err(CommunityError::Value(format!(
                        "invalid community value: invalid marker for large community, expected community to be of format large:<uint32>:<uint32>:<uint32> but got {} instead",
                        quote(c)
                    )));
                }
                let a = parse_section::<u32>(fs[1], c, 32)?;
                let b = parse_section::<u32>(fs[2], c, 32)?;
                let d = parse_section::<u32>(fs[3], c, 32)?;
                Ok(Community::Large(a, b, d))
            }
            _ => Err(CommunityError::Format(c.to_owned())),
        }
    }

    /// Whether this is a large community.
    pub fn is_large(&self) -> bool {
        matches!(self, Community::Large(..))
    }
}

/// Go's `strconv.ParseUint(s, 10, bits)` with its error text, wrapped in
/// MetalLB's message.
fn parse_section<T: TryFrom<u64>>(s: &str, c: &str, bits: u32) -> Result<T, CommunityError> {
    let err = |why: &str| {
        let go_err = format!("strconv.ParseUint: parsing {}: {why}", quote(s));
        CommunityError::Value(format!(
            "invalid community value: invalid section {} of community {}, err: {}",
            quote(s),
            quote(c),
            quote(&go_err)
        ))
    };
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("invalid syntax"));
    }
    let max: u64 = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let v = s.parse::<u64>().ok().filter(|v| *v <= max);
    match v.and_then(|v| T::try_from(v).ok()) {
        Some(v) => Ok(v),
        None => Err(err("value out of range")),
    }
}

impl fmt::Display for Community {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Community::Standard(a, b) => write!(f, "{a}:{b}"),
            Community::Large(a, b, c) => write!(f, "large:{a}:{b}:{c}"),
        }
    }
}

impl Serialize for Community {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_standard_and_large() {
        assert_eq!(
            Community::parse("65535:65282").unwrap(),
            Community::Standard(65535, 65282)
        );
        assert_eq!(
            Community::parse("large:1:2:3").unwrap(),
            Community::Large(1, 2, 3)
        );
        assert_eq!(
            Community::parse("large:4294967295:0:1")
                .unwrap()
                .to_string(),
            "large:4294967295:0:1"
        );
    }

    #[test]
    fn metallb_error_texts() {
        assert_eq!(
            Community::parse("abc:1").unwrap_err().to_string(),
            r#"invalid community value: invalid section "abc" of community "abc:1", err: "strconv.ParseUint: parsing \"abc\": invalid syntax""#
        );
        assert_eq!(
            Community::parse("1:70000").unwrap_err().to_string(),
            r#"invalid community value: invalid section "70000" of community "1:70000", err: "strconv.ParseUint: parsing \"70000\": value out of range""#
        );
        assert_eq!(
            Community::parse("big:1:2:3").unwrap_err().to_string(),
            r#"invalid community value: invalid marker for large community, expected community to be of format large:<uint32>:<uint32>:<uint32> but got "big:1:2:3" instead"#
        );
        assert_eq!(
            Community::parse("large:1:2:4294967296")
                .unwrap_err()
                .to_string(),
            r#"invalid community value: invalid section "4294967296" of community "large:1:2:4294967296", err: "strconv.ParseUint: parsing \"4294967296\": value out of range""#
        );
        let e = Community::parse("no-export").unwrap_err();
        assert_eq!(e.to_string(), "invalid community format: no-export");
        assert!(matches!(e, CommunityError::Format(_)));
    }
}
