//! The random source of the config crate's mutation tests: xorshift64 from a fixed seed, so a
//! failure is reproducible; no dependency for it.

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as usize
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.next() % n.max(1)
    }
}
