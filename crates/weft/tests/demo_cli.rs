//! The README's first command must keep working: `weft demo` runs end to end and checks its
//! own claims (byte-identical decode, refusal past r losses).

use std::process::Command;

#[test]
fn demo_runs_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["demo", "--size", "1MiB", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("restored.bin is byte-identical to sample.bin"), "{stdout}");
    assert!(stdout.contains("refused, as it must be"), "{stdout}");
    assert!(stdout.contains("clay(10,4)") && stdout.contains("32.5% of rs(10,4)"), "{stdout}");
}

/// Issue 16 item 10: without --dir the demo works in a folder of its own under $TMPDIR and
/// removes it at the end (it left /tmp/weft-demo-PID behind).
#[test]
fn demo_without_a_dir_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["demo", "--size", "64KiB"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains(&tmp.path().display().to_string()), "worked elsewhere: {stdout}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
