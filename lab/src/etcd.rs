//! etcd members (Debian's etcd 3.4 processes inside a seed) and the membership operations
//! etcd-druid would perform: add as learner, promote, remove, move leader — each retried while
//! etcd refuses it for a transient reason ("unhealthy cluster", learner not yet in sync).
//!
//! Names and advertised peer URLs are the planner's (`crate::specs`); the ports members listen
//! on inside a seed are the lab's (peer 12380 + index behind the proxy, client 22379 + index):
//! the proxy and all members share the seed's one namespace, where the proxy holds 2380+.

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
    /// Starts the member in `seed`; `cluster` is `--initial-cluster`, `state` `new`/`existing`.
    pub fn start(
        seed: &Seed,
        dir: &Path,
        r: MemberRef,
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
            .args(["--initial-advertise-peer-urls", &r.peer_url()])
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
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

/// `name=peer-url,...` for `--initial-cluster`.
pub fn initial_cluster(members: &[MemberRef]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.name(), m.peer_url()))
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
    pub peer_url: String,
    pub learner: bool,
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
            peer_url: m.peer_urls().first().cloned().unwrap_or_default(),
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

/// Adds `m` as a learner (idempotent: an existing member with its peer URL counts as done).
pub async fn add_learner(c: &Client, m: MemberRef) -> Result<()> {
    retry(
        &format!("add learner {}", m.name()),
        Duration::from_secs(60),
        || async {
            let mut c = c.clone();
            if list(&mut c)
                .await?
                .iter()
                .any(|l| l.peer_url == m.peer_url())
            {
                return Ok(());
            }
            c.member_add(
                [m.peer_url()],
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
            let Some(l) = members.iter().find(|l| l.peer_url == m.peer_url()) else {
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

async fn healthy_count(endpoints: &[String]) -> usize {
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
        .find(|l| l.peer_url == m.peer_url())
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
