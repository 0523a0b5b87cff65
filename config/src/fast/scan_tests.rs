//! Differential tests of the scanner against yaml-rust2 (`load`): wherever `scan` returns a
//! tree, `load` must return the same one. (The reverse is not required: the scanner may give
//! up on anything.) Over the repository's YAML files, hand-written edge cases, generated
//! files of the real shapes, and many mutants of them.

use super::scan::scan;
use super::{load, Value};
use std::path::{Path, PathBuf};

/// `scan(text)`, after checking that yaml-rust2 agrees with it.
fn checked(text: &str) -> Option<Value<'_>> {
    let fast = scan(text)?;
    match load(text) {
        Some(slow) => assert_eq!(fast, slow, "scan and load disagree on:\n{text}"),
        None => panic!("scan accepted what load refuses: {fast:?}\n{text}"),
    }
    Some(fast)
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

fn repo_files() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut paths = Vec::new();
    yaml_files(&root.join("examples"), &mut paths);
    yaml_files(&root.join("deploy"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

#[test]
fn agrees_on_the_repository_files() {
    let files = repo_files();
    assert!(
        !files.is_empty(),
        "no YAML files found under examples/ and deploy/"
    );
    let mut scanned = 0;
    for (path, text) in &files {
        let got = checked(text);
        // Multi-document manifests and block scalars are outside the subset; every file that
        // is one document in the subset's constructs must be read by the scanner.
        let outside = text.contains("\n---") || text.contains(": |") || text.contains(": >");
        assert!(
            got.is_some() || outside,
            "{} is in the subset but the scanner gave up",
            path.display()
        );
        scanned += usize::from(got.is_some());
    }
    eprintln!("scanner read {scanned} of {} repository files", files.len());
    assert!(scanned >= 3);
    assert!(checked(include_str!("../../../examples/proxy.yaml")).is_some());
}

/// The peer benchmark's file (benches/peers/contender.rs `isthmus_yaml`).
fn contender_file(routes: usize) -> String {
    let mut s = String::from(
        "admin: { address: \"127.0.0.1:9901\" }\ndrain_delay: 0s\ndrain_timeout: 1s\n\
         # Reloads come from SIGHUP only, so one write triggers exactly one reload.\n\
         watch_interval: 0s\nlisteners:\n  - name: bench\n    address: \"127.0.0.1:8443\"\n    routes:\n",
    );
    for i in 0..routes {
        s += &format!("      - {{ sni: \"r{i}.reload.example.test\", upstream: up }}\n");
    }
    s + "upstreams:\n  - name: up\n    endpoints: [\"127.0.0.1:9000\"]\n"
}

/// The criterion benchmark's file (benches/config.rs `file`).
fn criterion_file(routes: usize) -> String {
    let mut s =
        String::from("listeners:\n  - name: peer\n    address: \"0.0.0.0:2380\"\n    routes:\n");
    for i in 0..routes {
        s += &format!(
            "      - {{ sni: \"etcd-main-{}.shoot--p{i}--c.seed-a.internal.example.com\", upstream: u{} }}\n",
            i % 3,
            i % 100
        );
    }
    s += "upstreams:\n";
    for u in 0..100 {
        s += &format!(
            "  - name: u{u}\n    endpoints: [\"etcd-main-{u}.etcd-main-peer.ns.svc.cluster.local:2380\"]\n"
        );
    }
    s
}

/// What the controller renders (controller/src/proxy_config.rs through serde_saphyr):
/// indentless sequences, compact mappings in entries, `[]`, quotes only where needed.
fn controller_file(listeners: usize, routes: usize) -> String {
    let mut s = String::from(
        "# Written by isthmus controller; edits are overwritten.\nadmin:\n  address: 0.0.0.0:9901\nlisteners:\n",
    );
    for l in 0..listeners {
        s += &format!(
            "- name: peer-{}\n  address: 0.0.0.0:{}\n",
            2380 + l,
            2380 + l
        );
        if l % 3 == 2 {
            s += "  routes: []\n";
            continue;
        }
        s += "  routes:\n";
        for r in 0..routes {
            s += &format!(
                "  - sni: etcd-main-{l}.shoot--p{r}--c.seed-a.internal.example.com\n    upstream: shoot--p{r}--c-etcd-main-{l}-peer\n"
            );
        }
        s += "  - sni: \"*.vpn.seed-a.internal.example.com\"\n    upstream: vpn\n";
    }
    s += "upstreams:\n";
    for r in 0..routes {
        s += &format!(
            "- name: shoot--p{r}--c-etcd-main-0-peer\n  endpoints:\n  - etcd-main-0.etcd-main-peer.shoot--p{r}--c.svc.cluster.local:2380\n  - 10.1.2.3:2379\n  - \"[::1]:2379\"\n"
        );
    }
    s + "- name: vpn\n  endpoints: []\n"
}

#[test]
fn reads_the_generated_files_of_real_shapes() {
    for text in [
        contender_file(2000),
        criterion_file(2000),
        controller_file(7, 300),
    ] {
        assert!(checked(&text).is_some(), "gave up on:\n{}", &text[..600]);
    }
}

/// Constructs of the subset: the scanner must read each, and agree with yaml-rust2.
const IN_SUBSET: &[&str] = &[
    "a: b\n",
    "a: b",
    "a: http://x:80/y\n",
    "a: b#c\n",
    "a: b # c\n",
    "a: b   # c\n",
    "a: 'it''s'\n",
    "a: ''''\n",
    "a: ''\n",
    "a: \"\"\n",
    "a:\n",
    "a:",
    "a:   \n",
    "a: # only a comment\n",
    "a: ~\n",
    "a: null\n",
    "a: -1\n",
    "a: -x\n",
    "a: 1.5e3\n",
    "a: [x, \"y\", 'z']\n",
    "a: {}\n",
    "a: []\n",
    "a: [ ]\n",
    "a: { }\n",
    "a: [a b, c  d ]\n",
    "a: {b: [1, [2, 3]], c: {d: e}}\n",
    "a: [{b: 1}, {c: 2}]\n",
    "a: { b: \"x\", c: 'y' } # comment\n",
    "a: [x] # comment\n",
    "a: b   \n",
    "a: \"b\"   \n",
    "a:    b\n",
    "a  : b\n",
    "\"a b\": c\n",
    "'a''b': c\n",
    "a.b/c-d_e: f\n",
    "-a: b\n",
    "a:b: c\n",
    "a: b:c\n",
    "a: b, c\n",
    "a: x[1]{2}\n",
    "a: it's\n",
    "a: b \"c\"\n",
    "a: b  c\n",
    "a: \"  b  c  \"\n",
    "a: 'b # c'\n",
    "a: \"b # c\"\n",
    "a: [\"b, c\", 'd]']\n",
    "a: {b: c#d}\n",
    "a: [b#c]\n",
    "a: [b:c]\n",
    "a: [http://x:80]\n",
    "a: [-1, -x]\n",
    "ключ: значение\n",
    "a: 日本語 テキスト\n",
    "a: \"ünï\"\n",
    "# comment\na: b\n",
    "a: b\n# comment\n",
    "a: b\n    # indented comment\nc: d\n",
    "\n\na: b\n\n\nc: d\n\n",
    "a:\n  b: c\n  d: e\nf: g\n",
    "a:\n    b: c\n",
    "a:\n  b:\n    c:\n      d: e\n",
    "a:\n# comment at column 0\n  b: c\n",
    "a:\n  - x\n  - y\n",
    "a:\n- x\n- y\nb: z\n",
    "a:\n- x: 1\n  y: 2\n- z: 3\nb: c\n",
    "a:\n  - x: 1\n    y: 2\n  - z\n",
    "a:\n  -   x: 1\n      y: 2\n",
    "a:\n  - x:\n    - 1\n    - 2\n    y: 3\n",
    "a:\n  - x:\n      b: 1\n",
    "a:\n  -\n  - x\n",
    "a:\n  - \n  - x\n",
    "a:\n  -\n    b: c\n",
    "a:\n  - - x\n    - y\n  - z\n",
    "a:\n  - { sni: \"r1.reload.example.test\", upstream: up }\n  - { sni: 'x', upstream: y }\n",
    "a:\n  - [1, 2]\n  - 'q'\n  - \"r\"\n  - plain text\n",
    "a:\n  - x # c\n  # c\n  - y\n",
    "a:\n  b: 1\nc:\n",
    "  a: b\n  c: d\n",
    "{}\n",
    "{a: b}\n",
    "# only a comment\n",
    "a: 'x'\nb: \"y\"\nc: z\n",
    "admin: { address: \"127.0.0.1:0\" }\n",
    "a: b\n\n\n",
    "a: b\u{a0}\n",
    "a: \u{a0}b\n",
    "a: [b\u{3000}, c]\n",
    "a: [b::c]\n",
    "a:\n- \u{a0}\n",
    "\u{a0}: b\n",
    "a:\n  - # c\n    b: 1\n",
    "a: # c\n- x\n",
    "a: [b-]\n",
    "a: [b - c]\n",
    "a: b -\n",
    "a: b -]\n",
];

/// Outside the subset: the scanner must give up (yaml-rust2 decides, or refuses).
const GIVES_UP: &[&str] = &[
    "a:\tb\n",
    "a: b\r\n",
    "a: b\0c\n",
    "---\na: b\n",
    "a: b\n...\n",
    "%YAML 1.2\n---\na: b\n",
    "a: &x b\n",
    "a: *x\n",
    "a: !!str b\n",
    "a: !t b\n",
    "a: |\n  x\n",
    "a: >\n  x\n",
    "? a\n: b\n",
    "a: b\n  c\n",
    "a: 'b\n  c'\n",
    "a: \"b\n  c\"\n",
    "a: [b,\n  c]\n",
    "a: {b: c,\n  d: e}\n",
    "a: \"b\\nc\"\n",
    "a: ?b\n",
    "a: :b\n",
    "a: @b\n",
    "a: `b\n",
    "a: %b\n",
    "a: |b\n",
    "a: >b\n",
    "a: -\n",
    "a: - b\n",
    "a: b: c\n",
    "a: b:\n",
    "a: [b, ]\n",
    "a: [b,,c]\n",
    "a: [b: c]\n",
    "a: {b}\n",
    "a: {b:c}\n",
    "a: {\"b\":c}\n",
    "a: {b: }\n",
    "a: [b]#c\n",
    "a: \"b\"#c\n",
    "a: \"b\" c\n",
    "a: [b] c\n",
    "a: [b]: c\n",
    "[a]: b\n",
    "{a: b}: c\n",
    "a: b\na: c\n",
    "a: {b: 1, b: 2}\n",
    "- a\n",
    "a\n",
    "'a'\n",
    "[a]\n",
    "a:\n  b\n",
    "a:\n  [b]\n",
    "a:\n  b: c\n d: e\n",
    "a:\n  b: c\n   d: e\n",
    "a:\n  - b\n  c: d\n",
    "a: b\n- c\n",
    "  a: b\nc: d\n",
    "a: \u{feff}b\n",
    "a: b\u{2028}c\n",
    "a: b\u{85}c\n",
    "a: [b:]\n",
    "a: [b:, c]\n",
    "a: {b: c:}\n",
    "a: {b:}\n",
    "a: [-]\n",
    "a: [-, b]\n",
    "a: [b, -]\n",
    "a: {b: -}\n",
    "a: [- b]\n",
    "a: [b -]\n",
    "a: [b  -, c]\n",
    "a: {b: c -}\n",
    "a: {b: c d -}\n",
];

#[test]
fn reads_every_construct_of_the_subset() {
    for text in IN_SUBSET {
        assert!(checked(text).is_some(), "gave up on {text:?}");
    }
}

#[test]
fn gives_up_outside_the_subset() {
    for text in GIVES_UP {
        assert!(scan(text).is_none(), "did not give up on {text:?}");
    }
}

#[test]
fn mirrors_the_limits_of_load() {
    // `load` refuses more than MAX_KEYS keys in one mapping; so must the scanner.
    let keys = |n: usize| (0..n).map(|i| format!("k{i}: v\n")).collect::<String>();
    assert!(checked(&keys(super::MAX_KEYS)).is_some());
    assert!(scan(&keys(super::MAX_KEYS + 1)).is_none());
    let flow = |n: usize| {
        let entries: Vec<String> = (0..n).map(|i| format!("k{i}: v")).collect();
        format!("a: {{{}}}\n", entries.join(", "))
    };
    assert!(checked(&flow(super::MAX_KEYS)).is_some());
    assert!(scan(&flow(super::MAX_KEYS + 1)).is_none());
    // A block key longer than yaml-rust2's 1024-character limit for implicit keys.
    let long = "k".repeat(1100);
    assert!(scan(&format!("{long}: v\n")).is_none());
    assert!(checked(&format!("a: {long}\n")).is_some());
    // Deep nesting is left to yaml-rust2 rather than recursed into.
    let deep = format!("a: {}{}\n", "[".repeat(100), "]".repeat(100));
    assert!(scan(&deep).is_none());
    assert!(checked(&format!("a: {}{}\n", "[".repeat(20), "]".repeat(20))).is_some());
}

use isthmus_testkit::Rng;

/// Characters a mutant inserts: YAML's indicators, whitespace and some plain text.
const ALPHABET: &[char] = &[
    ' ', ' ', ' ', ':', '-', '#', '{', '}', '[', ']', ',', '\'', '"', '\n', '\t', '&', '*', '!',
    '|', '>', '?', '%', '@', '\\', '~', '.', 'a', 'b', 'x', '1', '0', 'é',
];

/// Values a mutant puts after a `: ` or `- `: those of the edge cases, in and out of the
/// subset, and a few near misses of its rules.
fn tokens() -> Vec<&'static str> {
    let mut tokens: Vec<&str> = IN_SUBSET
        .iter()
        .chain(GIVES_UP)
        .filter_map(|t| t.strip_prefix("a: "))
        .map(|t| t.strip_suffix('\n').unwrap_or(t))
        .collect();
    tokens.extend([
        "--x",
        "-.5",
        "-",
        "- x",
        "x:",
        "x: y",
        ":x",
        "?x",
        "~",
        "",
        "'",
        "\"",
        "[",
        "{",
        "]",
        "}",
        "[x]]",
        "{x: y}}",
        "x #",
        "x#",
        "# x",
        "{x: [y, {z: w}]}",
        "'x' #c",
        "\"x\"#c",
    ]);
    tokens
}

/// One to three edits: delete, insert or duplicate characters, swap lines, re-indent a line,
/// replace a value by a token.
fn mutate(base: &str, tokens: &[&str], rng: &mut Rng) -> String {
    let mut chars: Vec<char> = base.chars().collect();
    for _ in 0..=rng.below(3) {
        let i = rng.below(chars.len() + 1);
        match rng.below(8) {
            7 => {
                let text: String = chars.iter().collect();
                let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
                let l = rng.below(lines.len());
                let cut = lines[l].rfind(": ").or_else(|| lines[l].find("- "));
                if let Some(cut) = cut {
                    lines[l].truncate(cut + 2);
                    lines[l].push_str(tokens[rng.below(tokens.len())]);
                }
                chars = lines.join("\n").chars().collect();
            }
            0 if i < chars.len() => {
                chars.remove(i);
            }
            1 | 2 => chars.insert(i, ALPHABET[rng.below(ALPHABET.len())]),
            3 if i < chars.len() => {
                let end = (i + 1 + rng.below(8)).min(chars.len());
                let span: Vec<char> = chars[i..end].to_vec();
                chars.splice(i..i, span);
            }
            4 | 5 => {
                let text: String = chars.iter().collect();
                let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
                let l = rng.below(lines.len());
                if rng.below(2) == 0 {
                    let m = rng.below(lines.len());
                    lines.swap(l, m);
                } else if rng.below(2) == 0 {
                    lines[l].insert_str(0, &" ".repeat(1 + rng.below(2)));
                } else {
                    let cut = lines[l].len() - lines[l].trim_start_matches(' ').len();
                    lines[l].drain(..cut.min(1 + rng.below(2)));
                }
                chars = lines.join("\n").chars().collect();
            }
            _ => {
                if i < chars.len() {
                    chars[i] = ALPHABET[rng.below(ALPHABET.len())];
                }
            }
        }
    }
    chars.into_iter().collect()
}

/// Bases for mutation: files of every shape the scanner is meant for, small enough that
/// each edit matters.
fn mutation_bases() -> Vec<String> {
    let mut bases: Vec<String> = repo_files()
        .into_iter()
        .filter(|(_, text)| scan(text).is_some())
        .map(|(_, text)| text)
        .collect();
    bases.push(contender_file(4));
    bases.push(criterion_file(3).replace("upstreams:\n", "upstreams: # three\n"));
    bases.push(controller_file(3, 2));
    bases.push(
        "a: 'it''s' # c\nb: \"x y\"\nc: [x, \"y\", 'z', [1, {d: e}]]\nd:\n- -1\n- ~\n-\n- { k: v }\n\
         e:\n  f: http://x:80/y\n  g: b#c\n  ключ: значение\nh: {}\ni: []\nj:\n"
            .to_owned(),
    );
    bases
}

#[test]
fn agrees_with_load_on_mutants() {
    let bases = mutation_bases();
    assert!(bases.len() >= 6, "{} bases", bases.len());
    let mutants = if cfg!(debug_assertions) {
        6_000
    } else {
        150_000
    };
    let tokens = tokens();
    let mut rng = Rng::new(0x2545_F491_4F6C_DD1D);
    let (mut agreed, mut gave_up_load_read, mut both_refused) = (0, 0, 0);
    for n in 0..mutants {
        let text = mutate(&bases[n % bases.len()], &tokens, &mut rng);
        match checked(&text) {
            Some(_) => agreed += 1,
            None if load(&text).is_some() => gave_up_load_read += 1,
            None => both_refused += 1,
        }
    }
    eprintln!(
        "{mutants} mutants: scanner read {agreed} (all equal to load), gave up on \
         {gave_up_load_read} that load read, both refused {both_refused}"
    );
    // Both outcomes must be exercised, or the test proves nothing.
    assert!(agreed > mutants / 5, "{agreed} of {mutants}");
    assert!(
        gave_up_load_read > mutants / 50,
        "{gave_up_load_read} of {mutants}"
    );
}

/// Texts made of random lines: random indentation, an entry start (`- `, `key: `, `- key:`,
/// ...) and a value token. Mostly invalid or outside the subset, but they reach indentation
/// layouts that edits of real files rarely do.
#[test]
fn agrees_with_load_on_random_lines() {
    const STARTS: &[&str] = &[
        "- ", "-", "a: ", "b:", "c: ", "- d: ", "- e:", "- - ", "\"f\": ", "'g': ", "# c", "",
    ];
    let tokens = tokens();
    let texts = if cfg!(debug_assertions) {
        20_000
    } else {
        300_000
    };
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let (mut read, mut total) = (0, 0);
    for _ in 0..texts {
        let mut text = String::new();
        for _ in 0..1 + rng.below(7) {
            text += &" ".repeat(rng.below(4) * 2 + rng.below(4) / 3);
            text += STARTS[rng.below(STARTS.len())];
            if rng.below(2) == 0 {
                text += tokens[rng.below(tokens.len())];
            }
            text.push('\n');
        }
        total += 1;
        read += usize::from(checked(&text).is_some());
    }
    eprintln!("{total} random texts: the scanner read {read} (all equal to load)");
    assert!(read > total / 20, "{read} of {total}");
}

/// Not a test: prints how long each tier takes on the peer benchmark's 10k-route file.
/// `cargo test -p isthmus-config --release --lib -- --ignored --nocapture scan_timing`
#[test]
#[ignore = "timing, run by hand in release"]
fn scan_timing() {
    use crate::ProxyConfig;
    use serde::Deserialize;
    use std::time::{Duration, Instant};
    let text = contender_file(10_000);
    let best = |f: &dyn Fn() -> bool| {
        (0..30)
            .map(|_| {
                let t = Instant::now();
                assert!(f());
                t.elapsed()
            })
            .min()
            .unwrap_or(Duration::ZERO)
    };
    let runs: [(&str, &dyn Fn() -> bool); 5] = [
        ("text -> tree, scan (hand-written)", &|| {
            scan(&text).is_some()
        }),
        ("text -> tree, load (yaml-rust2)", &|| load(&text).is_some()),
        ("text -> ProxyConfig, fast::parse (scan tier)", &|| {
            super::parse::<ProxyConfig>(&text).is_some()
        }),
        (
            "text -> ProxyConfig, load + serde (yaml-rust2 tier)",
            &|| load(&text).is_some_and(|v| ProxyConfig::deserialize(&v).is_ok()),
        ),
        ("parse_proxy (fast path + validation)", &|| {
            crate::parse_proxy("bench.yaml", &text).is_ok()
        }),
    ];
    for (name, f) in runs {
        let t = best(f);
        eprintln!(
            "{name}: {:.2} ms ({:.0} MB/s), best of 30, {} bytes",
            t.as_secs_f64() * 1e3,
            text.len() as f64 / 1e6 / t.as_secs_f64(),
            text.len()
        );
    }
}
