//! The controller for the dashboard's controller panels: the real `isthmus controller`
//! process against a real kube-apiserver with the pinned upstream CRDs and deploy/'s
//! `EtcdMigration` CRD, holding its Lease, with two migrations: one it works on (the source
//! example beside its `Etcd`: reconciliations) and one it refuses (a `vpn.target` in another
//! namespace, which no CRD rule can see: a `spec_invalid` failure).

use isthmus_testkit::kube::{minimal_etcd, KubeApiServer};
use isthmus_testkit::{Logged, Scratch};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub struct Controller {
    pub process: Logged,
    pub metrics: SocketAddr,
    _api: KubeApiServer,
    _dir: Scratch,
}

fn workspace(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The source example moved to `namespace`.
fn source_migration(namespace: &str) -> String {
    std::fs::read_to_string(workspace("deploy/examples/etcdmigration-source.yaml"))
        .unwrap()
        .replace("shoot--foo--bar", namespace)
}

/// The destination example moved to `namespace`, its VPN aimed at a Service of another one.
fn refused_migration(namespace: &str) -> String {
    std::fs::read_to_string(workspace("deploy/examples/etcdmigration-destination.yaml"))
        .unwrap()
        .replace(
            "vpn-seed-server.shoot--foo--bar.svc",
            "kube-apiserver.garden.svc",
        )
        .replace("shoot--foo--bar", namespace)
}

impl Controller {
    pub async fn start() -> Controller {
        let dir = Scratch::new("monitoring-controller");
        let api = KubeApiServer::start().await;
        for crd in KubeApiServer::upstream_crd_paths() {
            api.apply_yaml(&crd).await;
        }
        api.apply_yaml(&workspace("deploy/crd-etcdmigration.yaml"))
            .await;
        api.apply_yaml(&workspace("deploy/00-namespace.yaml")).await;
        for ns in ["shoot--a--one", "shoot--b--two"] {
            api.apply_yaml_str(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{ name: {ns} }}\n"
            ))
            .await;
        }
        let etcd = minimal_etcd("etcd-main", "shoot--a--one", 3);
        api.apply_yaml_str(&serde_json::to_string(&etcd).unwrap())
            .await;
        api.apply_yaml_str(&source_migration("shoot--a--one")).await;
        api.apply_yaml_str(&refused_migration("shoot--b--two"))
            .await;

        let mut cmd = Command::new(env!("CARGO_BIN_EXE_isthmus"));
        cmd.args(["--log-format", "json", "controller", "--kubeconfig"])
            .arg(api.admin_kubeconfig())
            .args([
                "--metrics-address",
                "127.0.0.1:0",
                "--identity",
                "monitoring",
                "--lease-seconds",
                "6",
            ]);
        let mut process = Logged::spawn(cmd);
        let metrics = process
            .field("metrics", Duration::from_secs(60))
            .await
            .parse()
            .unwrap();
        Controller {
            process,
            metrics,
            _api: api,
            _dir: dir,
        }
    }
}
