//! The one random source of the tests: xorshift64 from a fixed seed, so the same inputs come
//! on every run and every machine and a failure is reproducible; no dependency for it.

/// A deterministic xorshift64 generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (not zero: xorshift would stay at zero).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0), from the high bits (xorshift's low bits are its
    /// weakest).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) as usize) % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_same_seed_gives_the_same_numbers() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<usize> = (0..8).map(|_| a.below(10)).collect();
        let ys: Vec<usize> = (0..8).map(|_| b.below(10)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| *x < 10));
        assert_eq!(Rng::new(0).below(0), 0);
    }
}
