//! Two seeds as network namespaces, each joined to the host namespace by a veth pair (the
//! shoot of [`crate::webhook`] is a third namespace built the same way).
//!
//! The seeds have no route to each other: everything between them crosses the userspace
//! [`crate::link`] emulator in the host namespace, so a cut there is a real partition. Each seed
//! has its own `/etc/netns/NAME/hosts` (its "DNS": what `ip netns exec` bind-mounts) and its own
//! isthmus proxy process (see [`crate::proxy`]).

use crate::error::{Error, Result};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

/// One seed: a network namespace, the host side and seed side of its veth pair.
#[derive(Debug)]
pub struct Seed {
    /// `source` or `destination`: used in DNS names and reports.
    pub label: String,
    netns: String,
    /// The host side of the veth (where the link emulator listens for this seed).
    pub host_ip: Ipv4Addr,
    /// The seed side of the veth (where the seed's proxy and etcd client ports are reached).
    pub seed_ip: Ipv4Addr,
    host_dev: String,
}

impl Seed {
    /// Creates the namespace and its veth pair; `subnet` picks a private /30.
    pub fn new(label: &str, subnet: (u8, u8)) -> Result<Self> {
        // One counter per process, plus the pid, keeps names unique when tests run side by side.
        static N: AtomicU8 = AtomicU8::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id() % 100_000;
        let netns = format!("isthlab-{label}-{pid}-{n}");
        ip(&["netns", "add", &netns]).map_err(|e| Error::Namespaces(e.to_string()))?;
        let host_dev = format!("il{pid}h{n}");
        let seed_dev = format!("il{pid}s{n}");
        let host_ip = Ipv4Addr::new(10, subnet.0, subnet.1, 1);
        let seed_ip = Ipv4Addr::new(10, subnet.0, subnet.1, 2);
        let seed = Self {
            label: label.to_string(),
            netns,
            host_ip,
            seed_ip,
            host_dev,
        };
        seed.plumb(&seed_dev)?;
        Ok(seed)
    }

    fn plumb(&self, seed_dev: &str) -> Result<()> {
        let ns = self.netns.as_str();
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&[
            "link",
            "add",
            &self.host_dev,
            "type",
            "veth",
            "peer",
            "name",
            seed_dev,
        ])?;
        ip(&["link", "set", seed_dev, "netns", ns])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", self.host_ip),
            "dev",
            &self.host_dev,
        ])?;
        ip(&["link", "set", &self.host_dev, "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/30", self.seed_ip),
            "dev",
            seed_dev,
        ])?;
        ip(&["-n", ns, "link", "set", seed_dev, "up"])?;
        Ok(())
    }

    /// Routes everything the namespace does not reach on its veth through the host end, so
    /// it reaches addresses of the host namespace other than its own veth peer (the shoot
    /// uses this to reach the relays in front of each seed's ingress).
    pub fn route_via_host(&self) -> Result<()> {
        ip(&[
            "-n",
            &self.netns,
            "route",
            "add",
            "default",
            "via",
            &self.host_ip.to_string(),
        ])
    }

    /// The namespace's name.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Replaces the seed's DNS: `(address, name)` pairs in its hosts file.
    pub fn set_hosts(&self, entries: &[(String, String)]) -> Result<()> {
        let dir = PathBuf::from("/etc/netns").join(&self.netns);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
        let mut text = String::from("127.0.0.1 localhost\n");
        for (addr, name) in entries {
            text.push_str(&format!("{addr} {name}\n"));
        }
        // Overwrite in place, never write-and-rename: `ip netns exec` bind-mounts this file's
        // inode over /etc/hosts, so members started earlier would keep seeing the old inode
        // and never resolve the names added later (a trap found here: the source leader could
        // not dial the joining members and fell back to a congested pipeline).
        let path = dir.join("hosts");
        std::fs::write(&path, text).map_err(|e| Error::io(path.display(), e))
    }

    /// Translates each `(pod address, pod port, local port)` to `127.0.0.1:<local port>` for
    /// connections made inside the seed (nftables DNAT on output): the members' pod addresses.
    pub fn pod_ports(&self, rules: &[(Ipv4Addr, u16, u16)]) -> Result<()> {
        let mut text = String::from(
            "table ip pods {\n chain output {\n  type nat hook output priority -100;\n",
        );
        for (ip, port, local) in rules {
            text.push_str(&format!(
                "  ip daddr {ip} tcp dport {port} dnat to 127.0.0.1:{local}\n"
            ));
        }
        text.push_str(" }\n}\n");
        let path = std::env::temp_dir().join(format!("isthmus-lab-{}.nft", self.netns));
        std::fs::write(&path, text).map_err(|e| Error::io(path.display(), e))?;
        let r = run(self.command("nft").arg("-f").arg(&path));
        let _ = std::fs::remove_file(&path);
        r
    }

    /// A command that runs `program` inside the seed.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns, program]);
        c
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        // Kill what still runs inside (etcd members the lab lost track of after a failure),
        // then delete the namespace, which deletes the veth pair with it.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.netns])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_dev])
            .output();
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(&self.netns));
    }
}

pub(crate) fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args))
}

pub(crate) fn run(c: &mut Command) -> Result<()> {
    let command = format!("{c:?}");
    let out = c.output().map_err(|e| Error::Command {
        command: command.clone(),
        detail: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}
