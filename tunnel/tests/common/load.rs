//! Continuous webhook calls, every one recorded: the load that must not see a failure.

use super::{call, ConnectAddr, World, DEADLINE};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// One recorded webhook call of a [`Load`].
#[derive(Debug, Clone)]
pub struct Record {
    pub start: Instant,
    pub end: Instant,
    pub result: Result<(), String>,
}

/// Webhook calls issued continuously by `workers` tasks until stopped; every call recorded.
pub struct Load {
    stop: CancellationToken,
    pub records: Arc<Mutex<Vec<Record>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Each worker alternates a fast call and one whose webhook takes `slow_ms` (0: all fast),
    /// so that some streams are always open when a session drains.
    pub fn start(
        world: &Arc<World>,
        addr: &ConnectAddr,
        webhook: SocketAddr,
        workers: usize,
        slow_ms: u64,
    ) -> Self {
        let stop = CancellationToken::new();
        let records = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..workers)
            .map(|w| {
                let (world, addr, stop, records) =
                    (world.clone(), addr.clone(), stop.clone(), records.clone());
                tokio::spawn(async move {
                    let mut i = w;
                    while !stop.is_cancelled() {
                        let path = if slow_ms > 0 && i % 2 == 1 {
                            format!("/slow/{slow_ms}")
                        } else {
                            "/".into()
                        };
                        i += 1;
                        let start = Instant::now();
                        let result = call(&world, &addr, true, webhook, &path).await;
                        records.lock().unwrap().push(Record {
                            start,
                            end: Instant::now(),
                            result,
                        });
                    }
                })
            })
            .collect();
        Self {
            stop,
            records,
            tasks,
        }
    }

    pub fn ok(&self) -> usize {
        self.records
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.result.is_ok())
            .count()
    }

    /// Waits until `more` further calls have succeeded.
    pub async fn wait_for_more(&self, more: usize) {
        let target = self.ok() + more;
        isthmus_testkit::wait_until("more calls succeeded", DEADLINE, || {
            let done = self.ok() >= target;
            async move { done }
        })
        .await;
    }

    /// Stops issuing calls, waits for the ones in flight, returns every record.
    pub async fn stop(self) -> Vec<Record> {
        self.stop.cancel();
        for t in self.tasks {
            t.await.unwrap();
        }
        let r = self.records.lock().unwrap().clone();
        r
    }
}

pub fn failures(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| r.result.clone().err())
        .collect()
}
