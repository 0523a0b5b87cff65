//! Network namespaces as test hosts: a private loopback and a private `/etc/hosts`
//! (`/etc/netns/NAME/hosts`, which `ip netns exec` bind-mounts), so a test can give
//! DNS names to addresses without touching the machine's resolver. Needs root and iproute2.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A network namespace deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `isth-<label>-<pid>-<n>` with loopback up. Fails with a clear message when
    /// namespaces are unavailable (the fast tier, not root, no iproute2).
    pub fn new(label: &str) -> Result<Self, String> {
        if let Some(refused) = crate::tier::root_refusal("network namespaces") {
            return Err(refused);
        }
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "isth-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Self { name };
        run(Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]))?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes the namespace's `/etc/hosts` (seen by processes started with [`Netns::command`]).
    pub fn set_hosts(&self, entries: &[(&str, &str)]) {
        let dir = self.etc_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for (ip, name) in entries {
            text.push_str(&format!("{ip} {name}\n"));
        }
        std::fs::write(dir.join("hosts"), text).unwrap();
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Joins two namespaces with a veth pair, `a_ip` (CIDR, e.g. `10.213.7.1/30`) in `self`
    /// and `b_ip` in `other`. The addresses exist only inside the two test namespaces.
    pub fn link(&self, other: &Netns, a_ip: &str, b_ip: &str) -> Result<(), String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let (a, b) = (
            format!("vi{}a{n}", std::process::id() % 100_000),
            format!("vi{}b{n}", std::process::id() % 100_000),
        );
        run(Command::new("ip").args(["link", "add", &a, "type", "veth", "peer", "name", &b]))?;
        run(Command::new("ip").args(["link", "set", &a, "netns", &self.name]))?;
        run(Command::new("ip").args(["link", "set", &b, "netns", &other.name]))?;
        for (ns, dev, ip) in [(&self.name, &a, a_ip), (&other.name, &b, b_ip)] {
            run(Command::new("ip").args(["-n", ns, "addr", "add", ip, "dev", dev]))?;
            run(Command::new("ip").args(["-n", ns, "link", "set", dev, "up"]))?;
        }
        Ok(())
    }

    fn etc_dir(&self) -> PathBuf {
        PathBuf::from("/etc/netns").join(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::fs::remove_dir_all(self.etc_dir());
    }
}

fn run(c: &mut Command) -> Result<(), String> {
    let out = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{c:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
