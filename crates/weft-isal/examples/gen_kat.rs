//! Generates the known-answer vectors `crates/weft-codes/tests/data/rs-{k}-{r}.parity` with
//! Intel ISA-L alone (no weft code is involved in computing them):
//!
//! ```text
//! cargo run -p weft-isal --example gen_kat
//! ```
//!
//! For each of rs(10,4) and rs(6,3):
//! - data unit j (0 ≤ j < k), byte p (0 ≤ p < 1000) is `((p * 7 + j * 31 + 11) % 251) as u8`;
//! - the matrix is ISA-L's `gf_gen_cauchy1_matrix(a, k + r, k)`; its last r rows (the parity
//!   rows) go through `ec_init_tables(k, r, ...)` and `ec_encode_data(1000, k, r, ...)`;
//! - the file holds the r parity units of 1000 bytes each, unit after unit (r·1000 bytes).
//!
//! The checked-in files were made with ISA-L 2.30.0 from Debian's `libisal2`
//! (`/usr/lib/x86_64-linux-gnu/libisal.so.2`). `crates/weft-codes/tests/known_answers.rs`
//! regenerates the same data and checks that weft's encoder reproduces these bytes.

use std::path::PathBuf;
use std::process::ExitCode;

use weft_isal::Isal;

/// Length of every unit in the vectors.
const UNIT_LEN: usize = 1000;

/// The codes vectors are generated for, as (k, r).
const CODES: [(usize, usize); 2] = [(10, 4), (6, 3)];

/// Data unit `j`, byte `p`: a simple formula both this generator and the test can compute.
fn data_byte(j: usize, p: usize) -> u8 {
    ((p * 7 + j * 31 + 11) % 251) as u8
}

fn main() -> ExitCode {
    let isal = match Isal::load() {
        Ok(isal) => isal,
        Err(error) => {
            eprintln!("gen_kat needs ISA-L: {error}");
            return ExitCode::FAILURE;
        }
    };
    let out_dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../weft-codes/tests/data").canonicalize();
    let out_dir = match out_dir {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("crates/weft-codes/tests/data must exist: {error}");
            return ExitCode::FAILURE;
        }
    };
    for (k, r) in CODES {
        let data: Vec<Vec<u8>> =
            (0..k).map(|j| (0..UNIT_LEN).map(|p| data_byte(j, p)).collect()).collect();
        let matrix = isal.cauchy1_matrix(k + r, k);
        let tables = isal.init_tables(k, r, &matrix[k * k..]);
        let mut parity = vec![vec![0u8; UNIT_LEN]; r];
        let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        isal.encode_data(&tables, &srcs, &mut dsts);
        let path = out_dir.join(format!("rs-{k}-{r}.parity"));
        if let Err(error) = std::fs::write(&path, parity.concat()) {
            eprintln!("cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!(
            "wrote {} ({} bytes) with ISA-L from {}",
            path.display(),
            r * UNIT_LEN,
            isal.path()
        );
    }
    ExitCode::SUCCESS
}
