//! `metav1.Duration`: a Go duration string (`"90s"`, `"1m30s"`, `"300ms"`).
//!
//! The text is kept as written so that objects serialise back unchanged; the
//! parsed value follows Go's `time.ParseDuration` exactly, and `Display`
//! follows Go's `time.Duration.String`, which MetalLB's messages print.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A Go `time.Duration` in nanoseconds together with the text it was read from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Duration {
    text: String,
    nanos: i64,
}

/// A string `time.ParseDuration` rejects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("time: invalid duration {}", crate::gofmt::quote(.0))]
pub struct DurationParseError(pub String);

const NS: i64 = 1;
const US: i64 = 1_000 * NS;
const MS: i64 = 1_000 * US;
const SEC: i64 = 1_000 * MS;
const MIN: i64 = 60 * SEC;
const HOUR: i64 = 60 * MIN;

impl Duration {
    /// Parses a Go duration string.
    pub fn parse(text: &str) -> Result<Self, DurationParseError> {
        let nanos = parse_go_duration(text).ok_or_else(|| DurationParseError(text.to_owned()))?;
        Ok(Self {
            text: text.to_owned(),
            nanos,
        })
    }

    /// A duration of whole seconds, written the way Go prints it.
    pub fn from_secs(secs: i64) -> Self {
        Self::from_nanos(secs.saturating_mul(SEC))
    }

    /// A duration in nanoseconds, written the way Go prints it.
    pub fn from_nanos(nanos: i64) -> Self {
        Self {
            text: go_duration_string(nanos),
            nanos,
        }
    }

    /// Nanoseconds (negative durations are possible, as in Go).
    pub fn as_nanos(&self) -> i64 {
        self.nanos
    }

    /// The text as written in the object.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Rounds to the nearest multiple of a second, halfway away from zero
    /// (Go's `Duration.Round(time.Second)`).
    pub fn round_secs(&self) -> i64 {
        let d = self.nanos;
        let r = d % SEC;
        let q = d / SEC;
        if d >= 0 {
            if r + r < SEC { q } else { q + 1 }
        } else if -r - r < SEC {
            q
        } else {
            q - 1
        }
    }

    /// As a `std::time::Duration`, `None` when negative.
    pub fn to_std(&self) -> Option<std::time::Duration> {
        u64::try_from(self.nanos)
            .ok()
            .map(std::time::Duration::from_nanos)
    }
}

impl fmt::Display for Duration {
    /// Go's `Duration.String()` of the parsed value (what `%q`/`%s` print in Go).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&go_duration_string(self.nanos))
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Duration::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}

/// Go's `time.ParseDuration`. `None` on any error, including overflow.
fn parse_go_duration(s: &str) -> Option<i64> {
    let mut rest = s.as_bytes();
    let mut neg = false;
    if let Some((&c, tail)) = rest.split_first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        rest = tail;
    }
    if rest == b"0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        // Leading integer part.
        let int_len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        let (int_digits, tail) = rest.split_at(int_len);
        rest = tail;
        let mut frac_digits: &[u8] = &[];
        let had_dot = rest.first() == Some(&b'.');
        if had_dot {
            rest = &rest[1..];
            let frac_len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            let (fd, tail) = rest.split_at(frac_len);
            frac_digits = fd;
            rest = tail;
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return None;
        }
        let unit_len = rest
            .iter()
            .take_while(|c| **c != b'.' && !c.is_ascii_digit())
            .count();
        if unit_len == 0 {
            return None;
        }
        let (unit, tail) = rest.split_at(unit_len);
        rest = tail;
        let unit: u64 = match unit {
            b"ns" => 1,
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60 * 1_000_000_000,
            b"h" => 3_600 * 1_000_000_000,
            _ => return None,
        };
        let mut v: u64 = 0;
        for d in int_digits {
            v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        let mut v = v.checked_mul(unit)?;
        if !frac_digits.is_empty() {
            // Fractional part, accurate to the nanosecond like Go's.
            let mut f: u64 = 0;
            let mut scale: f64 = 1.0;
            let mut overflow = false;
            for d in frac_digits {
                if overflow || f > (u64::MAX - 9) / 10 {
                    overflow = true;
                    continue;
                }
                f = f * 10 + u64::from(d - b'0');
                scale *= 10.0;
            }
            let add = (f as f64) * (unit as f64 / scale);
            v = v.checked_add(add as u64)?;
        }
        total = total.checked_add(v)?;
        if total > 1u64 << 63 {
            return None;
        }
    }
    if neg {
        if total == 1u64 << 63 {
            Some(i64::MIN)
        } else {
            Some(-(total as i64))
        }
    } else if total > i64::MAX as u64 {
        None
    } else {
        Some(total as i64)
    }
}

