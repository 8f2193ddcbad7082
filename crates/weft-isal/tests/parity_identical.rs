//! weft against Intel ISA-L, byte for byte: the Cauchy generator, rs parity for many shapes and
//! lengths on every SIMD path, decoding of erasure patterns, and matrix inversion.
//!
//! ISA-L is loaded at run time. When it is not installed every test prints that it is skipped and
//! passes, so builds never require it; with `WEFT_REQUIRE_ISAL=1` a missing ISA-L fails instead
//! (CI installs `libisal2` and sets it). Randomness uses fixed seeds.
//!
//! weft's `LinearCode` runs on the process's active SIMD path (`WEFT_SIMD`, default the best
//! one); the kernels are also driven on every supported path explicitly through
//! `DotTables::with_path`, and `linear_code_on_every_simd_path` re-runs the encode and decode
//! comparisons in child processes with `WEFT_SIMD` set to each other supported path.

use std::process::Command;
use std::sync::OnceLock;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_codes::{Code, LinearCode};
use weft_gf::{DotTables, Matrix, MatrixError, SimdPath};
use weft_isal::Isal;

/// The loaded ISA-L, or `None` (after saying so) when it is absent and not required.
fn isal(test: &str) -> Option<&'static Isal> {
    static ISAL: OnceLock<Result<Isal, String>> = OnceLock::new();
    match ISAL.get_or_init(|| Isal::load().map_err(|e| e.to_string())) {
        Ok(isal) => Some(isal),
        Err(error) => {
            if std::env::var("WEFT_REQUIRE_ISAL").as_deref() == Ok("1") {
                panic!("WEFT_REQUIRE_ISAL=1 but ISA-L cannot be loaded: {error}");
            }
            println!("{test}: skipped, ISA-L is not available: {error}");
            None
        }
    }
}

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    bytes
}

fn first_difference(got: &[Vec<u8>], want: &[Vec<u8>]) -> Option<(usize, usize)> {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).enumerate().find_map(|(unit, (g, w))| {
        assert_eq!(g.len(), w.len());
        g.iter().zip(w).position(|(a, b)| a != b).map(|pos| (unit, pos))
    })
}

fn assert_same(got: &[Vec<u8>], want: &[Vec<u8>], context: &str) {
    if let Some((unit, pos)) = first_difference(got, want) {
        panic!(
            "{context}: output {unit} byte {pos}: weft {:#04x}, ISA-L {:#04x}",
            got[unit][pos], want[unit][pos]
        );
    }
}

/// `ec_init_tables` + `ec_encode_data` of a `rows × k` matrix over `srcs`.
fn isal_dot(isal: &Isal, matrix: &[u8], rows: usize, k: usize, srcs: &[&[u8]]) -> Vec<Vec<u8>> {
    let len = srcs[0].len();
    let tables = isal.init_tables(k, rows, matrix);
    let mut out = vec![vec![0u8; len]; rows];
    let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
    isal.encode_data(&tables, srcs, &mut dsts);
    out
}

/// weft's `DotTables` of a `rows × k` matrix over `srcs` on one path; outputs start as junk.
fn weft_dot(path: SimdPath, matrix: &[u8], rows: usize, k: usize, srcs: &[&[u8]]) -> Vec<Vec<u8>> {
    let len = srcs[0].len();
    let tables = DotTables::with_path(path, matrix, rows, k);
    let mut out = vec![vec![0xA5u8; len]; rows];
    let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
    tables.dot_prod(srcs, &mut dsts);
    out
}

