//! The commands of the Gardener harness module (`scripts/gardener-harness/`, Gardener
//! v1.149.3): built or found fresh by `scripts/build-gardener-harness.sh NAME` into
//! `<cache>/gardener-harness-v1.149.3/NAME`, run against an API server, their JSON answers
//! handed back. [`crate::gardener`] and [`crate::gardenlet`] wrap one command each.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use tokio::process::Command;

/// The Gardener the harness module is built from (`scripts/gardener-harness/go.mod`).
pub const GARDENER_VERSION: &str = "v1.149.3";

/// One answer of a harness command: its exit code (0 done, 1 the command's verdict: a Gardener
/// oracle or step said no, 2 any other error), its JSON document and its log (stderr).
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: i32,
    pub json: Value,
    pub log: String,
}

/// One command of the module: its name (a folder of the module) and the variable that
/// overrides its binary (the build script is then not run).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Harness {
    pub name: &'static str,
    pub env: &'static str,
}

impl Harness {
    /// The binary, built or found fresh by the build script once per process (the harness'
    /// source lives in this repository, so an edit must not leave a stale binary behind);
    /// panics with the script's output when it fails.
    pub fn binary(self) -> PathBuf {
        static BUILT: Mutex<BTreeMap<&str, PathBuf>> = Mutex::new(BTreeMap::new());
        let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = built.get(self.name) {
            return p.clone();
        }
        let bin = match std::env::var_os(self.env) {
            Some(p) => PathBuf::from(p),
            None => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../scripts/build-gardener-harness.sh");
                crate::tools::run_ok(std::process::Command::new(&script).arg(self.name));
                crate::cache::dir()
                    .join(format!("gardener-harness-{GARDENER_VERSION}"))
                    .join(self.name)
            }
        };
        built.insert(self.name, bin.clone());
        bin
    }

    /// `NAME COMMAND --kubeconfig K SCOPE ARGS...`, SCOPE the flag and value that say what the
    /// command is about (a namespace, a registration); panics unless stdout is JSON.
    pub async fn run(
        self,
        command: &str,
        kubeconfig: &Path,
        scope: [&str; 2],
        args: &[&str],
    ) -> Answer {
        let bin = self.binary();
        let out = Command::new(&bin)
            .arg(command)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(scope)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{} {command}: no JSON on stdout ({e}):\n{}\n{log}",
                self.name,
                String::from_utf8_lossy(&out.stdout)
            )
        });
        Answer {
            code: out.status.code().unwrap_or(-1),
            json,
            log,
        }
    }

    /// [`Harness::run`]; panics unless it exits 0. Its JSON document.
    pub async fn ok(
        self,
        command: &str,
        kubeconfig: &Path,
        scope: [&str; 2],
        args: &[&str],
    ) -> Value {
        let a = self.run(command, kubeconfig, scope, args).await;
        assert_eq!(
            a.code, 0,
            "{} {command} {args:?}: {:#}\n{}",
            self.name, a.json, a.log
        );
        a.json
    }
}
