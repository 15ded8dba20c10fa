//! [`ExactSum`]: a sum of `f64` and `i64` values kept exactly, so that values added and later
//! taken away (a view's retractions) leave exactly the sum of the values still there, in any
//! order. A running `f64` total cannot: `1e17 + 1 - 1e17` is `0` in floating point, and the
//! view's `avg` would say 0 where the query over the one row left says 1.
//!
//! Every finite `f64` is an integer multiple of 2^-1074 (the least subnormal) below 2^1024, so
//! the sum is kept as one integer in units of 2^-1074: a few 32-bit limbs held in `i64`s (room
//! for carries), only those from the lowest to the highest touched (an integer column's values
//! touch three or four). Infinities and NaNs are counted apart, as the batch query's answer
//! depends only on whether any is there. [`ExactSum::to_f64`] rounds the exact sum to the
//! nearest `f64` (ties to even), the best answer any order of additions can give; a batch
//! engine adding in its own order may differ from it in the last place, never by more.
//!
//! Stored through `state::value` ([`ExactSum::parts`], [`ExactSum::from_parts`]). Called by
//! `operators::hash_agg` for `avg` and floating-point `sum`.

/// Bit position of 2^0 in the fixed-point sum (units of 2^-1074).
const ONE_AT: usize = 1074;
/// Limbs hold 32 bits each; carries accumulate in the 31 spare bits of their `i64`.
const LIMB_BITS: usize = 32;
/// Carries are propagated after this many additions (each adds under 2^32 to a limb).
const ADDS_BEFORE_NORMALIZE: u32 = 1 << 29;

#[derive(Debug, Clone, Default)]
pub struct ExactSum {
    /// Index of `limbs[0]` (limb `i` weighs 2^(32 i - 1074)).
    lowest: u32,
    /// The finite part, least significant limb first; may hold unpropagated carries.
    limbs: Vec<i64>,
    /// Additions since carries were last propagated.
    unnormalized: u32,
    /// How many +inf, -inf and NaN values are in the sum (each may go negative transiently
    /// only through a caller's bug; a retraction takes one away).
    pos_inf: i64,
    neg_inf: i64,
    nan: i64,
}

/// Equal sums, however their carries stand.
impl PartialEq for ExactSum {
    fn eq(&self, other: &ExactSum) -> bool {
        self.parts() == other.parts()
    }
}

/// What [`ExactSum::parts`] gives and [`ExactSum::from_parts`] takes: (lowest limb index,
/// limbs, +inf count, -inf count, NaN count).
pub type ExactSumParts = (u32, Vec<i64>, i64, i64, i64);

impl ExactSum {
    /// Adds `sign` (+1 or -1) times `v`.
    pub fn add_f64(&mut self, v: f64, sign: i64) {
        if v.is_nan() {
            self.nan += sign;
            return;
        }
        if v.is_infinite() {
            if v > 0.0 {
                self.pos_inf += sign;
            } else {
                self.neg_inf += sign;
            }
            return;
        }
        let bits = v.to_bits();
        let exponent = ((bits >> 52) & 0x7ff) as usize;
        let fraction = bits & ((1 << 52) - 1);
        // v = mantissa * 2^(exponent - 1075) for normal numbers, fraction * 2^-1074 for
        // subnormal ones: in units of 2^-1074, mantissa shifted left by max(exponent - 1, 0).
        let (mantissa, shift) = if exponent == 0 { (fraction, 0) } else { (fraction | (1 << 52), exponent - 1) };
        let negative = (v < 0.0) != (sign < 0);
        self.add_scaled(mantissa, shift, negative);
    }

    /// Adds `sign` (+1 or -1) times `v`.
    pub fn add_i64(&mut self, v: i64, sign: i64) {
        self.add_i128(v as i128, sign);
    }

    /// Adds `sign` (+1 or -1) times `v` (any integer column's value, `u64` included).
    pub fn add_i128(&mut self, v: i128, sign: i64) {
        let negative = (v < 0) != (sign < 0);
        let magnitude = v.unsigned_abs();
        self.add_scaled(magnitude as u64, ONE_AT, negative);
        self.add_scaled((magnitude >> 64) as u64, ONE_AT + 64, negative);
    }

