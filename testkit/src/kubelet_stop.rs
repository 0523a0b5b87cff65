//! Stopping a process as kubelet stops a pod's container: SIGTERM, then SIGKILL once the grace
//! period is over (the lab's kube-apiservers, the seed world's etcd members).

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Stops `child` as kubelet would with `grace`; says which it took and how long.
pub async fn stop_like_kubelet(child: &mut Child, grace: Duration) -> std::io::Result<String> {
    let t0 = Instant::now();
    let out = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .output()?;
    if !out.status.success() && child.try_wait()?.is_none() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(std::io::Error::other(format!("kill -TERM: {why}")));
    }
    loop {
        match child.try_wait()? {
            Some(status) => {
                let took = t0.elapsed().as_secs_f64();
                return Ok(format!("SIGTERM, exited ({status}) after {took:.1} s"));
            }
            None if t0.elapsed() < grace => tokio::time::sleep(Duration::from_millis(50)).await,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                let g = grace.as_secs();
                return Ok(format!(
                    "SIGTERM, then SIGKILL after the {g} s grace period"
                ));
            }
        }
    }
}
