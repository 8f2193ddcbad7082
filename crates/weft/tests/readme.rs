//! README.md cannot drift: every ```sh block in it runs, as written, against a fresh `weft up`
//! of the size the README starts (12 nodes), from a directory holding a copy of README.md, with
//! `weft` on PATH and the cluster found through WEFT_META / WEFT_SECRET_FILE (what `./weft-data`
//! gives a user). Each block is one `bash -eu` script; a block fails the test when any command
//! in it fails.
//!
//! The only line not run as-is is a `weft status --watch` (it runs until Ctrl-C): it must end
//! its block; the test runs it for a few seconds under `timeout -s INT`, checks it redrew the
//! status at least twice, and then waits — as the README tells the user to watch — until meta
//! reports no under-protected unit, so the next block starts on a repaired cluster.

mod common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{
    cluster::{weft_bin, Cluster},
    sh_blocks,
};

/// Runs `script` with bash -eu in `dir` against `cluster`; panics with its output on failure.
/// Returns stdout and stderr.
fn run(cluster: &Cluster, dir: &Path, script: &str) -> (String, String) {
    let weft_dir = Path::new(weft_bin()).parent().expect("the binary's directory");
    let path = format!("{}:{}", weft_dir.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("bash")
        .args(["-euc", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("WEFT_META", cluster.meta_url())
        .env("WEFT_SECRET_FILE", cluster.secret_file())
        .env("WEFT_LOG", "warn")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "README block failed ({}):\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status,
    );
    (stdout, stderr)
}

#[test]
fn every_readme_block_runs_as_written_on_the_cluster_it_starts() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md is at the workspace root");
    assert!(
        readme.contains("cargo run --release -p weft -- up") && readme.contains("12-node cluster"),
        "the README's first command starts 12 nodes with `weft up`"
    );
    let blocks = sh_blocks(&readme);
    assert!(blocks.len() >= 3, "README.md has its tour in ```sh blocks: {}", blocks.len());
    // The README's cluster: 12 nodes (weft up's default), nodes down after 1.5 s instead of
    // 5 s so the drill's repair is quick.
    let cluster = Cluster::start(12, &["--down-after-ms", "1500", "--heartbeat-ms", "300"]);
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("README.md"), &readme).unwrap();
    let mut ran_watch = false;
    for block in &blocks {
        let lines: Vec<&str> = block.lines().collect();
        let watch = lines.iter().position(|l| l.contains("--watch"));
        let Some(at) = watch else {
            run(&cluster, work.path(), block);
            continue;
        };
        assert_eq!(at, lines.len() - 1, "a --watch line must end its block:\n{block}");
        let (_, said) = run(&cluster, work.path(), &lines[..at].join("\n"));
        assert!(said.contains("degraded read"), "the drill's get was not degraded:\n{said}");
        let command = lines[at].split('#').next().unwrap().trim();
        let (watched, _) =
            run(&cluster, work.path(), &format!("timeout -s INT 3 {command} || [ $? = 124 ]"));
        let screens = watched.matches("under-protected units").count();
        assert!(screens >= 2, "`{command}` redrew {screens} times in 3 s:\n{watched}");
        // What the user watches for: the dead node's units rebuilt elsewhere.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let status = cluster.status();
            if status["nodes_down"] == 1 && status["under_protected_units"] == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "the drill's repair did not finish: {status}");
            std::thread::sleep(Duration::from_millis(300));
        }
        ran_watch = true;
    }
    assert!(ran_watch, "the README's drill watches `weft status --watch`");
    let copy = std::fs::read(work.path().join("readme.copy")).expect("the drill's degraded get");
    assert_eq!(copy, readme.as_bytes(), "the degraded read returned other bytes");
}
