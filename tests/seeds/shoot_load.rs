//! The lab's API load and watch (`lab/src/api/{load,watch}.rs`) at the shoot's kube-apiservers
//! in the real seeds, from seed a's outside network (a client of the seeds' load balancers):
//! a thread of its own that joins that network namespace (setns; every socket its runtime
//! opens is then there) and runs its own tokio runtime. The shoot API's name ([`Dns`]) holds
//! a client for each seed's load balancer address; seed b's crosses the link. With a webhook
//! ([`Admission`], `shoot_webhook.rs`) it is registered through the source before the watch
//! and the load start, and a write is seen through it, as the lab's `ShootApi` does.

use isthmus_lab::api::kubeconfig::{kubeconfig_client, write_kubeconfig};
use isthmus_lab::api::load::{Load, Recording, NAMESPACE};
use isthmus_lab::api::report::Objects;
use isthmus_lab::api::watch::{Seen, Watch};
use isthmus_lab::api::{admission, Dns};
use isthmus_lab::webhook::endpoint::Served;
use isthmus_testkit::Scratch;
use kube::api::{Api, ListParams};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Pause between two requests of the load (create, patch, read in turn).
const INTERVAL: Duration = Duration::from_millis(250);
/// How long the watch may take to catch up with the last acknowledged write at the end.
const CATCH_UP: Duration = Duration::from_secs(30);

/// What the load and the watch saw, and what was read back at the end.
#[derive(Debug)]
pub struct Outcome {
    pub rec: Recording,
    pub seen: Seen,
    pub objects: Objects,
    /// When the load started on the wall clock (ms since the Unix epoch): the audit logs'.
    pub epoch_unix_ms: f64,
}

/// The shoot's webhook as the load registers it: its address in the shoot, the CA of its
/// serving certificate (a file), and what it has answered.
pub struct Admission {
    pub webhook: SocketAddr,
    pub ca: PathBuf,
    pub served: Served,
}

/// Moves the calling thread into the network namespace `netns` (`/run/netns/<netns>`):
/// every socket it opens from then on is there.
pub fn enter(netns: &str) -> Result<(), String> {
    let path = format!("/run/netns/{netns}");
    let ns = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&ns),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| format!("setns {path}: {e}"))
}

/// The running load and watch.
pub struct Outside {
    pub dns: Dns,
    /// When the load started: phases are measured from here.
    pub epoch: Instant,
    stop: oneshot::Sender<()>,
    thread: JoinHandle<Result<Outcome, String>>,
}

impl Outside {
    /// Joins `netns`, makes the load's objects through the source's address, starts the watch
    /// and the load (`webhook`: registered first). `addresses`: the source's and the
    /// destination's load balancer.
    pub fn start(
        netns: &str,
        addresses: [&str; 2],
        ca_pem: &str,
        token: &str,
        webhook: Option<Admission>,
    ) -> Self {
        let dir = Scratch::new("seeds-shoot-load");
        std::fs::write(dir.path().join("ca.crt"), ca_pem).unwrap();
        for (i, a) in addresses.iter().enumerate() {
            let server = format!("https://{a}:443");
            write_kubeconfig(
                &dir.path().join(format!("{i}.kubeconfig")),
                &server,
                &dir.path().join("ca.crt"),
                token,
            )
            .unwrap();
        }
        let netns = netns.to_owned();
        let (started, ready) = mpsc::channel();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::spawn(move || {
            enter(&netns)?;
            // Built after setns: its worker and blocking threads are created in the namespace.
            let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
            rt.block_on(run(dir, webhook, started, stopped))
        });
        match ready.recv() {
            Ok((dns, epoch)) => Self {
                dns,
                epoch,
                stop,
                thread,
            },
            Err(_) => panic!("the outside load did not start: {:?}", thread.join()),
        }
    }

    /// Stops the load after its request in flight, lets the watch catch up and reads every
    /// acknowledged object back through the name.
    pub fn stop(self) -> Result<Outcome, String> {
        let _ = self.stop.send(());
        self.thread
            .join()
            .map_err(|_| "the outside load panicked".to_string())?
    }
}

async fn run(
    dir: Scratch,
    webhook: Option<Admission>,
    started: mpsc::Sender<(Dns, Instant)>,
    stopped: oneshot::Receiver<()>,
) -> Result<Outcome, String> {
    let mut clients = Vec::new();
    for i in 0..2 {
        let c = kubeconfig_client(&dir.path().join(format!("{i}.kubeconfig"))).await;
        clients.push(c.map_err(|e| e.to_string())?);
    }
    let [source, destination]: [kube::Client; 2] = clients.try_into().map_err(|_| "two clients")?;
    isthmus_lab::api::load_objects(&source)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(w) = &webhook {
        admission::register(&source, w.webhook, &w.ca)
            .await
            .map_err(|e| e.to_string())?;
        admission::first_call(&source, || w.served.total())
            .await
            .map_err(|e| e.to_string())?;
    }
    let dns = Dns::new([source, destination]);
    let watch = Watch::start(dns.clone())
        .await
        .map_err(|e| format!("first list: {e}"))?;
    let epoch = Instant::now();
    let epoch_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let load = Load::start(epoch, dns.clone(), INTERVAL);
    started
        .send((dns.clone(), epoch))
        .map_err(|e| e.to_string())?;
    let _ = stopped.await;
    let rec: Recording = load.stop().await;
    let last = rec.acks.iter().map(|a| a.rv).max().unwrap_or(0);
    let seen: Seen = watch.stop_after(last, CATCH_UP).await;
    let (client, _) = dns.resolve();
    let stored = Api::namespaced(client, NAMESPACE)
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("final read: {e}"))?;
    Ok(Outcome {
        objects: Objects::check(&rec, &stored.items),
        rec,
        seen,
        epoch_unix_ms,
    })
}
