//! Session parameters, mirroring MetalLB's `BFDProfile` (ranges and defaults
//! are FRR's, as MetalLB renders them).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Range of `receiveInterval`, `transmitInterval` and `echoInterval`, in ms.
pub const INTERVAL_MS_MIN: u32 = 10;
/// See [`INTERVAL_MS_MIN`].
pub const INTERVAL_MS_MAX: u32 = 60_000;
/// Range of `detectMultiplier`.
pub const DETECT_MULTIPLIER_MIN: u32 = 2;
/// See [`DETECT_MULTIPLIER_MIN`].
pub const DETECT_MULTIPLIER_MAX: u32 = 255;
/// Range of `minimumTtl`.
pub const MINIMUM_TTL_MIN: u32 = 1;
/// See [`MINIMUM_TTL_MIN`].
pub const MINIMUM_TTL_MAX: u32 = 254;

/// Default `receiveInterval` and `transmitInterval`, ms.
pub const DEFAULT_INTERVAL_MS: u32 = 300;
/// Default `detectMultiplier`.
pub const DEFAULT_DETECT_MULTIPLIER: u32 = 3;
/// Default `echoInterval`, ms.
pub const DEFAULT_ECHO_INTERVAL_MS: u32 = 50;
/// Default `minimumTtl` (multihop only).
pub const DEFAULT_MINIMUM_TTL: u32 = 254;

/// The parameters of one session, as a `BFDProfile` gives them.
///
/// [`Parameters::validate`] applies the profile's ranges. A
/// [`crate::Session`] accepts any value but clamps it to what the protocol
/// can carry (intervals of at least 1 ms, a multiplier of at least 1, a TTL
/// of at least 1), so that tests can exercise e.g. a multiplier of 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Parameters {
    /// Required Min RX Interval we advertise, ms (10-60000, 300).
    pub receive_interval_ms: u32,
    /// Desired Min TX Interval we advertise once Up, ms (10-60000, 300).
    pub transmit_interval_ms: u32,
    /// Detect Mult (2-255, 3).
    pub detect_multiplier: u32,
    /// Echo transmit interval, and the Required Min Echo RX Interval we
    /// advertise when echo mode is on, ms (10-60000, 50).
    pub echo_interval_ms: u32,
    /// Echo function (single-hop IPv4 only).
    pub echo_mode: bool,
    /// Passive role: send nothing until the peer has been heard.
    pub passive_mode: bool,
    /// Smallest TTL accepted on a multihop session (1-254, 254).
    pub minimum_ttl: u32,
}

impl Default for Parameters {
    fn default() -> Self {
        Parameters {
            receive_interval_ms: DEFAULT_INTERVAL_MS,
            transmit_interval_ms: DEFAULT_INTERVAL_MS,
            detect_multiplier: DEFAULT_DETECT_MULTIPLIER,
            echo_interval_ms: DEFAULT_ECHO_INTERVAL_MS,
            echo_mode: false,
            passive_mode: false,
            minimum_ttl: DEFAULT_MINIMUM_TTL,
        }
    }
}

/// A parameter outside its `BFDProfile` range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("{field} {value} is out of range {min}..={max}")]
pub struct ParamError {
    pub field: &'static str,
    pub value: u32,
    pub min: u32,
    pub max: u32,
}

fn check(field: &'static str, value: u32, min: u32, max: u32) -> Result<(), ParamError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ParamError {
            field,
            value,
            min,
            max,
        })
    }
}

impl Parameters {
    /// Checks every field against the `BFDProfile` ranges (the first error
    /// wins, in field order).
    pub fn validate(&self) -> Result<(), ParamError> {
        check(
            "receiveInterval",
            self.receive_interval_ms,
            INTERVAL_MS_MIN,
            INTERVAL_MS_MAX,
        )?;
        check(
            "transmitInterval",
            self.transmit_interval_ms,
            INTERVAL_MS_MIN,
            INTERVAL_MS_MAX,
        )?;
        check(
            "detectMultiplier",
            self.detect_multiplier,
            DETECT_MULTIPLIER_MIN,
            DETECT_MULTIPLIER_MAX,
        )?;
        check(
            "echoInterval",
            self.echo_interval_ms,
            INTERVAL_MS_MIN,
            INTERVAL_MS_MAX,
        )?;
        check(
            "minimumTtl",
            self.minimum_ttl,
            MINIMUM_TTL_MIN,
            MINIMUM_TTL_MAX,
        )
    }

