//! No two files of `src/` import each other, directly or in a loop (docs/architecture.md,
//! "Layers"): within a folder as between the layers, a parent that uses its child's
//! items is not used by it, and siblings form no circle. Every path a file names counts
//! (`crate::…`, `super::…`, `self::…`, and `child::…` for a child the file declares with
//! `mod child;`), each resolved to the file that holds it; comments and a file's own
//! `#[cfg(test)] mod tests` do not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{root, rust_files};

/// A file's module path (`src/store/redis/mod.rs` → `store::redis`, `src/lib.rs` → ``).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments and its own test module.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
    text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The names a path continues with after `head` at byte `at` of `code`: one name, or
/// each first name of a `{…}` group.
fn names_after(code: &str, at: usize) -> Vec<Vec<String>> {
    let rest = &code[at..];
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 1;
        let end = group
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(group.len(), |(i, _)| i);
        let mut items = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in group[..end].char_indices().chain([(end, ',')]) {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    let item = group[start..i].trim();
                    let first: String =
                        item.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !first.is_empty() {
                        items.push(vec![first]);
                    }
                    start = i + 1;
                }
                _ => {}
            }
        }
        return items;
    }
    let path: String =
        rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
    vec![path.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect()]
}

/// `(file, file it imports)` for files given as (module path, code).
fn edges(files: &BTreeMap<Vec<String>, String>) -> BTreeSet<(Vec<String>, Vec<String>)> {
    let resolve = |parts: &[String]| {
        (1..=parts.len()).rev().map(|n| parts[..n].to_vec()).find(|m| files.contains_key(m))
    };
    let mut edges = BTreeSet::new();
    for (me, code) in files {
        let kids: Vec<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
            })
            .collect();
        let mut heads: Vec<(String, Vec<String>)> = vec![
            ("crate::".into(), Vec::new()),
            ("super::".into(), me[..me.len().saturating_sub(1)].to_vec()),
            ("self::".into(), me.clone()),
        ];
        for kid in &kids {
            heads.push((format!("{kid}::"), [me.clone(), vec![kid.clone()]].concat()));
        }
        for (head, base) in &heads {
            for (at, _) in code.match_indices(head.as_str()) {
                // A head inside a longer path (`portcullis::x`, `a::super::`) is not one.
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                for mut tail in names_after(code, at + head.len()) {
                    let mut full = base.clone();
                    // `super::super::x` climbs once more for each `super`.
                    while tail.first().is_some_and(|t| t == "super") {
                        full.pop();
                        tail.remove(0);
                    }
                    full.extend(tail);
                    if let Some(target) = resolve(&full)
                        && target != *me
                    {
                        edges.insert((me.clone(), target));
                    }
                }
            }
        }
    }
    edges
}

/// The circles among `files`: each a sorted list of module paths that reach each other.
fn circles(files: &BTreeMap<Vec<String>, String>) -> Vec<Vec<String>> {
    let edges = edges(files);
    let reaches = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for (a, b) in &edges {
                if *a == m && seen.insert(b.clone()) {
                    todo.push(b.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<_, _> = files.keys().map(|m| (m.clone(), reaches(m))).collect();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, r) in &reach {
        if r.contains(m) {
            let circle: Vec<String> = reach
                .iter()
                .filter(|(o, ro)| r.contains(*o) && ro.contains(m))
                .map(|(o, _)| o.join("::"))
                .collect();
            found.insert(circle);
        }
    }
    found.into_iter().collect()
}

/// Every file of `src/` but the binary's `main.rs`, by module path.
fn sources() -> BTreeMap<Vec<String>, String> {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths
        .into_iter()
        .filter(|p| !p.ends_with("main.rs"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (module_of(p.strip_prefix(&src).unwrap()), code_of(&text))
        })
        .collect()
}

#[test]
fn no_two_files_import_each_other_directly_or_in_a_loop() {
    let sources = sources();
    assert!(edges(&sources).len() > 300, "the imports are read");
    let circles = circles(&sources);
    assert!(circles.is_empty(), "files that import each other: {circles:#?}");
}

#[test]
fn the_circle_check_sees_a_parent_and_child_and_a_loop_of_siblings() {
    let file = |path: &str, code: &str| {
        (path.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect(), code_of(code))
    };
    // A parent using its child's item through a group, the child using the parent's.
    let planted: BTreeMap<_, _> = [
        file("room", "mod kid;\nuse kid::{Thing, other};\n"),
        file("room::kid", "// use nothing::here;\nuse super::Shared;\n"),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&planted), vec![vec!["room".to_owned(), "room::kid".to_owned()]]);
    // Three siblings in a loop, one of them through a crate:: path.
    let planted: BTreeMap<_, _> = [
        file("room", "mod a;\nmod b;\nmod c;\n"),
        file("room::a", "use super::b::B;\n"),
        file("room::b", "fn f() { crate::room::c::go() }\n"),
        file("room::c", "use super::{a::A, other};\n"),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&planted).len(), 1, "{:?}", circles(&planted));
    assert_eq!(circles(&planted)[0].len(), 3);
    // The same without the closing edge: no circle; a test module's imports do not count.
    let planted: BTreeMap<_, _> = [
        file("room", "mod a;\nmod b;\nuse a::A;\n"),
        file(
            "room::a",
            "use super::b::B;\n#[cfg(test)]\nmod tests {\n    use super::super::*;\n}\n",
        ),
        file("room::b", "pub struct B;\n"),
    ]
    .into_iter()
    .collect();
    assert!(circles(&planted).is_empty(), "{:?}", circles(&planted));
}
