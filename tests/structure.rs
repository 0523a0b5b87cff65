//! The shape of the workspace: no import circle between the files of any crate (each file
//! depends only on files below it; a parent module declaring or re-exporting its children does
//! not count, and a path through a re-export counts as a path to the module that defines the
//! item), and `unsafe` code in one module of the whole workspace, `proxy/src/sys.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;
type Graph = BTreeMap<String, BTreeSet<String>>;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

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

/// The `src/` folders of every member of the workspace (`.` is the `isthmus` binary).
fn crate_sources() -> Vec<PathBuf> {
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = cargo.split("members = [").nth(1).unwrap();
    let members = &members[..members.find(']').unwrap()];
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root().join(m).join("src"))
        .collect()
}

/// The module a file of `src` is (`plan/steps.rs` → `[plan, steps]`, `plan/mod.rs` → `[plan]`,
/// `lib.rs` → `[]`).
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Module = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without its unit tests and comments.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    body.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path of a `use` tree, braces expanded (`a::{b, c::d}` → `a::b`, `a::c::d`; `self` in
/// braces is the prefix itself).
fn expand_use(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let mut named = Vec::new();
    expand_use_named(prefix, tree, &mut named);
    out.extend(named.into_iter().map(|(_, path)| path));
}

/// [`expand_use`] with the name each path is known by in the importing module (its last
/// segment, or the `as` alias).
fn expand_use_named(prefix: &str, tree: &str, out: &mut Vec<(String, String)>) {
    let tree = tree.trim();
    let join = |p: &str, s: &str| {
        if p.is_empty() {
            s.to_owned()
        } else if s == "self" {
            p.to_owned()
        } else {
            format!("{p}::{s}")
        }
    };
    let last = |path: &str| path.rsplit("::").next().unwrap_or(path).to_owned();
    match tree.find('{') {
        None => {
            let mut parts = tree.split(" as ");
            let plain = parts.next().unwrap_or(tree).trim();
            let alias = parts.next().map(|a| a.trim().to_owned());
            let plain = plain.trim_end_matches("::*").trim_end_matches('*');
            let path = if !plain.is_empty() {
                join(prefix, plain.trim_end_matches("::"))
            } else if !prefix.is_empty() {
                prefix.to_owned()
            } else {
                return;
            };
            out.push((alias.unwrap_or_else(|| last(&path)), path));
        }
        Some(open) => {
            let head = tree[..open].trim().trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let prefix = if head.is_empty() {
                prefix.to_owned()
            } else {
                join(prefix, head)
            };
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand_use_named(&prefix, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand_use_named(&prefix, &inner[start..], out);
        }
    }
}

/// Every `use` statement's tree in `code`.
fn use_trees(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("use ") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(is_ident) {
            continue;
        }
        let rest = &code[at + 4..];
        if let Some(end) = rest.find(';') {
            out.push(&rest[..end]);
        }
    }
    out
}

/// Paths into the crate: every `use` path, and every inline `crate::`/`super::`/`self::` path.
fn paths(code: &str) -> BTreeSet<String> {
    let mut out = Vec::new();
    for tree in use_trees(code) {
        expand_use("", tree, &mut out);
    }
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if code[..at].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| is_ident(*c) || *c == ':')
                .collect();
            out.push(path.trim_end_matches(':').to_owned());
        }
    }
    out.into_iter().collect()
}

/// The module a path names, relative to `here` (the file's own module): `crate::a::b`,
/// `super::a`, `self::a`. Paths into other crates give `None`.
fn absolute(here: &Module, path: &str) -> Option<Module> {
    let mut segs = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut base: Module = match *segs.peek()? {
        "crate" => {
            segs.next();
            Vec::new()
        }
        "self" => {
            segs.next();
            here.clone()
        }
        "super" => {
            let mut b = here.clone();
            while segs.peek() == Some(&"super") {
                segs.next();
                b.pop();
            }
            b
        }
        _ => return None,
    };
    base.extend(segs.map(str::to_owned));
    Some(base)
}

