//! Leader election with a `coordination.k8s.io/v1` Lease: acquire when free or expired, renew
//! while held; every write is a replace conditional on the `resourceVersion` just read, so two
//! replicas can never both believe they won (the loser gets 409 Conflict).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use std::time::Duration;

/// A Lease-based lock.
#[derive(Debug, Clone)]
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaseLock {
    /// `identity` is this replica's unique name (the pod name).
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            duration,
        }
    }

    /// How often to call [`LeaseLock::try_acquire_or_renew`]: a third of the lease duration.
    pub fn renew_interval(&self) -> Duration {
        self.duration / 3
    }

    /// Takes or renews the lease at time `now`. `Ok(true)`: we hold it until
    /// `now + duration`. `Ok(false)`: someone else holds it (or won a race).
    pub async fn try_acquire_or_renew(&self, now: Timestamp) -> Result<bool, kube::Error> {
        let secs = i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return conflict_is_false(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = current.spec.clone().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let held_for =
            SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
        let expired = match &spec.renew_time {
            Some(MicroTime(t)) => t.checked_add(held_for).map(|end| end < now).unwrap_or(true),
            None => true,
        };
        let holder_empty = spec
            .holder_identity
            .as_deref()
            .unwrap_or_default()
            .is_empty();
        if !ours && !expired && !holder_empty {
            return Ok(false);
        }
        let mut next = current.clone();
        let mut s = spec;
        if !ours {
            s.holder_identity = Some(self.identity.clone());
            s.acquire_time = Some(MicroTime(now));
            s.lease_transitions = Some(s.lease_transitions.unwrap_or(0) + 1);
        }
        s.lease_duration_seconds = Some(secs);
        s.renew_time = Some(MicroTime(now));
        next.spec = Some(s);
        // `next` carries the resourceVersion we read: a concurrent writer makes this a 409.
        conflict_is_false(
            self.api
                .replace(&self.name, &PostParams::default(), &next)
                .await,
        )
    }
}

impl LeaseLock {
    /// Gives the lease up if we hold it, so another replica takes over at once instead of
    /// waiting out the lease. Conditional on the `resourceVersion` like every write.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        lease.spec = Some(spec);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }
}

fn conflict_is_false<T>(r: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits until this replica holds the lease, then runs `work` while renewing. Returns when
/// `work` ends (releasing the lease), or with an error as soon as the lease is lost (the caller exits, and the
/// restarted pod competes again: simpler and safer than stopping a controller half-way).
pub async fn run_as_leader<F>(
    lock: &LeaseLock,
    leader_gauge: &prometheus_client::metrics::gauge::Gauge,
    work: F,
) -> Result<(), LeaseError>
where
    F: std::future::Future<Output = ()>,
{
    loop {
        match lock.try_acquire_or_renew(Timestamp::now()).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "lease: acquire failed"),
        }
        tokio::time::sleep(lock.renew_interval()).await;
    }
    leader_gauge.set(1);
    tracing::info!(lease = %lock.name, identity = %lock.identity, "became leader");
    tokio::pin!(work);
    let mut last_renewal = tokio::time::Instant::now();
    let result = loop {
        tokio::select! {
            () = &mut work => {
                if let Err(e) = lock.release().await {
                    tracing::warn!(error = %e, "lease: release failed; it expires on its own");
                }
                break Ok(());
            }
            () = tokio::time::sleep(lock.renew_interval()) => {
                match lock.try_acquire_or_renew(Timestamp::now()).await {
                    Ok(true) => last_renewal = tokio::time::Instant::now(),
                    Ok(false) => break Err(LeaseError::Lost),
                    // A transient API error is retried while the lease surely still holds.
                    Err(e) if last_renewal.elapsed() + lock.renew_interval() < lock.duration => {
                        tracing::warn!(error = %e, "lease: renewal failed, retrying");
                    }
                    Err(e) => break Err(LeaseError::Api(e)),
                }
            }
        }
    };
    leader_gauge.set(0);
    result
}

/// Leadership ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another replica holds the lease now.
    #[error("leader lease lost to another replica")]
    Lost,
    /// Renewing failed; we cannot prove we still hold the lease, so we stop.
    #[error("leader lease renewal failed: {0}")]
    Api(kube::Error),
}
