//! A thread's scheduling policy as the kernel reports it, for the tests of `--scheduling`.

/// The name and policy (`SCHED_OTHER` 0, `SCHED_BATCH` 3, …) in a `/proc/…/task/TID/stat`
/// line: its 2nd and 41st fields. The name may hold spaces and parentheses; the fields after
/// its last `)` do not.
pub fn name_and_policy(stat: &str) -> Option<(&str, i32)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    // The fields after the name start with the 3rd (the state).
    let policy = stat
        .get(close + 2..)?
        .split(' ')
        .nth(41 - 3)?
        .parse()
        .ok()?;
    Some((stat.get(open + 1..close)?, policy))
}

/// The calling thread's policy (`/proc/thread-self/stat`).
pub fn policy_of_this_thread() -> i32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    name_and_policy(&stat).expect("a stat line").1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        let line = format!("42 (a) b (c) {}", fields.join(" "));
        assert_eq!(name_and_policy(&line), Some(("a) b (c", 41)));
        assert_eq!(name_and_policy("42 (short) S 1"), None);
    }
}