#[test]
fn cauchy1_matrix_identical_to_isal() {
    let Some(isal) = isal("cauchy1_matrix_identical_to_isal") else { return };
    let mut shapes: Vec<(usize, usize)> = Vec::new();
    for k in 1..=40 {
        for extra in [0, 1, 2, 3, 4, 8, 9, 16, 20, 56] {
            shapes.push((k + extra, k));
        }
    }
    shapes.extend([(256, 200), (256, 1), (256, 255), (256, 256), (255, 128), (256, 128)]);
    shapes.extend([(200, 100), (214, 200), (100, 64), (129, 127)]);
    for (n, k) in shapes {
        let ours = Matrix::cauchy1(n, k).unwrap();
        assert_eq!((ours.rows(), ours.cols()), (n, k));
        let theirs = isal.cauchy1_matrix(n, k);
        if let Some(at) = ours.as_slice().iter().zip(&theirs).position(|(a, b)| a != b) {
            panic!(
                "cauchy1({n},{k}) differs at [{}][{}]: weft {:#04x}, ISA-L {:#04x}",
                at / k,
                at % k,
                ours.as_slice()[at],
                theirs[at]
            );
        }
        // And the code is built on exactly that matrix.
        if n > k {
            let code = LinearCode::rs(k, n - k).unwrap();
            assert_eq!(
                code.generator().as_slice(),
                theirs.as_slice(),
                "rs({k},{}) generator",
                n - k
            );
        }
    }
}

/// (k, r) shapes compared with ISA-L, and the lengths each is tried with.
fn encode_cases() -> Vec<(usize, usize, &'static [usize])> {
    const ALL: &[usize] = &[1, 63, 64, 1000, 65537];
    const SHORT: &[usize] = &[1, 63, 64, 1000];
    vec![
        (6, 3, ALL),
        (10, 4, ALL),
        (12, 4, ALL),
        (20, 4, ALL),
        (1, 1, ALL),
        (2, 5, ALL),
        (3, 9, ALL),  // more parity rows than one kernel pass holds
        (5, 13, ALL), // two passes of rows, the second partial
        (17, 3, ALL),
        (31, 17, SHORT),
        (255, 1, SHORT),
        (1, 255, SHORT),
        (64, 32, SHORT),
        (200, 56, SHORT),
    ]
}

#[test]
fn encode_parity_identical_to_isal() {
    let Some(isal) = isal("encode_parity_identical_to_isal") else { return };
    let mut rng = StdRng::seed_from_u64(0x15A1);
    let paths = SimdPath::supported();
    for (k, r, lens) in encode_cases() {
        let code = LinearCode::rs(k, r).unwrap();
        let matrix = isal.cauchy1_matrix(k + r, k);
        let parity_rows = &matrix[k * k..];
        for &len in lens {
            // Offset 0 and, for longer units, slices one byte off their allocation's alignment.
            for offset in if len >= 64 { vec![0, 1] } else { vec![0] } {
                let context = format!("rs({k},{r}) len {len} offset {offset}");
                let buffers: Vec<Vec<u8>> =
                    (0..k).map(|_| random_bytes(&mut rng, len + offset)).collect();
                let srcs: Vec<&[u8]> = buffers.iter().map(|b| &b[offset..]).collect();
                let expected = isal_dot(isal, parity_rows, r, k, &srcs);

                let mut parity = vec![vec![0x3Cu8; len + offset]; r];
                let mut dsts: Vec<&mut [u8]> =
                    parity.iter_mut().map(|p| &mut p[offset..]).collect();
                code.encode(&srcs, &mut dsts).unwrap();
                let parity: Vec<Vec<u8>> = parity.iter().map(|p| p[offset..].to_vec()).collect();
                assert_same(&parity, &expected, &format!("{context} LinearCode::encode"));

                for &path in &paths {
                    let got = weft_dot(path, parity_rows, r, k, &srcs);
                    assert_same(&got, &expected, &format!("{context} DotTables on {path}"));
                }
            }
        }
    }
}

