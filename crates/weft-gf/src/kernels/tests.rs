use rand::{rngs::StdRng, Rng, SeedableRng};

use super::*;

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.gen()).collect()
}

/// Runs `dot_prod` and `dot_prod_add` on every supported path and compares with the oracle.
/// `offset` shifts every slice off its allocation's alignment.
fn check_all_paths(rng: &mut StdRng, rows: usize, cols: usize, len: usize, offset: usize) {
    let coefficients = random_bytes(rng, rows * cols);
    let sources: Vec<Vec<u8>> = (0..cols).map(|_| random_bytes(rng, len + offset)).collect();
    let initial: Vec<Vec<u8>> = (0..rows).map(|_| random_bytes(rng, len + offset)).collect();
    let srcs: Vec<&[u8]> = sources.iter().map(|s| &s[offset..]).collect();

    let run = |path: SimdPath, add: bool| -> Vec<Vec<u8>> {
        let tables = DotTables::with_path(path, &coefficients, rows, cols);
        let mut out = initial.clone();
        let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(|d| &mut d[offset..]).collect();
        if add {
            tables.dot_prod_add(&srcs, &mut dsts);
        } else {
            tables.dot_prod(&srcs, &mut dsts);
        }
        out
    };
    for add in [false, true] {
        let expected = run(SimdPath::Scalar, add);
        for path in SimdPath::supported() {
            let got = run(path, add);
            for (row, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert_eq!(&g[..offset], &initial[row][..offset], "{path} wrote before the slice");
                assert!(
                    g == e,
                    "{path} differs from scalar: rows={rows} cols={cols} len={len} \
                     offset={offset} add={add} row={row}"
                );
            }
        }
    }
}

#[test]
fn oracle_matches_the_definition() {
    let mut rng = StdRng::seed_from_u64(1);
    let coefficients = random_bytes(&mut rng, 3 * 5);
    let sources: Vec<Vec<u8>> = (0..5).map(|_| random_bytes(&mut rng, 77)).collect();
    let srcs: Vec<&[u8]> = sources.iter().map(|s| s.as_slice()).collect();
    let mut out = vec![vec![0xAAu8; 77]; 3];
    let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(|d| d.as_mut_slice()).collect();
    DotTables::with_path(SimdPath::Scalar, &coefficients, 3, 5).dot_prod(&srcs, &mut dsts);
    for (i, row) in out.iter().enumerate() {
        for (pos, &byte) in row.iter().enumerate() {
            let expected = (0..5).fold(0u8, |acc, j| {
                acc ^ crate::field::mul_bitwise(coefficients[i * 5 + j], sources[j][pos])
            });
            assert_eq!(byte, expected);
        }
    }
}

#[test]
fn every_code_shape_up_to_20_by_6() {
    let mut rng = StdRng::seed_from_u64(2);
    let lengths = [0, 1, 2, 15, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 1000];
    for rows in 1..=6 {
        for cols in 1..=20 {
            for &len in &lengths {
                check_all_paths(&mut rng, rows, cols, len, 0);
            }
        }
    }
}

#[test]
fn every_length_up_to_1024() {
    let mut rng = StdRng::seed_from_u64(3);
    for (rows, cols) in [(1, 1), (4, 10), (6, 20), (3, 6)] {
        for len in 0..=1024 {
            check_all_paths(&mut rng, rows, cols, len, len % 3);
        }
    }
}

#[test]
fn odd_large_lengths_unaligned_and_row_blocks() {
    let mut rng = StdRng::seed_from_u64(4);
    for &(rows, cols) in &[(4, 10), (1, 10), (8, 3), (9, 5), (17, 4), (2, 1)] {
        for &len in &[4099, 65_536 + 13, 100_003] {
            for offset in [0, 1, 7] {
                check_all_paths(&mut rng, rows, cols, len, offset);
            }
        }
    }
}

#[test]
fn region_helpers_for_every_coefficient() {
    let mut rng = StdRng::seed_from_u64(5);
    let src = random_bytes(&mut rng, 200);
    let base = random_bytes(&mut rng, 200);
    for c in 0..=255u8 {
        let expected_mul: Vec<u8> = src.iter().map(|&s| crate::field::mul(c, s)).collect();
        let expected_add: Vec<u8> = expected_mul.iter().zip(&base).map(|(m, b)| m ^ b).collect();
        for path in SimdPath::supported() {
            let mut dst = base.clone();
            mul_region_with(path, c, &src[1..], &mut dst[1..]);
            assert_eq!(dst[0], base[0]);
            assert_eq!(&dst[1..], &expected_mul[1..], "mul c={c} {path}");
            let mut dst = base.clone();
            mul_add_region_with(path, c, &src, &mut dst);
            assert_eq!(dst, expected_add, "mul_add c={c} {path}");
        }
    }
    let mut dst = base.clone();
    xor_region(&src, &mut dst);
    assert!(dst.iter().zip(src.iter().zip(&base)).all(|(d, (s, b))| *d == s ^ b));
}

