//! Which seed: the one vocabulary word every part of the lab shares, at the bottom of its
//! imports.

/// Which seed a member, a proxy or an `EtcdMigration` belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Source,
    Destination,
}

impl Side {
    /// Both seeds, source first (the order of every per-seed array).
    pub const BOTH: [Side; 2] = [Side::Source, Side::Destination];

    /// This seed's position in a per-seed array (`[source, destination]`).
    pub fn index(self) -> usize {
        match self {
            Side::Source => 0,
            Side::Destination => 1,
        }
    }
}
