//! `weft ec` driven through the real binary, in temporary directories.
//!
//! Every expectation is computed independently of the binary: unit bytes from the file
//! itself and from `weft_codes` (the library), checksums with `crc32c`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use serde_json::Value;
use weft_codes::CodeSpec;

const SEGMENT_BYTES: usize = 64 * 1024;
const MIB: usize = 1 << 20;

fn weft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft")).args(args).output().expect("weft runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs weft, asserts it succeeded, returns stdout.
fn ok(args: &[&str]) -> String {
    let output = weft(args);
    assert!(
        output.status.success(),
        "weft {args:?} failed: {}\nstdout: {}",
        text(&output.stderr),
        text(&output.stdout)
    );
    text(&output.stdout)
}

/// Runs weft, asserts it failed with a message, returns stderr.
fn fails(args: &[&str]) -> String {
    let output = weft(args);
    assert!(
        !output.status.success(),
        "weft {args:?} should fail; stdout: {}",
        text(&output.stdout)
    );
    let stderr = text(&output.stderr);
    assert!(!stderr.trim().is_empty(), "weft {args:?} failed without a message");
    stderr
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// A temporary directory holding `input` (the file to encode) and `dir` (the encoding).
struct Scene {
    _temp: tempfile::TempDir,
    root: PathBuf,
    input: PathBuf,
    dir: PathBuf,
    data: Vec<u8>,
}

impl Scene {
    fn new(len: usize, seed: u64) -> Scene {
        let temp = tempfile::tempdir().expect("temp dir");
        let root = temp.path().to_path_buf();
        let input = root.join("input.bin");
        let data = random_bytes(len, seed);
        fs::write(&input, &data).expect("write input");
        Scene { dir: root.join("encoded"), _temp: temp, root, input, data }
    }

    fn encode(&self, code_args: &[&str]) -> String {
        let mut args = vec!["ec", "encode", path_str(&self.input)];
        args.extend_from_slice(code_args);
        args.extend_from_slice(&["-o", path_str(&self.dir)]);
        ok(&args)
    }

    fn unit_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn unit(&self, index: usize) -> PathBuf {
        self.unit_path(&format!("unit-{index:02}"))
    }

    fn manifest(&self) -> Value {
        let bytes = fs::read(self.dir.join("manifest.json")).expect("manifest exists");
        serde_json::from_slice(&bytes).expect("manifest is JSON")
    }

    /// Decodes into a new file, asserts it equals the input byte for byte.
    fn assert_decodes(&self, extra: &[&str]) -> String {
        let output = self.root.join(format!("decoded-{}", rand::random::<u32>()));
        let mut args = vec!["ec", "decode", path_str(&self.dir), "-o", path_str(&output)];
        args.extend_from_slice(extra);
        let stdout = ok(&args);
        let decoded = fs::read(&output).expect("decoded file exists");
        assert_eq!(decoded.len(), self.data.len(), "decoded length");
        assert!(decoded == self.data, "decoded bytes differ from the input");
        fs::remove_file(&output).expect("remove decoded file");
        stdout
    }

    fn file_names(&self, dir: &Path) -> BTreeSet<String> {
        fs::read_dir(dir)
            .expect("read dir")
            .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    }
}

/// The units a code should produce for `data`, computed with the library: data units are the
/// zero-padded slices, parity comes from `Code::encode`. L is `unit_len_for`, but never 0.
fn expected_units(code_name: &str, data: &[u8]) -> Vec<Vec<u8>> {
    let code = CodeSpec::parse(code_name).expect("spec").build().expect("code");
    let k = code.data_units();
    let unit_len = code.unit_len_for(data.len()).max(code.unit_len_multiple());
    assert!(unit_len > 0);
    let mut units: Vec<Vec<u8>> = (0..k)
        .map(|i| {
            let mut unit = vec![0u8; unit_len];
            let start = (i * unit_len).min(data.len());
            let end = ((i + 1) * unit_len).min(data.len());
            unit[..end - start].copy_from_slice(&data[start..end]);
            unit
        })
        .collect();
    let mut parity = vec![vec![0u8; unit_len]; code.parity_units()];
    {
        let data_refs: Vec<&[u8]> = units.iter().map(Vec::as_slice).collect();
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.encode(&data_refs, &mut parity_refs).expect("library encode");
    }
    units.extend(parity);
    units
}

/// Flips one byte of a file in place.
fn corrupt(path: &Path, offset: usize) {
    let mut bytes = fs::read(path).expect("read unit");
    bytes[offset] ^= 0x5a;
    fs::write(path, bytes).expect("write unit");
}

/// Checks everything `encode` promises about the directory for this code and input.
fn assert_encoding(scene: &Scene, code_name: &str) {
    let expected = expected_units(code_name, &scene.data);
    let n = expected.len();
    let unit_len = expected[0].len();
    let mut names: BTreeSet<String> = (0..n).map(|i| format!("unit-{i:02}")).collect();
    names.insert("manifest.json".into());
    assert_eq!(scene.file_names(&scene.dir), names, "exactly the units and the manifest");
    for (index, unit) in expected.iter().enumerate() {
        let stored = fs::read(scene.unit(index)).expect("unit file");
        assert_eq!(stored.len(), unit_len, "unit {index} length");
        assert!(&stored == unit, "{code_name} unit {index} differs from the library's bytes");
    }
    if !scene.data.is_empty() {
        let first = fs::read(scene.unit(0)).expect("unit-00");
        let head = unit_len.min(scene.data.len());
        assert_eq!(&first[..head], &scene.data[..head], "unit-00 starts with the file");
    }

    let manifest = scene.manifest();
    let spec = CodeSpec::parse(code_name).expect("spec");
    assert_eq!(manifest["format"], "weft-ec");
    assert_eq!(manifest["version"], 1);
    assert_eq!(manifest["code"], code_name);
    assert_eq!(manifest["family"], spec.family());
    assert_eq!(manifest["k"], spec.k());
    assert_eq!(manifest["r"], spec.r());
    assert_eq!(manifest["original_len"], scene.data.len());
    assert_eq!(manifest["unit_len"], unit_len);
    assert_eq!(manifest["segment_bytes"], SEGMENT_BYTES);
    assert_eq!(manifest["checksum"], "crc32c");
    let units = manifest["units"].as_array().expect("units array");
    assert_eq!(units.len(), n);
    for (index, (entry, unit)) in units.iter().zip(&expected).enumerate() {
        assert_eq!(entry["index"], index);
        assert_eq!(entry["file"], format!("unit-{index:02}"));
        let segments: Vec<String> = unit
            .chunks(SEGMENT_BYTES)
            .map(|segment| format!("{:08x}", crc32c::crc32c(segment)))
            .collect();
        let listed: Vec<&str> = entry["segments"]
            .as_array()
            .expect("segments array")
            .iter()
            .map(|s| s.as_str().expect("checksum string"))
            .collect();
        assert_eq!(listed, segments, "{code_name} unit {index} segment checksums");
    }
}

#[test]
fn round_trips_every_code_and_size() {
    let codes: [(&str, &[&str], usize); 3] = [
        ("rs(10,4)", &["--code", "rs", "--k", "10", "--r", "4"], 10),
        ("rs(6,3)", &["--code", "rs(6,3)"], 6),
        ("rep(3)", &["--code", "rep", "--r", "2"], 1),
    ];
    for (seed, (name, args, k)) in codes.into_iter().enumerate() {
        for len in [0, 1, 1000, k * SEGMENT_BYTES, 3 * MIB + 4321] {
            let scene = Scene::new(len, seed as u64 * 1000 + len as u64);
            let stdout = scene.encode(args);
            assert!(stdout.contains(name), "encode names the code: {stdout}");
            assert_encoding(&scene, name);
            scene.assert_decodes(&[]);
            let verified = ok(&["ec", "verify", path_str(&scene.dir), "--json"]);
            let report: Value = serde_json::from_str(verified.trim()).expect("verify JSON");
            assert_eq!(report["intact"], true, "{name} {len}: {verified}");
        }
    }
}

#[test]
fn window_size_changes_memory_not_bytes() {
    let scene = Scene::new(2 * MIB + 777, 7);
    scene.encode(&["--code", "rs(6,3)"]);
    let default_units: Vec<Vec<u8>> =
        (0..9).map(|i| fs::read(scene.unit(i)).expect("unit")).collect();
    let manifest = fs::read(scene.dir.join("manifest.json")).expect("manifest");
    scene.encode(&["--code", "rs(6,3)", "--window", "64KiB", "--force"]);
    for (i, unit) in default_units.iter().enumerate() {
        assert!(&fs::read(scene.unit(i)).expect("unit") == unit, "unit {i} depends on window");
    }
    assert_eq!(fs::read(scene.dir.join("manifest.json")).expect("manifest"), manifest);
    assert_encoding(&scene, "rs(6,3)");
    fs::remove_file(scene.unit(2)).expect("remove");
    corrupt(&scene.unit(7), 200_000);
    scene.assert_decodes(&["--window", "64KiB"]);
}

#[test]
fn more_than_100_units_get_three_digit_names() {
    let scene = Scene::new(99 * 1000 + 17, 11);
    scene.encode(&["--code", "rs", "--k", "99", "--r", "2"]);
    let names = scene.file_names(&scene.dir);
    assert_eq!(names.len(), 102);
    for i in 0..101 {
        assert!(names.contains(&format!("unit-{i:03}")), "unit-{i:03} missing from {names:?}");
    }
    assert_eq!(scene.manifest()["units"][100]["file"], "unit-100");
    fs::remove_file(scene.unit_path("unit-000")).expect("remove");
    fs::remove_file(scene.unit_path("unit-050")).expect("remove");
    scene.assert_decodes(&[]);
}

#[test]
fn decode_survives_r_deleted_units() {
    let scene = Scene::new(MIB + 12345, 21);
    scene.encode(&["--code", "rs", "--k", "10", "--r", "4"]);
    for unit in [0, 5, 11, 13] {
        fs::remove_file(scene.unit(unit)).expect("remove");
    }
    let stdout = scene.assert_decodes(&[]);
    assert!(stdout.contains("unit-00 missing"), "decode reports the damage: {stdout}");

    let scene = Scene::new(600_001, 22);
    scene.encode(&["--code", "rs(6,3)"]);
    for unit in [0, 1, 2] {
        fs::remove_file(scene.unit(unit)).expect("remove");
    }
    scene.assert_decodes(&[]);

    let scene = Scene::new(5000, 23);
    scene.encode(&["--code", "rep", "--r", "2"]);
    fs::remove_file(scene.unit(0)).expect("remove");
    corrupt(&scene.unit(1), 4999);
    scene.assert_decodes(&[]);
}

#[test]
fn decode_survives_r_corrupt_units() {
    let scene = Scene::new(MIB + 999, 31);
    scene.encode(&["--code", "rs", "--k", "10", "--r", "4"]);
    let unit_len = scene.manifest()["unit_len"].as_u64().expect("unit_len") as usize;
    corrupt(&scene.unit(1), 0);
    corrupt(&scene.unit(9), unit_len - 1);
    corrupt(&scene.unit(12), 70_000);
    // A truncated unit is as good as corrupt from where it ends.
    let unit = fs::read(scene.unit(4)).expect("unit");
    fs::write(scene.unit(4), &unit[..unit_len / 2]).expect("truncate");
    let json = scene.assert_decodes(&["--json"]);
    let report: Value = serde_json::from_str(json.trim()).expect("decode JSON");
    let damaged: BTreeSet<u64> = report["damaged"]
        .as_array()
        .expect("damaged list")
        .iter()
        .map(|d| d["unit"].as_u64().expect("unit"))
        .collect();
    // Parity is read only when data is damaged; the three damaged data units are always seen.
    assert!(damaged.is_superset(&[1, 4, 9].into()), "{json}");
    assert!(report["rebuilt_bytes"].as_u64().expect("rebuilt") > 0);
}

#[test]
fn decode_counts_erasures_per_window_not_per_file() {
    // rs(4,2), L = 3 MiB: three 1 MiB windows of 16 segments each.
    let scene = Scene::new(12 * MIB - 1234, 41);
    scene.encode(&["--code", "rs", "--k", "4", "--r", "2"]);
    let at = |segment: usize| segment * SEGMENT_BYTES + 100;
    // Six units damaged, more than r = 2, but never more than 2 in one window.
    corrupt(&scene.unit(0), at(1)); // window 0
    corrupt(&scene.unit(4), at(3)); // window 0
    corrupt(&scene.unit(1), at(20)); // window 1
    corrupt(&scene.unit(5), at(20)); // window 1
    corrupt(&scene.unit(2), at(40)); // window 2
    corrupt(&scene.unit(3), at(47)); // window 2
    scene.assert_decodes(&[]);
    let verify = weft(&["ec", "verify", path_str(&scene.dir), "--json"]);
    assert!(!verify.status.success(), "verify exits non-zero on damage");
    let report: Value = serde_json::from_str(text(&verify.stdout).trim()).expect("verify JSON");
    assert_eq!(report["intact"], false);
    assert_eq!(report["decodable"], true);
    assert_eq!(report["units"][5]["bad_segments"], serde_json::json!([20]));
    assert_eq!(report["units"][3]["state"], "damaged");

    // Two more units in segment 40 make three erasures there: now it cannot be decoded, and
    // the message says where and which.
    corrupt(&scene.unit(0), at(40));
    corrupt(&scene.unit(5), at(40));
    let output = scene.root.join("out.bin");
    let stderr = fails(&["ec", "decode", path_str(&scene.dir), "-o", path_str(&output)]);
    for expected in [
        "3 units lost or corrupt",
        "segment 40",
        "unit-00 corrupt in segment 40",
        "unit-02 corrupt in segment 40",
        "unit-05 corrupt in segment 40",
        "rs(4,2) recovers at most 2",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
    }
    assert!(!output.exists(), "no output file after a failed decode");
}

#[test]
fn byte_local_codes_erase_segments_not_windows() {
    // Four units damaged inside one window, two per segment: rs(4,2) still recovers each
    // segment, because α = 1 codes are decoded segment by segment.
    let scene = Scene::new(4 * 4 * SEGMENT_BYTES, 43);
    scene.encode(&["--code", "rs(4,2)"]);
    corrupt(&scene.unit(0), 10);
    corrupt(&scene.unit(1), 20);
    corrupt(&scene.unit(2), SEGMENT_BYTES + 10);
    corrupt(&scene.unit(3), SEGMENT_BYTES + 20);
    scene.assert_decodes(&[]);
}

#[test]
fn decode_refuses_when_more_than_r_are_lost() {
    let scene = Scene::new(500_000, 51);
    scene.encode(&["--code", "rs", "--k", "10", "--r", "4"]);
    for unit in [0, 1, 2] {
        fs::remove_file(scene.unit(unit)).expect("remove");
    }
    corrupt(&scene.unit(3), 5);
    corrupt(&scene.unit(12), 5);
    let output = scene.root.join("restored.bin");
    let stderr = fails(&["ec", "decode", path_str(&scene.dir), "-o", path_str(&output)]);
    for expected in [
        "cannot decode",
        "5 units lost or corrupt",
        "unit-00 missing",
        "unit-02 missing",
        "unit-03 corrupt in segment 0",
        "unit-12 corrupt in segment 0",
        "rs(10,4) recovers at most 4",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
    }
    assert!(!output.exists(), "no output file");
    let left: BTreeSet<String> = scene.file_names(&scene.root);
    assert_eq!(left, ["encoded", "input.bin"].map(String::from).into(), "no temporary files");

    let verify = weft(&["ec", "verify", path_str(&scene.dir), "--json"]);
    assert!(!verify.status.success());
    let report: Value = serde_json::from_str(text(&verify.stdout).trim()).expect("verify JSON");
    assert_eq!(report["decodable"], false);
    assert_eq!(report["units"][0]["state"], "missing");
}

/// Parses a `repair --json` line and checks what holds for every repair.
fn repair_report(stdout: &str, target: usize, unit_len: usize) -> Value {
    assert_eq!(stdout.lines().count(), 1, "--json prints exactly one line: {stdout}");
    let report: Value = serde_json::from_str(stdout.trim()).expect("repair JSON");
    assert_eq!(report["unit"], target);
    assert_eq!(report["unit_len"], unit_len);
    let reads = report["reads"].as_array().expect("reads");
    let total: u64 = reads.iter().map(|r| r["len"].as_u64().expect("len")).sum();
    assert_eq!(report["bytes_read"], total, "bytes_read is the sum of the reads");
    for read in reads {
        assert_ne!(read["unit"], target, "a repair never reads its target");
        let end = read["offset"].as_u64().expect("offset") + read["len"].as_u64().expect("len");
        assert!(end <= unit_len as u64, "read past the unit: {read}");
    }
    report
}

fn read_units(report: &Value) -> BTreeSet<u64> {
    report["reads"]
        .as_array()
        .expect("reads")
        .iter()
        .map(|r| r["unit"].as_u64().expect("unit"))
        .collect()
}

#[test]
fn repair_rebuilds_data_and_parity_units_from_k_whole_units() {
    let scene = Scene::new(1_000_003, 61);
    scene.encode(&["--code", "rs", "--k", "10", "--r", "4"]);
    let unit_len = scene.manifest()["unit_len"].as_u64().expect("unit_len") as usize;
    let originals: Vec<Vec<u8>> = (0..14).map(|i| fs::read(scene.unit(i)).expect("unit")).collect();
    let dir = path_str(&scene.dir);

    // A data unit, repaired in 64 KiB windows: the reads still report whole units.
    fs::remove_file(scene.unit(3)).expect("remove");
    let stdout = ok(&["ec", "repair", dir, "--unit", "3", "--json", "--window", "64KiB"]);
    let report = repair_report(&stdout, 3, unit_len);
    assert!(fs::read(scene.unit(3)).expect("rebuilt") == originals[3], "unit-03 restored");
    let units = read_units(&report);
    assert_eq!(units.len(), 10, "rs(10,4) reads 10 other units: {stdout}");
    let reads = report["reads"].as_array().expect("reads");
    assert_eq!(reads.len(), 10, "one range per helper: {stdout}");
    for read in reads {
        assert_eq!(read["offset"], 0);
        assert_eq!(read["len"], unit_len);
    }
    assert_eq!(report["bytes_read"], 10 * unit_len);

    // A parity unit, corrupt rather than missing; human output.
    corrupt(&scene.unit(12), unit_len / 2);
    let stdout = ok(&["ec", "repair", dir, "--unit", "12"]);
    assert!(stdout.contains("unit-12") && stdout.contains("from 10 units"), "{stdout}");
    assert!(fs::read(scene.unit(12)).expect("rebuilt") == originals[12], "unit-12 restored");

    let names = scene.file_names(&scene.dir);
    assert_eq!(names.len(), 15, "no temporary files left: {names:?}");
    ok(&["ec", "verify", dir]);
    scene.assert_decodes(&[]);
}

#[test]
fn repair_avoids_a_corrupt_helper() {
    let scene = Scene::new(300_000, 71);
    scene.encode(&["--code", "rs", "--k", "10", "--r", "4"]);
    let unit_len = scene.manifest()["unit_len"].as_u64().expect("unit_len") as usize;
    let original = fs::read(scene.unit(0)).expect("unit");
    fs::remove_file(scene.unit(0)).expect("remove");
    // Unit 1 is the first helper any plan for unit 0 would pick.
    corrupt(&scene.unit(1), 7);
    let stdout = ok(&["ec", "repair", path_str(&scene.dir), "--unit", "0", "--json"]);
    let report = repair_report(&stdout, 0, unit_len);
    let units = read_units(&report);
    assert!(!units.contains(&1), "the corrupt helper is not used: {stdout}");
    assert_eq!(units.len(), 10, "{stdout}");
    assert_eq!(report["discarded_reads"][0]["unit"], 1, "{stdout}");
    assert_eq!(report["skipped"][0]["unit"], 1, "{stdout}");
    assert!(fs::read(scene.unit(0)).expect("rebuilt") == original, "unit-00 restored");

    // rep(3): a corrupt first copy sends the repair to the other one.
    let scene = Scene::new(100_000, 72);
    scene.encode(&["--code", "rep", "--r", "2"]);
    let original = fs::read(scene.unit(1)).expect("unit");
    fs::remove_file(scene.unit(1)).expect("remove");
    corrupt(&scene.unit(0), 99_999);
    let stdout = ok(&["ec", "repair", path_str(&scene.dir), "--unit", "1", "--json"]);
    let report = repair_report(&stdout, 1, 100_000);
    assert_eq!(read_units(&report), [2].into(), "{stdout}");
    assert!(fs::read(scene.unit(1)).expect("rebuilt") == original, "unit-01 restored");
}

#[test]
fn repair_refuses_when_too_many_are_lost() {
    let scene = Scene::new(10_000, 81);
    scene.encode(&["--code", "rs(6,3)"]);
    for unit in [0, 2, 4, 6] {
        fs::remove_file(scene.unit(unit)).expect("remove");
    }
    let stderr = fails(&["ec", "repair", path_str(&scene.dir), "--unit", "0", "--json"]);
    assert!(stderr.contains("rs(6,3) recovers at most 3"), "{stderr}");
    assert!(stderr.contains("unit-02 missing"), "{stderr}");
    assert!(!scene.unit(0).exists(), "nothing written");
    assert_eq!(scene.file_names(&scene.dir).len(), 6, "no temporary files");

    let stderr = fails(&["ec", "repair", path_str(&scene.dir), "--unit", "9"]);
    assert!(stderr.contains("no unit 9"), "{stderr}");
}

#[test]
fn invalid_code_parameters_write_nothing() {
    let scene = Scene::new(1000, 91);
    let cases: [(&[&str], &str); 10] = [
        (&["--code", "rs", "--k", "0", "--r", "4"], "k must be at least 1"),
        (&["--code", "rs", "--k", "10", "--r", "4", "--d", "12"], "--d does not apply"),
        (&["--code", "lrc", "--k", "10", "--l", "3", "--g", "2"], "must divide"),
        (&["--code", "clay", "--k", "10", "--r", "4", "--d", "10"], "k + 1 ≤ d"),
        (&["--code", "rs", "--k", "10", "--r", "0"], "r must be at least 1"),
        (&["--code", "rs", "--k", "250", "--r", "7"], "256"),
        (&["--code", "rs", "--k", "300", "--r", "1"], "256"),
        (&["--code", "rep", "--r", "0"], "n ≥ 2"),
        (&["--code", "zz", "--k", "1", "--r", "1"], "unknown code"),
        (&["--code", "rs(99999999999999999999999,1)"], "256"),
    ];
    for (code_args, expected) in cases {
        let mut args = vec!["ec", "encode", path_str(&scene.input)];
        args.extend_from_slice(code_args);
        args.extend_from_slice(&["-o", path_str(&scene.dir)]);
        let stderr = fails(&args);
        assert!(stderr.contains(expected), "{code_args:?}: {expected:?} not in {stderr}");
        assert!(!scene.dir.exists(), "{code_args:?} created the output directory");
    }
}

#[test]
fn missing_input_file_is_reported() {
    let scene = Scene::new(0, 92);
    let missing = scene.root.join("no-such-file.bin");
    let stderr = fails(&[
        "ec",
        "encode",
        path_str(&missing),
        "--k",
        "4",
        "--r",
        "2",
        "-o",
        path_str(&scene.dir),
    ]);
    assert!(stderr.contains("no-such-file.bin"), "{stderr}");
    assert!(stderr.contains("No such file"), "{stderr}");
    assert!(!scene.dir.exists());

    let stderr = fails(&["ec", "decode", path_str(&scene.root), "-o", path_str(&scene.input)]);
    assert!(stderr.contains("manifest.json"), "{stderr}");
}

#[test]
fn existing_encoding_and_output_need_force() {
    let scene = Scene::new(50_000, 93);
    scene.encode(&["--code", "rs(4,2)"]);
    let before = fs::read(scene.unit(0)).expect("unit");
    let other = Scene::new(70_000, 94);
    let args =
        ["ec", "encode", path_str(&other.input), "--code", "rs(6,3)", "-o", path_str(&scene.dir)];
    let stderr = fails(&args);
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(fs::read(scene.unit(0)).expect("unit"), before, "refused encode wrote nothing");
    assert_eq!(scene.manifest()["code"], "rs(4,2)");

    let mut forced = args.to_vec();
    forced.push("--force");
    ok(&forced);
    assert_eq!(scene.manifest()["code"], "rs(6,3)");
    assert_eq!(scene.manifest()["original_len"], 70_000);

    let stderr = fails(&["ec", "decode", path_str(&scene.dir), "-o", path_str(&scene.input)]);
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(fs::read(&scene.input).expect("input"), scene.data, "input untouched");
    ok(&["ec", "decode", path_str(&scene.dir), "-o", path_str(&scene.input), "--force"]);
    assert_eq!(fs::read(&scene.input).expect("input"), other.data);
}

#[test]
fn help_teaches_every_subcommand() {
    for command in ["encode", "decode", "repair", "verify"] {
        let stdout = ok(&["ec", command, "--help"]);
        assert!(stdout.contains("Example"), "{command} --help has no example: {stdout}");
        assert!(stdout.contains(&format!("weft ec {command} ")), "{command}: {stdout}");
    }
}

/// Every code family round-trips through the files: lose (and corrupt) as many units as the
/// code tolerates, decode, repair a data unit reading exactly what the code's plan names.
#[test]
fn every_code_family_round_trips_and_repairs_from_its_plan() {
    // (code name, units deleted, one unit corrupted): with unit 0 lost as well, still within
    // what the code corrects.
    let cases: [(&str, &[usize], usize); 6] = [
        ("hh-xor+(10,4)", &[0, 5, 11], 13),
        ("hh-nonxor(6,3)", &[0, 7], 2),
        ("hh-xor(5,3)", &[0, 6], 4),
        ("clay(6,3)", &[2, 8], 0),
        ("clay(8,4,11)", &[0, 3, 9], 11),
        ("lrc(10,2,2)", &[1, 6], 13),
    ];
    for (index, (name, deleted, corrupted)) in cases.into_iter().enumerate() {
        let spec = CodeSpec::parse(name).unwrap();
        let code = spec.build().unwrap();
        let scene = Scene::new(700_001, 500 + index as u64);
        scene.encode(&["--code", name]);
        let manifest = scene.manifest();
        assert_eq!(manifest["code"], spec.to_string());
        let unit_len = manifest["unit_len"].as_u64().unwrap() as usize;
        assert_eq!(unit_len % code.unit_len_multiple(), 0, "{name}: unit length fits the layout");
        let originals: Vec<Vec<u8>> =
            (0..code.total_units()).map(|i| fs::read(scene.unit(i)).unwrap()).collect();

        for &unit in deleted {
            fs::remove_file(scene.unit(unit)).unwrap();
        }
        let mut bytes = fs::read(scene.unit(corrupted)).unwrap();
        bytes[unit_len / 2] ^= 0x40;
        fs::write(scene.unit(corrupted), &bytes).unwrap();
        scene.assert_decodes(&[]);

        // Repair unit 0 (deleted or not), with the damaged units unavailable to it.
        let _ = fs::remove_file(scene.unit(0));
        let report: Value = serde_json::from_str(&ok(&[
            "ec",
            "repair",
            path_str(&scene.dir),
            "--unit",
            "0",
            "--json",
        ]))
        .unwrap();
        assert_eq!(fs::read(scene.unit(0)).unwrap(), originals[0], "{name}: repaired unit 0");
        // The corrupt unit is only found out if the plan reads it; then repair plans again.
        let mut unavailable: Vec<usize> = deleted.iter().copied().filter(|&u| u != 0).collect();
        let mut plan = code.repair_plan(0, &unavailable, unit_len).unwrap();
        if plan.helpers().contains(&corrupted) {
            unavailable.push(corrupted);
            unavailable.sort_unstable();
            plan = code.repair_plan(0, &unavailable, unit_len).unwrap();
        }
        assert_eq!(
            report["bytes_read"].as_u64().unwrap() as usize,
            plan.bytes_read(),
            "{name}: repair read exactly its plan ({report})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile directories: crafted manifests, units that are not regular files
// ---------------------------------------------------------------------------------------------

/// Far longer than any of these commands needs; a hang (a FIFO opened for reading with no
/// writer blocks forever) fails the test instead of stalling CI.
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// Runs weft, killing it and failing the test if it has not exited within [`HANG_LIMIT`].
fn weft_within_limit(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weft starts");
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for weft") {
            break status;
        }
        if started.elapsed() > HANG_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("weft {args:?} still running after {HANG_LIMIT:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().expect("stdout"), stderr: err.join().expect("stderr") }
}

/// Runs weft under the hang limit, asserts it exited (not killed by a signal: an allocation
/// failure aborts) with a non-zero code and exactly one line on stderr; returns that line.
fn fails_cleanly(args: &[&str]) -> String {
    let output = weft_within_limit(args);
    let stderr = text(&output.stderr);
    assert!(
        output.status.code().is_some_and(|code| code != 0),
        "weft {args:?} should fail with an exit code, got {:?}; stderr: {stderr}",
        output.status
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "weft {args:?}: one line on stderr: {stderr}");
    stderr
}

/// Every entry of a directory: its kind and, for regular files, its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, (String, Vec<u8>)> {
    fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            let entry = entry.expect("entry");
            let file_type = entry.file_type().expect("file type");
            let bytes =
                if file_type.is_file() { fs::read(entry.path()).expect("read") } else { vec![] };
            let kind = if file_type.is_fifo() {
                "fifo"
            } else if file_type.is_dir() {
                "dir"
            } else if file_type.is_file() {
                "file"
            } else {
                "other"
            };
            (entry.file_name().to_string_lossy().into_owned(), (kind.to_string(), bytes))
        })
        .collect()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn write_manifest(scene: &Scene, manifest: &Value) {
    fs::write(scene.dir.join("manifest.json"), serde_json::to_vec(manifest).unwrap()).unwrap();
}

#[test]
fn crafted_huge_unit_len_is_refused_not_allocated() {
    const TIB: u64 = 1 << 40;
    let scene = Scene::new(300_000, 120);
    scene.encode(&["--code", "rs(4,2)"]);
    let original = scene.manifest();

    // unit_len 2^40 with every other field made to agree with it: N = k·L, one checksum per
    // unit because the segment is as large as the unit. Before validation this aborted on a
    // 1 TiB allocation (and left a 4 TiB temporary output behind).
    let mut crafted = original.clone();
    crafted["unit_len"] = TIB.into();
    crafted["original_len"] = (4 * TIB).into();
    crafted["segment_bytes"] = TIB.into();
    for unit in crafted["units"].as_array_mut().unwrap() {
        let first = unit["segments"][0].clone();
        unit["segments"] = Value::Array(vec![first]);
    }
    // Only unit_len changed.
    let mut lone = original.clone();
    lone["unit_len"] = TIB.into();

    for (manifest, expect) in [(&crafted, "segment_bytes"), (&lone, "unit_len")] {
        write_manifest(&scene, manifest);
        let before = snapshot(&scene.root);
        let before_dir = snapshot(&scene.dir);
        let output = scene.root.join("decoded.bin");
        let started = Instant::now();
        let stderr =
            fails_cleanly(&["ec", "decode", path_str(&scene.dir), "-o", path_str(&output)]);
        assert!(started.elapsed() < Duration::from_secs(20), "refused quickly");
        assert!(stderr.contains("manifest.json") && stderr.contains(expect), "{stderr}");
        for command in [&["verify"][..], &["repair", "--unit", "0"][..]] {
            let mut args = vec!["ec", command[0], path_str(&scene.dir)];
            args.extend_from_slice(&command[1..]);
            let stderr = fails_cleanly(&args);
            assert!(stderr.contains(expect), "{stderr}");
        }
        assert_eq!(snapshot(&scene.root), before, "nothing created");
        assert_eq!(snapshot(&scene.dir), before_dir, "nothing modified");
    }
}

#[test]
fn manifest_that_the_unit_files_do_not_back_is_refused_before_decoding() {
    // A self-consistent manifest (L follows from N, full checksum lists) for 64 MiB units,
    // over unit files of a few hundred KiB: decode refuses from the lengths alone, before it
    // creates the output or sizes a window from L (clay, not byte-local, would use W = L).
    for name in ["rs(4,2)", "clay(4,2)"] {
        let scene = Scene::new(300_000, 121);
        scene.encode(&["--code", name]);
        let code = CodeSpec::parse(name).unwrap().build().unwrap();
        let original_len = 4 * 64 * MIB;
        let unit_len = code.unit_len_for(original_len).max(code.unit_len_multiple());
        let mut manifest = scene.manifest();
        manifest["original_len"] = original_len.into();
        manifest["unit_len"] = unit_len.into();
        let segments = vec![Value::from("00000000"); unit_len.div_ceil(SEGMENT_BYTES)];
        for unit in manifest["units"].as_array_mut().unwrap() {
            unit["segments"] = Value::Array(segments.clone());
        }
        write_manifest(&scene, &manifest);
        let before = snapshot(&scene.root);
        let before_dir = snapshot(&scene.dir);
        let output = scene.root.join("decoded.bin");
        let stderr =
            fails_cleanly(&["ec", "decode", path_str(&scene.dir), "-o", path_str(&output)]);
        assert!(stderr.contains("truncated") && stderr.contains("nothing written"), "{stderr}");
        assert!(stderr.contains(&format!("of {unit_len} bytes")), "{stderr}");
        let stderr = fails_cleanly(&["ec", "repair", path_str(&scene.dir), "--unit", "0"]);
        assert!(stderr.contains("truncated"), "{stderr}");
        assert_eq!(snapshot(&scene.root), before, "{name}: nothing created");
        assert_eq!(snapshot(&scene.dir), before_dir, "{name}: nothing modified");
    }
}

/// Replaces unit-01 with something that is not a regular file, then checks that decode,
/// verify and repair each refuse it promptly, naming it, and leave everything as it was.
fn assert_non_regular_unit_refused(make: fn(&Path), kind: &str) {
    let scene = Scene::new(300_000, 122);
    scene.encode(&["--code", "rs(4,2)"]);
    fs::remove_file(scene.unit(1)).unwrap();
    make(&scene.unit(1));
    let before = snapshot(&scene.root);
    let before_dir = snapshot(&scene.dir);
    let output = scene.root.join("decoded.bin");
    let dir = path_str(&scene.dir);
    let runs: [&[&str]; 5] = [
        &["ec", "decode", dir, "-o", path_str(&output)],
        &["ec", "verify", dir],
        &["ec", "verify", dir, "--json"],
        &["ec", "repair", dir, "--unit", "0"],
        &["ec", "repair", dir, "--unit", "1"],
    ];
    for args in runs {
        let stderr = fails_cleanly(args);
        assert!(stderr.contains("unit-01") && stderr.contains(kind), "{args:?}: {stderr}");
        assert!(stderr.contains("not a regular file"), "{args:?}: {stderr}");
        assert_eq!(snapshot(&scene.root), before, "{args:?}: nothing created");
        assert_eq!(snapshot(&scene.dir), before_dir, "{args:?}: nothing modified");
    }
}

#[test]
fn fifo_unit_is_refused_without_hanging() {
    assert_non_regular_unit_refused(mkfifo, "FIFO");
}

#[test]
fn directory_unit_is_refused() {
    assert_non_regular_unit_refused(|path| fs::create_dir(path).unwrap(), "directory");
}

#[test]
fn fifo_output_or_input_is_refused_without_hanging() {
    let scene = Scene::new(100_000, 123);
    scene.encode(&["--code", "rs(4,2)"]);
    let output = scene.root.join("out.fifo");
    mkfifo(&output);
    let before = snapshot(&scene.root);
    for force in [false, true] {
        let mut args = vec!["ec", "decode", path_str(&scene.dir), "-o", path_str(&output)];
        if force {
            args.push("--force");
        }
        let stderr = fails_cleanly(&args);
        assert!(stderr.contains("out.fifo"), "{stderr}");
        assert_eq!(snapshot(&scene.root), before, "the FIFO is still there, nothing else is");
    }
    // Encoding a FIFO used to block in open until a writer came.
    let fifo_input = scene.root.join("input.fifo");
    mkfifo(&fifo_input);
    let other = scene.root.join("other");
    let stderr = fails_cleanly(&[
        "ec",
        "encode",
        path_str(&fifo_input),
        "--code",
        "rs(4,2)",
        "-o",
        path_str(&other),
    ]);
    assert!(stderr.contains("input.fifo") && stderr.contains("not a regular file"), "{stderr}");
    assert!(!other.exists());
}

#[test]
fn unit_of_the_wrong_length_counts_as_damaged() {
    let scene = Scene::new(300_000, 124);
    scene.encode(&["--code", "rs(4,2)"]);
    let unit_len = scene.manifest()["unit_len"].as_u64().unwrap() as usize;
    let mut long = fs::read(scene.unit(2)).unwrap();
    long.push(0);
    fs::write(scene.unit(2), &long).unwrap();
    let problem = format!("{} bytes long, expected {unit_len}", unit_len + 1);
    let stdout = scene.assert_decodes(&[]);
    assert!(stdout.contains(&format!("unit-02 {problem}")), "{stdout}");
    let stderr = fails(&["ec", "verify", path_str(&scene.dir)]);
    assert!(stderr.contains("still decodable"), "{stderr}");
    let report: Value =
        serde_json::from_str(&ok(&["ec", "repair", path_str(&scene.dir), "--unit", "0", "--json"]))
            .unwrap();
    assert!(report["skipped"].to_string().contains(&problem), "{report}");
    ok(&["ec", "repair", path_str(&scene.dir), "--unit", "2"]);
    ok(&["ec", "verify", path_str(&scene.dir)]);
}

/// Issue 16 item 4: a command whose reader went away (`weft ec repair-cost … | head` after
/// head exits) ends quietly, killed by SIGPIPE as Unix tools are, instead of panicking with
/// "failed printing to stdout: Broken pipe".
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["ec", "repair-cost", "--code", "clay", "--k", "8", "--r", "4", "--d", "11"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{:?}", output.status);
}

/// Issue 16 item 9: `repair-cost --json` is one document, `{"units": [...], "summary": {...}}`;
/// `--json-lines` prints the same units one per line, then the summary.
#[test]
fn repair_cost_json_is_one_document_and_json_lines_the_same_rows() {
    let args = ["ec", "repair-cost", "--code", "hh-xor+", "--k", "4", "--r", "2"];
    let one = weft(&[&args[..], &["--json"]].concat());
    assert!(one.status.success(), "{one:?}");
    let document: serde_json::Value = serde_json::from_slice(&one.stdout).expect("one document");
    let units = document["units"].as_array().expect("units");
    assert_eq!(units.len(), 6, "{document}");
    // Hitchhiker-XOR+ repairs a data unit from 3 of the 4 units rs(4,2) reads.
    assert_eq!(
        (units[0]["kind"].as_str(), units[0]["read_units"].as_f64()),
        (Some("data"), Some(3.0))
    );
    assert_eq!(document["summary"]["data_units_fraction_of_rs"], 0.75, "{document}");
    let lines = weft(&[&args[..], &["--json-lines"]].concat());
    let lines: Vec<serde_json::Value> = String::from_utf8(lines.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(&lines[..6], &units[..], "the same unit rows");
    assert_eq!(lines[6], document["summary"]);
    assert_eq!(lines.len(), 7);
}
