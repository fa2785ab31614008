//! One name, one meaning: no two modules of `src/` share a name (a reader who meets
//! `network` or `verify` must not have to ask which), except the role names every
//! room may have and a rule's name in the layers of docs/architecture.md's "One name
//! per rule" table, which this test reads: each rule's files are where the table says,
//! named for the rule, with its trait and each backend's implementation of it, and no
//! file of those layers is named for anything else. And every daemon metric name is
//! written once, in `src/telemetry/metrics.rs`, where its doc comment says what it counts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{root, rust_files};

/// Names a module may share because they say what a file is for in its room, not
/// what the room is.
const ROLE_NAMES: [&str; 4] = ["mod", "config", "tests", "error"];

/// The layers a rule's name may appear in, as module paths with `{}` for the rule (the
/// defence of the same concept may carry it too: `defence/devices` keeps the devices'
/// tokens, `store/devices` their epochs).
const RULE_LAYERS: [&str; 5] =
    ["throttle/{}", "store/{}", "store/redis/{}", "store/embedded/{}", "defence/{}"];

/// The machinery beside the rules in each rule folder (docs/architecture.md, "One name
/// per rule", the paragraph under the table): a file of these folders that is neither a
/// rule's nor listed here is a second name for something.
const MACHINERY: [(&str, &[&str]); 5] = [
    ("src/throttle", &["mod.rs", "flow.rs"]),
    ("src/store", &["mod.rs", "error.rs", "config.rs", "instrumented.rs"]),
    (
        "src/store/redis",
        &[
            "mod.rs",
            "standalone.rs",
            "cluster.rs",
            "sentinel.rs",
            "pool.rs",
            "settings.rs",
            "info.rs",
            "scripts.rs",
            "invocation.rs",
            "error.rs",
        ],
    ),
    ("src/store/embedded", &["mod.rs", "writer.rs", "tables.rs", "entry.rs"]),
    ("src/store/lua", &["prelude.lua"]),
];

/// One row of the table: the rule's name and each layer's cell (`None` for `—`).
#[derive(Debug)]
struct Rule {
    name: String,
    throttle: Option<String>,
    store: Option<String>,
    /// The store trait the `src/store/` cell names after the file, if any.
    store_trait: Option<String>,
    redis: Option<String>,
    embedded: Option<String>,
    lua: Option<String>,
}

/// The rows of docs/architecture.md's "One name per rule" table.
fn rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let section = text.split("\n## One name per rule\n").nth(1).expect("the section exists");
    let section = section.split("\n## ").next().unwrap();
    let cell = |c: &str| {
        let c = c.trim();
        (c != "—").then(|| c.split('`').nth(1).expect("a cell names its file").to_owned())
    };
    let rows: Vec<Rule> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            Rule {
                name: cells[1].trim_matches('`').to_owned(),
                throttle: cell(cells[3]),
                store: cell(cells[4]),
                store_trait: cells[4].split('`').nth(3).map(str::to_owned),
                redis: cell(cells[5]),
                embedded: cell(cells[6]),
                lua: cell(cells[7]),
            }
        })
        .collect();
    assert!(rows.len() >= 7, "the table has a row per rule: {rows:?}");
    rows
}

