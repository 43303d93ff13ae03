//! Deterministic randomness for discriminators and transmit jitter.
//!
//! The core takes a seed rather than reading the OS: tests replay exactly,
//! and the runtime edge seeds it from the OS once. Neither use needs a
//! cryptographic generator (discriminators are guarded by GTSM, and RFC 5880
//! only asks that they be unique and hard to guess off-path).

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, full 2^64 period.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A non-zero value, for a discriminator.
    pub fn next_nonzero_u32(&mut self) -> u32 {
        loop {
            let value = self.next_u32();
            if value != 0 {
                return value;
            }
        }
    }
}

/// RFC 5880 §6.8.7: a periodic transmission interval reduced by a random
/// 0-25 % (so 75-100 % of `interval_ns`), or by 10-25 % (75-90 %) when our
/// Detect Mult is 1. `random` is a uniform 32-bit draw.
pub fn jittered_ns(interval_ns: u64, detect_mult: u8, random: u32) -> u64 {
    // Reduction in parts per million, uniform over [low, 250_000].
    let low: u64 = if detect_mult == 1 { 100_000 } else { 0 };
    let span = 250_000 - low + 1;
    let reduction_ppm = low + ((u64::from(random) * span) >> 32);
    let reduction = (u128::from(interval_ns) * u128::from(reduction_ppm) / 1_000_000) as u64;
    interval_ns - reduction
}

/// As [`jittered_ns`], but `margin_ns` inside both ends of the band (at
/// most half its width): a transmission the edge sends up to `margin_ns`
/// early or late against such a deadline still keeps the interval between
/// two packets inside 75-100 % (75-90 %).
pub fn jittered_with_margin_ns(
    interval_ns: u64,
    detect_mult: u8,
    random: u32,
    margin_ns: u64,
) -> u64 {
    let low = interval_ns - interval_ns / 4;
    let high = if detect_mult == 1 {
        interval_ns - interval_ns / 10
    } else {
        interval_ns
    };
    let margin = margin_ns.min((high - low) / 2);
    let span = u128::from(high - low - 2 * margin) + 1;
    let offset = ((u128::from(random) * span) >> 32) as u64;
    low + margin + offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        // The published first output for seed 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn jitter_extremes() {
        let i = 1_000_000_000;
        assert_eq!(jittered_ns(i, 3, 0), i);
        assert_eq!(jittered_ns(i, 3, u32::MAX), 750_000_000);
        assert_eq!(jittered_ns(i, 1, 0), 900_000_000);
        assert_eq!(jittered_ns(i, 1, u32::MAX), 750_000_000);
        assert_eq!(jittered_ns(u64::MAX, 3, u32::MAX), u64::MAX - u64::MAX / 4);
    }

    #[test]
    fn jitter_with_margin_stays_inside_the_band_by_the_margin() {
        let i = 50_000_000u64;
        let m = 2_000_000u64;
        assert_eq!(jittered_with_margin_ns(i, 3, 0, m), 37_500_000 + m);
        assert_eq!(jittered_with_margin_ns(i, 3, u32::MAX, m), i - m);
        assert_eq!(jittered_with_margin_ns(i, 1, 0, m), 37_500_000 + m);
        assert_eq!(jittered_with_margin_ns(i, 1, u32::MAX, m), 45_000_000 - m);
        // No margin: the whole band.
        assert_eq!(jittered_with_margin_ns(i, 3, 0, 0), 37_500_000);
        assert_eq!(jittered_with_margin_ns(i, 3, u32::MAX, 0), i);
        // A margin wider than half the band: the middle.
        assert_eq!(jittered_with_margin_ns(100, 1, 0, 1_000), 82);
        assert_eq!(jittered_with_margin_ns(100, 1, u32::MAX, 1_000), 83);
        assert_eq!(jittered_with_margin_ns(0, 3, u32::MAX, 5), 0);
        let mut rng = SplitMix64::new(9);
        for _ in 0..10_000 {
            let j = jittered_with_margin_ns(i, 3, rng.next_u32(), m);
            assert!((37_500_000 + m..=i - m).contains(&j), "{j}");
        }
    }

    #[test]
    fn jitter_bounds_over_many_draws() {
        let mut rng = SplitMix64::new(7);
        let interval = 300_000_000u64;
        for (mult, lo, hi) in [(3u8, 75, 100), (1u8, 75, 90)] {
            let (mut min, mut max, mut sum) = (u64::MAX, 0u64, 0u128);
            let draws = 100_000u64;
            for _ in 0..draws {
                let j = jittered_ns(interval, mult, rng.next_u32());
                min = min.min(j);
                max = max.max(j);
                sum += u128::from(j);
            }
            assert!(min >= interval * lo / 100, "mult {mult}: min {min}");
            assert!(max <= interval * hi / 100, "mult {mult}: max {max}");
            // The draws fill the band: both ends within 0.1 % of the interval.
            assert!(
                min < interval * lo / 100 + interval / 1000,
                "mult {mult}: min {min}"
            );
            assert!(
                max > interval * hi / 100 - interval / 1000,
                "mult {mult}: max {max}"
            );
            let mean = (sum / u128::from(draws)) as u64;
            let mid = interval * (lo + hi) / 200;
            assert!(
                mean.abs_diff(mid) < interval / 200,
                "mult {mult}: mean {mean}, expected ~{mid}"
            );
        }
    }
}