/// The names each file imports (`use`, `pub use`), by the name they are known by there, as
/// absolute paths: `lib.rs`'s `pub use listener::KeepaliveConfig` gives
/// `[] → {KeepaliveConfig: [listener, KeepaliveConfig]}`. A path may start at a child module
/// of the importing file (`use listener::X` in `lib.rs`).
type Exports = BTreeMap<Module, BTreeMap<String, Module>>;

fn exports(files: &[(Module, String)], is_module: impl Fn(&Module) -> bool) -> Exports {
    let mut out = Exports::new();
    for (here, text) in files {
        let names = out.entry(here.clone()).or_default();
        for tree in use_trees(text) {
            let mut named = Vec::new();
            expand_use_named("", tree, &mut named);
            for (name, path) in named {
                let target = absolute(here, &path).or_else(|| {
                    let mut child = here.clone();
                    child.extend(path.split("::").map(str::to_owned));
                    is_module(&child[..here.len() + 1].to_vec()).then_some(child)
                });
                if let Some(target) = target {
                    names.insert(name, target);
                }
            }
        }
    }
    out
}

/// The file that defines what `path` (absolute) names: the longest module prefix that is a
/// file, unless that file only imports the next segment, which is then followed to where it
/// comes from (re-exports of re-exports too).
fn resolve(mut path: Module, exports: &Exports, is_module: impl Fn(&Module) -> bool) -> Module {
    for _ in 0..32 {
        let mut file = path.clone();
        while !file.is_empty() && !is_module(&file) {
            file.pop();
        }
        let next = path.get(file.len());
        let Some(target) = next.and_then(|n| exports.get(&file)?.get(n)) else {
            return file;
        };
        let mut followed = target.clone();
        followed.extend(path[file.len() + 1..].iter().cloned());
        if followed == path {
            return file;
        }
        path = followed;
    }
    panic!("re-exports in a loop at {path:?}")
}

/// File-level import graph of one crate: `a.rs → b.rs` when `a` names something defined in
/// `b` (the longest module prefix of the path that is a file, re-exports followed to the
/// defining file), except from an ancestor to its descendants (declarations and re-exports).
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let has_lib = src.join("lib.rs").is_file();
    let files: Vec<(Module, PathBuf)> = files
        .into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .filter(|f| !(has_lib && f == &src.join("main.rs")))
        .map(|f| (module_of(src, &f), f))
        .collect();
    let by_module: BTreeMap<&Module, String> = files
        .iter()
        .map(|(m, f)| (m, f.strip_prefix(src).unwrap().display().to_string()))
        .collect();
    let texts: Vec<(Module, String)> = files
        .iter()
        .map(|(m, f)| (m.clone(), code(&std::fs::read_to_string(f).unwrap())))
        .collect();
    let is_module = |m: &Module| by_module.contains_key(m);
    let exports = exports(&texts, is_module);
    let mut graph = Graph::new();
    for (here, text) in &texts {
        let name = by_module[here].clone();
        let deps = graph.entry(name.clone()).or_default();
        for path in paths(text) {
            let Some(target) = absolute(here, &path) else {
                continue;
            };
            let target = resolve(target, &exports, is_module);
            let descendant = target.len() > here.len() && target.starts_with(here);
            if &target != here && !descendant {
                if let Some(t) = by_module.get(&target) {
                    deps.insert(t.clone());
                }
            }
        }
    }
    graph
}

/// The circles of a graph: its strongly connected components of more than one file (Tarjan).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(w: &mut Walk<'g>, node: &'g str) {
        let i = w.index.len();
        w.index.insert(node, i);
        w.low.insert(node, i);
        w.stack.push(node);
        for next in w.graph.get(node).into_iter().flatten() {
            let next = next.as_str();
            if !w.index.contains_key(next) {
                visit(w, next);
                let l = w.low[node].min(w.low[next]);
                w.low.insert(node, l);
            } else if w.stack.contains(&next) {
                let l = w.low[node].min(w.index[next]);
                w.low.insert(node, l);
            }
        }
        if w.low[node] == w.index[node] {
            let at = w.stack.iter().rposition(|n| *n == node).unwrap();
            let scc: Vec<String> = w.stack.drain(at..).map(str::to_owned).collect();
            if scc.len() > 1 {
                w.out.push(scc);
            }
        }
    }
    let mut w = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for node in graph.keys() {
        if !w.index.contains_key(node.as_str()) {
            visit(&mut w, node);
        }
    }
    for c in &mut w.out {
        c.sort();
    }
    w.out
}

