//! Keeps the shoot namespace's `isthmus-etcd` Service ([`crate::network`]) in line with the
//! migrations there whose routes lead to their etcd: applied (server-side, under gardenlet's
//! grant: get/create/patch/delete of that one name) while one does, deleted once none does
//! (only if a migration owns it: a Service someone else made under the name stays).

use super::context::Context;
use super::write::ssa;
use super::Error;
use crate::crd::{EtcdMigration, EtcdMigrationSpec};
use crate::gardener::etcd_resource;
use crate::network::{etcd_service, pod_labels, EtcdUser, ETCD_SERVICE};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, DynamicObject, Patch};
use kube::ResourceExt;

/// Applies or deletes the Service of `ns`: `me` needs it when `wanted` (its routes are in
/// the proxy file, or not yet out of every proxy); every other migration of `ns` while its
/// status lists exposed members and it is not being deleted.
pub(super) async fn sync(
    ctx: &Context,
    ns: &str,
    me: &EtcdMigration,
    wanted: bool,
) -> Result<(), Error> {
    let migrations: Api<EtcdMigration> = Api::namespaced(ctx.client.clone(), ns);
    let etcds: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &etcd_resource());
    let mut users = Vec::new();
    let mut list = migrations.list(&Default::default()).await?.items;
    list.sort_by_key(|m| m.name_any());
    for m in &list {
        let needs = if m.uid() == me.uid() {
            wanted
        } else {
            m.metadata.deletion_timestamp.is_none()
                && m.status
                    .as_ref()
                    .is_some_and(|s| !s.exposed_members.is_empty())
        };
        if !needs {
            continue;
        }
        let labels = labels(&etcds, &m.spec).await?;
        if labels.is_empty() {
            tracing::warn!(migration = %m.name_any(), namespace = ns,
                "no pod labels for the Etcd yet: not in the isthmus-etcd Service");
            continue;
        }
        users.push(EtcdUser {
            name: m.name_any(),
            uid: m.uid().unwrap_or_default(),
            pod_labels: labels,
        });
    }
    let settings = &ctx.settings;
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    match etcd_service(
        ns,
        &users,
        &settings.proxy_namespace_labels,
        &settings.shoot_alias,
    ) {
        Some(body) => {
            services
                .patch(ETCD_SERVICE, &ssa(), &Patch::Apply(body))
                .await?;
        }
        None => {
            if !users.is_empty() {
                tracing::warn!(
                    namespace = ns,
                    "the migrating Etcds' pods share no label: no isthmus-etcd Service"
                );
            }
            delete_ours(&services).await?;
        }
    }
    Ok(())
}

/// Deletes the Service if a migration owns it (one a person made under that name is left
/// alone), on the condition that it is still the object read.
async fn delete_ours(services: &Api<Service>) -> Result<(), Error> {
    let Some(svc) = services.get_opt(ETCD_SERVICE).await? else {
        return Ok(());
    };
    let ours = svc
        .owner_references()
        .iter()
        .any(|o| o.kind == "EtcdMigration" && o.api_version.starts_with("isthmus.dev/"));
    if !ours {
        return Ok(());
    }
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: svc.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match services.delete(ETCD_SERVICE, &dp).await {
        Ok(_) => Ok(()),
        // Gone meanwhile, or replaced by another object of that name: not ours to delete.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The pod labels of `spec`'s `Etcd`: the existing one's, else (a destination `Etcd` not
/// created yet) its template's.
async fn labels(
    etcds: &Api<DynamicObject>,
    spec: &EtcdMigrationSpec,
) -> Result<std::collections::BTreeMap<String, String>, Error> {
    if let Some(e) = etcds.get_opt(&spec.etcd_name).await? {
        let labels = pod_labels(&e.data["spec"]);
        if !labels.is_empty() {
            return Ok(labels);
        }
    }
    Ok(spec
        .destination
        .as_ref()
        .and_then(|d| d.etcd_template.as_ref())
        .map(|t| pod_labels(&t.spec))
        .unwrap_or_default())
}
