//! No module cycle inside any crate of the workspace (issue 35).
//!
//! The rule: the nodes are the files (modules) of one crate's `src/` (`lib.rs`, `main.rs` and
//! `mod.rs` stand for their folder; `src/bin/` is left out). Module M depends on module N when
//! M names an item of N through a `use` (nested braces expanded) or a `crate::`, `super::` or
//! `self::` path; a `use` of a child module by its bare name counts too. A re-export (`pub use`,
//! `pub(crate) use`, globs included) is an edge of the re-exporting module unless it re-exports
//! a descendant's item (a parent re-exporting its children is fine), and a module naming the
//! item through it gets its edge to the module that defines the item. An edge to one of the
//! module's own ancestors is allowed.
//! Comments, strings and char literals are removed before reading. Every strongly connected
//! component of more than one module is a cycle; the test names its modules and the edges inside.
//!
//! Cycles kept as known debts are listed in `KNOWN_CYCLES` (none now); any other, or any change
//! to one, fails.
//! `tests/module-cycles.sh` runs just this file.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The `src/` folders of every workspace crate, relative to the workspace root; all are checked.
const CRATE_SOURCES: &[&str] = &[
    "ucs/src",
    "uct/src",
    "ucp/src",
    "capi/src",
    "capi/uct/src",
    "capi/ucs/src",
    "capi/ucm/src",
    "perftest/src",
    "examples/src",
    "tests/src",
];

/// A module's path inside its crate: `["mm", "iface"]` for `mm/iface.rs`, `[]` for the root.
type ModPath = Vec<String>;

