//! The controller's access under `deploy/controller.yaml` and the grant gardenlet gives it in a
//! shoot namespace (`isthmus_controller::access`), asked of a real kube-apiserver (v1.34.4)
//! with `SubjectAccessReview`s for the controller's ServiceAccount: what a migration needs is
//! allowed in its namespace, and nothing of another shoot is — above all not its etcd client
//! Secret. That the controller works with exactly this access is `apiserver_controller.rs`
//! (it runs the controller as that ServiceAccount) and the lab's `--controllers` runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{spec, NS};
use isthmus_controller::access::{grant, Subject};
use isthmus_controller::crd::{Role, Step};
use isthmus_testkit::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
use isthmus_testkit::kube::KubeApiServer;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::Client;
use std::path::Path;

const OTHER: &str = "shoot--other--shoot";

/// The etcd client Secrets the `Etcd` names (Gardener's secrets manager's), which gardenlet's
/// grant names.
fn secrets() -> [String; 2] {
    [ETCD_CA_BUNDLE_SECRET.into(), ETCD_CLIENT_SECRET.into()]
}
const SA: &str = "system:serviceaccount:isthmus-system:isthmus-controller";

/// Whether the controller's ServiceAccount may `verb` the `resource` (`group/resource`).
async fn may(c: &Client, verb: &str, resource: &str, ns: Option<&str>, name: Option<&str>) -> bool {
    let (group, resource) = resource.split_once('/').unwrap_or(("", resource));
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(SA.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:isthmus-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: ns.map(String::from),
                name: name.map(String::from),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(c.clone());
    let answer = api.create(&PostParams::default(), &review).await.unwrap();
    answer.status.unwrap().allowed
}

/// Waits until the RBAC authorizer has seen the grant in `ns` (it reads Roles and
/// RoleBindings through informers: a grant just applied takes a moment).
async fn granted(c: &Client, ns: &'static str) {
    isthmus_testkit::wait_until(
        "the grant in effect",
        std::time::Duration::from_secs(30),
        || async move { may(c, "get", "secrets", Some(ns), Some(ETCD_CLIENT_SECRET)).await },
    )
    .await;
}

#[tokio::test]
async fn the_controller_reads_no_other_shoots_secret_and_writes_only_where_granted() {
    let k = KubeApiServer::start().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    k.apply_yaml(&root.join("deploy/00-namespace.yaml")).await;
    k.apply_yaml(&root.join("deploy/controller.yaml")).await;
    for ns in [NS, OTHER] {
        k.apply_yaml_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
        ))
        .await;
    }
    // gardenlet's grant for the destination migration of NS; none in OTHER.
    let dst = spec(Role::Destination, Step::Expose);
    for doc in grant(&dst, NS, &Subject::default(), &secrets()) {
        k.apply_yaml_str(&serde_json::to_string(&doc).unwrap())
            .await;
    }
    let c = k.admin().await;
    let secret = Some(ETCD_CLIENT_SECRET);
    granted(&c, NS).await;

    // What the migration in NS needs.
    #[rustfmt::skip]
    let allowed = [
        ("get", "secrets", Some(NS), secret),
        ("get", "secrets", Some(NS), Some(ETCD_CA_BUNDLE_SECRET)),
        // Creates by name (a server-side apply that creates is authorised as `create` of
        // that name).
        ("create", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("isthmus-etcd-main-0")),
        ("create", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("isthmus-vpn")),
        ("patch", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("isthmus-etcd-main-2")),
        ("delete", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("isthmus-vpn")),
        ("create", "druid.gardener.cloud/etcds", Some(NS), Some("etcd-main")),
        ("patch", "druid.gardener.cloud/etcds", Some(NS), Some("etcd-main")),
        ("delete", "druid.gardener.cloud/etcds", Some(NS), Some("etcd-main")),
        ("create", "events.k8s.io/events", Some(NS), None),
        // The resource manager's trigger, by name (a server-side apply that creates it is
        // authorised as `create` of that name).
        ("get", "services", Some(NS), Some("isthmus-etcd")),
        ("create", "services", Some(NS), Some("isthmus-etcd")),
        ("patch", "services", Some(NS), Some("isthmus-etcd")),
        ("delete", "services", Some(NS), Some("isthmus-etcd")),
        // Cluster-wide reads of what the controller watches, and its own resource.
        ("watch", "druid.gardener.cloud/etcds", None, None),
        ("list", "extensions.gardener.cloud/dnsrecords", None, None),
        ("patch", "isthmus.dev/etcdmigrations/status", Some(OTHER), Some("etcd-main")),
        ("get", "services", Some("isthmus-system"), Some("isthmus-proxy")),
    ];
    for (verb, resource, ns, name) in allowed {
        assert!(
            may(&c, verb, resource, ns, name).await,
            "{verb} {resource} {ns:?}/{name:?} must be allowed"
        );
    }

    // Nothing of another shoot, nothing beyond isthmus' own objects in NS.
    #[rustfmt::skip]
    let denied = [
        ("get", "secrets", Some(OTHER), secret),
        ("list", "secrets", None, None),
        ("list", "secrets", Some(NS), None),
        // Only the names the `Etcd` references: not the CA itself (its private key), not a
        // client certificate of an earlier rotation, not a Secret found by its labels.
        ("get", "secrets", Some(NS), Some("ca-etcd-4e1b9a07")),
        ("get", "secrets", Some(NS), Some("etcd-client-0d1e2f3a")),
        ("watch", "secrets", Some(NS), None),
        ("create", "extensions.gardener.cloud/dnsrecords", Some(OTHER), None),
        // Issue 47 point 6: no create of any other name (the shoot's own records, another
        // Etcd), nor an unnamed one.
        ("create", "extensions.gardener.cloud/dnsrecords", Some(NS), None),
        ("create", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("bar-external")),
        ("create", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("bar-internal")),
        ("create", "druid.gardener.cloud/etcds", Some(NS), None),
        ("create", "druid.gardener.cloud/etcds", Some(NS), Some("etcd-events")),
        ("patch", "extensions.gardener.cloud/dnsrecords", Some(OTHER), Some("isthmus-etcd-main-0")),
        ("patch", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("bar-external")),
        ("delete", "extensions.gardener.cloud/dnsrecords", Some(NS), Some("bar-internal")),
        ("patch", "druid.gardener.cloud/etcds", Some(OTHER), Some("etcd-main")),
        ("patch", "druid.gardener.cloud/etcds", Some(NS), Some("etcd-events")),
        ("delete", "druid.gardener.cloud/etcds", Some(OTHER), Some("etcd-main")),
        ("create", "events.k8s.io/events", Some(OTHER), None),
        ("get", "services", Some(NS), Some("isthmus-proxy")),
        ("get", "services", Some("isthmus-system"), Some("kube-dns")),
        ("create", "services", Some(NS), None),
        ("create", "services", Some(NS), Some("etcd-main-client")),
        ("patch", "services", Some(NS), Some("kube-apiserver")),
        ("delete", "services", Some(NS), Some("etcd-main-peer")),
        ("list", "services", Some(NS), None),
        ("create", "services", Some(OTHER), Some("isthmus-etcd")),
        ("delete", "services", Some(OTHER), Some("isthmus-etcd")),
    ];
    for (verb, resource, ns, name) in denied {
        assert!(
            !may(&c, verb, resource, ns, name).await,
            "{verb} {resource} {ns:?}/{name:?} must be denied"
        );
    }

    // The source's grant: its Etcd is gardenlet's; the controller never creates or deletes it.
    let src = spec(Role::Source, Step::Expose);
    for doc in grant(&src, OTHER, &Subject::default(), &secrets()) {
        k.apply_yaml_str(&serde_json::to_string(&doc).unwrap())
            .await;
    }
    granted(&c, OTHER).await;
    assert!(
        may(
            &c,
            "patch",
            "druid.gardener.cloud/etcds",
            Some(OTHER),
            Some("etcd-main")
        )
        .await
    );
    assert!(may(&c, "get", "secrets", Some(OTHER), secret).await);
    for verb in ["create", "delete"] {
        assert!(
            !may(
                &c,
                verb,
                "druid.gardener.cloud/etcds",
                Some(OTHER),
                Some("etcd-main")
            )
            .await,
            "{verb} the source Etcd"
        );
    }
    assert!(
        !may(
            &c,
            "patch",
            "extensions.gardener.cloud/dnsrecords",
            Some(OTHER),
            Some("isthmus-vpn")
        )
        .await,
        "the source has no VPN record"
    );
}

