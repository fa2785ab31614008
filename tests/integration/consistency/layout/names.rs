//! One name, one meaning: no two modules of `src/` share a name (a reader who meets
//! `network` or `verify` must not have to ask which), except the role names every
//! room may have; and every daemon metric name is written once, in
//! `src/telemetry/metrics.rs`, where its doc comment says what it counts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{root, rust_files};

/// Names a module may share because they say what a file is for in its room, not
/// what the room is.
const ROLE_NAMES: [&str; 4] = ["mod", "config", "tests", "error"];

/// Module name → the module paths that carry it, for every file and directory of `src/`
/// (`src/lib.rs` and `src/main.rs` are the crate roots, not modules).
fn module_names() -> BTreeMap<String, Vec<String>> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(root().join("src")).unwrap().with_extension("");
        let parts: Vec<String> =
            relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        for depth in 1..=parts.len() {
            let name = &parts[depth - 1];
            if depth == 1 && (name == "lib" || name == "main") {
                continue;
            }
            let path = parts[..depth].join("/");
            let paths = names.entry(name.clone()).or_default();
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    names
}

#[test]
fn no_two_modules_share_a_name_but_role_names() {
    let shared: Vec<(String, Vec<String>)> = module_names()
        .into_iter()
        .filter(|(name, paths)| paths.len() > 1 && !ROLE_NAMES.contains(&name.as_str()))
        .collect();
    assert!(shared.is_empty(), "modules sharing a name: {shared:?}");
}

#[test]
fn the_name_check_sees_a_shared_name() {
    // `store/redis/mod.rs` and `store/mod.rs` are both `mod`: a role name, allowed;
    // `store` itself is one module even though it is a directory with files.
    let names = module_names();
    assert_eq!(names["store"], vec!["store".to_owned()]);
    assert!(names["mod"].len() > 1);
}

/// `"portcullis_<name>"` literals outside `src/telemetry/metrics.rs`: metric names
/// written where they are recorded, which the docs test cannot find and an operator's
/// dashboard then misses.
#[test]
fn every_metric_name_is_written_in_telemetry_metrics_only() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let home: PathBuf = root().join("src/telemetry/metrics.rs");
    let mut strays = Vec::new();
    for file in files.iter().filter(|f| **f != home) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("\"portcullis_") {
                let name: String = rest[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // The descriptor set's name in src/lib.rs is no metric.
                if name != "portcullis_descriptor" {
                    strays.push(format!("{}:{}: {name}", file.display(), n + 1));
                }
                rest = &rest[at + 1..];
            }
        }
    }
    assert!(strays.is_empty(), "metric names outside src/telemetry/metrics.rs: {strays:#?}");
}
