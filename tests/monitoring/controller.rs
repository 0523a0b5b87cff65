//! The controller for the dashboard's controller panels: the real `isthmus controller`
//! process against a real kube-apiserver with the pinned upstream CRDs and deploy/'s
//! `EtcdMigration` CRD, holding its Lease, with two migrations: one it works on (the source
//! example beside its `Etcd`: reconciliations) and one it refuses (a `vpn.target` in another
//! namespace, which no CRD rule can see: a `spec_invalid` failure).

use isthmus_testkit::kube::{minimal_etcd, KubeApiServer};
use isthmus_testkit::Scratch;
use serde_json::Value;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Controller {
    child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    pub metrics: SocketAddr,
    _api: KubeApiServer,
    _dir: Scratch,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

        let mut child = Command::new(env!("CARGO_BIN_EXE_isthmus"))
            .args(["--log-format", "json", "controller", "--kubeconfig"])
            .arg(api.admin_kubeconfig())
            .args([
                "--metrics-address",
                "127.0.0.1:0",
                "--identity",
                "monitoring",
                "--lease-seconds",
                "6",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = lines.clone();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for l in stderr.lines().map_while(Result::ok) {
                if let Some(a) = serde_json::from_str::<Value>(&l)
                    .ok()
                    .and_then(|v| v["fields"]["metrics"].as_str().map(str::to_owned))
                {
                    let _ = tx.send(a);
                }
                sink.lock().unwrap().push(l);
            }
        });
        let metrics = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => panic!(
                "no metrics address in the controller's log: {:?}",
                lines.lock().unwrap()
            ),
        };
        Controller {
            child,
            lines,
            metrics,
            _api: api,
            _dir: dir,
        }
    }
}
