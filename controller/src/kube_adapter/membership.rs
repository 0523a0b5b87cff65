//! The controller's side of etcd's membership: reading the member list through the
//! endpoints the planner names (`plan::needs`), and carrying out the planner's `EtcdOp`s as
//! given (the planner decided the target, and the leader's URL a transfer goes through).

use super::context::Context;
use super::etcd::EtcdClient;
use super::Error;
use crate::crd::EtcdMigrationSpec;
use crate::gardener::{etcd_client_tls, etcd_resource, EtcdClientTls};
use crate::plan::{EtcdCluster, EtcdOp};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};

/// A client with the etcd client TLS material the `Etcd` names (`spec.etcd.clientUrlTls`:
/// Gardener's `etcd-client-<hash>` and `ca-etcd-bundle-<hash>`), read afresh every pass so
/// that a rotation (new names in the `Etcd`) is followed without a restart, and etcd's member
/// list through `endpoints`. `Ok(None)` (logged) when the material is unusable or no endpoint
/// answers: the planner then waits or holds, as it does for an unreachable etcd. `Err` when
/// the API server refuses a Secret (the namespace's grant does not name it: reported by the
/// caller).
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

/// Where the `Etcd` (or, before it exists, the destination's template) says etcd's client
/// TLS material is.
async fn client_tls(
    ctx: &Context,
    ns: &str,
    spec: &EtcdMigrationSpec,
) -> Result<EtcdClientTls, Error> {
    let etcds: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &etcd_resource());
    let etcd_spec = match etcds.get_opt(&spec.etcd_name).await? {
        Some(o) => o.data.get("spec").cloned().unwrap_or_default(),
        None => spec
            .destination
            .as_ref()
            .and_then(|d| d.etcd_template.as_ref())
            .map(|t| t.spec.clone())
            .ok_or_else(|| {
                Error::EtcdTls(format!("no Etcd {ns}/{} and no template", spec.etcd_name))
            })?,
    };
    etcd_client_tls(&etcd_spec, ns).map_err(Error::EtcdTls)
}

async fn etcd_client(
    ctx: &Context,
    ns: &str,
    spec: &EtcdMigrationSpec,
) -> Result<EtcdClient, Error> {
    let tls = client_tls(ctx, ns, spec).await?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let ca = secrets.get(&tls.ca_secret).await?;
    let client = secrets.get(&tls.client_secret).await?;
    let get = |s: &Secret, name: &str, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.clone())
            .ok_or_else(|| Error::EtcdTls(format!("Secret {ns}/{name} has no key {k}")))
    };
    EtcdClient::new(
        &get(&ca, &tls.ca_secret, &tls.ca_key)?,
        &get(&client, &tls.client_secret, "tls.crt")?,
        &get(&client, &tls.client_secret, "tls.key")?,
        ctx.settings.etcd_connect_to.clone(),
    )
    .map_err(|e| Error::EtcdTls(e.to_string()))
}
