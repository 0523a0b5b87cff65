//! What of the host a node of `scripts/cluster.sh` could change, for the checks that `down`
//! leaves the host as it was: the global sysctls kubelet sets, the seeds' network namespaces,
//! cgroups and mounts, the seeds' shared state directory (`target/cluster-host`), and the link
//! between seeds (`scripts/cluster.sh link`: its namespace, state directory and process).

use std::path::Path;
use std::process::Command;

/// The global sysctls kubelet sets (scripts/cluster/node.sh restores them).
const SYSCTLS: [&str; 6] = [
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
];

/// Whether a namespace or cgroup name is a seed's: `isthmus-node…` for seed a,
/// `isthmus-<b…j>` and `isthmus-<b…j>-ext` for the others (not the lab's `isth-…`).
fn is_seed_name(name: &str) -> bool {
    if name.starts_with("isthmus-node") {
        return true;
    }
    let Some(rest) = name.strip_prefix("isthmus-") else {
        return false;
    };
    let mut chars = rest.chars();
    matches!(chars.next(), Some('b'..='j')) && matches!(chars.as_str(), "" | "-ext")
}

/// The host's state as text: equal before `up` and after `down`.
pub fn host_state() -> String {
    let mut s = String::new();
    for k in SYSCTLS {
        let v = std::fs::read_to_string(format!("/proc/sys/{}", k.replace('.', "/"))).unwrap();
        s.push_str(&format!("{k}={}\n", v.trim()));
    }
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for l in String::from_utf8_lossy(&netns.stdout).lines() {
        let name = l.split_whitespace().next().unwrap_or("");
        if is_seed_name(name) || name == "isthmus-link" {
            s.push_str(&format!("netns {l}\n"));
        }
    }
    for d in std::fs::read_dir("/sys/fs/cgroup").unwrap() {
        let hierarchy = d.unwrap().path();
        let Ok(children) = std::fs::read_dir(&hierarchy) else {
            continue;
        };
        for c in children.flatten() {
            if is_seed_name(&c.file_name().to_string_lossy()) {
                s.push_str(&format!("cgroup {}\n", c.path().display()));
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for l in mounts
        .lines()
        .filter(|l| l.contains("isthmus-node") || l.contains("target/cluster"))
    {
        s.push_str(&format!("mount {l}\n"));
    }
    for dir in ["target/cluster-host", "target/cluster-link"] {
        let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        if shared.exists() {
            s.push_str(&format!("dir {}\n", shared.display()));
        }
    }
    // The link's emulator outlives its namespace if nobody kills it.
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let args: Vec<_> = cmdline.split(|b| *b == 0).collect();
        if args.len() > 1 && args[0].ends_with(b"isthmus-lab") && args[1] == b"link" {
            s.push_str(&format!("process {}\n", String::from_utf8_lossy(&cmdline)));
        }
    }
    s
}

#[cfg(test)]
mod names {
    #[test]
    fn seeds_are_recognised_and_nothing_else() {
        for n in [
            "isthmus-node",
            "isthmus-node-ext",
            "isthmus-b",
            "isthmus-j-ext",
        ] {
            assert!(super::is_seed_name(n), "{n}");
        }
        for n in ["isthmus-bench", "isthmus-k", "isthmus-lab-a", "other"] {
            assert!(!super::is_seed_name(n), "{n}");
        }
    }
}
