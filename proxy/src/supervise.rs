//! What a panic does: a task or thread the proxy cannot run without (an accept loop, a
//! splicer, the admin endpoint) that panics **aborts the process**. Left alone, a dead splicer would keep
//! its connections open and unserved while its accept loop kept handing it new ones, and a
//! dead accept loop would leave the kernel accepting into a backlog nobody reads. Aborting
//! closes every socket at once: clients see resets and reconnect, the load balancer's health
//! check and the kubelet's liveness probe take the pod out and restart it.
//!
//! A panic inside one connection's intake task ends that task only: its socket is dropped
//! (closed), the rest of the process is unaffected.

use std::future::Future;
use tokio::runtime::Handle;

/// Spawns `task` on `runtime`; if it panics, logs `what` and aborts the process.
pub fn spawn_critical<F>(runtime: &Handle, what: &'static str, task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = runtime.spawn(task);
    runtime.spawn(async move {
        if let Err(e) = handle.await {
            if e.is_panic() {
                tracing::error!(
                    task = what,
                    "a critical task panicked: aborting the process"
                );
                std::process::abort();
            }
        }
    });
}

/// Runs `body` (a thread the proxy cannot run without); if it panics, logs `what` and aborts
/// the process.
pub fn abort_on_panic(what: &'static str, body: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_err() {
        tracing::error!(
            thread = what,
            "a critical thread panicked: aborting the process"
        );
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Re-runs this test in a child process whose critical task panics: the child must die
    /// of SIGABRT instead of living on.
    #[test]
    fn a_panicking_critical_task_aborts_the_process() {
        if std::env::var_os("ISTHMUS_TEST_PANIC_CHILD").is_some() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                spawn_critical(&Handle::current(), "test", async { panic!("boom") });
                // Only the abort ends this.
                std::future::pending::<()>().await;
            });
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new(exe)
            .args([
                "--exact",
                "supervise::tests::a_panicking_critical_task_aborts_the_process",
                "--test-threads=1",
            ])
            .env("ISTHMUS_TEST_PANIC_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
    }
}
