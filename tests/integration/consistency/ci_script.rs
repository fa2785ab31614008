//! `.ci/run` finds the build where cargo puts it: from `cargo metadata`'s
//! `target_directory`, never a `./target` of its own, so a machine with
//! `CARGO_TARGET_DIR` set runs the client suites against the daemon it just built.

use std::path::Path;

/// Every line of `.ci/run` outside comments that names a path under the build directory
/// names it through `$target_dir`, and `$target_dir` comes from `cargo metadata`.
#[test]
fn ci_run_takes_the_target_directory_from_cargo() {
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    let code: Vec<&str> = script.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
    let assignment = code
        .iter()
        .position(|l| l.starts_with("target_dir=$(cargo metadata --format-version 1"))
        .expect(".ci/run sets target_dir from cargo metadata");
    assert!(
        code[assignment..].iter().take(3).any(|l| l.contains("target_directory")),
        ".ci/run reads cargo metadata's target_directory"
    );
    for line in &code {
        let bare = line.replace("$target_dir/", "").replace("${target_dir}/", "");
        assert!(
            !bare.contains("target/"),
            ".ci/run names a build path without $target_dir: {line}"
        );
    }
    for needed in
        ["PORTCULLIS_BINARY=\"$target_dir/debug/portcullis\"", "venv=\"$target_dir/python-venv\""]
    {
        assert!(script.contains(needed), ".ci/run lacks {needed}");
    }
}
