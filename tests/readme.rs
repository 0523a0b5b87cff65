//! The READMEs against the real thing: the layout table lists every crate of the workspace,
//! "the two commands" are two, every `isthmus …` command they show is a real subcommand and
//! every subcommand is documented, every proxy metric is in the metrics table, and each
//! subcommand's `--help` says what its line in `isthmus --help` says and nothing meant for
//! the code's readers, and the README quotes no measured figure that BENCHMARKS.md lacks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_isthmus"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "isthmus {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// `(name, about)` of every subcommand in `isthmus --help`, `help` left out.
fn subcommands() -> Vec<(String, String)> {
    let text = help(&["--help"]);
    let list = text.split("Commands:\n").nth(1).unwrap();
    list.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (name, about) = l.trim().split_once(' ')?;
            Some((name.to_owned(), about.trim().to_owned()))
        })
        .filter(|(name, _)| name != "help")
        .collect()
}

#[test]
fn the_layout_table_lists_every_crate() {
    let cargo = read("Cargo.toml");
    let members = cargo.split("members = [").nth(1).unwrap();
    let members = &members[..members.find(']').unwrap()];
    let crates: BTreeSet<String> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty() && m != ".")
        .collect();
    assert!(crates.len() >= 7, "{crates:?}");
    let readme = read("README.md");
    let rows: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("/` |").map(|(f, _)| f.to_owned()))
        .collect();
    for c in &crates {
        assert!(rows.contains(c), "README.md's layout table lacks `{c}/`");
    }
    for r in &rows {
        assert!(
            root().join(r).is_dir(),
            "README.md lists `{r}/`, which does not exist"
        );
    }
}

/// Every name the layout table shows in backticks (`admin/`, `Cargo.toml`, ...).
fn layout_names() -> BTreeSet<String> {
    let readme = read("README.md");
    let section = readme.split("## Layout").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| "))
        .filter_map(|l| l.split(" | ").next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_owned))
        .map(|name| name.trim_end_matches('/').to_owned())
        .collect()
}

/// Nothing lands at the root unnoticed (nine Python wheels once did): every top-level entry of
/// the repository is named in the README's layout table.
#[test]
fn the_layout_table_names_every_root_entry() {
    let out = Command::new("git")
        .args(["ls-files"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "git ls-files failed: {out:?}");
    let tracked = String::from_utf8(out.stdout).unwrap();
    let roots: BTreeSet<&str> = tracked
        .lines()
        .map(|p| p.split('/').next().unwrap())
        .collect();
    assert!(roots.contains("Cargo.toml"), "{roots:?}");
    let named = layout_names();
    let missing: Vec<&&str> = roots.iter().filter(|r| !named.contains(**r)).collect();
    assert!(
        missing.is_empty(),
        "README.md's layout table does not name {missing:?}"
    );
}

#[test]
fn the_two_commands_are_two() {
    let readme = read("README.md");
    let section = readme.split("## The two commands").nth(1).unwrap();
    let block = section.split("```").nth(1).unwrap();
    let commands = block.lines().skip(1).filter(|l| !l.trim().is_empty());
    assert_eq!(commands.count(), 2);
}

#[test]
fn readme_commands_are_the_real_subcommands() {
    let real: BTreeSet<String> = subcommands().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        real,
        [
            "check-config",
            "controller",
            "proxy",
            "tunnel-agent",
            "tunnel-server"
        ]
        .map(String::from)
        .into()
    );
    let mut shown = BTreeSet::new();
    for file in [
        "README.md",
        "tunnel/README.md",
        "controller/README.md",
        "deploy/README.md",
    ] {
        let text = read(file);
        for (at, _) in text.match_indices("isthmus ") {
            // Only commands: at a line start or right after a backtick.
            let before = text[..at].chars().next_back();
            if !matches!(before, None | Some('\n') | Some('`')) {
                continue;
            }
            let word: String = text[at + "isthmus ".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if !word.is_empty() {
                assert!(
                    real.contains(&word),
                    "{file} shows `isthmus {word}`, not a subcommand"
                );
                shown.insert(word);
            }
        }
    }
    assert_eq!(shown, real, "every subcommand is documented in a README");
}

#[test]
fn subcommand_help_says_what_the_list_says() {
    let subs = subcommands();
    assert_eq!(subs.len(), 5);
    for (name, about) in subs {
        let text = help(&[&name, "--help"]);
        assert_eq!(text.lines().next().unwrap(), about, "isthmus {name} --help");
        for bad in ["Boxed", "//", "TODO", "FIXME"] {
            assert!(
                !text.contains(bad),
                "isthmus {name} --help prints an implementation comment ({bad}):\n{text}"
            );
        }
    }
}

/// Every metric name the proxy registers (`r.register("proxy_…"` under the `isthmus` prefix,
/// or a full `isthmus_proxy_…` name),
/// read from its source: an empty family is not encoded, so a scrape would miss most.
fn proxy_metric_names(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            proxy_metric_names(&path, out);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("register") {
            let rest = &text[at..];
            let Some(open) = rest.find('"') else { continue };
            if !rest[..open]
                .trim_start_matches(|c: char| c.is_alphanumeric() || c == '_')
                .trim()
                .starts_with('(')
            {
                continue;
            }
            let name: String = rest[open + 1..].chars().take_while(|c| *c != '"').collect();
            if name.starts_with("proxy_") {
                out.insert(format!("isthmus_{name}"));
            } else if name.starts_with("isthmus_proxy_") {
                out.insert(name);
            }
        }
    }
}

