//! Scalar GF(2^8) arithmetic with the polynomial 0x11D.
//!
//! Invariants:
//! - `EXP[i] = 2^i` for i in 0..510 (doubled so `EXP[LOG[a] + LOG[b]]` needs no reduction).
//! - `LOG[EXP[i]] = i` for i in 0..255; `LOG[0]` is unused (0 has no logarithm).
//! - `MUL[a][b] = a·b` for all a, b; this table is the oracle every SIMD kernel is checked against.
//! - All tables are computed at compile time: there is no initialisation order to get wrong.

/// The reducing polynomial x^8 + x^4 + x^3 + x^2 + 1.
pub const POLYNOMIAL: u16 = 0x11D;

const fn build_exp_log() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    // exp[510], exp[511] are never indexed by mul (max LOG sum is 254 + 254 = 508).
    exp[510] = exp[0];
    exp[511] = exp[1];
    (exp, log)
}

const EXP_LOG: ([u8; 512], [u8; 256]) = build_exp_log();
static EXP: [u8; 512] = EXP_LOG.0;
static LOG: [u8; 256] = EXP_LOG.1;

const fn mul_slow(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP_LOG.0[EXP_LOG.1[a as usize] as usize + EXP_LOG.1[b as usize] as usize]
}

const fn build_mul() -> [[u8; 256]; 256] {
    let mut table = [[0u8; 256]; 256];
    let mut a = 0;
    while a < 256 {
        let mut b = 0;
        while b < 256 {
            table[a][b] = mul_slow(a as u8, b as u8);
            b += 1;
        }
        a += 1;
    }
    table
}

/// `MUL_TABLE[a][b] = a·b`: the scalar oracle's lookup table (64 KiB).
pub static MUL_TABLE: [[u8; 256]; 256] = build_mul();

const fn build_inv() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut a = 1;
    while a < 256 {
        table[a] = EXP_LOG.0[255 - EXP_LOG.1[a] as usize];
        a += 1;
    }
    table
}

/// `INV_TABLE[a] = a⁻¹` for a ≠ 0; `INV_TABLE[0] = 0` (0 has no inverse, callers must check).
pub static INV_TABLE: [u8; 256] = build_inv();

/// Addition (and subtraction) in GF(2^8): XOR.
#[inline]
pub const fn add(a: u8, b: u8) -> u8 {
    a ^ b
}

/// Multiplication in GF(2^8).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    MUL_TABLE[a as usize][b as usize]
}

/// Multiplicative inverse. Panics on 0: dividing by zero is a programming error.
#[inline]
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "0 has no inverse in GF(2^8)");
    INV_TABLE[a as usize]
}

/// Division `a / b`. Panics when `b` is 0.
#[inline]
pub fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// `2^i` (the generator raised to `i`, any `i`).
#[inline]
pub fn exp(i: usize) -> u8 {
    EXP[i % 255]
}

/// Discrete logarithm base 2. Panics on 0.
#[inline]
pub fn log(a: u8) -> u8 {
    assert!(a != 0, "0 has no logarithm in GF(2^8)");
    LOG[a as usize]
}

/// `a^e` with `0^0 = 1`.
pub fn pow(a: u8, e: usize) -> u8 {
    if e == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    EXP[(LOG[a as usize] as usize * e) % 255]
}

/// Carry-less "Russian peasant" multiplication, independent of every table: the reference the
/// tables themselves are tested against.
pub fn mul_bitwise(mut a: u8, mut b: u8) -> u8 {
    let mut product = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (POLYNOMIAL & 0xFF) as u8;
        }
        b >>= 1;
    }
    product
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_bitwise_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_bitwise(a, b), "{a}·{b}");
            }
        }
    }

    #[test]
    fn field_axioms_exhaustive() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a);
            assert_eq!(mul(a, 0), 0);
            assert_eq!(add(a, a), 0);
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1, "inverse of {a}");
                assert_eq!(div(a, a), 1);
            }
            for b in 0..=255u8 {
                let ab = mul(a, b);
                assert_eq!(ab, mul(b, a), "commutativity {a},{b}");
                if b != 0 {
                    assert_eq!(div(ab, b), a, "division {a},{b}");
                }
                let row_ab = &MUL_TABLE[ab as usize];
                let row_a = &MUL_TABLE[a as usize];
                let row_b = &MUL_TABLE[b as usize];
                for c in 0..=255u8 {
                    // (a·b)·c = a·(b·c)
                    assert_eq!(row_ab[c as usize], row_a[row_b[c as usize] as usize]);
                    // a·(b+c) = a·b + a·c
                    assert_eq!(row_a[(b ^ c) as usize], ab ^ row_a[c as usize]);
                }
            }
        }
    }

    #[test]
    fn exp_log_round_trip_and_generator_order() {
        let mut seen = [false; 256];
        for i in 0..255 {
            let x = exp(i);
            assert!(!seen[x as usize], "2 has order below 255");
            seen[x as usize] = true;
            assert_eq!(log(x) as usize, i);
        }
        assert!(!seen[0]);
        assert_eq!(pow(2, 255), 1);
        assert_eq!(pow(0, 0), 1);
        assert_eq!(pow(7, 3), mul(7, mul(7, 7)));
    }
}
