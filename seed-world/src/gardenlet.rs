//! The gardenlet stand-in: what Gardener's gardenlet does around a live migration, through a
//! seed's API only (gardenlet needs a Garden cluster): the source's `Etcd` before any
//! migration (as its etcd component deploys it), the controller's access grant in the shoot's
//! namespace with each `EtcdMigration` (`isthmus_controller::access`, `deploy/examples/`), the
//! migration's steps (`spec.step`), and the source's `status.exposedMembers` copied into the
//! destination's `spec.destination.sourceMembers`. Waiting for `status.stepReady` between
//! steps is the caller's (a test's body, the lab's driver). The same functions orchestrate
//! the migration between two real seeds (`tests/cluster/join_expose.rs`).

use crate::error::{Error, Result};
use isthmus_controller::access::{self, Subject};
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, MemberUrls, Step};
use isthmus_controller::gardener::etcd_resource;
use isthmus_testkit::apply::try_apply;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

/// gardenlet's field manager.
const MANAGER: &str = "gardenlet";

/// The source's `Etcd` (`etcd`, a whole object) as gardenlet creates it before any migration.
pub async fn create_etcd(admin: &Client, etcd: &Value) -> Result<()> {
    let ns = etcd["metadata"]["namespace"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &etcd_resource());
    let obj: DynamicObject =
        serde_json::from_value(etcd.clone()).map_err(|e| Error::State(e.to_string()))?;
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| Error::kube("gardenlet stand-in: creating the Etcd", e))?;
    Ok(())
}

/// The etcd client Secrets an `Etcd`'s spec names (`spec.etcd.clientUrlTls`): what the grant
/// lets the controller read.
pub fn client_secrets(etcd_spec: &Value, namespace: &str) -> Result<Vec<String>> {
    let tls = isthmus_controller::gardener::etcd_client_tls(etcd_spec, namespace)
        .map_err(|e| Error::State(format!("gardenlet stand-in: {e}")))?;
    Ok(tls.secret_names())
}

/// Grants the controller access in `namespace` for the migration `spec`: its writes there and
/// reading the etcd client Secrets `secrets` (after a rotation, the new names).
pub async fn grant(
    admin: &Client,
    spec: &EtcdMigrationSpec,
    namespace: &str,
    secrets: &[String],
) -> Result<()> {
    for doc in access::grant(spec, namespace, &Subject::default(), secrets) {
        try_apply(admin, &doc, MANAGER)
            .await
            .map_err(|e| Error::State(format!("gardenlet stand-in: the grant: {e}")))?;
    }
    Ok(())
}

/// Creates the `EtcdMigration` `name` in `namespace` with `spec`.
pub async fn create_migration(
    admin: &Client,
    namespace: &str,
    name: &str,
    spec: &EtcdMigrationSpec,
) -> Result<()> {
    migrations(admin, namespace)
        .create(
            &PostParams::default(),
            &EtcdMigration::new(name, spec.clone()),
        )
        .await
        .map_err(|e| Error::kube(format!("gardenlet stand-in: creating {name}"), e))?;
    Ok(())
}

/// Sets `spec.step` of migration `name`.
pub async fn set_step(admin: &Client, namespace: &str, name: &str, step: Step) -> Result<()> {
    let patch = json!({"spec": {"step": step}});
    migrations(admin, namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::kube(format!("gardenlet stand-in: setting step {step:?}"), e))?;
    Ok(())
}

/// Copies the source migration's `status.exposedMembers` (read with `source`) into the
/// destination's `spec.destination.sourceMembers` (written with `destination`); both named
/// `name` in `namespace`. Returns what it copied.
pub async fn copy_exposed_members(
    source: &Client,
    destination: &Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<MemberUrls>> {
    let src = migrations(source, namespace)
        .get(name)
        .await
        .map_err(|e| Error::kube("gardenlet stand-in: reading the source", e))?;
    let exposed = src.status.unwrap_or_default().exposed_members;
    let patch = json!({"spec": {"destination": {"sourceMembers": exposed}}});
    migrations(destination, namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::kube("gardenlet stand-in: copying sourceMembers", e))?;
    Ok(exposed)
}

fn migrations(admin: &Client, namespace: &str) -> Api<EtcdMigration> {
    Api::namespaced(admin.clone(), namespace)
}
