//! Whether a migration's listener can be bound beside what the file holds already: one port
//! is one listener name, never the admin port, never a privileged port. A port problem is
//! the migration's, not the file's: it is left out (or loses the port to the older
//! migration) and every other migration keeps its routes.

use crate::plan::validate::UNPRIVILEGED;
use crate::plan::MemberRoute;

/// Why a route's listener cannot be had.
pub(super) enum Taken {
    /// No proxy could bind it, or the layout binds its port under another name.
    Problem(String),
    /// An earlier claim (its index) holds the port under another listener name (that name).
    By(usize, String),
}

/// `on_port`: the listeners already on the route's port, `(name, first owner)`, `None` for the
/// layout's own; `me`: the route's claim.
pub(super) fn taken<'a>(
    admin_port: u16,
    r: &MemberRoute,
    me: usize,
    on_port: impl Iterator<Item = (&'a str, Option<usize>)>,
) -> Option<Taken> {
    let mut held = None;
    for (name, owner) in on_port {
        match owner {
            // The layout's own listener: it binds.
            None if name == r.listener => return None,
            None => {
                return Some(Taken::Problem(format!(
                    "port {} is the listener {name:?}'s, which every proxy binds",
                    r.port
                )))
            }
            Some(_) if name == r.listener => {}
            Some(h) if h == me => {
                return Some(Taken::Problem(format!(
                    "port {} is also this migration's listener {name:?}",
                    r.port
                )))
            }
            Some(h) => held = held.or(Some(Taken::By(h, name.to_owned()))),
        }
    }
    if r.port == admin_port {
        return Some(Taken::Problem(format!(
            "port {} is the proxy's admin port: the kubelet's probes would be spread over this listener",
            r.port
        )));
    }
    if r.port < UNPRIVILEGED {
        return Some(Taken::Problem(format!(
            "port {} is below {UNPRIVILEGED}: the proxy pods run without NET_BIND_SERVICE",
            r.port
        )));
    }
    held
}
