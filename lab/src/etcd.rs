//! etcd members (Debian's etcd 3.4 processes inside a seed) and the membership operations
//! etcd-druid would perform: add as learner, promote, remove, move leader — each retried while
//! etcd refuses it for a transient reason ("unhealthy cluster", learner not yet in sync).
//!
//! Names and exposed peer URLs are the planner's (`crate::specs`); the ports members listen
//! on inside a seed are the lab's (peer 12380 + index behind the proxy, client 22379 + index):
//! the proxy and all members share the seed's one namespace, where the proxy holds 2380+.
//!
//! A member has two possible peer URLs: its in-cluster one (etcd-druid's peer Service name,
//! `<pod>.<etcd>-peer.<namespace>.svc`, spelled alike in both seeds and resolved by each seed
//! to its own pod) and its exposed one. Which it advertises is the lab's druid stand-in's
//! business (`crate::backend`); a listed member is recognised by its name, or by its exposed
//! URL while it is a learner that has not started (learners are added with that URL).

use crate::error::{Error, Result};
use crate::seeds::Seed;
use etcd_client::{Client, ConnectOptions, MemberAddOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Which seed a member lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Source,
    Destination,
}

/// A member's identity: seed and index (the index picks its proxy listener, 2380 + index).
/// Its names and URLs come from the controller's planner (`crate::specs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemberRef {
    pub side: Side,
    pub index: u16,
}

impl MemberRef {
    /// The etcd member name, as the planner spells it (`crate::specs`): the destination's
    /// carries etcd-druid's member-name prefix.
    pub fn name(&self) -> String {
        self.planned(|m| m.member)
    }
    /// The member's DNS name (`<pod>.<namespace>.<seed>.<domain>`): what its seed's proxy routes
    /// on (SNI) and what peers resolve.
    pub fn dns(&self) -> String {
        self.planned(|m| m.dns_name)
    }
    /// The advertised peer URL on the planner's peer port (`PortScheme`: 2380 + index): a DNS
    /// name (Go sends no SNI for IP addresses).
    pub fn peer_url(&self) -> String {
        self.planned(|m| m.peer_url())
    }
    /// The in-cluster peer name, etcd-druid's peer Service: `<pod>.<etcd>-peer.<namespace>.svc`.
    /// The pod names are the same in both seeds (`etcd-main-<i>`), so the name is too.
    pub fn in_cluster_dns(&self) -> String {
        format!(
            "{}.{}-peer.{}.svc",
            self.planned(|m| m.pod),
            crate::specs::ETCD,
            crate::specs::NAMESPACE
        )
    }
    /// Its pod's in-cluster DNS name as etcd-druid's headless peer Service spells it in a
    /// cluster (`<pod>.etcd-main-peer.<ns>.svc.cluster.local`): where the controller's rendered
    /// proxy routes point. Each seed resolves its own members' names to [`Self::pod_ip`].
    pub fn pod_dns(&self) -> String {
        format!("{}.cluster.local", self.in_cluster_dns())
    }
    /// The member's "pod address" inside its seed: a loopback address of its own whose pod
    /// ports (2380 peer, 2379 client) the seed translates to the member's lab ports
    /// ([`crate::seeds::Seed::pod_ports`], what kube-proxy and pod networking do in a cluster;
    /// the seed's proxy holds 2380 and 2379 on every local address itself).
    pub fn pod_ip(&self) -> std::net::Ipv4Addr {
        let i = u8::try_from(self.index).unwrap_or(0);
        std::net::Ipv4Addr::new(127, 0, 1, 10u8.saturating_add(i))
    }
    /// The in-cluster peer URL: reaches the member directly inside its own seed (its listen
    /// port, not the proxy's).
    pub fn in_cluster_url(&self) -> String {
        format!("https://{}:{}", self.in_cluster_dns(), self.peer_port())
    }
    /// Whether `l` is this member in etcd's list: by name, or, for a learner that has not
    /// started (no name yet), by the exposed URL it was added with.
    pub fn listed_as(&self, l: &Listed) -> bool {
        if l.name.is_empty() {
            l.peer_urls.contains(&self.peer_url())
        } else {
            l.name == self.name()
        }
    }
    fn planned(&self, f: impl FnOnce(isthmus_controller::plan::Member) -> String) -> String {
        // Every lab member (index < 3) has a planner entry; an empty name would fail loudly
        // in etcd's flag parsing rather than silently.
        crate::specs::member(*self).map(f).unwrap_or_default()
    }
    /// Where the member listens for peers (behind its seed's proxy). Not the planner's 2380:
    /// the proxy and every member share the seed's one namespace, and the proxy holds 2380+.
    pub fn peer_port(&self) -> u16 {
        12380 + self.index
    }
    /// Where the member serves clients over TLS (the client exposure's upstream, its pod
    /// port 2379 in a cluster), inside its seed.
    pub fn tls_client_port(&self) -> u16 {
        24379 + self.index
    }
    /// Where the member listens for clients (on the seed side of the veth), for the same reason
    /// not the planner's client port.
    pub fn client_port(&self) -> u16 {
        22379 + self.index
    }
    /// The client URL, reachable from the host namespace over the seed's veth.
    pub fn client_url(&self, seed: &Seed) -> String {
        format!("http://{}:{}", seed.seed_ip, self.client_port())
    }
}

