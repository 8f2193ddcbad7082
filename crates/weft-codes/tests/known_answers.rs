//! Known-answer vectors: weft's rs parity must equal parity computed by Intel ISA-L.
//!
//! How `tests/data/rs-10-4.parity` and `tests/data/rs-6-3.parity` were generated:
//!
//! ```text
//! cargo run -p weft-isal --example gen_kat
//! ```
//!
//! (source: `crates/weft-isal/examples/gen_kat.rs`) with ISA-L 2.30.0 from Debian's `libisal2`
//! package (2.30.0-5, `/usr/lib/x86_64-linux-gnu/libisal.so.2`), on x86_64. The generator uses
//! ISA-L only: `gf_gen_cauchy1_matrix(a, k + r, k)`, then `ec_init_tables(k, r, a + k·k, g)` and
//! `ec_encode_data(1000, k, r, g, data, parity)` on the r parity rows.
//!
//! - Data: unit j (0 ≤ j < k), byte p (0 ≤ p < 1000) is `((p * 7 + j * 31 + 11) % 251) as u8`.
//! - File: the r parity units of 1000 bytes, unit after unit (r·1000 bytes).
//! - sha256: rs-10-4.parity 59e93250da40f6e985a69a6974250eb76d0183f3ccfd9354d5e038b6a971a1ad,
//!   rs-6-3.parity 345235b75a147096cbb231c370279a5969039f822132d135fa37325c8752ebc0.
//!
//! These files are the only hard-coded results in weft-codes' tests; never regenerate them with
//! weft itself.

use weft_codes::{CodeSpec, LinearCode};
use weft_gf::{DotTables, SimdPath};

const UNIT_LEN: usize = 1000;

const RS_10_4: &[u8] = include_bytes!("data/rs-10-4.parity");
const RS_6_3: &[u8] = include_bytes!("data/rs-6-3.parity");

fn vectors() -> [(usize, usize, &'static [u8]); 2] {
    [(10, 4, RS_10_4), (6, 3, RS_6_3)]
}

/// The data of the vectors; must stay identical to `data_byte` in gen_kat.rs.
fn data_units(k: usize) -> Vec<Vec<u8>> {
    (0..k).map(|j| (0..UNIT_LEN).map(|p| ((p * 7 + j * 31 + 11) % 251) as u8).collect()).collect()
}

fn expected_parity(r: usize, file: &[u8]) -> Vec<Vec<u8>> {
    assert_eq!(file.len(), r * UNIT_LEN, "vector file holds r units of {UNIT_LEN} bytes");
    assert!(file.iter().any(|&b| b != 0), "vector file is all zeros");
    file.chunks(UNIT_LEN).map(<[u8]>::to_vec).collect()
}

fn assert_parity_eq(got: &[Vec<u8>], want: &[Vec<u8>], context: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if let Some(pos) = g.iter().zip(w).position(|(a, b)| a != b) {
            panic!(
                "{context}: parity unit {i} byte {pos}: weft {:#04x}, ISA-L {:#04x}",
                g[pos], w[pos]
            );
        }
    }
    assert_eq!(got.len(), want.len(), "{context}: parity unit count");
}

#[test]
fn weft_encode_reproduces_isal_vectors() {
    for (k, r, file) in vectors() {
        let expected = expected_parity(r, file);
        let code = CodeSpec::parse(&format!("rs({k},{r})")).unwrap().build().unwrap();
        let data = data_units(k);
        let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut parity = vec![vec![0u8; UNIT_LEN]; r];
        let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.encode(&srcs, &mut dsts).unwrap();
        assert_parity_eq(&parity, &expected, &format!("rs({k},{r}) encode"));

        // Incremental encoding lands on the same bytes.
        let mut parity = vec![vec![0u8; UNIT_LEN]; r];
        let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        for j in (0..k).rev() {
            code.encode_add(j, &data[j], &mut dsts).unwrap();
        }
        assert_parity_eq(&parity, &expected, &format!("rs({k},{r}) encode_add"));
    }
}

#[test]
fn every_simd_path_reproduces_isal_vectors() {
    for (k, r, file) in vectors() {
        let expected = expected_parity(r, file);
        let code = LinearCode::rs(k, r).unwrap();
        let parity_rows = code.generator().sub_matrix(k, 0, r, k);
        let data = data_units(k);
        let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        for path in SimdPath::supported() {
            let tables = DotTables::with_path(path, parity_rows.as_slice(), r, k);
            let mut parity = vec![vec![0x5Au8; UNIT_LEN]; r];
            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            tables.dot_prod(&srcs, &mut dsts);
            assert_parity_eq(&parity, &expected, &format!("rs({k},{r}) on {path}"));
        }
    }
}

#[test]
fn weft_decodes_isal_parity() {
    for (k, r, file) in vectors() {
        let code = CodeSpec::parse(&format!("rs({k},{r})")).unwrap().build().unwrap();
        let original: Vec<Vec<u8>> =
            data_units(k).into_iter().chain(expected_parity(r, file)).collect();
        // Lose the first r data units, the last r data units, and every other unit up to r.
        let patterns: Vec<Vec<usize>> = vec![
            (0..r).collect(),
            (k - r..k).collect(),
            (0..k + r).step_by(2).take(r).collect(),
            (0..k + r).step_by(3).take(r).collect(),
        ];
        for lost in patterns {
            let mut units = original.clone();
            for &u in &lost {
                units[u].fill(0xFF);
            }
            let mut refs: Vec<&mut [u8]> = units.iter_mut().map(Vec::as_mut_slice).collect();
            code.decode(&mut refs, &lost).unwrap();
            assert!(units == original, "rs({k},{r}) lost {lost:?}: decoded bytes differ");
        }
    }
}
