//! Which unit of the region a random request goes to: fio's
//! `random_distribution` (`random`, `zipf:THETA`, `pareto:H`).
//!
//! A skewed distribution models a working set with hot blocks (a KV-cache
//! tier, a database index): on a file namespace the hot units stay in the
//! target's page cache, which a uniform run over a large region never shows.
//! As fio does, the ranks a skewed distribution draws (rank 0 the hottest)
//! are scattered over the region rather than packed at its start, so the hot
//! set is not one contiguous range: here by a bijection of `0..units`
//! (`rank · stride + offset mod units`), so every unit keeps exactly the
//! probability of its rank.

use std::fmt;
use std::str::FromStr;

use rand_core::Rng;
use rand_distr::Distribution as _;

/// How random modes pick their units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Every unit equally likely (fio's default, `random`).
    Uniform,
    /// Zipf with exponent θ > 0: the unit of rank k (from 1) is drawn with
    /// probability ∝ 1/k^θ (fio's `zipf:THETA`; 1.2 is a common pick).
    Zipf(f64),
    /// fio's `pareto:H` with 0 < H < 1: a fraction H of the requests goes to
    /// the hottest 1 − H of the units (0.8: the "80/20 rule").
    Pareto(f64),
}

impl Distribution {
    /// True unless uniform.
    pub fn skewed(self) -> bool {
        self != Distribution::Uniform
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => f.write_str("random"),
            Distribution::Zipf(t) => write!(f, "zipf:{t}"),
            Distribution::Pareto(h) => write!(f, "pareto:{h}"),
        }
    }
}

impl FromStr for Distribution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let num = |what: &str| -> Result<f64, String> {
            let a = arg.ok_or_else(|| format!("{name} needs its {what}, e.g. {name}:{}", example(name)))?;
            a.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("{what} {a:?} is not a number"))
        };
        match name {
            "random" | "uniform" if arg.is_none() => Ok(Distribution::Uniform),
            "zipf" => {
                let t = num("theta")?;
                // θ = 0 is uniform; fio refuses it too.
                if t <= 0.0 {
                    return Err(format!("zipf theta {t} must be above 0"));
                }
                Ok(Distribution::Zipf(t))
            }
            "pareto" => {
                let h = num("h")?;
                if !(h > 0.0 && h < 1.0) {
                    return Err(format!("pareto h {h} must be between 0 and 1 (exclusive)"));
                }
                Ok(Distribution::Pareto(h))
            }
            _ => Err(format!("unknown distribution {s:?} (random, zipf:THETA, pareto:H)")),
        }
    }
}

/// Parses a `--random-distribution` value.
pub fn parse_distribution(s: &str) -> Result<Distribution, String> {
    s.parse()
}

fn example(name: &str) -> &'static str {
    match name {
        "pareto" => "0.8",
        _ => "1.2",
    }
}

/// Picks units of a region of `units` under a [`Distribution`].
#[derive(Clone, Debug)]
pub struct UnitPicker {
    units: u64,
    kind: Picker,
    /// `stride` is coprime with `units`, so rank ↦ unit is a bijection.
    stride: u64,
    offset: u64,
}

#[derive(Clone, Debug)]
enum Picker {
    Uniform,
    Zipf(rand_distr::Zipf<f64>),
    /// Exponent of fio's `pareto_next`: log(h) / log(1 − h).
    Pareto(f64),
}

impl UnitPicker {
    /// A picker for `units` (≥ 1); `seed` places the hot units.
    pub fn new(dist: Distribution, units: u64, seed: u64) -> Self {
        assert!(units > 0, "an empty region");
        let kind = match dist {
            Distribution::Uniform => Picker::Uniform,
            Distribution::Zipf(t) => {
                Picker::Zipf(rand_distr::Zipf::new(units as f64, t).expect("theta > 0 and units ≥ 1"))
            }
            Distribution::Pareto(h) => Picker::Pareto(h.ln() / (1.0 - h).ln()),
        };
        // A stride near units/φ spreads consecutive ranks far apart; step
        // until it shares no factor with `units`.
        let mut stride = ((units as f64 * 0.618_033_988_749_895) as u64).max(1);
        while gcd(stride, units) != 1 {
            stride += 1;
        }
        let offset = splitmix(seed) % units;
        Self { units, kind, stride, offset }
    }