/// One crate's module graph: each module and the modules it depends on.
struct Graph {
    edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

/// One cycle: its modules (sorted) and the edges among them.
#[derive(Debug, Clone)]
struct Cycle {
    modules: Vec<String>,
    edges: Vec<(String, String)>,
}

/// The module path of a file given by its path relative to `src/` (`None` for `bin/` files).
fn module_of(rel: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if !matches!(stem, "lib" | "main" | "mod") {
        parts.push(stem.to_string());
    }
    if parts.first().map(String::as_str) == Some("bin") {
        return None;
    }
    Some(parts)
}

/// Every `.rs` file under `src`, as (module path, text).
fn read_crate(src: &Path) -> Vec<(ModPath, String)> {
    fn walk(dir: &Path, src: &Path, out: &mut Vec<(ModPath, String)>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).expect("file under src");
                if let Some(module) = module_of(rel) {
                    let text = fs::read_to_string(&path)
                        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                    out.push((module, text));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(src, src, &mut out);
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The text with comments (nested block comments too) replaced by a space and string, raw
/// string, byte string and char literals replaced by empty ones; lifetimes stay.
fn strip(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let prev_ident = |i: usize| i > 0 && is_ident(s[i - 1]);
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
            out.push(' ');
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if !prev_ident(i) && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            // A raw string: r"..", r#".."#, br"..".
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            while s.get(j) == Some(&'#') {
                j += 1;
            }
            s.get(j) == Some(&'"')
        } {
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while s[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= s.len() {
                    break;
                }
                if s[j] == '"' && (1..=hashes).all(|h| s.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < s.len() && s[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("''");
            } else if s.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("''");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Splits `s` at the commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The paths a use-tree names: `a::{b, c::{d as e, *}}` gives `a::b`, `a::c::d`, `a::c::*`.
fn expand_use(body: &str) -> Vec<Vec<String>> {
    fn segments(s: &str) -> Vec<String> {
        s.split("::")
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    }
    fn rec(prefix: &[String], s: &str, out: &mut Vec<Vec<String>>) {
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            if let (Some(open), true) = (part.find('{'), part.ends_with('}')) {
                let mut p = prefix.to_vec();
                p.extend(segments(&part[..open]));
                rec(&p, &part[open + 1..part.len() - 1], out);
            } else {
                let words: Vec<&str> = part.split_whitespace().collect();
                let path = match words.as_slice() {
                    [.., "as", _] => words[..words.len() - 2].join(" "),
                    _ => part.to_string(),
                };
                let mut p = prefix.to_vec();
                p.extend(segments(&path));
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    rec(&[], body, &mut out);
    out
}

/// `p` as an absolute module path seen from `module`, if it starts with `crate`, `super` or `self`.
fn absolute(module: &[String], p: &[String]) -> Option<Vec<String>> {
    match p.first()?.as_str() {
        "crate" => Some(p[1..].to_vec()),
        "super" => {
            let mut base = module.to_vec();
            let mut rest = p;
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend_from_slice(rest);
            Some(base)
        }
        "self" => {
            let mut base = module.to_vec();
            base.extend_from_slice(&p[1..]);
            Some(base)
        }
        _ => None,
    }
}

/// Each `use` statement of a stripped text: (re-exported: `pub` or `pub(..)` before it, body,
/// byte range of `use ..;`).
fn use_statements(t: &str) -> Vec<(bool, &str, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let b = t.as_bytes();
    let mut from = 0;
    while let Some(off) = t[from..].find("use") {
        let at = from + off;
        from = at + 3;
        let before_ok = at == 0 || !is_ident(t[..at].chars().next_back().unwrap_or(' '));
        let after_ok = b.get(at + 3).is_some_and(|c| c.is_ascii_whitespace());
        if !before_ok || !after_ok {
            continue;
        }
        let Some(end) = t[at..].find(';') else { break };
        let body = &t[at + 3..at + end];
        // `pub use` or `pub(crate) use`: look back over whitespace and one `(..)`.
        let mut head = t[..at].trim_end();
        if head.ends_with(')') {
            if let Some(open) = head.rfind('(') {
                head = head[..open].trim_end();
            }
        }
        let public = head.ends_with("pub")
            && !head[..head.len() - 3]
                .chars()
                .next_back()
                .is_some_and(is_ident);
        out.push((public, body, at..at + end + 1));
        from = at + end;
    }
    out
}

/// Each `crate::a::b`, `super::x`, `self::y` path of a stripped text (at least one segment
/// after the keyword), as its segments.
fn keyword_paths(t: &str) -> Vec<Vec<String>> {
    let s: Vec<char> = t.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if !is_ident(s[i]) {
            i += 1;
            continue;
        }
        // An identifier starts at i; read `ident(::ident)*`.
        let start = i;
        let mut segs: Vec<String> = Vec::new();
        let mut j = i;
        loop {
            let k = j;
            while j < s.len() && is_ident(s[j]) {
                j += 1;
            }
            if j == k {
                break;
            }
            segs.push(s[k..j].iter().collect());
            if s.get(j) == Some(&':')
                && s.get(j + 1) == Some(&':')
                && s.get(j + 2).is_some_and(|c| is_ident(*c))
            {
                j += 2;
            } else {
                break;
            }
        }
        i = j.max(start + 1);
        // Keyword paths may start a longer path (`x::crate` is not one); take the first
        // keyword segment's run, as a regex over the text would.
        if let Some(pos) = segs
            .iter()
            .position(|w| matches!(w.as_str(), "crate" | "super" | "self"))
        {
            if pos == 0 && segs.len() > 1 {
                out.push(segs);
            }
        }
    }
    out
}

/// Builds the module graph of one crate from its files' module paths and texts.
fn build_graph(files: &[(ModPath, String)]) -> Graph {
    let mods: BTreeSet<ModPath> = files.iter().map(|(m, _)| m.clone()).collect();
    // module -> re-exported name -> absolute path; globs are keyed `*N`.
    let mut reexports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut uses: BTreeMap<ModPath, Vec<Vec<String>>> = BTreeMap::new();
    for (m, text) in files {
        let t = strip(text);
        let re = reexports.entry(m.clone()).or_default();
        let us = uses.entry(m.clone()).or_default();
        let statements = use_statements(&t);
        // The paths outside `use` statements (a `use` is read whole above, so that
        // `use crate::a::{X}` names where `X` is defined, not `a`).
        let mut outside = t.clone();
        for (_, _, range) in &statements {
            outside.replace_range(range.clone(), &" ".repeat(range.len()));
        }
        for (public, body, _) in statements {
            for p in expand_use(body) {
                let a = match absolute(m, &p) {
                    Some(a) => a,
                    None => {
                        let Some(first) = p.first() else { continue };
                        let mut child = m.clone();
                        child.push(first.clone());
                        if mods.contains(&child) {
                            let mut a = m.clone();
                            a.extend(p.iter().cloned());
                            a
                        } else {
                            continue;
                        }
                    }
                };
                if public {
                    let key = match a.last().map(String::as_str) {
                        Some("*") | Some("self") | None => format!("*{}", re.len()),
                        Some(name) => name.to_string(),
                    };
                    re.insert(key, a.clone());
                    // A re-export is also the module's own import of the item, except one of
                    // its own descendants' items (a parent re-exporting its children is fine).
                    if a.len() > m.len() && a[..m.len()] == m[..] {
                        continue;
                    }
                }
                us.push(a);
            }
        }
        for p in keyword_paths(&outside) {
            if let Some(a) = absolute(m, &p) {
                us.push(a);
            }
        }
    }
    let defined = files
        .iter()
        .map(|(m, text)| (m.clone(), defined_names(&strip(text))))
        .collect();
    let krate = Crate {
        mods,
        reexports,
        defined,
    };
    let mut edges = BTreeMap::new();
    for m in &krate.mods {
        let targets: &mut BTreeSet<ModPath> = edges.entry(m.clone()).or_default();
        for a in uses.get(m).into_iter().flatten() {
            let t = krate.resolve(a, 0);
            let ancestor = t.len() < m.len() && m[..t.len()] == t[..];
            if &t != m && !ancestor {
                targets.insert(t);
            }
        }
    }
    Graph { edges }
}

/// What the resolver knows of a crate: its modules, each module's re-exports (name -> absolute
/// path; globs keyed `*N`) and the names of the items each module defines.
struct Crate {
    mods: BTreeSet<ModPath>,
    reexports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
    defined: BTreeMap<ModPath, BTreeSet<String>>,
}

/// The names a stripped text defines: the identifier after `fn`, `struct`, `enum`, `union`,
/// `trait`, `type`, `const`, `static`, `mod` or `macro_rules!`.
fn defined_names(t: &str) -> BTreeSet<String> {
    let words: Vec<&str> = t
        .split(|c: char| !(is_ident(c) || c == '!'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| {
            matches!(
                w[0],
                "fn" | "struct"
                    | "enum"
                    | "union"
                    | "trait"
                    | "type"
                    | "const"
                    | "static"
                    | "mod"
                    | "macro_rules!"
            )
        })
        .map(|w| w[1].trim_end_matches('!').to_string())
        .collect()
}

impl Crate {
    /// The module that defines what `full` names: its longest module prefix, following that
    /// module's re-exports for the next segment: a named one, else the glob that leads to a
    /// module defining the name (or re-exporting it further), else the only glob there is.
    fn resolve(&self, full: &[String], depth: usize) -> ModPath {
        for k in (0..=full.len()).rev() {
            let t = &full[..k];
            if !self.mods.contains(t) {
                continue;
            }
            if k < full.len() && depth < 20 {
                let re = &self.reexports[t];
                if let Some(target) = re.get(&full[k]) {
                    let mut next = target.clone();
                    next.extend_from_slice(&full[k + 1..]);
                    return self.resolve(&next, depth + 1);
                }
                let globs: Vec<&Vec<String>> = re
                    .iter()
                    .filter(|(key, v)| {
                        key.starts_with('*') && v.last().map(String::as_str) == Some("*")
                    })
                    .map(|(_, v)| v)
                    .collect();
                for v in &globs {
                    let base = &v[..v.len() - 1];
                    let mut next = base.to_vec();
                    next.extend_from_slice(&full[k..]);
                    let r = self.resolve(&next, depth + 1);
                    let defines = self.defined.get(base).is_some_and(|d| d.contains(&full[k]));
                    if r != base || defines || globs.len() == 1 {
                        return r;
                    }
                }
            }
            return t.to_vec();
        }
        Vec::new()
    }
}

/// The graph's strongly connected components of more than one module (Tarjan).
fn cycles(g: &Graph) -> Vec<Cycle> {
    struct Tarjan<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        comps: Vec<Vec<&'a ModPath>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.g.edges.get(v).into_iter().flatten() {
                let Some((w, _)) = self.g.edges.get_key_value(w) else {
                    continue; // a path outside the crate's files
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().expect("on stack");
                    self.on_stack.remove(w);
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    self.comps.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        comps: Vec::new(),
    };
    for v in g.edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    let name = |m: &ModPath| {
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    t.comps
        .iter()
        .map(|comp| {
            let members: BTreeSet<&ModPath> = comp.iter().copied().collect();
            let mut modules: Vec<String> = comp.iter().map(|m| name(m)).collect();
            modules.sort();
            let mut edges = Vec::new();
            for m in &members {
                for w in &g.edges[*m] {
                    if members.contains(w) {
                        edges.push((name(m), name(w)));
                    }
                }
            }
            Cycle { modules, edges }
        })
        .collect()
}

/// A readable report of one crate's cycles.
fn report(krate: &str, found: &[Cycle]) -> String {
    let mut s = String::new();
    for c in found {
        s.push_str(&format!(
            "{krate}: cycle of {} modules: {}\n",
            c.modules.len(),
            c.modules.join(", ")
        ));
        for (a, b) in &c.edges {
            s.push_str(&format!("    {a} -> {b}\n"));
        }
    }
    s
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

/// The workspace members named in the root Cargo.toml.
fn workspace_members(root: &Path) -> Vec<String> {
    let toml = fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let line = toml
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in the workspace Cargo.toml");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

#[test]
fn every_workspace_crate_is_checked() {
    let root = workspace_root();
    let members = workspace_members(&root);
    assert!(members.len() >= 5, "members parsed: {members:?}");
    for m in &members {
        let src = format!("{m}/src");
        assert!(
            CRATE_SOURCES.contains(&src.as_str()),
            "workspace member {m} is missing from CRATE_SOURCES"
        );
    }
    for src in CRATE_SOURCES {
        assert!(
            !read_crate(&root.join(src)).is_empty(),
            "{src} has no Rust files"
        );
    }
}

/// Module cycles kept as known debts: (crate sources, the cycle's modules as the report names
/// them, sorted). The whole-tree check fails when a crate's cycles differ from this list in any
/// way: a new cycle, a module joining a known one, or a known cycle that shrank or is gone (then
/// shorten or drop its entry, so the list only ever shrinks).
///
/// Empty: no crate has a module cycle.
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

#[test]
fn workspace_has_no_module_cycles() {
    let root = workspace_root();
    let mut all = String::new();
    for src in CRATE_SOURCES {
        let files = read_crate(&root.join(src));
        let found = cycles(&build_graph(&files));
        let known: Vec<&[&str]> = KNOWN_CYCLES
            .iter()
            .filter(|(k, _)| k == src)
            .map(|(_, m)| *m)
            .collect();
        let new: Vec<Cycle> = found
            .iter()
            .filter(|c| !known.iter().any(|m| same_modules(c, m)))
            .cloned()
            .collect();
        all.push_str(&report(src, &new));
        for m in known {
            if !found.iter().any(|c| same_modules(c, m)) {
                all.push_str(&format!(
                    "{src}: the known cycle of {} modules ({}) is no longer there as listed: update KNOWN_CYCLES\n",
                    m.len(),
                    m.join(", ")
                ));
            }
        }
    }
    assert!(
        all.is_empty(),
        "module cycles (issue 35's rule; see this file's doc):\n{all}"
    );
}

/// Whether cycle `c` has exactly the modules `m`.
fn same_modules(c: &Cycle, m: &[&str]) -> bool {
    let mut a: Vec<&str> = c.modules.iter().map(String::as_str).collect();
    let mut b = m.to_vec();
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// A graph from (file path relative to `src/`, text) pairs.
fn graph_of(files: &[(&str, &str)]) -> Graph {
    let files: Vec<(ModPath, String)> = files
        .iter()
        .filter_map(|(p, t)| Some((module_of(Path::new(p))?, t.to_string())))
        .collect();
    build_graph(&files)
}

fn has_edge(g: &Graph, from: &str, to: &str) -> bool {
    let path = |s: &str| -> ModPath {
        s.split("::")
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    g.edges
        .get(&path(from))
        .is_some_and(|t| t.contains(&path(to)))
}

#[test]
fn a_two_module_cycle_is_found_with_its_edges() {
    let g = graph_of(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::Thing;\npub struct Other;"),
        ("b.rs", "pub struct Thing(crate::a::Other);"),
        ("c.rs", "use crate::a::Other;"),
    ]);
    let found = cycles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].modules, ["a", "b"]);
    let mut edges = found[0].edges.clone();
    edges.sort();
    assert_eq!(edges, [("a".into(), "b".into()), ("b".into(), "a".into())]);
    assert!(report("x/src", &found).contains("x/src: cycle of 2 modules: a, b"));
}

#[test]
fn a_three_module_cycle_through_super_and_self_paths() {
    let g = graph_of(&[
        ("lib.rs", "mod m;"),
        ("m/mod.rs", "mod x; mod y; mod z; fn f() { self::x::go() }"),
        ("m/x.rs", "pub fn go() { super::y::go() }"),
        ("m/y.rs", "pub fn go() { crate::m::z::go() }"),
        ("m/z.rs", "use super::x;\npub fn go() { x::go() }"),
    ]);
    let found = cycles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].modules, ["m::x", "m::y", "m::z"]);
    // m -> m::x is a parent naming its child; m::x -> m would be allowed (ancestor).
    assert!(has_edge(&g, "m", "m::x"));
}

#[test]
fn an_edge_to_an_ancestor_is_allowed() {
    let g = graph_of(&[
        ("lib.rs", "mod p; pub struct Root; use crate::p::Child;"),
        ("p/mod.rs", "mod q; pub use q::Deep; pub struct Child;"),
        (
            "p/q.rs",
            "use crate::Root; use super::Child; pub struct Deep;",
        ),
    ]);
    assert!(!has_edge(&g, "p::q", "p"));
    assert!(!has_edge(&g, "p::q", ""));
    assert!(has_edge(&g, "", "p"));
    assert!(
        !has_edge(&g, "p", "p::q"),
        "a parent re-exporting its child's item"
    );
    assert!(cycles(&g).is_empty());
}

#[test]
fn a_reexport_is_followed_to_the_defining_module() {
    // `b` names `a::Thing`, which `a` only re-exports from `c`; `c` uses `b`: a cycle b <-> c
    // (not b <-> a), found only if the re-export is followed. The glob re-export in `d` too.
    let g = graph_of(&[
        ("lib.rs", "mod a; mod b; mod c; mod d;"),
        ("a.rs", "pub use crate::c::Thing;"),
        ("b.rs", "use crate::a::Thing; pub fn f() {}"),
        ("c.rs", "pub struct Thing; fn g() { crate::b::f() }"),
        ("d.rs", "pub(crate) use crate::c::*;"),
    ]);
    assert!(has_edge(&g, "b", "c"));
    assert!(!has_edge(&g, "b", "a"));
    assert!(
        has_edge(&g, "a", "c"),
        "a re-export of a sibling's item is an edge"
    );
    let found = cycles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].modules, ["b", "c"]);

    let g = graph_of(&[
        ("lib.rs", "mod c; mod d; mod e;"),
        ("c.rs", "pub struct Thing;"),
        ("d.rs", "pub(crate) use crate::c::*;"),
        ("e.rs", "use crate::d::Thing;"),
    ]);
    assert!(has_edge(&g, "e", "c"), "glob re-export followed");
    assert!(!has_edge(&g, "e", "d"));

    // Two globs: the one whose module defines the name is followed.
    let g = graph_of(&[
        ("lib.rs", "mod c; mod d; mod e; mod f;"),
        ("c.rs", "pub struct Thing;"),
        ("f.rs", "pub fn other() {}"),
        ("d.rs", "pub use crate::c::*;\npub use crate::f::*;"),
        ("e.rs", "use crate::d::{other, Thing};"),
    ]);
    assert!(has_edge(&g, "e", "c"));
    assert!(has_edge(&g, "e", "f"));
    assert!(!has_edge(&g, "e", "d"));
}

#[test]
fn nested_use_braces_are_expanded() {
    assert_eq!(
        expand_use(" crate::{a::{X, y::Z as W}, b, c::{self, *}}"),
        [
            vec!["crate", "a", "X"],
            vec!["crate", "a", "y", "Z"],
            vec!["crate", "b"],
            vec!["crate", "c", "self"],
            vec!["crate", "c", "*"],
        ]
    );
    let g = graph_of(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        (
            "a.rs",
            "use crate::{\n    c::Z,\n    b::{self, Y as Why},\n};\npub struct X;",
        ),
        ("b.rs", "pub struct Y;"),
        ("c.rs", "use crate::{b::Y, a::{X}};\npub struct Z;"),
    ]);
    assert!(has_edge(&g, "a", "b"));
    assert!(has_edge(&g, "a", "c"));
    assert!(has_edge(&g, "c", "a"));
    let found = cycles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].modules, ["a", "c"]);
}

#[test]
fn comments_strings_and_chars_are_not_read() {
    let g = graph_of(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "// use crate::b::X;\n/* crate::b::Y /* nested */ crate::b::Z */\n\
             const S: &str = \"crate::b::W; use crate::b::V;\";\n\
             const R: &str = r#\"crate::b::\"U\"\"#;\nconst C: char = '\"';\n\
             fn f<'a>(x: &'a str) -> &'a str { x }\npub struct A;",
        ),
        ("b.rs", "use crate::a::A;"),
    ]);
    assert!(!has_edge(&g, "a", "b"), "{:?}", g.edges);
    assert!(has_edge(&g, "b", "a"));
    assert!(cycles(&g).is_empty());
}

#[test]
fn the_walker_reads_folders_and_leaves_out_bin() {
    let dir = std::env::temp_dir().join(format!("rucx-module-cycles-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::create_dir_all(dir.join("m")).unwrap();
    fs::write(dir.join("lib.rs"), "mod m;").unwrap();
    fs::write(
        dir.join("m/mod.rs"),
        "mod k; use crate::m::k::K; pub struct M;",
    )
    .unwrap();
    fs::write(dir.join("m/k.rs"), "pub struct K;").unwrap();
    fs::write(dir.join("bin/tool.rs"), "use crate::m::M;").unwrap();
    let mut mods: Vec<ModPath> = read_crate(&dir).into_iter().map(|(m, _)| m).collect();
    mods.sort();
    fs::remove_dir_all(&dir).unwrap();
    let expect: Vec<ModPath> = vec![vec![], vec!["m".into()], vec!["m".into(), "k".into()]];
    assert_eq!(mods, expect);
}
