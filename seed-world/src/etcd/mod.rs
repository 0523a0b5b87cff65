//! A real etcd cluster as a seed runs it for etcd-druid: member processes (Debian's etcd 3.4)
//! started where their seed's DNS resolves the names druid gives them ([`Place`]), the
//! membership as druid's pods keep it ([`Cluster`]), the membership operations etcd-druid's
//! pods and backup-restore sidecars perform through etcd's member API ([`membership`]: add as
//! learner, promote, remove, member update, move leader, each retried while etcd refuses it
//! for a transient reason) and the rolling restart onto new peer URLs ([`rolling`]), and the
//! reads every part needs (member list, leader, whether a member serves).
//!
//! Members are named and addressed by their [`MemberDef`]: the lab's members in its seeds'
//! network namespaces, the controller tests' on loopback with a private `/etc/hosts`
//! ([`loopback`]). The harness talks to each member on its plain client URL; the TLS client
//! listener is the controller's (client certificates of the cluster's CA).

pub mod cluster;
pub mod loopback;
pub mod member;
pub mod membership;
pub mod process;
pub mod rolling;

pub use cluster::Cluster;
pub use loopback::{free_run, Loopback, MemberCa};
pub use member::{Listed, MemberDef, Place};
pub use membership::{add_learner, move_leader, promote, remove, update_peer_urls};

use crate::error::{Error, Result};
use etcd_client::{Client, ConnectOptions};
use std::time::{Duration, Instant};

/// An admin connection to the cluster (the one etcd-druid's operations go through).
pub async fn connect(endpoints: &[String]) -> Result<Client> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    Client::connect(endpoints, Some(opts))
        .await
        .map_err(|e| Error::etcd(format!("connect {endpoints:?}"), e))
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
pub async fn retry<T, E, F, Fut>(what: &str, budget: Duration, mut op: F) -> Result<T>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
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
        if serving(e).await {
            n += 1;
        }
    }
    n
}

pub(crate) async fn find(c: &mut Client, m: &MemberDef) -> Result<Listed> {
    list(c)
        .await?
        .into_iter()
        .find(|l| m.listed_as(l))
        .ok_or_else(|| Error::State(format!("{} is not a member", m.name)))
}

/// Whether a linearizable read on `endpoint` succeeds now (one attempt): the member serves and
/// is connected to a working leader. What a ready replica is.
pub async fn serving(endpoint: &str) -> bool {
    match connect(&[endpoint.to_string()]).await {
        // A linearizable read needs the member connected to a working leader.
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
