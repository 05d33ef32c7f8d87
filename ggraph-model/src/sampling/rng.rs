//! The random numbers of llama.cpp's samplers, bit for bit: the C++
//! standard library's `std::mt19937` and the libstdc++ arithmetic of
//! `std::uniform_real_distribution` (`generate_canonical`) and
//! `std::discrete_distribution`, as llama.cpp is built with g++.

/// The 32-bit Mersenne Twister (`std::mt19937`).
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; 624],
    next: usize,
}

impl Mt19937 {
    /// Seeded as `std::mt19937(seed)`.
    pub fn new(seed: u32) -> Mt19937 {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, next: 624 }
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        for i in 0..624 {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % 624] & LOWER);
            let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            self.state[i] = v;
        }
        self.next = 0;
    }

    /// The next 32 bits (`operator()`).
    pub fn next_u32(&mut self) -> u32 {
        if self.next >= 624 {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// A double in [0, 1): libstdc++'s `generate_canonical<double, 53>`,
    /// two draws, the first the low word.
    pub fn next_f64(&mut self) -> f64 {
        let low = self.next_u32() as f64;
        let high = self.next_u32() as f64;
        let sum = low + high * 4_294_967_296.0;
        let x = sum / 18_446_744_073_709_551_616.0;
        if x >= 1.0 { 1.0f64.next_down() } else { x }
    }

    /// A float in [0, 1): libstdc++'s `generate_canonical<float, 24>`, one
    /// draw.
    pub fn next_f32(&mut self) -> f32 {
        let x = self.next_u32() as f32 / 4_294_967_296.0f32;
        if x >= 1.0 { 1.0f32.next_down() } else { x }
    }

    /// An index drawn with the given weights, as
    /// `std::discrete_distribution<int>(weights)(rng)` computes it: the
    /// weights widened to doubles, normalised by their sum, summed into a
    /// cumulative table whose last entry is set to 1, and searched for
    /// the first entry not below one canonical double. Fewer than two
    /// weights give 0 without a draw.
    pub fn discrete(&mut self, weights: impl Iterator<Item = f32> + Clone) -> usize {
        let n = weights.clone().count();
        if n < 2 {
            return 0;
        }
        let sum: f64 = weights.clone().fold(0.0, |s, w| s + w as f64);
        let mut cumulative = Vec::with_capacity(n);
        let mut run = 0.0f64;
        for w in weights {
            run += w as f64 / sum;
            cumulative.push(run);
        }
        cumulative[n - 1] = 1.0;
        let p = self.next_f64();
        cumulative.partition_point(|&c| c < p)
    }
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("next", &self.next).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ten_thousandth_draw_is_the_standards() {
        // C++11 [rand.predef]: the 10000th invocation of a default-constructed
        // std::mt19937 produces 4123659995
        let mut r = Mt19937::new(5489);
        let v = (0..10_000).map(|_| r.next_u32()).last();
        assert_eq!(v, Some(4_123_659_995));
    }

    #[test]
    fn canonical_values_stay_below_one() {
        let mut r = Mt19937::new(1);
        for _ in 0..10_000 {
            let d = r.next_f64();
            let f = r.next_f32();
            assert!((0.0..1.0).contains(&d) && (0.0..1.0).contains(&f));
        }
    }

    #[test]
    fn discrete_follows_its_weights() {
        let mut r = Mt19937::new(3);
        let w = [0.0f32, 3.0, 1.0];
        let mut counts = [0usize; 3];
        for _ in 0..4000 {
            counts[r.discrete(w.iter().copied())] += 1;
        }
        assert_eq!(counts[0], 0);
        assert!((2800..3200).contains(&counts[1]), "{counts:?}");
        assert_eq!(Mt19937::new(3).discrete([5.0f32].into_iter()), 0);
    }
}