/// ISA-L's decode, as its `erasure_code_test` does it: invert the rows of the first k
/// survivors with `gf_invert_matrix`, rebuild the data with `ec_encode_data`, then re-encode
/// lost parity from the rebuilt data. Returns the lost units in ascending order.
fn isal_decode(
    isal: &Isal,
    k: usize,
    r: usize,
    units: &[Vec<u8>],
    lost: &[usize],
) -> (Vec<Vec<u8>>, Vec<u8>) {
    let n = k + r;
    let matrix = isal.cauchy1_matrix(n, k);
    let survivors: Vec<usize> = (0..n).filter(|u| !lost.contains(u)).take(k).collect();
    let mut rows = Vec::with_capacity(k * k);
    for &s in &survivors {
        rows.extend_from_slice(&matrix[s * k..(s + 1) * k]);
    }
    let inverse = isal.invert_matrix(&rows, k).expect("every k rows of cauchy1 are invertible");
    let srcs: Vec<&[u8]> = survivors.iter().map(|&s| units[s].as_slice()).collect();
    let data = isal_dot(isal, &inverse, k, k, &srcs);
    let data_refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut rebuilt = Vec::new();
    let mut sorted = lost.to_vec();
    sorted.sort_unstable();
    for &u in &sorted {
        if u < k {
            rebuilt.push(data[u].clone());
        } else {
            rebuilt.extend(isal_dot(isal, &matrix[u * k..(u + 1) * k], 1, k, &data_refs));
        }
    }
    (rebuilt, inverse)
}

fn decode_patterns(k: usize, r: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
    let n = k + r;
    let mut patterns = vec![
        (0..r.min(k)).collect::<Vec<usize>>(), // data only
        (k..n).collect(),                      // parity only
        (n - r..n).rev().collect(),            // the last r, given in descending order
        vec![0, n - 1],                        // one of each
    ];
    for _ in 0..12 {
        let m = rng.gen_range(1..=r);
        patterns.push(rand::seq::index::sample(rng, n, m).into_vec());
    }
    patterns
}

#[test]
fn decode_identical_to_isal() {
    let Some(isal) = isal("decode_identical_to_isal") else { return };
    let mut rng = StdRng::seed_from_u64(0xDEC0);
    let paths = SimdPath::supported();
    for (k, r) in [(6, 3), (10, 4), (12, 4), (20, 4), (3, 9), (17, 3), (64, 32)] {
        let code = LinearCode::rs(k, r).unwrap();
        let n = k + r;
        for len in [63, 1000, 4099] {
            let data: Vec<Vec<u8>> = (0..k).map(|_| random_bytes(&mut rng, len)).collect();
            let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let matrix = isal.cauchy1_matrix(n, k);
            let parity = isal_dot(isal, &matrix[k * k..], r, k, &srcs);
            let units: Vec<Vec<u8>> = data.iter().cloned().chain(parity).collect();
            for lost in decode_patterns(k, r, &mut rng) {
                let context = format!("rs({k},{r}) len {len} lost {lost:?}");
                let mut sorted = lost.clone();
                sorted.sort_unstable();
                let originals: Vec<Vec<u8>> = sorted.iter().map(|&u| units[u].clone()).collect();
                let (expected, isal_inverse) = isal_decode(isal, k, r, &units, &lost);
                assert_same(&expected, &originals, &format!("{context}: ISA-L's own decode"));

                // weft's decode, in place over garbage.
                let mut work = units.clone();
                for &u in &lost {
                    rng.fill(&mut work[u][..]);
                }
                let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
                code.decode(&mut refs, &lost).unwrap_or_else(|e| panic!("{context}: {e}"));
                let got: Vec<Vec<u8>> = sorted.iter().map(|&u| work[u].clone()).collect();
                assert_same(&got, &expected, &format!("{context}: Code::decode"));

                // The same decode from weft_gf's inverse, on every SIMD path.
                let survivors: Vec<usize> = (0..n).filter(|u| !lost.contains(u)).take(k).collect();
                let inverse = code.generator().select_rows(&survivors).invert().unwrap();
                assert_eq!(inverse.as_slice(), isal_inverse.as_slice(), "{context}: inverses");
                let decode_rows = code.generator().select_rows(&sorted).multiply(&inverse).unwrap();
                let srcs: Vec<&[u8]> = survivors.iter().map(|&s| units[s].as_slice()).collect();
                for &path in &paths {
                    let got = weft_dot(path, decode_rows.as_slice(), sorted.len(), k, &srcs);
                    assert_same(&got, &expected, &format!("{context}: decode rows on {path}"));
                }
            }
        }
    }
}

