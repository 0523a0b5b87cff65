//! The two test tiers (README "Testing"): `./scripts/test.sh --fast` runs every test that needs
//! neither root nor a one-time build, `./scripts/test.sh` runs every test. Which tests belong to
//! the full tier alone is written once, as the `fast` profile's filter in
//! `.config/nextest.toml`; the helpers that need root or a one-time build call [`full_only`] or
//! [`needs_root`] first, so a test the filter forgot fails at once with this module's message
//! instead of deep inside `ip netns add` or a missing binary.

use std::os::unix::fs::MetadataExt;

/// The variable `scripts/test.sh --fast` sets (`ISTHMUS_TIER=fast`).
pub const VARIABLE: &str = "ISTHMUS_TIER";

/// Whether this process runs in the fast tier.
pub fn is_fast() -> bool {
    std::env::var_os(VARIABLE).is_some_and(|v| v == "fast")
}

/// The message for a full-tier test that runs in the fast tier, or `None` outside it.
pub fn refusal(what: &str) -> Option<String> {
    is_fast().then(|| {
        let binary = std::env::var("NEXTEST_BINARY_ID").unwrap_or_else(|_| "this test".into());
        format!(
            "{binary} needs {what}: it belongs to the full tier (`sudo ./scripts/test.sh`), not to \
             `--fast`; list it in the `fast` profile's default-filter in .config/nextest.toml"
        )
    })
}

/// Whether the process runs as root (the owner of `/proc/self` is the effective user).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Refuses (panics with [`refusal`]'s message) in the fast tier: for helpers that need a
/// one-time build (kube-apiserver, helm, Prometheus, the image).
pub fn full_only(what: &str) {
    if let Some(message) = refusal(what) {
        panic!("{message}");
    }
}

/// The message for a root test that cannot run here (fast tier, or not root), or `None`.
pub fn root_refusal(what: &str) -> Option<String> {
    refusal(&format!("root ({what})")).or_else(|| {
        (!is_root()).then(|| {
            format!("needs root ({what}): run the full tier as root, `sudo ./scripts/test.sh`")
        })
    })
}

/// Refuses in the fast tier and without root: for helpers that create network namespaces,
/// mount namespaces or the node.
pub fn needs_root(what: &str) {
    if let Some(message) = root_refusal(what) {
        panic!("{message}");
    }
}

/// Panics unless every command of `tools` is on `PATH`, saying `install` (how to get them)
/// for the first one missing: for tests that run system tools (openvpn, etcd, ip, curl).
pub fn needs_tools(tools: &[&str], install: &str) {
    for tool in tools {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(found, "{tool} is missing: {install}");
    }
}

#[cfg(test)]
mod tests {
    use super::VARIABLE;
    use std::process::Command;

    /// Run only as the child of the test below.
    #[test]
    #[ignore = "the child of a_root_helper_refuses_in_the_fast_tier"]
    fn child_makes_a_namespace() {
        crate::Netns::new("tier").unwrap();
    }

    #[test]
    fn a_root_helper_refuses_in_the_fast_tier() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tier::tests::child_makes_a_namespace"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env(VARIABLE, "fast")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{text}");
        assert!(text.contains("1 failed"), "the child ran: {text}");
        assert!(
            text.contains("needs root (network namespaces): it belongs to the full tier"),
            "{text}"
        );
    }
}
