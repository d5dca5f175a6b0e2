//! The layer rules of ARCHITECTURE.md, generated from one table. [`ENGINE`] places every engine
//! module, bottom layer first, with the engine modules it may import; [`TANGLES`] lists the
//! imports today's code makes against that order, each with why. The tests read each module's
//! files (following its `mod` declarations, leaving out `#[cfg(test)]` code) and collect the
//! modules its `crate::` paths name, so a module added later must be placed before it passes,
//! and an import not in the table fails with the file that makes it.
//!
//! The shell may use only the engine modules of [`SHELL_USES`], and the runtime (and any other
//! workspace crate but the shell, the tests and xtask) does not depend on the engine at all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every engine module and the engine modules it may import, bottom layer first: a module may
/// import only modules placed above it (earlier in the list). Imports against that order are
/// [`TANGLES`], not entries here.
const ENGINE: &[(&str, &[&str])] = &[
    // Vocabulary: typed addresses, the engine's error, name helpers.
    ("addr", &[]),
    ("error", &[]),
    ("demangle", &[]),
    ("suggest", &[]),
    // The address space the patcher writes through and process control allocates in.
    ("space", &["addr"]),
    // The automated search: it knows programs only through its `Lab`.
    ("consult", &[]),
    // Analysis: the file, its functions, DWARF, instructions, CFGs.
    ("elf", &["addr", "error"]),
    ("disasm", &["addr"]),
    ("symbols", &["addr", "demangle", "elf"]),
    ("dwarf", &["addr", "elf"]),
    ("cfg", &["addr", "elf", "symbols"]),
    ("analysis", &["addr", "cfg", "elf", "symbols"]),
    // What the patcher may read of a module.
    ("code", &["addr", "cfg", "elf", "symbols"]),
    // The session: modules, lazily analysed, and the names users type.
    (
        "session",
        &[
            "addr", "analysis", "cfg", "code", "dwarf", "elf", "error", "suggest", "symbols",
        ],
    ),
    // Writing: the snippet compiler (the world only through its `Env`), the static rewriter,
    // process control, stack walks.
    ("snippet", &["suggest"]),
    ("rewrite", &["addr", "elf"]),
    ("process", &["elf", "space"]),
    ("unwind", &["addr", "elf", "symbols"]),
    // Instrumentation: points, callees, the patcher, and where they all meet.
    ("point", &["addr", "cfg", "snippet", "symbols"]),
    (
        "callee",
        &["addr", "analysis", "cfg", "elf", "session", "symbols"],
    ),
    (
        "patch",
        &[
            "addr", "cfg", "code", "disasm", "point", "snippet", "space", "symbols",
        ],
    ),
    (
        "instrument",
        &[
            "addr", "callee", "cfg", "consult", "dwarf", "elf", "error", "patch", "point",
            "process", "rewrite", "session", "snippet", "symbols", "unwind",
        ],
    ),
];

/// Imports today's code makes against [`ENGINE`]'s order or one of the named rules below: the
/// tangles left, each with why. A tangle the code no longer has fails
/// [`every_tangle_is_still_in_the_code`], so the list only shrinks.
const TANGLES: &[(&str, &str, &str)] = &[];

/// The engine modules the shell may use (besides the items the engine's root re-exports).
const SHELL_USES: &[&str] = &[
    "addr",
    "analysis",
    "cfg",
    "consult",
    "disasm",
    "dwarf",
    "elf",
    "instrument",
    "session",
    "snippet",
    "suggest",
    "symbols",
];

/// Engine modules the shell uses today that belong behind the engine's façade, with why. None
/// is left: process control (`process`) is reached only through `instrument::Inferior`.
const SHELL_TANGLES: &[(&str, &str)] = &[];

/// Engine modules the shell may never use: process control (the tracer, ptrace-level requests,
/// registers and memory) is the façade's (`instrument::inferior`); the patcher, points,
/// callees, stack walks, the rewriter and the patcher's views are reached through `instrument`;
/// errors and names through the root's re-exports and `symbols`. Every engine module is in
/// this list or in [`SHELL_USES`], so a new one must be placed for the shell too.
const SHELL_NEVER: &[&str] = &[
    "callee", "code", "demangle", "error", "patch", "point", "process", "rewrite", "space",
    "unwind",
];

