//! The source layout holds what `src/lib.rs` ("Layout") and docs/architecture.md
//! ("Layers") say of it: each module uses only the modules listed before it, the list
//! names every module, no source file is over 600 lines and no function over 100
//! (`function_length`), and the README's layout names paths that exist. What the
//! documentation names (paths, cargo targets, the Layers picture's modules) exists:
//! `doc_references`. One name, one meaning (module names, the rules' names in every
//! layer, metric names): `names`. No two files import each other, directly or in a
//! loop: `import_cycles`.

mod doc_references;
mod function_length;
mod import_cycles;
mod names;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Longest source file kept (one idea a file).
const MAX_LINES: usize = 600;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules of `src/lib.rs`'s Layout section, in its order (the lowest
/// first).
fn layout_order() -> Vec<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let section: Vec<&str> = lib
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .skip_while(|l| *l != "//! # Layout")
        .collect();
    assert!(!section.is_empty(), "src/lib.rs has no Layout section");
    section
        .iter()
        .filter_map(|l| l.strip_prefix("//! - [`"))
        .filter_map(|l| l.split_once("`]").map(|(name, _)| name.to_string()))
        .collect()
}

/// `(module, module it uses, where)` for every `crate::NAME` outside comments in `src/`.
fn uses() -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut edges = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root().join("src")).unwrap();
        let first = relative.components().next().unwrap().as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if ["lib", "main", "cli"].contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (at, _) in line.match_indices("crate::") {
                let used: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if used != module && !used.is_empty() {
                    let place = format!("{}:{}", relative.display(), n + 1);
                    edges.push((module.clone(), used, place));
                }
            }
        }
    }
    edges
}

#[test]
fn each_module_uses_only_the_modules_listed_before_it() {
    let order = layout_order();
    // The contract crate's modules, re-exported at the top: below every other.
    let contract = ["codec", "normalize", "client"];
    let rank = |m: &str| {
        if contract.contains(&m) {
            Some(0)
        } else {
            order.iter().position(|o| o == m).map(|p| p + 1)
        }
    };
    let mut wrong = Vec::new();
    for (module, used, place) in uses() {
        let (Some(from), Some(to)) = (rank(&module), rank(&used)) else {
            wrong.push(format!("{place}: {module} or {used} is not in the Layout list"));
            continue;
        };
        if to >= from {
            wrong.push(format!("{place}: {module} uses {used}, listed after it"));
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_layout_lists_every_module_once() {
    let order = layout_order();
    let listed: BTreeSet<&str> = order.iter().map(String::as_str).collect();
    assert_eq!(listed.len(), order.len(), "a module listed twice: {order:?}");
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let declared: BTreeSet<&str> =
        lib.lines().filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';')).collect();
    assert_eq!(listed, declared, "src/lib.rs's Layout and its `pub mod`s differ");
}

#[test]
fn the_layering_check_sees_a_use_of_a_later_module() {
    // The check above reads real uses: the store's use of the throttle rules is one.
    assert!(uses().iter().any(|(m, u, _)| m == "store" && u == "throttle"));
}

/// The directories under `dir` whose module is written `X.rs` beside `X/` instead of
/// `X/mod.rs`.
fn file_beside_folder(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.with_extension("rs").is_file() {
                found.push(path.with_extension("rs").display().to_string());
            }
            found.extend(file_beside_folder(&path));
        }
    }
    found
}

/// One module-file convention across `src/`: a module with children is `X/mod.rs`,
/// never `X.rs` beside `X/`.
#[test]
fn every_module_with_children_is_a_folder_with_mod_rs() {
    assert!(
        file_beside_folder(&root().join("src")).is_empty(),
        "{:?}",
        file_beside_folder(&root().join("src"))
    );
    // The check sees the other convention.
    let planted = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(planted.path().join("room/kid")).unwrap();
    std::fs::write(planted.path().join("room/kid.rs"), "").unwrap();
    assert_eq!(file_beside_folder(planted.path()).len(), 1);
}

#[test]
fn no_source_file_is_over_600_lines() {
    let mut files = Vec::new();
    for dir in ["src", "client", "tests", "benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    files.push(root().join("build.rs"));
    let long: Vec<String> = files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "target"))
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}

#[test]
fn the_readme_layout_names_paths_that_exist_and_every_source_module() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let block: Vec<&str> = readme
        .split("## Layout")
        .nth(1)
        .expect("README has a Layout section")
        .split("```")
        .nth(1)
        .expect("README's Layout section has a block")
        .lines()
        .collect();
    let named: Vec<&str> = block
        .iter()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for path in &named {
        assert!(root().join(path).exists(), "README's layout names {path}, which does not exist");
    }
    for entry in std::fs::read_dir(root().join("src")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let shown = if root().join("src").join(&name).is_dir() {
            format!("src/{name}/")
        } else {
            format!("src/{name}")
        };
        assert!(named.contains(&shown.as_str()), "README's layout does not show {shown}");
    }
}

/// Every `X.md, "Heading"` (or `X.md ("Heading"`) in the repository names a heading that
/// X has, so a reference to a section never dangles after a rename.
#[test]
fn references_to_doc_sections_name_headings_that_exist() {
    let docs = root().join("docs");
    let mut headings = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&docs).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let titles: BTreeSet<String> = text
            .lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim().to_owned())
            .collect();
        headings.insert(path.file_name().unwrap().to_string_lossy().into_owned(), titles);
    }
    let mut files = Vec::new();
    for dir in ["src", "client", "tests", "benches", "docs", "deploy", "proto"] {
        collect(&root().join(dir), &mut files);
    }
    files.push(root().join("README.md"));
    let mut dangling = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        // Comments wrap: join continuation lines so a title split over two reads whole.
        let joined = text
            .lines()
            .map(|l| l.trim_start().trim_start_matches(['/', '!', '#', '-', ' ']))
            .collect::<Vec<_>>()
            .join(" ");
        for (at, _) in joined.match_indices(".md") {
            let name_start = joined[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .map_or(0, |i| i + 1);
            let doc = format!("{}.md", &joined[name_start..at]);
            let Some(titles) = headings.get(&doc) else { continue };
            let rest = &joined[at + 3..];
            let rest = rest.strip_prefix(')').unwrap_or(rest);
            let Some(rest) = rest.strip_prefix(", \"").or_else(|| rest.strip_prefix(" (\"")) else {
                continue;
            };
            let Some(end) = rest.find('"') else { continue };
            let title = &rest[..end];
            if !titles.contains(title) {
                dangling.push(format!("{}: {doc}, \"{title}\"", file.display()));
            }
        }
    }
    assert!(
        dangling.is_empty(),
        "references to sections that do not exist:\n{}",
        dangling.join("\n")
    );
}

/// Every file under `dir` that is text the repository ships (sources, docs, config).
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| {
            ["rs", "md", "toml", "proto", "lua", "yml", "yaml"].contains(&e.to_str().unwrap_or(""))
        }) {
            out.push(path);
        }
    }
}