    /// The unit of a request.
    #[inline]
    pub fn pick<R: Rng>(&self, rng: &mut R) -> u64 {
        match &self.kind {
            Picker::Uniform => ((rng.next_u64() as u128 * self.units as u128) >> 64) as u64,
            Picker::Zipf(z) => self.place((z.sample(rng) as u64).clamp(1, self.units) - 1),
            Picker::Pareto(pow) => {
                // fio: (nranges − 1) · u^pow, which crowds at the top; counted
                // from there, rank 0 is the hottest.
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let top = ((self.units - 1) as f64 * u.powf(*pow)) as u64;
                self.place(self.units - 1 - top.min(self.units - 1))
            }
        }
    }

    /// The unit that holds `rank` (0 the hottest).
    #[inline]
    pub fn place(&self, rank: u64) -> u64 {
        ((rank as u128 * self.stride as u128 + self.offset as u128) % self.units as u128) as u64
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Xs(u64);
    impl rand_core::TryRng for Xs {
        type Error = std::convert::Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
            self.try_next_u64().map(|v| (v >> 32) as u32)
        }
        fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            Ok(self.0)
        }
        fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
            rand_core::utils::fill_bytes_via_next_word(dst, || self.try_next_u64())
        }
    }

    #[test]
    fn parses_fio_names_and_refuses_the_rest() {
        assert_eq!("random".parse(), Ok(Distribution::Uniform));
        assert_eq!("zipf:1.2".parse(), Ok(Distribution::Zipf(1.2)));
        assert_eq!("pareto:0.8".parse(), Ok(Distribution::Pareto(0.8)));
        for (bad, says) in [
            ("zipf", "needs its theta"),
            ("zipf:0", "must be above 0"),
            ("zipf:-1", "must be above 0"),
            ("zipf:x", "not a number"),
            ("zipf:inf", "not a number"),
            ("pareto:1", "between 0 and 1"),
            ("pareto:0", "between 0 and 1"),
            ("normal:10", "unknown distribution"),
            ("random:3", "unknown distribution"),
        ] {
            let e = bad.parse::<Distribution>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        for d in [Distribution::Uniform, Distribution::Zipf(1.2), Distribution::Pareto(0.8)] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
    }

    #[test]
    fn placement_is_a_bijection() {
        for units in [1u64, 2, 3, 10, 64, 1000, 4096, 9973] {
            let p = UnitPicker::new(Distribution::Zipf(1.1), units, units * 7);
            let mut seen = vec![false; units as usize];
            for r in 0..units {
                let u = p.place(r) as usize;
                assert!(!seen[u], "units {units}: rank {r} lands on a taken unit {u}");
                seen[u] = true;
            }
        }
    }

    fn counts(dist: Distribution, units: u64, n: usize) -> Vec<u64> {
        let p = UnitPicker::new(dist, units, 42);
        let mut rng = Xs(0x1234_5678_9abc_def1);
        let mut c = vec![0u64; units as usize];
        for _ in 0..n {
            let u = p.pick(&mut rng);
            assert!(u < units);
            c[u as usize] += 1;
        }
        c
    }

    #[test]
    fn zipf_gives_each_rank_its_share() {
        let (units, n, theta) = (1000u64, 400_000usize, 1.2f64);
        let c = counts(Distribution::Zipf(theta), units, n);
        let p = UnitPicker::new(Distribution::Zipf(theta), units, 42);
        let h: f64 = (1..=units).map(|k| (k as f64).powf(-theta)).sum();
        for rank in [0u64, 1, 2, 9, 99] {
            let want = n as f64 * ((rank + 1) as f64).powf(-theta) / h;
            let got = c[p.place(rank) as usize] as f64;
            // Five standard deviations of a binomial count.
            assert!((got - want).abs() < 5.0 * want.sqrt() + 1.0, "rank {rank}: {got} vs {want:.0}");
        }
    }

    #[test]
    fn pareto_sends_h_of_the_requests_to_the_hottest_one_minus_h() {
        let (units, n) = (1000u64, 200_000usize);
        for h in [0.8, 0.9] {
            let c = counts(Distribution::Pareto(h), units, n);
            let mut sorted = c.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let hot = ((1.0 - h) * units as f64).round() as usize;
            let share = sorted[..hot].iter().sum::<u64>() as f64 / n as f64;
            assert!((share - h).abs() < 0.02, "h {h}: the hottest {hot} units took {share:.3}");
        }
    }

    #[test]
    fn uniform_covers_the_region_evenly() {
        let c = counts(Distribution::Uniform, 100, 100_000);
        assert!(c.iter().all(|&k| (800..1200).contains(&k)), "{c:?}");
    }
}
