//! A process's resident memory, as the kernel reports it (`VmRSS` in `/proc/PID/status`).

/// The resident memory of process `pid` in KiB; `None` when it is gone or reports none.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_resident_memory() {
        assert!(super::rss_kib(std::process::id()).is_some_and(|k| k > 0));
    }
}
