//! The shoot API's DNS name as the lab's clients resolve it: which seed's kube-apiserver it
//! points at (it moves at `MigrateDNSRecords`).

use kube::Client;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The shoot API's DNS name: which seed's kube-apiserver it points at. Clients resolve it per
/// request; a watch re-resolves when it reconnects.
#[derive(Clone)]
pub struct Dns {
    clients: Arc<[Client; 2]>,
    current: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns")
            .field("current", &self.resolve().1)
            .finish_non_exhaustive()
    }
}

impl Dns {
    /// The name over the source's and the destination's kube-apiserver clients, pointing at
    /// the source.
    pub fn new(clients: [Client; 2]) -> Self {
        Self {
            clients: Arc::new(clients),
            current: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// `MigrateDNSRecords`: the name points at the destination from now on.
    pub fn move_to_destination(&self) {
        self.current.store(1, Ordering::Relaxed);
    }

    /// The client of the destination's kube-apiserver, whatever the name points at.
    pub fn destination(&self) -> Client {
        self.clients[1].clone()
    }

    /// A client for the kube-apiserver the name points at now, and that seed's label.
    pub fn resolve(&self) -> (Client, &'static str) {
        let i = self.current.load(Ordering::Relaxed).min(1);
        (self.clients[i].clone(), ["source", "destination"][i])
    }
}