/// Without gardenlet's grant in its namespace the controller changes nothing there and says
/// why in the migration's status (it may always write that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_without_the_grant_is_reported_forbidden() {
    use isthmus_controller::crd::EtcdMigration;
    let seed = isthmus_seed_world::seed::Seed::start("seed-a", "203.0.113.7", OTHER).await;
    let _controller = seed.controller("controller-a-0", Default::default()).await;
    let api: Api<EtcdMigration> = Api::namespaced(seed.admin.clone(), OTHER);
    let mut s = spec(Role::Source, Step::Expose);
    s.dns.secret_ref.namespace = OTHER.into();
    api.create(&PostParams::default(), &EtcdMigration::new("etcd-main", s))
        .await
        .unwrap();
    isthmus_testkit::wait_until(
        "ObjectsApplied=False/Forbidden",
        std::time::Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                let s = api
                    .get("etcd-main")
                    .await
                    .unwrap()
                    .status
                    .unwrap_or_default();
                s.conditions.iter().any(|c| {
                    c.type_ == "ObjectsApplied"
                        && c.status == "False"
                        && c.reason == "Forbidden"
                        && c.message.contains("dnsrecords")
                })
            }
        },
    )
    .await;
    let records: Api<kube::api::DynamicObject> = Api::namespaced_with(
        seed.admin.clone(),
        OTHER,
        &isthmus_controller::gardener::dnsrecord_resource(),
    );
    assert!(records
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty());
}