/// Workspace members that may depend on the engine; every other one (the runtime, the ABI it
/// shares) must not.
const ENGINE_USERS: &[&str] = &["engine", "shell", "tests", "xtask"];

// ---------------------------------------------------------------------------------------------
// Reading the sources.

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A source tree: the text of a file by path, or `None` when there is none.
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// `p` as written from the workspace root.
fn shown(p: &Path) -> String {
    let r = root();
    p.strip_prefix(&r).unwrap_or(p).display().to_string()
}

fn disk(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments removed and the contents of string and character literals blanked,
/// so neither a `crate::` nor a brace inside them counts.
fn lex(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
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
        } else if c[i] == 'r'
            && (i == 0 || !is_ident(c[i - 1]) || c[i - 1] == 'b')
            && matches!(next, Some('"') | Some('#'))
            && c[i + 1..].iter().find(|&&x| x != '#') == Some(&'"')
        {
            // A raw string: r"..." or r#"..."#.
            let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
            i += 1 + hashes + 1;
            out.push_str("\"\"");
            while i < c.len() {
                if c[i] == '"'
                    && c[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&x| x == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{7f}') or a lifetime ('a).
            if next == Some('\\') {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The end (exclusive) of the item starting at byte `from` of lexed code: past its `;`, or past
/// the `}` matching its first `{`, whichever comes first outside parentheses and brackets.
fn item_end(c: &[u8], from: usize) -> usize {
    let mut nest = 0i32;
    let mut depth = 0i32;
    for (i, &b) in c.iter().enumerate().skip(from) {
        match b {
            b'(' | b'[' if depth == 0 => nest += 1,
            b')' | b']' if depth == 0 => nest -= 1,
            b';' if nest == 0 && depth == 0 => return i + 1,
            b'{' if nest == 0 => depth += 1,
            b'}' if nest == 0 => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    c.len()
}

/// Lexed `text` without its `#[cfg(test)]` items (test modules, test-only imports and helpers):
/// unit tests may build whole sessions; the rules bind the code they test.
fn without_tests(text: &str) -> String {
    const ATTR: &str = "#[cfg(test)]";
    let code = lex(text);
    let mut out = String::with_capacity(code.len());
    let mut at = 0;
    while let Some(i) = code[at..].find(ATTR) {
        out.push_str(&code[at..at + i]);
        // Every delimiter `item_end` looks for is ASCII, so its answer is a char boundary.
        at = item_end(code.as_bytes(), at + i + ATTR.len());
    }
    out.push_str(&code[at..]);
    out
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The first names of the paths in the group `{a::b, c, d::{e, f}}` that `s` starts with.
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut start = true;
    for (i, ch) in s.char_indices() {
        match ch {
            '{' => {
                depth += 1;
                if depth == 1 {
                    start = true;
                    continue;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => {
                start = true;
                continue;
            }
            _ => {}
        }
        if start && depth == 1 && !ch.is_whitespace() {
            start = false;
            heads.push(ident(&s[i..]).to_owned());
        }
    }
    heads
}

/// The first names of the paths that start with `prefix::` in `code` (lexed, without tests),
/// where `prefix` stands at the start of a path.
fn path_heads(code: &str, prefix: &str) -> Vec<String> {
    let pat = format!("{prefix}::");
    let mut out = Vec::new();
    for (i, _) in code.match_indices(&pat) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|b| is_ident(b) || b == ':') {
            continue;
        }
        let rest = code[i + pat.len()..].trim_start();
        if rest.starts_with('{') {
            out.extend(group_heads(rest));
        } else {
            out.push(ident(rest).to_owned());
        }
    }
    out.retain(|h| !h.is_empty());
    out
}

/// The first names of paths that climb out of a module `depth` levels deep with `super::`
/// (`super::session::Module` in `engine/src/callee.rs` names the crate's `session`).
fn super_heads(code: &str, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("super::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|b| is_ident(b) || b == ':') {
            continue;
        }
        let mut rest = &code[i..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r.trim_start();
        }
        if ups >= depth {
            if rest.starts_with('{') {
                out.extend(group_heads(rest));
            } else {
                out.push(ident(rest).to_owned());
            }
        }
    }
    out.retain(|h| !h.is_empty());
    out
}

/// The modules `code` declares with `mod name;` (its files are elsewhere).
fn declared_mods(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("mod ") {
        if code[..i].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = code[i + 4..].trim_start();
        let name = ident(rest);
        if !name.is_empty() && rest[name.len()..].trim_start().starts_with(';') {
            out.push(name.to_owned());
        }
    }
    out
}

/// The file of module `name` declared in `file`, and its depth below the crate root.
fn child_file(read: Read, file: &Path, name: &str) -> Option<PathBuf> {
    let stem = file.file_stem()?.to_string_lossy();
    let dir = if stem == "mod" || stem == "lib" || stem == "main" {
        file.parent()?.to_path_buf()
    } else {
        file.with_extension("")
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| read(p).is_some())
}

/// A crate's top-level modules as its root file declares them outside tests, each with its
/// files (those its `mod` declarations reach outside tests) and their depths.
fn crate_modules(read: Read, root_file: &Path) -> BTreeMap<String, Vec<(PathBuf, usize)>> {
    let code =
        without_tests(&read(root_file).unwrap_or_else(|| panic!("no {}", root_file.display())));
    let mut out = BTreeMap::new();
    for m in declared_mods(&code) {
        let file = child_file(read, root_file, &m).unwrap_or_else(|| {
            panic!(
                "{} declares `mod {m};` but it has no file",
                root_file.display()
            )
        });
        let mut files = Vec::new();
        let mut stack = vec![(file, 1)];
        while let Some((f, depth)) = stack.pop() {
            let code = without_tests(&read(&f).unwrap());
            for c in declared_mods(&code) {
                if let Some(cf) = child_file(read, &f, &c) {
                    stack.push((cf, depth + 1));
                }
            }
            files.push((f, depth));
        }
        files.sort();
        out.insert(m, files);
    }
    out
}

/// The items the crate root re-exports (`pub use session::{Module, Session};`), by the module
/// they come from.
fn root_reexports(root_code: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (i, _) in root_code.match_indices("pub use ") {
        let rest = &root_code[i + "pub use ".len()..];
        let rest = rest.strip_prefix("crate::").unwrap_or(rest);
        let module = ident(rest).to_owned();
        let path = &rest[..rest.find(';').unwrap_or(rest.len())];
        let items = match path.find('{') {
            Some(b) => group_heads(&path[b..]),
            None => vec![path.rsplit("::").next().unwrap_or("").trim().to_owned()],
        };
        for item in items {
            out.insert(item, module.clone());
        }
    }
    out
}

/// Who imports what: for each module of a crate, the other modules of it that its code names,
/// each with one file that names it.
type Graph = BTreeMap<String, BTreeMap<String, PathBuf>>;

/// The import graph of the crate whose root file is `root_file`. A name that is neither a
/// module nor a re-exported item panics, so nothing slips through unread.
fn import_graph(read: Read, root_file: &Path) -> Graph {
    let modules = crate_modules(read, root_file);
    let reexports = root_reexports(&without_tests(&read(root_file).unwrap()));
    let mut graph = Graph::new();
    for (m, files) in &modules {
        let edges = graph.entry(m.clone()).or_default();
        for (f, depth) in files {
            let code = without_tests(&read(f).unwrap());
            let mut heads = path_heads(&code, "crate");
            heads.extend(super_heads(&code, *depth));
            for h in heads {
                let target = if modules.contains_key(&h) {
                    h
                } else if let Some(m) = reexports.get(&h) {
                    m.clone()
                } else {
                    panic!(
                        "{} names crate::{h}, which is no module of the crate",
                        f.display()
                    )
                };
                if &target != m {
                    edges.entry(target).or_insert_with(|| f.clone());
                }
            }
        }
    }
    graph
}

fn engine_graph() -> Graph {
    import_graph(&disk, &root().join("engine/src/lib.rs"))
}

// ---------------------------------------------------------------------------------------------
// The table.

/// What module `m` may import: its row, and its tangles.
fn allowed(m: &str) -> BTreeSet<&'static str> {
    let row = ENGINE
        .iter()
        .find(|(n, _)| *n == m)
        .map(|(_, a)| *a)
        .unwrap_or(&[]);
    row.iter()
        .copied()
        .chain(TANGLES.iter().filter(|t| t.0 == m).map(|t| t.1))
        .collect()
}

/// Every import of `graph` that the table does not allow, one line each.
fn violations(
    graph: &Graph,
    table: &[(&str, &[&str])],
    tangles: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (m, edges) in graph {
        let Some((_, row)) = table.iter().find(|(n, _)| n == m) else {
            out.push(format!(
                "engine module `{m}` is not in tests/it/architecture.rs's ENGINE table: place it \
                 (its row lists the modules it may import)"
            ));
            continue;
        };
        for (to, file) in edges {
            let ok = row.contains(&to.as_str()) || tangles.iter().any(|t| t.0 == m && t.1 == to);
            if !ok {
                out.push(format!(
                    "{} imports crate::{to}, which `{m}` may not (it may import only {})",
                    shown(file),
                    if row.is_empty() {
                        "no other engine module".to_owned()
                    } else {
                        row.join(", ")
                    }
                ));
            }
        }
    }
    for (m, _) in table {
        if !graph.contains_key(*m) {
            out.push(format!(
                "the ENGINE table places `{m}`, which is no engine module"
            ));
        }
    }
    out
}

#[test]
fn every_engine_module_imports_only_what_its_row_allows() {
    let v = violations(&engine_graph(), ENGINE, TANGLES);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn the_table_runs_bottom_up() {
    for (i, (m, row)) in ENGINE.iter().enumerate() {
        for to in *row {
            assert!(
                ENGINE[..i].iter().any(|(n, _)| n == to),
                "`{m}` may import `{to}`, which is not placed above it; move a row or make it a tangle"
            );
        }
    }
    for (from, to, why) in TANGLES {
        assert!(!why.is_empty(), "the tangle {from} → {to} says why");
        assert!(
            !allowed_row(from).contains(to),
            "{from} → {to} is both a row entry and a tangle"
        );
    }
}

fn allowed_row(m: &str) -> &'static [&'static str] {
    ENGINE
        .iter()
        .find(|(n, _)| *n == m)
        .map(|(_, a)| *a)
        .unwrap_or(&[])
}

#[test]
fn every_tangle_is_still_in_the_code() {
    let graph = engine_graph();
    for (from, to, _) in TANGLES {
        assert!(
            graph.get(*from).is_some_and(|e| e.contains_key(*to)),
            "{from} no longer imports {to}: remove the tangle from TANGLES"
        );
    }
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(|e| e.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

/// The import cycles among engine modules: the table runs bottom-up, so only tangles close
/// one, and each cycle here names the tangle to cut.
#[test]
fn engine_modules_import_each_other_in_no_cycle() {
    let c = cycles(&engine_graph());
    assert!(
        c.is_empty(),
        "{} cycles among engine modules: {c:?}",
        c.len()
    );
}

// ---------------------------------------------------------------------------------------------
// The named rules, stated over the table (rows and tangles alike), so widening a row to let
// code through breaks them.

fn assert_never(module: &str, forbidden: &[&str], why: &str) {
    let a = allowed(module);
    for f in forbidden {
        assert!(!a.contains(f), "`{module}` may not import `{f}`: {why}");
    }
}

/// Every module `module` reaches through rows of the table (tangles left out: they are the
/// listed exceptions).
fn reaches(module: &str) -> BTreeSet<&'static str> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = allowed_row(module).to_vec();
    while let Some(m) = todo.pop() {
        if seen.insert(m) {
            todo.extend(allowed_row(m));
        }
    }
    seen
}

#[test]
fn process_control_sits_below_the_patcher() {
    assert_never(
        "process",
        &[
            "patch",
            "instrument",
            "snippet",
            "point",
            "session",
            "cfg",
            "analysis",
        ],
        "process control knows nothing of what is inserted; `instrument` joins the two",
    );
    let r = reaches("process");
    for above in ["patch", "instrument", "snippet", "point", "session"] {
        assert!(
            !r.contains(above),
            "process reaches `{above}` through {r:?}"
        );
    }
}

#[test]
fn the_patcher_sees_code_and_an_address_space_only() {
    assert_never(
        "patch",
        &[
            "process",
            "instrument",
            "session",
            "analysis",
            "dwarf",
            "elf",
            "rewrite",
        ],
        "the patcher reads a `code::CodeView` and writes a `space::AddressSpace`",
    );
    let r = reaches("patch");
    for above in ["process", "instrument", "session", "rewrite", "dwarf"] {
        assert!(
            !r.contains(above),
            "the patcher reaches `{above}` through {r:?}"
        );
    }
}

#[test]
fn the_search_knows_programs_only_through_its_lab() {
    assert!(
        allowed("consult").is_empty(),
        "consult imports no other engine module"
    );
}

#[test]
fn analysis_layers_import_nothing_above_them() {
    let base = [
        "addr", "error", "demangle", "disasm", "elf", "symbols", "dwarf", "cfg",
    ];
    for m in ["elf", "symbols", "dwarf", "cfg", "analysis"] {
        let pos = base.iter().position(|b| *b == m);
        for to in allowed(m) {
            let below = match (pos, base.iter().position(|b| *b == to)) {
                (Some(p), Some(q)) => q < p,
                (None, Some(_)) => true,
                _ => false,
            };
            assert!(
                below,
                "`{m}` may not import `{to}`: analysis imports nothing above it"
            );
        }
    }
}

#[test]
fn the_narrow_layers_stay_narrow() {
    for (m, only) in [
        ("space", &["addr"][..]),
        ("code", &["addr", "elf", "symbols", "cfg"][..]),
        ("rewrite", &["addr", "elf"][..]),
        ("snippet", &["suggest", "error", "addr"][..]),
    ] {
        for to in allowed(m) {
            assert!(
                only.contains(&to),
                "`{m}` may import only {only:?}, not `{to}`"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The shell and the other crates.

/// The engine modules each shell file names (`engine::instrument::…`, `use engine::{…}`); items
/// the engine's root re-exports count as their module.
fn shell_uses() -> BTreeMap<String, PathBuf> {
    let engine = crate_modules(&disk, &root().join("engine/src/lib.rs"));
    let reexports = root_reexports(&without_tests(
        &disk(&root().join("engine/src/lib.rs")).unwrap(),
    ));
    let mut out = BTreeMap::new();
    for f in sources(&root().join("shell/src")) {
        let code = without_tests(&disk(&f).unwrap());
        for h in path_heads(&code, "engine")
            .into_iter()
            .chain(path_heads(&code, "gsh_engine"))
        {
            let m = if engine.contains_key(&h) {
                h
            } else if reexports.contains_key(&h) {
                // The root's re-exports are the façade itself.
                continue;
            } else {
                panic!(
                    "{} names engine::{h}, which the engine does not have",
                    f.display()
                )
            };
            out.entry(m).or_insert_with(|| f.clone());
        }
    }
    out
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_shell_uses_only_the_engines_facade() {
    let uses = shell_uses();
    for (m, file) in &uses {
        assert!(
            SHELL_USES.contains(&m.as_str()) || SHELL_TANGLES.iter().any(|t| t.0 == m),
            "the shell may import only {} of the engine (and the root's re-exports), but {} \
             uses engine::{m}; go through the façade",
            SHELL_USES.join(", "),
            shown(file)
        );
    }
    for m in SHELL_NEVER {
        assert!(
            !SHELL_USES.contains(m) && !SHELL_TANGLES.iter().any(|t| t.0 == *m),
            "the shell may never import engine::{m}: it parses, calls `instrument` and prints"
        );
    }
    for (m, _) in ENGINE {
        assert!(
            SHELL_USES.contains(m) != SHELL_NEVER.contains(m),
            "engine module `{m}` must be in exactly one of SHELL_USES and SHELL_NEVER: place it \
             for the shell"
        );
    }
    for m in SHELL_USES.iter().chain(SHELL_NEVER) {
        assert!(
            ENGINE.iter().any(|(n, _)| n == m),
            "SHELL_USES or SHELL_NEVER names `{m}`, which the ENGINE table does not place"
        );
    }
    for (m, _) in SHELL_TANGLES {
        assert!(
            uses.contains_key(*m),
            "the shell no longer uses engine::{m}: remove it from SHELL_TANGLES"
        );
        assert!(!SHELL_USES.contains(m), "{m} is both façade and tangle");
    }
}

#[test]
fn shell_reaches_binaries_only_through_the_engine() {
    for f in sources(&root().join("shell/src")) {
        let text = std::fs::read_to_string(&f).unwrap();
        for krate in ["object::", "gimli::", "iced_x86::", "addr2line::"] {
            assert!(
                !text.contains(krate),
                "{} uses {krate} directly; go through the engine",
                f.display()
            );
        }
    }
}

/// The workspace's members, as the root manifest lists them.
fn members() -> Vec<String> {
    let manifest = disk(&root().join("Cargo.toml")).unwrap();
    let at = manifest
        .find("members")
        .expect("the root manifest lists its members");
    let list = &manifest[at..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_runtime_and_other_crates_depend_on_no_engine() {
    let members = members();
    assert!(
        members.iter().any(|m| m == "rt"),
        "the runtime is a member: {members:?}"
    );
    for m in members
        .iter()
        .filter(|m| !ENGINE_USERS.contains(&m.as_str()))
    {
        let manifest = disk(&root().join(m).join("Cargo.toml"))
            .unwrap_or_else(|| panic!("member {m} has no Cargo.toml"));
        assert!(
            !manifest.contains("gsh-engine") && !manifest.contains("../engine"),
            "{m}/Cargo.toml depends on the engine; the runtime side stays below it"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The reader itself, on a planted tree.

#[test]
fn the_reader_finds_planted_imports_and_ignores_comments_strings_and_tests() {
    let tree: BTreeMap<PathBuf, String> = [
        (
            "src/lib.rs",
            "pub mod low;\npub mod high;\npub mod new;\n#[cfg(test)]\nmod testutil;\npub use high::Thing;\n",
        ),
        (
            "src/low.rs",
            r##"//! Uses crate::high in a comment only.
fn f() -> &'static str { "crate::high \" crate::high" }
fn g(c: char) -> bool { c == '{' || c == '\'' || c == '"' }
fn r() -> &'static str { r#"crate::high "{"# }
#[cfg(test)]
fn helper() -> [u8; 2] { crate::high::Z }
#[cfg(test)]
mod tests { use crate::high::X; }
"##,
        ),
        ("src/high/mod.rs", "mod part;\nuse crate::{low::{a, b}, new};\n"),
        ("src/high/part.rs", "use super::super::low::c; /* crate::new */\n"),
        ("src/new.rs", "fn f() -> crate::Thing { todo!() }\n"),
        ("src/testutil.rs", "use crate::high::Y;\n"),
    ]
    .into_iter()
    .map(|(p, t)| (PathBuf::from(p), t.to_owned()))
    .collect();
    let read = |p: &Path| tree.get(p).cloned();
    let graph = import_graph(&read, Path::new("src/lib.rs"));
    let edges = |m: &str| graph[m].keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        graph.keys().cloned().collect::<Vec<_>>(),
        ["high", "low", "new"]
    );
    assert!(edges("low").is_empty(), "{:?}", edges("low"));
    assert_eq!(edges("high"), ["low", "new"]);
    assert_eq!(edges("new"), ["high"]);
    assert_eq!(graph["high"]["low"], PathBuf::from("src/high/mod.rs"));
    // A table that places `new` below `high` catches the planted upward import, and one that
    // leaves a module out asks for it to be placed.
    let table: &[(&str, &[&str])] = &[("low", &[]), ("new", &[]), ("high", &["low", "new"])];
    let v = violations(&graph, table, &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("src/new.rs imports crate::high"), "{v:?}");
    assert!(violations(&graph, table, &[("new", "high", "planted")]).is_empty());
    let v = violations(&graph, &table[1..], &[("new", "high", "planted")]);
    assert!(v.len() == 1 && v[0].contains("`low` is not in"), "{v:?}");
    assert_eq!(cycles(&graph), [["high", "new"]]);
}