#[test]
fn zero_columns_and_rows() {
    let mut out = vec![7u8; 10];
    DotTables::with_path(SimdPath::Scalar, &[], 1, 0).dot_prod(&[], &mut [&mut out]);
    assert_eq!(out, vec![0; 10]);
    DotTables::with_path(SimdPath::Scalar, &[], 0, 3).dot_prod(&[&[1], &[2], &[3]], &mut []);
}

#[test]
#[should_panic(expected = "same length")]
fn unequal_lengths_are_refused() {
    let tables = DotTables::with_path(SimdPath::Scalar, &[1, 2], 1, 2);
    let mut out = vec![0u8; 4];
    tables.dot_prod(&[&[0; 4], &[0; 5]], &mut [&mut out]);
}

#[test]
fn simd_names_parse() {
    for path in SimdPath::ALL {
        assert_eq!(SimdPath::parse(path.name()), Ok(path));
    }
    assert!(matches!(SimdPath::parse("neon"), Err(SimdError::Unknown { .. })));
    assert!(SimdPath::supported().contains(&SimdPath::Scalar));
    assert!(SimdPath::active().is_supported());
}

#[test]
fn all_ones_rows_are_plain_xor_on_every_path() {
    let mut rng = StdRng::seed_from_u64(6);
    for cols in 1..=13 {
        for len in (0..300).chain([4099, 65_536 + 13]) {
            let offset = len % 3;
            let sources: Vec<Vec<u8>> =
                (0..cols).map(|_| random_bytes(&mut rng, len + offset)).collect();
            let srcs: Vec<&[u8]> = sources.iter().map(|s| &s[offset..]).collect();
            let initial = random_bytes(&mut rng, len + offset);
            let xor_all: Vec<u8> =
                (0..len).map(|p| srcs.iter().fold(0u8, |acc, s| acc ^ s[p])).collect();
            for path in SimdPath::supported() {
                let tables = DotTables::with_path(path, &vec![1u8; cols], 1, cols);
                for add in [false, true] {
                    let mut out = initial.clone();
                    if add {
                        tables.dot_prod_add(&srcs, &mut [&mut out[offset..]]);
                    } else {
                        tables.dot_prod(&srcs, &mut [&mut out[offset..]]);
                    }
                    assert_eq!(&out[..offset], &initial[..offset], "{path} wrote before the slice");
                    let expected: Vec<u8> = if add {
                        xor_all.iter().zip(&initial[offset..]).map(|(x, i)| x ^ i).collect()
                    } else {
                        xor_all.clone()
                    };
                    assert!(
                        out[offset..] == expected[..],
                        "{path} cols={cols} len={len} add={add}"
                    );
                }
            }
        }
    }
}

#[test]
fn xor_pair_rows_match_their_definition_on_every_path() {
    let mut rng = StdRng::seed_from_u64(7);
    for cols in 1..=14 {
        for len in [0, 1, 63, 64, 65, 255, 256, 1000, 4099] {
            let coefficients: Vec<u8> =
                (0..cols).map(|j| if j % 4 == 3 { 0 } else { rng.gen() }).collect();
            let in_a: Vec<bool> = (0..cols).map(|j| j % 3 != 1).collect();
            let sources: Vec<Vec<u8>> = (0..cols).map(|_| random_bytes(&mut rng, len)).collect();
            let srcs: Vec<&[u8]> = sources.iter().map(|s| s.as_slice()).collect();
            let b_expected: Vec<u8> = (0..len)
                .map(|p| {
                    (0..cols).fold(0, |acc, j| acc ^ crate::field::mul(coefficients[j], srcs[j][p]))
                })
                .collect();
            let a_expected: Vec<u8> = (0..len)
                .map(|p| {
                    (0..cols).filter(|&j| in_a[j]).fold(b_expected[p], |acc, j| acc ^ srcs[j][p])
                })
                .collect();
            for path in SimdPath::supported() {
                let tables = XorPairTables::with_path(path, &coefficients, &in_a);
                let (mut b, mut a) = (random_bytes(&mut rng, len), random_bytes(&mut rng, len));
                tables.run(&srcs, &mut b, &mut a);
                assert!(b == b_expected && a == a_expected, "{path} cols={cols} len={len}");
            }
        }
    }
}

/// Where a slice `phase` bytes past a 64-byte boundary starts in `storage`.
fn at_phase(storage: &[u8], phase: usize) -> usize {
    (phase % 64 + 64 - storage.as_ptr() as usize % 64) % 64
}