    /// Adds or subtracts `magnitude * 2^(at - 1074)`.
    fn add_scaled(&mut self, magnitude: u64, at: usize, negative: bool) {
        if magnitude == 0 {
            return;
        }
        let first = at / LIMB_BITS;
        let wide = (magnitude as u128) << (at % LIMB_BITS);
        // At most 64 + 31 bits: three limbs.
        let chunks = [(wide & 0xffff_ffff) as i64, ((wide >> 32) & 0xffff_ffff) as i64, (wide >> 64) as i64];
        let last = first
            + if chunks[2] != 0 {
                2
            } else if chunks[1] != 0 {
                1
            } else {
                0
            };
        self.cover(first, last);
        let base = first - self.lowest as usize;
        for (i, chunk) in chunks.iter().enumerate().take(last - first + 1) {
            if negative {
                self.limbs[base + i] -= chunk;
            } else {
                self.limbs[base + i] += chunk;
            }
        }
        self.unnormalized += 1;
        if self.unnormalized >= ADDS_BEFORE_NORMALIZE {
            self.normalize();
        }
    }

    /// Makes limbs `first..=last` (absolute indexes) exist, plus one above for carries.
    fn cover(&mut self, first: usize, last: usize) {
        let last = last + 1;
        if self.limbs.is_empty() {
            self.lowest = first as u32;
            self.limbs = vec![0; last - first + 1];
            return;
        }
        let lowest = self.lowest as usize;
        if first < lowest {
            let mut grown = vec![0; lowest - first];
            grown.append(&mut self.limbs);
            self.limbs = grown;
            self.lowest = first as u32;
        }
        let highest = self.lowest as usize + self.limbs.len() - 1;
        if last > highest {
            self.limbs.resize(self.limbs.len() + (last - highest), 0);
        }
    }

    /// Propagates carries: every limb but the top in [0, 2^32), the top holding the sign.
    fn normalize(&mut self) {
        let n = self.limbs.len();
        for i in 0..n.saturating_sub(1) {
            let carry = self.limbs[i] >> LIMB_BITS;
            self.limbs[i] -= carry << LIMB_BITS;
            self.limbs[i + 1] += carry;
        }
        self.unnormalized = 0;
    }

    /// The sum rounded to the nearest `f64` (ties to even): NaN if a NaN, or both infinities,
    /// are in it; an infinity if one is; infinite too if the finite sum exceeds `f64::MAX`.
    pub fn to_f64(&self) -> f64 {
        if self.nan > 0 || (self.pos_inf > 0 && self.neg_inf > 0) {
            return f64::NAN;
        }
        if self.pos_inf > 0 {
            return f64::INFINITY;
        }
        if self.neg_inf > 0 {
            return f64::NEG_INFINITY;
        }
        let mut limbs = self.clone();
        limbs.normalize();
        let mut limbs = limbs.limbs;
        let negative = limbs.last().is_some_and(|&top| top < 0);
        if negative {
            // The magnitude: negate every limb, then propagate again.
            limbs.iter_mut().for_each(|l| *l = -*l);
            let mut magnitude = ExactSum { lowest: self.lowest, limbs, ..ExactSum::default() };
            magnitude.normalize();
            limbs = magnitude.limbs;
        }
        let Some(top) = limbs.iter().rposition(|&l| l != 0) else { return 0.0 };
        // The top three limbs (up to 96 bits), and whether anything below them is non-zero
        // (folded into the lowest bit: enough bits below the 53 kept to round right).
        let low = top.saturating_sub(2);
        let mut magnitude: u128 = 0;
        for i in (low..=top).rev() {
            magnitude = (magnitude << LIMB_BITS) | limbs[i] as u128;
        }
        if limbs[..low].iter().any(|&l| l != 0) {
            magnitude |= 1;
        }
        let exponent = ((self.lowest as usize + low) * LIMB_BITS) as i32 - ONE_AT as i32;
        let value = scale(magnitude as f64, exponent);
        if negative {
            -value
        } else {
            value
        }
    }