#[test]
fn no_import_circle_in_any_crate() {
    let sources = crate_sources();
    assert!(sources.len() >= 8, "{sources:?}");
    let mut found = Vec::new();
    for src in &sources {
        let g = graph(src);
        assert!(!g.is_empty(), "{} has no files", src.display());
        let krate = src.parent().unwrap().strip_prefix(root()).unwrap();
        for circle in circles(&g) {
            found.push(format!("{}: {}", krate.display(), circle.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "import circles (files that import each other, directly or through the others):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_graph_sees_circles_through_use_trees_and_inline_paths() {
    let mut out = Vec::new();
    expand_use(
        "",
        "crate::plan::{roles::{a, b as c}, steps, self}",
        &mut out,
    );
    assert_eq!(
        out,
        [
            "crate::plan::roles::a",
            "crate::plan::roles::b",
            "crate::plan::steps",
            "crate::plan"
        ]
    );
    let found = paths("use super::x::*;\nfn f() { crate::y::z(); self::w::v }");
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["crate::y::z", "self::w::v", "super::x"]
    );
    let here: Module = vec!["plan".into(), "steps".into()];
    assert_eq!(
        absolute(&here, "super::roles::Ctx"),
        Some(vec!["plan".into(), "roles".into(), "Ctx".into()])
    );
    assert_eq!(absolute(&here, "std::fmt"), None);
    let mut g = Graph::new();
    g.entry("a.rs".into()).or_default().insert("b.rs".into());
    g.entry("b.rs".into()).or_default().insert("c.rs".into());
    g.entry("d.rs".into()).or_default().insert("a.rs".into());
    assert!(circles(&g).is_empty());
    g.entry("c.rs".into()).or_default().insert("a.rs".into());
    assert_eq!(circles(&g), [["a.rs", "b.rs", "c.rs"]]);
}

/// A crate whose two files import each other only through the crate root's re-exports (as
/// `config/src/{defaults,listener}.rs` did): the graph follows each re-export to the file that
/// defines the item, so the circle is seen; a re-export of a re-export too.
#[test]
fn the_graph_follows_re_exports_to_the_defining_file() {
    let dir = std::env::temp_dir().join(format!("isthmus-structure-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("outer")).unwrap();
    let write = |f: &str, t: &str| std::fs::write(src.join(f), t).unwrap();
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod outer;\npub use a::A;\npub use outer::{B as Bee, C};\n",
    );
    write("a.rs", "use crate::Bee;\npub struct A(Bee);\n");
    write(
        "b.rs",
        "pub struct B;\npub fn c() -> crate::A { todo!() }\n",
    );
    write(
        "outer/mod.rs",
        "mod c;\npub use crate::b::B;\npub use c::C;\n",
    );
    write("outer/c.rs", "pub struct C;\n");
    let g = graph(&src);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(g["a.rs"], BTreeSet::from(["b.rs".to_owned()]), "{g:?}");
    assert_eq!(g["b.rs"], BTreeSet::from(["a.rs".to_owned()]), "{g:?}");
    assert_eq!(circles(&g), [["a.rs", "b.rs"]]);
}

#[test]
fn unsafe_code_lives_in_sys_only() {
    let mut files = Vec::new();
    rust_files(root(), &mut files);
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
            with_unsafe.push(file.strip_prefix(root()).unwrap().display().to_string());
        }
    }
    assert_eq!(with_unsafe, ["proxy/src/sys.rs"]);
}
