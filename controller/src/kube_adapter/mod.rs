//! The kube-rs adapter: runs the planner against a real API server. Watches `EtcdMigration`s
//! and the `DNSRecord`s and `Etcd`s they touch, applies with server-side apply (field manager
//! `isthmus`), writes status, keeps a finalizer, backs off on errors, counts in Prometheus and
//! only reconciles while holding the leader Lease.
//!
//! Our `DNSRecord`s carry a label instead of an ownerReference: garbage collection would delete
//! them without Gardener's deletion confirmation, so the finalizer deletes them instead.

mod applied;
mod context;
mod error;
pub mod etcd;
mod etcd_service;
pub mod lease;
mod load_balancer;
mod membership;
mod metrics;
mod notice;
pub mod nudge;
pub mod probe;
mod proxy;
mod reconcile;
mod refuse;
mod serve;
mod tunnel_server;
mod write;

pub use applied::AppliedEtcds;
pub use context::{Clock, Context, Settings, FIELD_MANAGER, FINALIZER};
pub use error::Error;
pub use metrics::{FailureLabels, Metrics, OverwriteLabels, StepLabels};
pub use reconcile::{error_policy, reconcile};
pub use serve::{connect, serve_metrics, serve_metrics_with, ConnectError};

use crate::crd::EtcdMigration;
use crate::gardener::{dnsrecord_resource, etcd_resource, MIGRATION_LABEL};
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;

/// The migration a `DNSRecord` belongs to (by our label).
pub fn record_owner(record: &DynamicObject) -> Option<ObjectRef<EtcdMigration>> {
    let ns = record.namespace().unwrap_or_default();
    record
        .labels()
        .get(MIGRATION_LABEL)
        .map(|m| ObjectRef::<EtcdMigration>::new(m).within(&ns))
}

/// The migrations (in the `Etcd`'s namespace) whose `spec.etcdName` names this `Etcd`.
pub fn etcd_users(
    migrations: &[Arc<EtcdMigration>],
    etcd: &DynamicObject,
) -> Vec<ObjectRef<EtcdMigration>> {
    let ns = etcd.namespace();
    let name = etcd.name_any();
    migrations
        .iter()
        .filter(|m| m.namespace() == ns && m.spec.etcd_name == name)
        .map(|m| ObjectRef::from_obj(&**m))
        .collect()
}

/// Runs the controller until the watch streams end.
pub async fn run(ctx: Arc<Context>) {
    let client = ctx.client.clone();
    let (migrations, dns, etcds) = match &ctx.settings.namespace {
        Some(ns) => (
            Api::<EtcdMigration>::namespaced(client.clone(), ns),
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &dnsrecord_resource()),
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &etcd_resource()),
        ),
        None => (
            Api::<EtcdMigration>::all(client.clone()),
            Api::<DynamicObject>::all_with(client.clone(), &dnsrecord_resource()),
            Api::<DynamicObject>::all_with(client.clone(), &etcd_resource()),
        ),
    };
    // One reconciliation at a time: every pass rewrites the one shared proxy ConfigMap.
    let controller = Controller::new(migrations, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(1));
    let store = controller.store();
    let applied = ctx.clone();
    controller
        .watches_with(
            dns,
            dnsrecord_resource(),
            watcher::Config::default().labels(MIGRATION_LABEL),
            |o: DynamicObject| {
                let ns = o.namespace().unwrap_or_default();
                o.labels()
                    .get(MIGRATION_LABEL)
                    .map(|m| ObjectRef::<EtcdMigration>::new(m).within(&ns))
            },
        )
        .watches_with(
            etcds,
            etcd_resource(),
            watcher::Config::default(),
            move |o: DynamicObject| {
                // Every version: one another writer made and isthmus wrote over before a
                // pass read it is still said (`applied`).
                applied.etcd_applied.note(&o);
                let ns = o.namespace();
                let name = o.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|m| m.namespace() == ns && m.spec.etcd_name == name)
                    .map(|m| ObjectRef::from_obj(&*m))
                    .collect::<Vec<_>>()
            },
        )
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            match r {
                Ok((o, _)) => tracing::debug!(migration = %o, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "controller event"),
            }
        })
        .await;
}
