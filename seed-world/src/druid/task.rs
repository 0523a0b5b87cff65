//! The stand-in running on its own beside a test, as etcd-druid runs in a seed: a pass every
//! 150 ms over one `Etcd`, its pods on a cluster it shares with the other seed's stand-in. And
//! the seam a test holds: whoever plays etcd-druid answers for the contract it saw kept.

use super::DruidStandIn;
use crate::etcd::Cluster;
use crate::journal::Log;
use isthmus_controller::gardener::etcd_resource;
use kube::api::{Api, DynamicObject};
use kube::Client;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// Whoever plays etcd-druid for a seed's `Etcd`: the stand-in here and in the lab; the real
/// etcd-druid where a node runs it (issue 44), whose implementation reads the same contract
/// from the API instead of starting anything.
pub trait EtcdDruid: Send + Sync + std::fmt::Debug {
    /// The breaches of the etcd-druid contract seen so far: a request for a generation
    /// already reconciled, a change etcd-druid#1426's CEL rules would refuse.
    fn violations(&self) -> Vec<String>;
}

/// [`DruidStandIn`] in a task of its own; stopped on drop.
#[derive(Debug)]
pub struct DruidTask {
    violations: Arc<Mutex<Vec<String>>>,
    generations: Arc<Mutex<Generations>>,
    task: JoinHandle<()>,
}

/// The generations the stand-in acted on, as of its last pass (a test's figures: what druid
/// did with a spec between two writes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Generations {
    /// Reconciled (handed to the StatefulSet), in order: [`DruidStandIn::reconciled`].
    pub reconciled: Vec<i64>,
    /// Rolled out (the members ran it), in order: [`DruidStandIn::rolled_out`].
    pub rolled_out: Vec<i64>,
}

impl Drop for DruidTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DruidTask {
    /// Starts the stand-in for the `Etcd` `etcd` in `namespace` of seed `label` (read and
    /// written as `admin`), its pods on `cluster`.
    pub fn spawn(
        admin: Client,
        namespace: &str,
        etcd: &str,
        label: &str,
        cluster: Arc<tokio::sync::Mutex<Cluster>>,
    ) -> Self {
        let api: Api<DynamicObject> = Api::namespaced_with(admin, namespace, &etcd_resource());
        let mut druid = DruidStandIn::new(etcd, label);
        let violations = Arc::new(Mutex::new(Vec::new()));
        let seen = violations.clone();
        let generations = Arc::new(Mutex::new(Generations::default()));
        let acted = generations.clone();
        let task = tokio::spawn(async move {
            loop {
                let pass = {
                    let mut c = cluster.lock().await;
                    druid.pass(&api, &mut c, &mut Log).await
                };
                *acted.lock().unwrap_or_else(|e| e.into_inner()) = Generations {
                    reconciled: druid.reconciled().to_vec(),
                    rolled_out: druid.rolled_out().to_vec(),
                };
                match pass {
                    Ok(p) => seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(p.violations),
                    Err(e) => eprintln!("etcd-druid stand-in: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
        Self {
            violations,
            generations,
            task,
        }
    }

    /// The generations it acted on so far.
    pub fn generations(&self) -> Generations {
        self.generations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl EtcdDruid for DruidTask {
    fn violations(&self) -> Vec<String> {
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
