//! What the documentation names exists: every repository path mentioned in README.md,
//! docs/, deploy/, benches/ and the comments of src/, client/ and tests/ is a file or
//! directory of the repository (a `*` pattern matches one at least), every relative
//! Markdown link resolves, every `cargo test --test NAME` and `cargo bench --bench
//! NAME` names a target that exists, user documentation cites no issue numbers and no
//! "this machine", and docs/architecture.md's Layers picture names every module of src/.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::root;

/// The top-level directories a mention of a repository path starts with.
const TOP: [&str; 8] =
    ["src/", "client/", "tests/", "benches/", "docs/", "deploy/", "proto/", ".ci/"];

/// The documentation a user reads (docs/performance-log.md is history: it says what was
/// true then).
fn user_docs() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| !p.ends_with("performance-log.md"))
        .collect();
    docs.push(root().join("README.md"));
    docs.sort();
    docs
}

/// Every file whose mentions are checked, with the text to read in it: all of README.md,
/// docs/, deploy/ and the benches' scripts, and the comments of Rust files (a path in
/// code is the code's business: the tests that read it fail on their own).
/// docs/performance-log.md is left out: it is history, and names what existed then.
fn mentioning_texts() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for dir in ["src", "client", "tests", "benches", "docs", "deploy"] {
        all_files(&root().join(dir), &mut files);
    }
    files.push(root().join("README.md"));
    let mut out = Vec::new();
    for file in files {
        if file.components().any(|c| c.as_os_str() == "target")
            || file.ends_with("docs/performance-log.md")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let text = if file.extension().is_some_and(|e| e == "rs") {
            text.lines()
                .map(str::trim_start)
                .filter(|l| l.starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            text
        };
        out.push((file, text));
    }
    out
}

