//! kube-router takes its load-balancer lease back (`scripts/cluster/kube-router.sh`): with its
//! seed's kube-apiserver frozen (SIGSTOP) past kube-router's 10 s renewal deadline, as a
//! kube-apiserver starved at CI's load ~49 made it miss one, twice, kube-router loses the lease.
//! Alone it then never leads again and no LoadBalancer Service gets an address (checked by hand
//! on this machine: one stayed `<pending>` for 45 s with the lease's holder empty); under the
//! script it is restarted, and a Service made after the thaw gets one.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::link::poll;
use super::text;

/// `scripts/cluster.sh --seed SEED kubectl ARGS…`; its stdout, or why it failed.
fn kubectl(seed: &str, args: &[&str]) -> Result<String, String> {
    let out = super::seed(seed, &[&["kubectl"], args].concat());
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

fn signal(sig: &str, pid: &str) {
    let out = Command::new("kill")
        .args([sig, pid])
        .output()
        .expect("kill");
    assert!(
        out.status.success(),
        "kill {sig} {pid}: {}",
        text(&out.stderr)
    );
}

/// Thaws the process when dropped, also after a failed assertion.
struct Frozen(String);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

fn pid(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|p| p.trim().to_string())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Freezes seed SEED's kube-apiserver until kube-router fails to renew its lease, thaws it,
/// and checks that kube-router was restarted and a LoadBalancer Service made afterwards gets an
/// address.
pub fn kube_router_takes_its_lease_back(seed: &str) {
    let state = super::node::Node::seed(seed.chars().next().unwrap_or('a')).state_dir();
    let pids = state.join("pids");
    let log = state.join("logs/kube-router.log");
    let before = pid(&pids.join("kube-router.process")).unwrap_or_else(|e| panic!("{e}"));
    let api = pid(&pids.join("kube-apiserver")).unwrap_or_else(|e| panic!("{e}"));
    let seen = std::fs::read_to_string(&log).map(|l| l.len()).unwrap_or(0);

    let t0 = Instant::now();
    signal("-STOP", &api);
    let frozen = Frozen(api);
    poll("kube-router's failed renewal", 60, || {
        let l = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
        if l.get(seen..)
            .unwrap_or("")
            .contains("failed to renew lease")
        {
            Ok(())
        } else {
            Err("no \"failed to renew lease\" in its log yet".into())
        }
    });
    let lost = t0.elapsed();
    drop(frozen);

    let after = poll("kube-router restarted after its lost lease", 60, || {
        let p = pid(&pids.join("kube-router.process"))?;
        if p != before && Path::new("/proc").join(&p).exists() {
            Ok(p)
        } else {
            Err(format!("the pidfile names {p}"))
        }
    });

    kubectl(
        seed,
        &[
            "-n",
            "kube-system",
            "expose",
            "deployment/coredns",
            "--name",
            "lease-probe",
            "--type",
            "LoadBalancer",
            "--port",
            "8081",
            "--target-port",
            "8080",
        ],
    )
    .expect("the probe Service");
    let ip = poll(
        "an address for a LoadBalancer Service after the lost lease",
        60,
        || {
            let ip = kubectl(
                seed,
                &[
                    "-n",
                    "kube-system",
                    "get",
                    "svc/lease-probe",
                    "-o",
                    "jsonpath={.status.loadBalancer.ingress[0].ip}",
                ],
            )?;
            if ip.is_empty() {
                Err("<pending>".into())
            } else {
                Ok(ip)
            }
        },
    );
    kubectl(seed, &["-n", "kube-system", "delete", "svc/lease-probe"]).expect("delete the probe");
    println!(
        "figure: seed {seed}'s kube-apiserver frozen: kube-router's renewal failed after \
         {lost:.1?}, it was restarted (pid {before} -> {after}), a LoadBalancer Service made \
         then got {ip}; {:.1?} from the freeze",
        t0.elapsed()
    );
}
