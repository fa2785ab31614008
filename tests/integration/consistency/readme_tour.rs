//! The README's "quick tour" is true: each `$ portcullis ...` line of its console blocks,
//! run against a daemon on its embedded default, prints what the README shows (the
//! seconds until the door opens and the time it shut are the only figures allowed to
//! differ).

use std::process::Command;

use portcullis_test_support::{DaemonProcess, TEST_TOP_LEVEL};

/// The `$ ` commands of the tour, each with the lines the README shows after it.
fn tour() -> Vec<(String, Vec<String>)> {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let section = readme
        .split("## A quick tour with the operator client")
        .nth(1)
        .expect("the README has its tour")
        .split("\n## ")
        .next()
        .unwrap();
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for block in section.split("```console").skip(1) {
        let block = block.split("```").next().unwrap();
        for line in block.lines() {
            if let Some(command) = line.strip_prefix("$ ") {
                steps.push((command.to_string(), Vec::new()));
            } else if let Some((_, shown)) = steps.last_mut()
                && !line.is_empty()
            {
                shown.push(line.to_string());
            }
        }
    }
    steps
}

#[test]
fn the_readme_tour_prints_what_the_readme_shows() {
    // The daemon's defaults, on its embedded store: no realm configured.
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\ndata_dir = {:?}\n",
        dir.path().display().to_string()
    );
    let daemon = DaemonProcess::spawn(&config);
    let steps = tour();
    assert!(steps.len() >= 8, "the tour has too few steps: {steps:?}");
    // The README's own `portcullis() { cargo run ... }` is replaced by the built binary,
    // pointed at this daemon.
    let prelude = format!(
        "portcullis() {{ local command=$1; shift; '{}' \"$command\" --addr http://{} \"$@\"; }}",
        env!("CARGO_BIN_EXE_portcullis"),
        daemon.addr
    );
    let mut checked = 0;
    for (command, shown) in steps.iter().filter(|(c, _)| !c.starts_with("portcullis() {")) {
        let out =
            Command::new("bash").arg("-c").arg(format!("{prelude}\n{command}")).output().unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        let printed: Vec<&str> = printed.lines().collect();
        assert_eq!(
            printed.len(),
            shown.len(),
            "`{command}` printed {printed:?}, the README shows {shown:?}"
        );
        for (p, s) in printed.iter().zip(shown) {
            let varies = |prefix: &str| s.starts_with(prefix) && p.starts_with(prefix);
            let same = p == s || varies("seconds_until_open: ") || varies("door_shut_at: 20");
            assert!(same, "`{command}` printed {p:?} where the README shows {s:?}");
        }
        checked += 1;
    }
    assert!(checked >= 8);
}