    /// The sum as an i128, when it is a finite integer that one holds.
    pub fn to_i128(&self) -> Option<i128> {
        if self.nan != 0 || self.pos_inf != 0 || self.neg_inf != 0 {
            return None;
        }
        let mut normalized = self.clone();
        normalized.normalize();
        let mut value: i128 = 0;
        for (i, &limb) in normalized.limbs.iter().enumerate() {
            if limb == 0 {
                continue;
            }
            // Limb `i` weighs 2^(32 (lowest + i) - ONE_AT).
            let shift = (LIMB_BITS * (normalized.lowest as usize + i)) as i64 - ONE_AT as i64;
            let part = if shift >= 0 {
                let shift = u32::try_from(shift).ok().filter(|&s| s < 127)?;
                (limb as i128).checked_mul(1i128.checked_shl(shift)?)?
            } else {
                // Below the units: an integer sum has no bits there.
                let shift = u32::try_from(-shift).ok()?;
                if shift >= 64 || limb & ((1i64 << shift) - 1) != 0 {
                    return None;
                }
                (limb >> shift) as i128
            };
            value = value.checked_add(part)?;
        }
        Some(value)
    }

    /// The sum's parts, for storing it.
    pub fn parts(&self) -> ExactSumParts {
        let mut normalized = self.clone();
        normalized.normalize();
        // Zero limbs at either end carry nothing.
        let first = normalized.limbs.iter().position(|&l| l != 0).unwrap_or(normalized.limbs.len());
        let last = normalized.limbs.iter().rposition(|&l| l != 0).map_or(first, |l| l + 1);
        let limbs = normalized.limbs[first..last].to_vec();
        let lowest = if limbs.is_empty() { 0 } else { normalized.lowest + first as u32 };
        (lowest, limbs, self.pos_inf, self.neg_inf, self.nan)
    }

    /// A sum from what [`ExactSum::parts`] gave; None if the parts cannot be one (corrupt).
    pub fn from_parts((lowest, limbs, pos_inf, neg_inf, nan): ExactSumParts) -> Option<ExactSum> {
        let fits = (lowest as usize + limbs.len()) * LIMB_BITS <= ONE_AT + 1024 + 2 * 64 + LIMB_BITS;
        fits.then_some(ExactSum { lowest, limbs, unnormalized: 0, pos_inf, neg_inf, nan })
    }
}

