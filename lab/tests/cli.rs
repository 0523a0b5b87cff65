//! The `isthmus-lab` binary's flags, as a developer meets them (no root needed: nothing here
//! starts a lab).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_isthmus-lab");

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn demo_help_lists_the_flags_of_the_issue() {
    let (code, top, _) = run(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(top.contains("  demo "), "{top}");
    let (code, help, _) = run(&["demo", "--help"]);
    assert_eq!(code, Some(0));
    for flag in [
        "--rtt <DURATION>",
        "--scenario <NAME>",
        "--report <FILE>",
        "--picture <FILE>",
        "--isthmus <FILE>",
        "[default: 50ms]",
        "[default: migrate]",
    ] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
    }
    for scenario in ["migrate", "link-cut", "abort", "proxy-restart"] {
        assert!(help.contains(&format!("- {scenario}:")), "{help}");
    }
}

#[test]
fn bad_flags_are_refused_before_anything_runs() {
    let (code, _, err) = run(&["demo", "--scenario", "bogus"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("possible values: migrate, link-cut, abort, proxy-restart"),
        "{err}"
    );
    let (code, _, err) = run(&["demo", "--rtt", "50"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("expected a duration like 50us, 50ms or 2s"),
        "{err}"
    );
}

#[test]
fn a_missing_isthmus_binary_is_named_with_the_command_that_builds_it() {
    let dir = std::env::temp_dir().join(format!("isthmus-lab-cli-{}", std::process::id()));
    let (code, _, err) = run(&[
        "demo",
        "--isthmus",
        "/nonexistent/isthmus",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no runnable isthmus binary at /nonexistent/isthmus")
            && err.contains("cargo build --release -p isthmus"),
        "{err}"
    );
    // Refused before the scratch directory was touched.
    assert!(!dir.exists());
}