#[test]
fn invert_identical_to_isal() {
    let Some(isal) = isal("invert_identical_to_isal") else { return };
    let mut rng = StdRng::seed_from_u64(0x1471);
    let mut sizes: Vec<usize> = (1..=40).flat_map(|n| [n; 6]).collect();
    sizes.extend([64, 100, 128, 200, 255, 256]);
    let (mut inverted, mut singular) = (0, 0);
    for (case, n) in sizes.into_iter().enumerate() {
        let mut values = random_bytes(&mut rng, n * n);
        // Every sixth matrix is made singular on purpose (when n > 1): a repeated row, a
        // row that is a multiple of another, or a zero column.
        if n > 1 && case % 6 == 5 {
            let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n - 1));
            let b = if b >= a { b + 1 } else { b };
            match (case / 6) % 3 {
                0 => {
                    let row = values[a * n..(a + 1) * n].to_vec();
                    values[b * n..(b + 1) * n].copy_from_slice(&row);
                }
                1 => {
                    let c = rng.gen_range(1..=255u8);
                    for j in 0..n {
                        values[b * n + j] = weft_gf::mul(c, values[a * n + j]);
                    }
                }
                _ => (0..n).for_each(|i| values[i * n + a] = 0),
            }
        }
        let matrix = Matrix::from_vec(n, n, values.clone());
        match (matrix.invert(), isal.invert_matrix(&values, n)) {
            (Ok(ours), Some(theirs)) => {
                assert_eq!(ours.as_slice(), theirs.as_slice(), "{n}×{n} inverse, case {case}");
                assert_eq!(ours.multiply(&matrix).unwrap(), Matrix::identity(n));
                inverted += 1;
            }
            (Err(MatrixError::Singular), None) => singular += 1,
            (ours, theirs) => panic!(
                "{n}×{n} case {case}: weft {:?}, ISA-L {}",
                ours.map(|_| "inverse"),
                if theirs.is_some() { "inverse" } else { "singular" }
            ),
        }
    }
    assert!(inverted > 150, "only {inverted} random matrices were invertible");
    assert!(singular >= 30, "only {singular} singular matrices were checked");

    // Random k×k selections of Cauchy generators are always invertible, for both.
    for (k, r) in [(10, 4), (20, 4), (50, 20), (128, 128)] {
        let generator = Matrix::cauchy1(k + r, k).unwrap();
        for _ in 0..5 {
            let mut rows = rand::seq::index::sample(&mut rng, k + r, k).into_vec();
            rows.sort_unstable();
            let sub = generator.select_rows(&rows);
            let theirs = isal.invert_matrix(sub.as_slice(), k).expect("ISA-L inverts it");
            assert_eq!(sub.invert().unwrap().as_slice(), theirs.as_slice(), "rs({k},{r}) {rows:?}");
        }
    }
}

/// `LinearCode` takes its SIMD path from `WEFT_SIMD` once per process, so the encode and decode
/// comparisons are re-run in a child process per other supported path.
#[test]
fn linear_code_on_every_simd_path() {
    if std::env::var_os("WEFT_SIMD").is_some() {
        // This process is such a child, or the caller pinned a path on purpose.
        return;
    }
    let Some(_) = isal("linear_code_on_every_simd_path") else { return };
    let exe = std::env::current_exe().expect("the test binary's path");
    let active = SimdPath::active();
    for path in SimdPath::supported().into_iter().filter(|&p| p != active) {
        let output = Command::new(&exe)
            .env("WEFT_SIMD", path.name())
            .args(["--exact", "encode_parity_identical_to_isal", "decode_identical_to_isal"])
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "WEFT_SIMD={path}: comparisons failed\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("test result: ok. 2 passed"),
            "WEFT_SIMD={path}: expected both comparisons to run\n{stdout}"
        );
    }
}