/// `x * 2^exponent`, in steps that stay within `f64`'s exponent range.
fn scale(mut x: f64, mut exponent: i32) -> f64 {
    let power = |e: i32| f64::from_bits(((e + 1023) as u64) << 52);
    while exponent > 1000 {
        x *= power(1000);
        exponent -= 1000;
    }
    while exponent < -1000 {
        x *= power(-1000);
        exponent += 1000;
    }
    x * power(exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum_of(values: &[f64]) -> ExactSum {
        let mut sum = ExactSum::default();
        values.iter().for_each(|&v| sum.add_f64(v, 1));
        sum
    }

    /// An integer sum reads back as its i128 exactly, negative and past 2^64 too; a fraction,
    /// an infinity or a sum past i128 does not.
    #[test]
    fn integer_sums_read_back_as_i128() {
        let mut sum = ExactSum::default();
        sum.add_i128(i64::MAX as i128 * i64::MAX as i128, 1);
        sum.add_i128(-7, 1);
        assert_eq!(sum.to_i128(), Some(i64::MAX as i128 * i64::MAX as i128 - 7));
        let mut negative = ExactSum::default();
        negative.add_i128(-12345678901234567890123, 1);
        negative.add_f64(3.0, 1);
        assert_eq!(negative.to_i128(), Some(-12345678901234567890120));
        assert_eq!(sum_of(&[0.5, 1.0]).to_i128(), None);
        assert_eq!(sum_of(&[0.5, 0.5, -3.0]).to_i128(), Some(-2));
        assert_eq!(sum_of(&[f64::INFINITY]).to_i128(), None);
        assert_eq!(sum_of(&[1e300]).to_i128(), None);
        assert_eq!(ExactSum::default().to_i128(), Some(0));
    }

    #[test]
    fn values_taken_away_leave_exactly_the_rest() {
        let mut sum = sum_of(&[1e17, 1.0]);
        sum.add_f64(1e17, -1);
        assert_eq!(sum.to_f64(), 1.0);
        let mut ints = ExactSum::default();
        ints.add_i64(i64::MAX, 1);
        ints.add_i64(3, 1);
        ints.add_i64(i64::MAX, -1);
        assert_eq!(ints.to_f64(), 3.0);
        ints.add_i64(i64::MIN, 1);
        assert_eq!(ints.to_f64(), 3.0 - 2f64.powi(63));
        ints.add_i64(i64::MIN, -1);
        ints.add_i64(3, -1);
        assert_eq!((ints.to_f64(), ints.parts()), (0.0, (0, vec![], 0, 0, 0)), "nothing left");
        ints.add_i128(u64::MAX as i128, 1);
        ints.add_i128(i128::MIN + 1, 1);
        ints.add_i128(i128::MIN + 1, -1);
        assert_eq!(ints.to_f64(), u64::MAX as f64);
    }

    #[test]
    fn the_sum_is_correctly_rounded_whatever_the_order() {
        // 0.1 + 0.2 exactly is just above 0.3's neighbour: rounded once, it is 0.30000000000000004.
        assert_eq!(sum_of(&[0.1, 0.2]).to_f64(), 0.1 + 0.2);
        let values = [1e308, -1e308, 5e-324, 3.5, -2.25e-300, 1.0 / 3.0, 7e22, -7e22];
        let forward = sum_of(&values).to_f64();
        let mut reversed = values;
        reversed.reverse();
        assert_eq!(forward, sum_of(&reversed).to_f64());
        assert_eq!(forward, 3.5 + 1.0 / 3.0);
        // Ties go to even: 2^53 + 1 is halfway between 2^53 and 2^53 + 2.
        let two53 = 2f64.powi(53);
        assert_eq!(sum_of(&[two53, 1.0]).to_f64(), two53);
        assert_eq!(sum_of(&[two53, 1.0, 1e-300]).to_f64(), two53 + 2.0, "anything above the tie rounds up");
        assert_eq!(sum_of(&[-two53, -1.0, -1e-300]).to_f64(), -(two53 + 2.0));
        assert_eq!(sum_of(&[5e-324, 5e-324]).to_f64(), 1e-323, "subnormals add exactly");
        assert_eq!(sum_of(&[f64::MAX, f64::MAX]).to_f64(), f64::INFINITY);
        assert_eq!(sum_of(&[-0.0]).to_f64(), 0.0);
    }

    #[test]
    fn infinities_and_nans_are_counted_apart() {
        let mut sum = sum_of(&[1.0, f64::INFINITY]);
        assert_eq!(sum.to_f64(), f64::INFINITY);
        sum.add_f64(f64::NEG_INFINITY, 1);
        assert!(sum.to_f64().is_nan());
        sum.add_f64(f64::INFINITY, -1);
        assert_eq!(sum.to_f64(), f64::NEG_INFINITY);
        sum.add_f64(f64::NEG_INFINITY, -1);
        sum.add_f64(f64::NAN, 1);
        assert!(sum.to_f64().is_nan());
        sum.add_f64(f64::NAN, -1);
        assert_eq!(sum.to_f64(), 1.0);
    }

    #[test]
    fn parts_round_trip_and_carries_survive_many_additions() {
        let mut sum = ExactSum::default();
        for i in 0..100_000i32 {
            sum.add_f64(f64::from(i) * 0.5 - 1234.75, 1);
            sum.add_i64(-i64::from(i), 1);
        }
        let expected: f64 = (0..100_000i32).map(|i| f64::from(i) * 0.5 - 1234.75 - f64::from(i)).sum();
        let restored = ExactSum::from_parts(sum.parts()).unwrap();
        assert_eq!(restored.to_f64(), sum.to_f64());
        assert_eq!(sum.to_f64(), expected, "exact for values a float sum also gets exactly");
        assert_eq!(restored.parts(), sum.parts());
        assert_eq!(ExactSum::default().parts(), (0, vec![], 0, 0, 0));
        assert!(ExactSum::from_parts((5000, vec![1], 0, 0, 0)).is_none());
    }
}