/// What is wrong with the rule folders under `src` (the tree at `src_root`) against
/// `rules`: every problem, in words.
fn rule_layout_problems(src_root: &Path, rules: &[Rule]) -> Vec<String> {
    let mut problems = Vec::new();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    for rule in rules {
        let name = &rule.name;
        let cells = [
            ("throttle", &rule.throttle, format!("{name}.rs")),
            ("store", &rule.store, format!("{name}.rs")),
            ("store/redis", &rule.redis, format!("{name}.rs")),
            ("store/embedded", &rule.embedded, format!("{name}.rs")),
        ];
        for (folder, cell, want) in cells {
            let Some(file) = cell else { continue };
            if *file != want {
                problems.push(format!("{name}: {folder}/{file} is not named for the rule"));
            }
            if !src_root.join(folder).join(file).is_file() {
                problems.push(format!("{name}: src/{folder}/{file} does not exist"));
            }
        }
        if let Some(lua) = &rule.lua {
            let (file, dir) = (format!("{name}.lua"), format!("{name}/"));
            if *lua != file && *lua != dir {
                problems.push(format!("{name}: lua/{lua} is not named for the rule"));
            }
            if !src_root.join("store/lua").join(lua.trim_end_matches('/')).exists() {
                problems.push(format!("{name}: src/store/lua/{lua} does not exist"));
            }
        }
        // The trait beside its shapes, and each backend's implementation of it in the
        // backend's file of the rule's name.
        let store_text = read(&src_root.join(format!("store/{name}.rs")));
        if let Some(tr) = &rule.store_trait {
            if !store_text.contains(&format!("pub trait {tr}:")) {
                problems.push(format!("{name}: src/store/{name}.rs does not define {tr}"));
            }
            for (backend, ty) in [("redis", "RedisStore"), ("embedded", "EmbeddedStore")] {
                let file = src_root.join(format!("store/{backend}/{name}.rs"));
                if !read(&file).contains(&format!("impl {tr} for {ty}")) {
                    problems.push(format!("{name}: {} does not implement {tr}", file.display()));
                }
            }
        }
    }
    // Every file of the rule folders is a rule's or the machinery's.
    for (folder, machinery) in MACHINERY {
        let dir = src_root.join(folder.trim_start_matches("src/"));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            problems.push(format!("{folder} cannot be read"));
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.path().is_dir();
            let stem = file.trim_end_matches(".rs").trim_end_matches(".lua");
            let a_rule = rules.iter().any(|r| r.name == stem);
            // Sub-folders of store/ are the backends, the scripts (each checked itself) and
            // the keys.
            let a_backend = folder == "src/store" && is_dir;
            if !a_rule && !a_backend && !machinery.contains(&file.as_str()) {
                problems.push(format!("{folder}/{file} is named for no rule and is no machinery"));
            }
        }
    }
    problems
}

#[test]
fn every_rule_has_one_name_in_every_layer() {
    let problems = rule_layout_problems(&root().join("src"), &rules());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_rule_check_sees_a_second_name_and_a_missing_implementation() {
    // A planted tree: the network bucket's Redis side under another name, and a store
    // trait its embedded side does not implement.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    for folder in ["throttle", "store/redis", "store/embedded", "store/lua"] {
        std::fs::create_dir_all(src.join(folder)).unwrap();
    }
    let write = |p: &str, text: &str| std::fs::write(src.join(p), text).unwrap();
    write("throttle/network_bucket.rs", "");
    write("store/network_bucket.rs", "#[async_trait]\npub trait NetworkBucketStore: Send {}\n");
    write("store/redis/bucket.rs", "impl NetworkBucketStore for RedisStore {}\n");
    write("store/embedded/network_bucket.rs", "");
    write("store/lua/network_bucket.lua", "");
    let rule = Rule {
        name: "network_bucket".into(),
        throttle: Some("network_bucket.rs".into()),
        store: Some("network_bucket.rs".into()),
        store_trait: Some("NetworkBucketStore".into()),
        redis: Some("network_bucket.rs".into()),
        embedded: Some("network_bucket.rs".into()),
        lua: Some("network_bucket.lua".into()),
    };
    let problems = rule_layout_problems(src, &[rule]).join("\n");
    assert!(problems.contains("src/store/redis/bucket.rs is named for no rule"), "{problems}");
    assert!(problems.contains("src/store/redis/network_bucket.rs does not exist"), "{problems}");
    assert!(problems.contains("does not implement NetworkBucketStore"), "{problems}");
}

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
fn no_two_modules_share_a_name_but_role_names_and_rules() {
    let rules: Vec<String> = rules().into_iter().map(|r| r.name).collect();
    let shared: Vec<(String, Vec<String>)> = module_names()
        .into_iter()
        .filter(|(name, paths)| {
            let in_rule_layers = rules.contains(name)
                && paths.iter().all(|p| RULE_LAYERS.iter().any(|l| *p == l.replace("{}", name)));
            paths.len() > 1 && !ROLE_NAMES.contains(&name.as_str()) && !in_rule_layers
        })
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
    // A rule's name is shared by its layers.
    assert!(names["network_bucket"].contains(&"store/redis/network_bucket".to_owned()));
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