/// `WEFT_ISAL_VARIANT` binds `encode_data` and `encode_data_update` to one implementation
/// (how a CPU with fewer instruction sets is measured on one that has more): in a child
/// process per variant this CPU runs, the library reports the variant, and encode and update
/// still equal weft's parity; a variant that cannot run is refused at load, naming it.
#[test]
fn every_isal_variant_can_be_forced_and_agrees() {
    if std::env::var_os("WEFT_ISAL_VARIANT").is_some() {
        // A child: this process's Isal is bound to the variant; the comparisons check it.
        let isal = isal("every_isal_variant_can_be_forced_and_agrees").expect("ISA-L loads");
        let wanted = std::env::var("WEFT_ISAL_VARIANT").unwrap();
        assert_eq!(isal.variant().name(), wanted.as_str());
        return;
    }
    let Some(isal) = isal("every_isal_variant_can_be_forced_and_agrees") else { return };
    let exe = std::env::current_exe().expect("the test binary's path");
    for variant in isal.variants() {
        let output = Command::new(&exe)
            .env("WEFT_ISAL_VARIANT", variant.name())
            .args(["--exact", "every_isal_variant_can_be_forced_and_agrees"])
            .args(["encode_parity_identical_to_isal"])
            .args(["update_adds_each_column_into_what_encode_writes_and_weft_adds_the_same"])
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("test result: ok. 3 passed"),
            "WEFT_ISAL_VARIANT={}: expected the three checks to pass\n{stdout}\n{stderr}",
            variant.name()
        );
    }
    let refused = Command::new(&exe)
        .env("WEFT_ISAL_VARIANT", "neon")
        .env("WEFT_REQUIRE_ISAL", "1")
        .args(["--exact", "every_isal_variant_can_be_forced_and_agrees"])
        .output()
        .expect("the test binary runs");
    let said = String::from_utf8_lossy(&refused.stdout) + String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("WEFT_ISAL_VARIANT=\"neon\" cannot be used"),
        "an unknown variant must be refused at load\n{said}"
    );
}

#[test]
fn update_adds_each_column_into_what_encode_writes_and_weft_adds_the_same() {
    let Some(isal) = isal("update_adds_each_column_into_what_encode_writes_and_weft_adds_the_same")
    else {
        return;
    };
    assert!(isal.has_update(), "every ISA-L weft supports has ec_encode_data_update");
    let mut rng = StdRng::seed_from_u64(0xADD);
    for (k, rows, len) in [(1, 1, 1), (4, 3, 4099), (6, 3, 65536), (10, 4, 777), (3, 6, 128)] {
        let matrix = random_bytes(&mut rng, rows * k);
        let data: Vec<Vec<u8>> = (0..k).map(|_| random_bytes(&mut rng, len)).collect();
        let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let want = isal_dot(isal, &matrix, rows, k, &srcs);
        // Columns added one at a time, in a scrambled order, onto a starting value that
        // must survive as an XOR: start ^ Σ columns.
        let start: Vec<Vec<u8>> = (0..rows).map(|_| random_bytes(&mut rng, len)).collect();
        let mut got = start.clone();
        let tables = isal.init_tables(k, rows, &matrix);
        let mut order: Vec<usize> = (0..k).collect();
        order.reverse();
        order.rotate_left(k / 2);
        for column in order {
            let mut dsts: Vec<&mut [u8]> = got.iter_mut().map(Vec::as_mut_slice).collect();
            isal.encode_data_update(&tables, column, srcs[column], &mut dsts);
        }
        let added: Vec<Vec<u8>> = want
            .iter()
            .zip(&start)
            .map(|(w, s)| w.iter().zip(s).map(|(a, b)| a ^ b).collect())
            .collect();
        assert_same(&got, &added, &format!("update k={k} rows={rows} len={len}"));
        // weft's fused add of the same columns onto the same start agrees byte for byte.
        let mut fused = start.clone();
        let mut dsts: Vec<&mut [u8]> = fused.iter_mut().map(Vec::as_mut_slice).collect();
        DotTables::new(&matrix, rows, k).dot_prod_add(&srcs, &mut dsts);
        assert_same(&fused, &got, &format!("weft add k={k} rows={rows} len={len}"));
    }
}
