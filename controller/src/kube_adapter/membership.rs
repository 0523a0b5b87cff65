//! The controller's side of etcd's membership: reading the member list through the
//! endpoints the planner names (`plan::needs`), and carrying out the planner's `EtcdOp`s as
//! given (the planner decided the target, and the leader's URL a transfer goes through).

use super::context::Context;
use super::etcd::EtcdClient;
use super::Error;
use crate::crd::EtcdMigrationSpec;
use crate::plan::{EtcdCluster, EtcdOp};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

/// A client with the etcd client TLS material of the Secret named in the spec (`ca.crt`,
/// `tls.crt`, `tls.key`), and etcd's member list through `endpoints`. `Ok(None)` (logged)
/// when the material is unusable or no endpoint answers: the planner then waits or holds, as
/// it does for an unreachable etcd. `Err` when the API server refuses the Secret (the
/// namespace's grant is missing: reported by the caller).
pub(super) async fn read_cluster(
    ctx: &Context,
    ns: &str,
    spec: &EtcdMigrationSpec,
    endpoints: &[String],
) -> Result<Option<(EtcdClient, EtcdCluster)>, Error> {
    let key = format!("{ns}/{}", spec.etcd_name);
    let client = match etcd_client(ctx, ns, spec).await {
        Ok(c) => c,
        Err(e @ Error::Kube(kube::Error::Api(_))) => return Err(e),
        Err(e) => {
            tracing::warn!(etcd = %key, error = %e, "etcd client");
            return Ok(None);
        }
    };
    match client.cluster(endpoints).await {
        Ok(cluster) => Ok(Some((client, cluster))),
        Err(e) => {
            tracing::warn!(etcd = %key, error = %e, "etcd member list");
            Ok(None)
        }
    }
}

/// Carries out the plan's etcd operations; a failure is logged and the next pass retries
/// (the plan asks again while etcd's member list still shows the need).
pub(super) async fn run_ops(client: &EtcdClient, ops: &[EtcdOp], endpoints: &[String]) {
    for op in ops {
        let result = match op {
            EtcdOp::MoveLeader { to, via, name } => {
                tracing::info!(to = %name, via = %via, "moving etcd leadership");
                client.move_leader(via, *to).await
            }
            EtcdOp::Remove { id, name } => {
                tracing::info!(member = %name, "removing etcd member (abort)");
                client.remove(endpoints, *id).await
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "etcd operation failed; retried next pass");
        }
    }
}

async fn etcd_client(
    ctx: &Context,
    ns: &str,
    spec: &EtcdMigrationSpec,
) -> Result<EtcdClient, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret = secrets.get(&spec.etcd_client.secret_name).await?;
    let data = secret.data.unwrap_or_default();
    let get = |k: &str| {
        data.get(k).map(|b| b.0.clone()).ok_or_else(|| {
            Error::EtcdTls(format!(
                "Secret {ns}/{} has no key {k}",
                spec.etcd_client.secret_name
            ))
        })
    };
    EtcdClient::new(
        &get("ca.crt")?,
        &get("tls.crt")?,
        &get("tls.key")?,
        ctx.settings.etcd_connect_to.clone(),
    )
    .map_err(|e| Error::EtcdTls(e.to_string()))
}