    /// The parameters of a session shared by several clients: the most
    /// demanding of each. Shortest intervals and smallest multiplier (the
    /// fastest detection any client asked for), echo if any client asked for
    /// it, passive only if every client is, and the strictest (highest)
    /// minimum TTL. `None` for no clients.
    pub fn merge<'a>(all: impl IntoIterator<Item = &'a Parameters>) -> Option<Parameters> {
        all.into_iter().copied().reduce(|a, b| Parameters {
            receive_interval_ms: a.receive_interval_ms.min(b.receive_interval_ms),
            transmit_interval_ms: a.transmit_interval_ms.min(b.transmit_interval_ms),
            detect_multiplier: a.detect_multiplier.min(b.detect_multiplier),
            echo_interval_ms: a.echo_interval_ms.min(b.echo_interval_ms),
            echo_mode: a.echo_mode || b.echo_mode,
            passive_mode: a.passive_mode && b.passive_mode,
            minimum_ttl: a.minimum_ttl.max(b.minimum_ttl),
        })
    }

    /// Desired Min TX Interval, µs (at least 1 ms).
    pub fn transmit_interval_us(&self) -> u32 {
        ms_to_us(self.transmit_interval_ms)
    }

    /// Required Min RX Interval, µs (at least 1 ms).
    pub fn receive_interval_us(&self) -> u32 {
        ms_to_us(self.receive_interval_ms)
    }

    /// Echo interval, µs (at least 1 ms).
    pub fn echo_interval_us(&self) -> u32 {
        ms_to_us(self.echo_interval_ms)
    }

    /// Detect Mult, clamped to 1..=255.
    pub fn detect_mult(&self) -> u8 {
        self.detect_multiplier.clamp(1, 255) as u8
    }

    /// Minimum TTL, clamped to 1..=255.
    pub fn min_ttl(&self) -> u8 {
        self.minimum_ttl.clamp(1, 255) as u8
    }
}

fn ms_to_us(ms: u32) -> u32 {
    ms.max(1).saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_frr_s_and_valid() {
        let p = Parameters::default();
        assert_eq!(p.receive_interval_ms, 300);
        assert_eq!(p.transmit_interval_ms, 300);
        assert_eq!(p.detect_multiplier, 3);
        assert_eq!(p.echo_interval_ms, 50);
        assert!(!p.echo_mode && !p.passive_mode);
        assert_eq!(p.minimum_ttl, 254);
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn ranges_are_enforced_at_both_ends() {
        type Setter = fn(&mut Parameters, u32);
        let cases: [(&str, Setter, u32, u32); 5] = [
            (
                "receiveInterval",
                |p, v| p.receive_interval_ms = v,
                10,
                60_000,
            ),
            (
                "transmitInterval",
                |p, v| p.transmit_interval_ms = v,
                10,
                60_000,
            ),
            ("detectMultiplier", |p, v| p.detect_multiplier = v, 2, 255),
            ("echoInterval", |p, v| p.echo_interval_ms = v, 10, 60_000),
            ("minimumTtl", |p, v| p.minimum_ttl = v, 1, 254),
        ];
        for (field, set, min, max) in cases {
            for ok in [min, max] {
                let mut p = Parameters::default();
                set(&mut p, ok);
                assert_eq!(p.validate(), Ok(()), "{field}={ok}");
            }
            for bad in [min - 1, max + 1] {
                let mut p = Parameters::default();
                set(&mut p, bad);
                let err = p.validate().unwrap_err();
                assert_eq!(
                    (err.field, err.value, err.min, err.max),
                    (field, bad, min, max)
                );
            }
        }
    }

    #[test]
    fn merge_takes_the_most_demanding_values() {
        let a = Parameters {
            receive_interval_ms: 100,
            passive_mode: true,
            minimum_ttl: 250,
            ..Default::default()
        };
        let b = Parameters {
            transmit_interval_ms: 50,
            detect_multiplier: 5,
            echo_mode: true,
            echo_interval_ms: 20,
            passive_mode: true,
            ..Default::default()
        };
        let c = Parameters {
            detect_multiplier: 2,
            ..Default::default()
        };
        let m = Parameters::merge([&a, &b]).unwrap();
        assert_eq!(m.receive_interval_ms, 100);
        assert_eq!(m.transmit_interval_ms, 50);
        assert_eq!(m.detect_multiplier, 3);
        assert_eq!(m.echo_interval_ms, 20);
        assert!(m.echo_mode);
        assert!(m.passive_mode);
        assert_eq!(m.minimum_ttl, 254);
        let m = Parameters::merge([&a, &b, &c]).unwrap();
        assert_eq!(m.detect_multiplier, 2);
        assert!(!m.passive_mode);
        assert_eq!(Parameters::merge([]), None);
    }

    #[test]
    fn microsecond_conversions_clamp() {
        let p = Parameters {
            transmit_interval_ms: 0,
            detect_multiplier: 0,
            minimum_ttl: 999,
            ..Default::default()
        };
        assert_eq!(p.transmit_interval_us(), 1000);
        assert_eq!(p.receive_interval_us(), 300_000);
        assert_eq!(p.detect_mult(), 1);
        assert_eq!(p.min_ttl(), 255);
        let big = Parameters {
            echo_interval_ms: u32::MAX,
            ..Default::default()
        };
        assert_eq!(big.echo_interval_us(), u32::MAX);
    }
}