/// Like [`check_all_paths`], but every slice lies at its own distance past a 64-byte boundary:
/// source j at `phases[j]`, destination i at `phases[cols + i]`. The bytes around each
/// destination slice must stay untouched.
fn check_phased(rng: &mut StdRng, rows: usize, cols: usize, len: usize, phases: &[usize]) {
    assert_eq!(phases.len(), rows + cols);
    let coefficients = random_bytes(rng, rows * cols);
    let source_storage: Vec<Vec<u8>> = (0..cols).map(|_| random_bytes(rng, len + 128)).collect();
    let srcs: Vec<&[u8]> = source_storage
        .iter()
        .zip(phases)
        .map(|(s, &phase)| {
            let at = at_phase(s, phase);
            &s[at..at + len]
        })
        .collect();
    let initial: Vec<Vec<u8>> = (0..rows).map(|_| random_bytes(rng, len)).collect();
    let filler = random_bytes(rng, len + 128);
    let run = |path: SimdPath, add: bool| -> Vec<Vec<u8>> {
        let tables = DotTables::with_path(path, &coefficients, rows, cols);
        let mut storage: Vec<Vec<u8>> = vec![filler.clone(); rows];
        let starts: Vec<usize> =
            storage.iter().zip(&phases[cols..]).map(|(s, &p)| at_phase(s, p)).collect();
        for ((s, &at), init) in storage.iter_mut().zip(&starts).zip(&initial) {
            s[at..at + len].copy_from_slice(init);
        }
        let mut dsts: Vec<&mut [u8]> =
            storage.iter_mut().zip(&starts).map(|(s, &at)| &mut s[at..at + len]).collect();
        if add {
            tables.dot_prod_add(&srcs, &mut dsts);
        } else {
            tables.dot_prod(&srcs, &mut dsts);
        }
        for (row, (s, &at)) in storage.iter().zip(&starts).enumerate() {
            assert!(s[..at] == filler[..at], "{path} wrote before row {row} (len {len})");
            assert!(
                s[at + len..] == filler[at + len..],
                "{path} wrote after row {row} (len {len})"
            );
        }
        storage.iter().zip(&starts).map(|(s, &at)| s[at..at + len].to_vec()).collect()
    };
    for add in [false, true] {
        let expected = run(SimdPath::Scalar, add);
        for path in SimdPath::supported() {
            let got = run(path, add);
            for (row, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert!(
                    g == e,
                    "{path} differs from scalar: rows={rows} cols={cols} len={len} \
                     phases={phases:?} add={add} row={row}"
                );
            }
        }
    }
}

#[test]
fn slices_at_mixed_alignments_match_the_oracle() {
    // The split-nibble kernels align their stores to the first row's vector boundary (32
    // bytes for AVX2, 16 for SSSE3) and compute the bytes before it and after the last whole
    // vector as overlapping edge vectors: every distance of that row to its boundary, other
    // rows and sources elsewhere, and lengths around one and two vectors of either width
    // past each edge.
    let mut rng = StdRng::seed_from_u64(9);
    let lengths =
        [16, 17, 24, 31, 32, 33, 40, 47, 48, 63, 64, 65, 95, 96, 97, 127, 160, 200, 1000, 4099];
    for rows in 1..=8 {
        let cols = [1, 3, 10][rows % 3];
        for first in 0..64 {
            let len = lengths[(first + rows) % lengths.len()];
            let mut phases: Vec<usize> = (0..rows + cols).map(|_| rng.gen_range(0..64)).collect();
            phases[cols] = first;
            check_phased(&mut rng, rows, cols, len, &phases);
        }
    }
    // Every slice at one phase (malloc's large allocations sit 16 bytes past a line), so
    // the whole main loop runs aligned.
    for phase in [0, 8, 16, 31, 32, 48] {
        for len in [16, 32, 48, 64, 65, 1000, 4099] {
            check_phased(&mut rng, 4, 10, len, &[phase; 14]);
        }
    }
}

#[test]
fn outputs_beyond_the_streaming_threshold_are_exact() {
    // Large enough for the SIMD kernels' streaming stores, with a tail that is not a whole
    // vector: outputs all 64-byte aligned (every SIMD path streams), all 16 bytes past a line
    // (AVX2 streams after its head edge, SSSE3 from the start), and at mixed phases (the
    // outputs 16-byte aligned, so only SSSE3 streams); dot_prod
    // and dot_prod_add (which never streams).
    let mut rng = StdRng::seed_from_u64(8);
    let len = (4 << 20) + 64 * 5 + 13;
    let (rows, cols) = (3, 4);
    for phases in [[0; 7], [16; 7], [5, 0, 16, 40, 0, 32, 48]] {
        check_phased(&mut rng, rows, cols, len, &phases);
    }
}