/// Go's `time.Duration.String`.
pub(crate) fn go_duration_string(d: i64) -> String {
    if d == 0 {
        return "0s".to_owned();
    }
    let neg = d < 0;
    let u = d.unsigned_abs();
    let mut out = String::new();
    if u < SEC as u64 {
        let (unit, div) = if u < US as u64 {
            ("ns", 1u64)
        } else if u < MS as u64 {
            ("\u{b5}s", US as u64)
        } else {
            ("ms", MS as u64)
        };
        out.push_str(&frac_string(u, div));
        out.push_str(unit);
    } else {
        let hours = u / HOUR as u64;
        let rem = u % HOUR as u64;
        let mins = rem / MIN as u64;
        let secs_ns = rem % MIN as u64;
        if hours > 0 {
            out.push_str(&format!("{hours}h{mins}m"));
        } else if mins > 0 {
            out.push_str(&format!("{mins}m"));
        }
        out.push_str(&frac_string(secs_ns, SEC as u64));
        out.push('s');
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// `v / div` with the fractional digits Go prints (trailing zeros trimmed).
fn frac_string(v: u64, div: u64) -> String {
    let int = v / div;
    let frac = v % div;
    if frac == 0 {
        return int.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_go() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("90s", 90 * SEC),
            ("1m30s", 90 * SEC),
            ("1.5s", 1_500 * MS),
            ("300ms", 300 * MS),
            ("-2s", -2 * SEC),
            ("1h", HOUR),
            ("2h45m", 2 * HOUR + 45 * MIN),
            ("10us", 10 * US),
            ("10\u{b5}s", 10 * US),
            (".5s", 500 * MS),
            ("1.s", SEC),
        ];
        for (text, want) in cases {
            assert_eq!(Duration::parse(text).unwrap().as_nanos(), *want, "{text}");
        }
        for bad in [
            "",
            "s",
            "1",
            "1x",
            "abc",
            "--1s",
            "1.2.3s",
            ".s",
            "9999999999h",
        ] {
            assert!(Duration::parse(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn prints_like_go() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (90 * SEC, "1m30s"),
            (2 * SEC, "2s"),
            (1_500 * MS, "1.5s"),
            (300 * MS, "300ms"),
            (HOUR + 2 * SEC, "1h0m2s"),
            (-2 * SEC, "-2s"),
            (1, "1ns"),
            (1_500, "1.5\u{b5}s"),
        ];
        for (nanos, want) in cases {
            assert_eq!(go_duration_string(*nanos), *want);
        }
    }

    #[test]
    fn rounds_like_go() {
        assert_eq!(Duration::parse("2.5s").unwrap().round_secs(), 3);
        assert_eq!(Duration::parse("2.4s").unwrap().round_secs(), 2);
        assert_eq!(Duration::parse("2499ms").unwrap().round_secs(), 2);
        assert_eq!(Duration::parse("-2.5s").unwrap().round_secs(), -3);
    }

    #[test]
    fn keeps_text() {
        let d: Duration = serde_json::from_str("\"90s\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"90s\"");
        assert_eq!(d.to_string(), "1m30s");
    }
}