/// A running etcd process (killed on drop).
#[derive(Debug)]
pub struct Member {
    pub r: MemberRef,
    child: Child,
}

impl Member {
    /// Starts the member in `seed` advertising `peer_urls`; `cluster` is `--initial-cluster`,
    /// `state` `new`/`existing`.
    pub fn start(
        seed: &Seed,
        dir: &Path,
        r: MemberRef,
        peer_urls: &[String],
        cluster: &str,
        state: &str,
        pre_vote: bool,
    ) -> Result<Self> {
        let name = r.name();
        let d = |f: &str| dir.join(f).display().to_string();
        let log_path = dir.join(format!("{name}.log"));
        // Appended: a member restarted after a kill keeps the log of its first life.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(log_path.display(), e))?;
        let client = r.client_url(seed);
        let child = seed
            .command("etcd")
            .args(["--name", &name, "--data-dir", &d(&format!("{name}.data"))])
            .args([
                "--listen-peer-urls",
                &format!("https://127.0.0.1:{}", r.peer_port()),
            ])
            .args(["--initial-advertise-peer-urls", &peer_urls.join(",")])
            .args([
                "--listen-client-urls",
                &format!("{client},https://127.0.0.1:{}", r.tls_client_port()),
                "--advertise-client-urls",
                &client,
            ])
            // The TLS client listener (the client exposure, what the controller reads etcd's
            // member list through) takes client certificates of the lab CA only.
            .args(["--cert-file", &d(&format!("{name}.crt"))])
            .args(["--key-file", &d(&format!("{name}.key"))])
            .args(["--trusted-ca-file", &d("ca.crt"), "--client-cert-auth"])
            .args([
                "--initial-cluster",
                cluster,
                "--initial-cluster-state",
                state,
            ])
            .args(["--initial-cluster-token", "isthmus-lab"])
            .args(["--peer-cert-file", &d(&format!("{name}.crt"))])
            .args(["--peer-key-file", &d(&format!("{name}.key"))])
            .args([
                "--peer-trusted-ca-file",
                &d("ca.crt"),
                "--peer-client-cert-auth",
            ])
            // Peer traffic is source-NATed by the proxies: skip the client-cert SAN check
            // (TLS stays end-to-end between members).
            .arg("--experimental-peer-skip-client-san-verification")
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            // Without pre-vote, members cut off from the leader keep raising their term and, when
            // the link comes back, force an election: write stalls of 1.2 and 4.2 s measured
            // in the link-cut scenario. Pre-vote lets them rejoin quietly.
            .arg(format!("--pre-vote={pre_vote}"))
            .env("ETCD_UNSUPPORTED_ARCH", "")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Error::Command {
                command: "etcd".into(),
                detail: e.to_string(),
            })?;
        Ok(Self { r, child })
    }

    /// Stops it as kubelet stops a pod: SIGTERM (a leader hands its leadership over first),
    /// SIGKILL after `grace`. Says which it took.
    pub async fn stop(&mut self, grace: Duration) -> Result<String> {
        let t0 = Instant::now();
        crate::seeds::run(
            std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]),
        )?;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => {
                    return Ok(format!(
                        "SIGTERM, exited after {:.1} s",
                        t0.elapsed().as_secs_f64()
                    ))
                }
                Ok(None) if t0.elapsed() < grace => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    self.kill9();
                    return Ok(format!("SIGTERM, SIGKILL after {} s", grace.as_secs()));
                }
            }
        }
    }

    /// `kill -9`: the process dies without a word to its peers (a crashed container).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Log path of a member (for error messages).
    pub fn log_path(dir: &Path, r: MemberRef) -> PathBuf {
        dir.join(format!("{}.log", r.name()))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name=peer-url,...` for `--initial-cluster`: every URL of every member.
pub fn initial_cluster(members: &[(MemberRef, Vec<String>)]) -> String {
    members
        .iter()
        .flat_map(|(m, urls)| urls.iter().map(move |u| format!("{}={u}", m.name())))
        .collect::<Vec<_>>()
        .join(",")
}

/// An admin connection to the cluster (the one etcd-druid's operations go through).
pub async fn connect(endpoints: &[String]) -> Result<Client> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    Client::connect(endpoints, Some(opts))
        .await
        .map_err(|e| Error::etcd(format!("connect {endpoints:?}"), e))
}

/// One member as the cluster lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub learner: bool,
}

impl Listed {
    /// The lab's name for this member: etcd's, or, for a learner that has not started (no
    /// name in etcd yet), the name of the lab member it was added as.
    pub fn lab_name(&self) -> String {
        [crate::topology::source(), crate::topology::destination()]
            .concat()
            .iter()
            .find(|m| m.listed_as(self))
            .map_or_else(|| self.name.clone(), MemberRef::name)
    }
}

/// The member list.
pub async fn list(c: &mut Client) -> Result<Vec<Listed>> {
    let r = c
        .member_list()
        .await
        .map_err(|e| Error::etcd("member list", e))?;
    Ok(r.members()
        .iter()
        .map(|m| Listed {
            id: m.id(),
            name: m.name().to_string(),
            peer_urls: m.peer_urls().to_vec(),
            learner: m.is_learner(),
        })
        .collect())
}

/// Retries `op` until it succeeds or `budget` runs out; etcd refuses membership changes for a
/// few seconds after members (re)connect, and promotion until the learner caught up.
pub async fn retry<T, F, Fut>(what: &str, budget: Duration, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = Instant::now() + budget;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => {
                return Err(Error::State(format!(
                    "{what}: gave up after {budget:?}: {e}"
                )))
            }
            Err(e) => tracing::debug!(what, error = %e, "retrying"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Adds `m` as a learner advertising `urls` (idempotent: `m` listed counts as done).
pub async fn add_learner(c: &Client, m: MemberRef, urls: &[String]) -> Result<()> {
    retry(
        &format!("add learner {}", m.name()),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            if list(&mut c).await?.iter().any(|l| m.listed_as(l)) {
                return Ok(());
            }
            c.member_add(
                urls.to_vec(),
                Some(MemberAddOptions::new().with_is_learner()),
            )
            .await
            .map(|_| ())
            .map_err(|e| Error::etcd("member add", e))
        },
    )
    .await
}

/// Promotes the learner `m` to a voter once it caught up.
pub async fn promote(c: &Client, m: MemberRef) -> Result<()> {
    retry(
        &format!("promote {}", m.name()),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            let l = find(&mut c, m).await?;
            if !l.learner {
                return Ok(());
            }
            c.member_promote(l.id)
                .await
                .map(|_| ())
                .map_err(|e| Error::etcd("member promote", e))
        },
    )
    .await
}

/// Removes `m` after checking that the remaining voters are all healthy and form a quorum.
pub async fn remove(c: &Client, m: MemberRef, endpoints_after: &[String]) -> Result<()> {
    retry(
        &format!("remove {}", m.name()),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            let members = list(&mut c).await?;
            let Some(l) = members.iter().find(|l| m.listed_as(l)) else {
                return Ok(());
            };
            let voters_after = members
                .iter()
                .filter(|x| !x.learner && x.id != l.id)
                .count();
            let healthy = healthy_count(endpoints_after).await;
            if healthy < voters_after / 2 + 1 || voters_after == 0 {
                return Err(Error::State(format!(
                    "removing {} would leave {healthy} healthy of {voters_after} voters",
                    m.name()
                )));
            }
            c.member_remove(l.id)
                .await
                .map(|_| ())
                .map_err(|e| Error::etcd("member remove", e))
        },
    )
    .await
}

/// `member update`: `m` advertises `urls` from now on (what etcd-druid's backup-restore
/// sidecar does when a pod starts with peer URLs the cluster does not list yet).
pub async fn update_peer_urls(c: &Client, m: MemberRef, urls: &[String]) -> Result<()> {
    retry(
        &format!("member update {}", m.name()),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            let l = find(&mut c, m).await?;
            if l.peer_urls == urls {
                return Ok(());
            }
            c.member_update(l.id, urls.to_vec())
                .await
                .map(|_| ())
                .map_err(|e| Error::etcd("member update", e))
        },
    )
    .await
}

/// Moves leadership to `m` (sent to the current leader, as etcd requires).
pub async fn move_leader(endpoints: &[String], m: MemberRef) -> Result<()> {
    retry(
        &format!("move leader to {}", m.name()),
        Duration::from_secs(30),
        || async {
            let mut any = connect(endpoints).await?;
            let target = find(&mut any, m).await?.id;
            for e in endpoints {
                let mut one = connect(std::slice::from_ref(e)).await?;
                let st = one.status().await.map_err(|e| Error::etcd("status", e))?;
                if st.leader() == target {
                    return Ok(());
                }
                if st.header().map(|h| h.member_id()) == Some(st.leader()) {
                    one.move_leader(target)
                        .await
                        .map_err(|e| Error::etcd("move leader", e))?;
                    return Ok(());
                }
            }
            Err(Error::State("no leader among the endpoints".into()))
        },
    )
    .await
}

/// The name of the current leader, asked of the given endpoints.
pub async fn leader(endpoints: &[String]) -> Result<String> {
    let mut c = connect(endpoints).await?;
    let st = c.status().await.map_err(|e| Error::etcd("status", e))?;
    let members = list(&mut c).await?;
    Ok(members
        .into_iter()
        .find(|l| l.id == st.leader())
        .map(|l| l.name)
        .unwrap_or_default())
}

/// How many of `endpoints` serve a linearizable read now.
pub async fn healthy_count(endpoints: &[String]) -> usize {
    let mut n = 0;
    for e in endpoints {
        if let Ok(mut c) = connect(std::slice::from_ref(e)).await {
            // A linearizable read needs the member connected to a working leader.
            if c.get("health", None).await.is_ok() {
                n += 1;
            }
        }
    }
    n
}

async fn find(c: &mut Client, m: MemberRef) -> Result<Listed> {
    list(c)
        .await?
        .into_iter()
        .find(|l| m.listed_as(l))
        .ok_or_else(|| Error::State(format!("{} is not a member", m.name())))
}

/// Whether a linearizable read on `endpoint` succeeds now (one attempt): the member serves and
/// is connected to a working leader. What the lab reports as a ready replica.
pub async fn serving(endpoint: &str) -> bool {
    match connect(&[endpoint.to_string()]).await {
        Ok(mut c) => c.get("health", None).await.is_ok(),
        Err(_) => false,
    }
}

/// Waits until a linearizable read on `endpoint` succeeds (the member serves, caught up).
pub async fn wait_serving(endpoint: &str, budget: Duration) -> Result<()> {
    retry(&format!("{endpoint} serving"), budget, || async {
        let mut c = connect(&[endpoint.to_string()]).await?;
        c.get("health", None)
            .await
            .map(|_| ())
            .map_err(|e| Error::etcd("get", e))
    })
    .await
}