/// Every file under `dir`, whatever its kind (deploy/ has scripts, units, a Containerfile).
fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn relative(file: &Path) -> String {
    file.strip_prefix(root()).unwrap().display().to_string()
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./*".contains(c)
}

/// The repository paths `text` mentions: a word starting with one of [`TOP`], up to the
/// first character no path has, less a trailing `.` or `,`.
fn mentioned_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for top in TOP {
        for (at, _) in text.match_indices(top) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| is_path_char(c) || c == '$' || c == '~') {
                continue; // inside a longer path, or a path on the target host
            }
            let path: String = text[at..].chars().take_while(|c| is_path_char(*c)).collect();
            let path = path.trim_end_matches(['.', ',']);
            found.push(path.to_owned());
        }
    }
    found
}

/// `path`, mentioned in `file`, names a file or directory that exists: relative to the
/// repository, or to the crate `file` is in (the client crate's own `src/`), or one that
/// .gitignore names (made where it is used, never committed).
fn exists(file: &Path, path: &str) -> bool {
    let crate_root = ["client", "tests/support"]
        .into_iter()
        .map(|c| root().join(c))
        .find(|c| file.starts_with(c))
        .unwrap_or_else(|| root().to_path_buf());
    let ignored = std::fs::read_to_string(root().join(".gitignore")).unwrap();
    exists_under(root(), path)
        || exists_under(&crate_root, path)
        || ignored.lines().any(|l| l.strip_prefix('/') == Some(path))
}

/// `path` (with `*` in one component at most) names something under `base`.
fn exists_under(base: &Path, path: &str) -> bool {
    let Some(star) = path.find('*') else { return base.join(path).exists() };
    let dir_end = path[..star].rfind('/').map_or(0, |i| i + 1);
    let (dir, pattern) = path.split_at(dir_end);
    let pattern = pattern.split('/').next().unwrap();
    let (prefix, suffix) = pattern.split_once('*').unwrap();
    std::fs::read_dir(base.join(dir)).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.len() >= prefix.len() + suffix.len()
                && name.starts_with(prefix)
                && name.ends_with(suffix)
        })
    })
}

#[test]
fn every_repository_path_the_documentation_mentions_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for (file, text) in mentioning_texts() {
        for path in mentioned_paths(&text) {
            checked += 1;
            if !exists(&file, &path) {
                missing.push(format!("{}: {path}", relative(&file)));
            }
        }
    }
    assert!(checked > 200, "too few paths found ({checked}): the scan is broken");
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "paths that do not exist:\n{}", missing.join("\n"));
}

#[test]
fn every_relative_markdown_link_resolves() {
    let mut dangling = Vec::new();
    for file in user_docs().into_iter().chain([root().join("docs/performance-log.md")]) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("](") {
            let target = text[at + 2..].split(')').next().unwrap();
            let target = target.split('#').next().unwrap();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !file.parent().unwrap().join(target).exists() {
                dangling.push(format!("{}: ({target})", relative(&file)));
            }
        }
    }
    assert!(dangling.is_empty(), "links to nothing:\n{}", dangling.join("\n"));
}

/// The names of one kind of target (`test`, `bench`) of every workspace member `cargo`
/// builds here: `[[test]]`/`[[bench]]` sections and the files cargo discovers.
fn targets(kind: &str) -> BTreeSet<String> {
    let dir = if kind == "test" { "tests" } else { "benches" };
    let mut names = BTreeSet::new();
    for member in [".", "client", "tests/support"] {
        let manifest: toml::Table = std::fs::read_to_string(root().join(member).join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
        for t in manifest.get(kind).and_then(|t| t.as_array()).into_iter().flatten() {
            names.insert(t["name"].as_str().unwrap().to_owned());
        }
        let Ok(entries) = std::fs::read_dir(root().join(member).join(dir)) else { continue };
        for entry in entries.map(Result::unwrap) {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "rs") {
                names.insert(path.file_stem().unwrap().to_string_lossy().into_owned());
            } else if path.join("main.rs").is_file() {
                names.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    names
}

/// The name after every `--test` and `--bench` flag in `text`, with its kind (an
/// upper-case name is a placeholder: `--bench NAME`).
fn named_targets(text: &str) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    for kind in ["test", "bench"] {
        let flag = format!("--{kind} ");
        for (at, _) in text.match_indices(&flag) {
            let name: String = text[at + flag.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            if name.chars().any(|c| c.is_ascii_lowercase()) {
                found.push((kind, name));
            }
        }
    }
    found
}

#[test]
fn every_cargo_test_and_bench_target_named_exists() {
    let tests = targets("test");
    let benches = targets("bench");
    assert!(tests.contains("integration") && benches.contains("throttle"), "{tests:?} {benches:?}");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (file, text) in mentioning_texts() {
        for (kind, name) in named_targets(&text) {
            checked += 1;
            let known = if kind == "test" { &tests } else { &benches };
            if !known.contains(&name) {
                wrong.push(format!("{}: --{kind} {name:?}", relative(&file)));
            }
        }
    }
    assert!(checked >= 10, "too few target names found ({checked}): the scan is broken");
    assert!(
        wrong.is_empty(),
        "targets that do not exist (tests {tests:?}, benches {benches:?}):\n{}",
        wrong.join("\n")
    );
}

/// Where `text` cites an issue: `issue 12`, `issues 23–24`, `#12` (but not a standard's
/// number: `UTS #46`, `PKCS#8`).
fn issue_citations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lower = text.to_lowercase();
    for word in ["issue ", "issues ", "issue #", "pull request "] {
        for (at, _) in lower.match_indices(word) {
            let rest = &lower[at + word.len()..];
            if rest.trim_start_matches('#').starts_with(|c: char| c.is_ascii_digit()) {
                found.push(text[at..].chars().take(word.len() + 4).collect());
            }
        }
    }
    for (at, _) in text.match_indices('#') {
        let digit_after = text[at + 1..].starts_with(|c: char| c.is_ascii_digit());
        let before = text[..at].chars().next_back();
        let word_before = text[..at].trim_end().rsplit([' ', '(', '\n']).next().unwrap_or("");
        if digit_after
            && !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !["UTS", "RFC", "No."].contains(&word_before)
        {
            found.push(text[at..].chars().take(6).collect());
        }
    }
    found
}

#[test]
fn user_docs_cite_no_issue_numbers_and_no_machine_of_their_writer() {
    let mut wrong = Vec::new();
    for file in user_docs() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let place = format!("{}:{}", relative(&file), n + 1);
            for cite in issue_citations(line) {
                wrong.push(format!("{place}: {cite:?}"));
            }
            if line.to_lowercase().contains("this machine") {
                wrong.push(format!("{place}: \"this machine\" (which? say what it is)"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "user docs speak of the writer's work, not to the user:\n{}",
        wrong.join("\n")
    );
    // The check itself finds what it looks for, and passes what it must.
    assert_eq!(issue_citations("the goal (issue 10), issues 23–24, see #12").len(), 3);
    assert!(issue_citations("IDNA (UTS #46), PKCS#8, issue time, a non-issue").is_empty());
}

/// The modules docs/architecture.md's Layers picture names, with the line of each: the
/// first word of each of its columns (cells apart by two spaces or more), less a `/`, and
/// every path under src/ (the binary's line).
fn layers_picture() -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let picture = text
        .split("## Layers")
        .nth(1)
        .expect("docs/architecture.md has a Layers section")
        .split("```")
        .nth(1)
        .expect("the Layers section has a picture");
    let mut named = Vec::new();
    for (n, line) in picture.lines().enumerate() {
        for cell in line.split("  ").map(str::trim).filter(|c| !c.is_empty()) {
            let first = cell.split_whitespace().next().unwrap();
            named.push((first.trim_end_matches('/').to_owned(), n));
        }
        for (at, _) in line.match_indices("src/") {
            let name: String = line[at + 4..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            named.push((name, n));
        }
    }
    named
}

#[test]
fn the_layers_picture_names_every_module_in_the_layout_order() {
    let named = layers_picture();
    let line_of = |module: &str| named.iter().find(|(m, _)| m == module).map(|(_, n)| *n);
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("src")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        if module != "lib" && line_of(module).is_none() {
            missing.push(module.to_owned());
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "docs/architecture.md's Layers picture lacks {missing:?}");
    // Each box is below (or beside) every box listed after it in src/lib.rs's Layout.
    let order = super::layout_order();
    for pair in order.windows(2) {
        let (lower, upper) = (line_of(&pair[0]), line_of(&pair[1]));
        assert!(
            lower >= upper,
            "the Layers picture puts {} above {}, src/lib.rs's Layout the other way",
            pair[0],
            pair[1]
        );
    }
}
