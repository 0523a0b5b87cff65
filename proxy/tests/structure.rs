//! The shape of the crate: no import cycle between the modules of `proxy/src` (each step of a
//! connection's path depends only on the steps and parts below it), and `unsafe` code in one
//! module of the whole workspace, `proxy/src/sys.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src` belongs to (`splice/flow.rs` → `splice`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The code of a file without its unit tests and comments.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    body.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `crate::x` → `x` for every path into the crate (in `use` lines and inline).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            refs.insert(name);
        }
    }
    refs
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let module = module_of(&src, &file);
        let refs = crate_refs(&code(&std::fs::read_to_string(&file).unwrap()));
        let deps = graph.entry(module.clone()).or_default();
        deps.extend(refs.into_iter().filter(|r| *r != module));
    }
    graph
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_cycle_between_modules() {
    let graph = graph();
    assert!(graph.contains_key("conn") && graph.contains_key("splice"));
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("conn".into()).or_default().insert("splice".into());
    g.entry("splice".into())
        .or_default()
        .insert("sources".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("sources".into()).or_default().insert("conn".into());
    assert_eq!(
        find_cycle(&g).unwrap(),
        ["conn", "splice", "sources", "conn"]
    );
    assert_eq!(
        crate_refs("use crate::a::{b, c};\nlet x = crate::d::e();"),
        BTreeSet::from(["a".to_owned(), "d".to_owned()])
    );
}

#[test]
fn unsafe_code_lives_in_sys_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(root, &mut files);
    assert!(files.len() > 50, "walked {} files", files.len());
    let mut with_unsafe = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        // Spelt apart so that this file does not match itself.
        let kw = "unsafe";
        let hits = [" {", " fn", " impl"]
            .iter()
            .any(|k| code.contains(&format!("{kw}{k}")));
        if hits || code.contains(&format!("allow({kw}_code)")) {
            with_unsafe.push(file.strip_prefix(root).unwrap().display().to_string());
        }
    }
    assert_eq!(with_unsafe, ["proxy/src/sys.rs"]);
}
