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

    /// Re-runs the test `name` in a child process with `ISTHMUS_TEST_PANIC_CHILD` set and
    /// returns the signal that ended it.
    fn child_signal(name: &str) -> Option<i32> {
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new(exe)
            .args(["--exact", name, "--test-threads=1"])
            .env("ISTHMUS_TEST_PANIC_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        status.signal()
    }

    fn in_child() -> bool {
        std::env::var_os("ISTHMUS_TEST_PANIC_CHILD").is_some()
    }

    /// A child process whose critical task panics must die of SIGABRT instead of living on.
    #[test]
    fn a_panicking_critical_task_aborts_the_process() {
        if in_child() {
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
        let signal = child_signal("supervise::tests::a_panicking_critical_task_aborts_the_process");
        assert_eq!(signal, Some(libc::SIGABRT));
    }

    /// The same for a critical thread (a splicer's): the panic on that thread ends the whole
    /// process, while the main thread would otherwise wait forever.
    #[test]
    fn a_panicking_critical_thread_aborts_the_process() {
        if in_child() {
            let worker = std::thread::spawn(|| abort_on_panic("test", || panic!("boom")));
            // Without the abort the join returns and the child exits 0: the parent sees that.
            let _ = worker.join();
            return;
        }
        let signal =
            child_signal("supervise::tests::a_panicking_critical_thread_aborts_the_process");
        assert_eq!(signal, Some(libc::SIGABRT));
    }
}
