//! A route's allow-list, compiled: checked once the SNI (or header value) picked the route, so
//! that shoots sharing a listener do not share their peers.

use isthmus_config::{Cidr, UnlistedSources};

/// Which sources a route admits, once the listener admitted them.
#[derive(Debug)]
pub enum Admits {
    /// Any source.
    Any,
    /// Sources in these networks.
    Only(Box<[Cidr]>),
    /// No source.
    Nobody,
}

impl Admits {
    /// From a route's own list, else the file's `routes_without_allowed_sources`.
    pub fn of(listed: &[Cidr], unlisted: UnlistedSources) -> Self {
        match (listed.is_empty(), unlisted) {
            (false, _) => Admits::Only(listed.into()),
            (true, UnlistedSources::Allow) => Admits::Any,
            (true, UnlistedSources::Deny) => Admits::Nobody,
        }
    }

    /// Whether `source` may use the route.
    pub fn admits(&self, source: std::net::IpAddr) -> bool {
        match self {
            Admits::Any => true,
            Admits::Only(list) => Cidr::any_contains(list, source),
            Admits::Nobody => false,
        }
    }

    /// Whether every address of a family passes (behind `listener`'s own list).
    pub fn is_open(&self, listener: &[Cidr]) -> bool {
        let everything = |l: &[Cidr]| l.iter().any(Cidr::is_everything);
        let listener_open = listener.is_empty() || everything(listener);
        listener_open
            && match self {
                Admits::Any => true,
                Admits::Only(list) => everything(list),
                Admits::Nobody => false,
            }
    }
}