#[test]
fn the_metrics_table_lists_every_proxy_metric() {
    let strip = |n: &str| n.strip_suffix("_total").unwrap_or(n).to_owned();
    let mut real = BTreeSet::new();
    proxy_metric_names(&root().join("proxy/src"), &mut real);
    let real: BTreeSet<String> = real.iter().map(|n| strip(n)).collect();
    assert!(real.len() >= 15, "{real:?}");
    let readme = read("README.md");
    let documented: BTreeSet<String> = readme
        .lines()
        .filter(|l| l.starts_with("| `isthmus_proxy_"))
        .flat_map(|l| {
            let names = l.split(" | ").next().unwrap_or("");
            names
                .split(" / ")
                .map(|n| strip(n.trim_start_matches("| ").trim_matches('`')))
                .collect::<Vec<_>>()
        })
        .collect();
    let missing: Vec<_> = real.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&real).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's metrics table: missing {missing:?}, not a metric {stale:?}"
    );
}

/// The measured figure that ends at byte `end` of `text` (`0.24–0.28` before `×`, `35.7–38.7`
/// before ` µs`): digits, points and en-dash ranges, read backwards.
fn figure_before(text: &str, end: usize) -> &str {
    let start = text[..end]
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit() || matches!(c, '.' | '–' | ','))
        .last()
        .map_or(end, |(i, _)| i);
    &text[start..end]
}

/// README quotes only what BENCHMARKS.md holds: every ratio it gives (`0.24–0.28×`) and every
/// measured range in µs or MiB (`612–752 MiB`) is on the results page, and the idle memory per
/// 10,000 connections it sizes a seed with is the peers run of record's.
#[test]
fn the_readme_quotes_only_figures_of_the_results_page() {
    let readme = read("README.md");
    let results = read("BENCHMARKS.md");
    let mut quoted = Vec::new();
    for (at, _) in readme.match_indices('×') {
        quoted.push(format!("{}×", figure_before(&readme, at)));
    }
    for unit in [" µs", " MiB"] {
        for (at, _) in readme.match_indices(unit) {
            let figure = figure_before(&readme, at);
            if figure.contains('–') {
                quoted.push(format!("{figure}{unit}"));
            }
        }
    }
    let quoted: Vec<String> = quoted.into_iter().filter(|q| q.len() > 3).collect();
    assert!(quoted.len() >= 4, "{quoted:?}");
    let missing: Vec<&String> = quoted.iter().filter(|q| !results.contains(*q)).collect();
    assert!(
        missing.is_empty(),
        "README.md quotes {missing:?}, which BENCHMARKS.md does not hold"
    );

    let row = "| memory per 10k idle connections (MiB) | ";
    let idle = results
        .split(row)
        .nth(1)
        .expect("the peers table's idle memory row");
    let idle = idle.split(' ').next().unwrap();
    assert!(
        readme.contains(&format!("cost {idle} MiB of RSS per 10,000")),
        "README.md's sizing does not use the run of record's {idle} MiB per 10k idle connections"
    );
}
