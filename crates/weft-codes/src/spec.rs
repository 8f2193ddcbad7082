//! Code specifications: the names users type (`rs(10,4)`, `rep(3)`) and their parameters.
//!
//! Invariants:
//! - `CodeSpec::parse(spec.to_string()) == spec` for every valid spec (the name round-trips),
//!   so a spec can be stored in a manifest or metadata as its name.
//! - A spec that passes `validate` builds a code; limits are the named constants below.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use crate::{Code, CodeError, LinearCode};

/// GF(2^8) has 256 elements, so a code has at most 256 units (k + r ≤ 256).
pub const MAX_TOTAL_UNITS: usize = 256;

/// Most built codes a process keeps for reuse by [`CodeSpec::build`].
pub const MAX_CACHED_CODES: usize = 256;

/// Families `CodeSpec::parse` understands, as users write them.
pub const KNOWN_FAMILIES: &[&str] = &[
    "rs(k,r)",
    "rep(n)",
    "hh-xor(k,r)",
    "hh-xor+(k,r)",
    "hh-nonxor(k,r)",
    "clay(k,r[,d])",
    "lrc(k,l,g)",
];

/// Most sub-chunks a code may cut a unit into (Clay's α = q^t grows fast with n); units must
/// be a multiple of α × 64 bytes, so this also bounds the smallest unit.
pub const MAX_SUB_CHUNKS: usize = 1 << 14;

/// A code and its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CodeSpec {
    /// Reed-Solomon on ISA-L's Cauchy matrix: k data units, r parity units, any r lost.
    Rs { k: usize, r: usize },
    /// n copies: one data unit, n − 1 parity units that equal it.
    Rep { n: usize },
    /// Hitchhiker-XOR (Rashmi et al., SIGCOMM'14): RS with XOR piggybacks, α = 2.
    HhXor { k: usize, r: usize },
    /// Hitchhiker-XOR+: piggybacks that also use the all-ones parity row, α = 2.
    HhXorPlus { k: usize, r: usize },
    /// Hitchhiker-nonXOR: piggybacks through the RS parity function, α = 2.
    HhNonXor { k: usize, r: usize },
    /// Clay (Vajha et al., FAST'18): MSR code, any unit repaired from d helpers reading β = α/q
    /// sub-chunks each; q = d − k + 1, α = q^⌈n/q⌉.
    Clay { k: usize, r: usize, d: usize },
    /// Azure-style LRC: l local groups of k/l data units with one XOR parity each, plus g
    /// global parities.
    Lrc { k: usize, l: usize, g: usize },
}

/// Parameters as separate flags (`--code clay --k 10 --r 4 --d 13`), before validation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeParts {
    pub family: String,
    pub k: Option<usize>,
    pub r: Option<usize>,
    pub d: Option<usize>,
    pub l: Option<usize>,
    pub g: Option<usize>,
}

fn invalid(code: &str, reason: impl Into<String>) -> CodeError {
    CodeError::InvalidParameters { code: code.to_string(), reason: reason.into() }
}

impl CodeSpec {
    /// Parses `rs(10,4)`, `rs 10 4`, `rep(3)`, `hh-xor+(10,4)`, `clay(10,4)`, `clay(8,4,11)`,
    /// `lrc(10,2,2)` (case and spaces do not matter).
    pub fn parse(text: &str) -> Result<CodeSpec, CodeError> {
        let cleaned: String = text.trim().to_ascii_lowercase();
        let (family, rest) = match cleaned.find(['(', ' ']) {
            Some(at) => (cleaned[..at].trim(), &cleaned[at..]),
            None => (cleaned.as_str(), ""),
        };
        if !FAMILY_NAMES.contains(&family) {
            return Err(CodeError::UnknownCode { name: text.to_string() });
        }
        let numbers: Vec<usize> = rest
            .split(['(', ')', ',', ' '])
            .filter(|s| !s.is_empty())
            .map(str::parse::<usize>)
            .collect::<Result<_, _>>()
            .map_err(|_| {
                invalid(
                    text,
                    format!("parameters must be whole numbers with n ≤ {MAX_TOTAL_UNITS}"),
                )
            })?;
        let wrong = |expected: &str| invalid(text, format!("expected {expected}"));
        let spec = match (family, numbers.as_slice()) {
            ("rs", &[k, r]) => CodeSpec::Rs { k, r },
            ("rep", &[n]) => CodeSpec::Rep { n },
            ("hh-xor", &[k, r]) => CodeSpec::HhXor { k, r },
            ("hh-xor+", &[k, r]) => CodeSpec::HhXorPlus { k, r },
            ("hh-nonxor", &[k, r]) => CodeSpec::HhNonXor { k, r },
            ("clay", &[k, r]) => CodeSpec::Clay { k, r, d: (k + r).saturating_sub(1) },
            ("clay", &[k, r, d]) => CodeSpec::Clay { k, r, d },
            ("lrc", &[k, l, g]) => CodeSpec::Lrc { k, l, g },
            ("rep", _) => return Err(wrong("rep(n)")),
            ("clay", _) => return Err(wrong("clay(k,r) or clay(k,r,d)")),
            ("lrc", _) => return Err(wrong("lrc(k,l,g)")),
            (family, _) => return Err(wrong(&format!("{family}(k,r)"))),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Builds a spec from separate parameters, as the CLI's flags give them. `rep` has k = 1
    /// and n = 1 + r (`--r 2` is three copies); `clay`'s d defaults to k + r − 1; `lrc` takes
    /// `--l` and `--g` (and `--r`, if given, must equal l + g).
    pub fn from_parts(parts: &CodeParts) -> Result<CodeSpec, CodeError> {
        let family = parts.family.trim().to_ascii_lowercase();
        let need = |value: Option<usize>, flag: &str| {
            value.ok_or_else(|| invalid(&family, format!("{flag} is required")))
        };
        let refuse = |value: Option<usize>, flag: &str| match value {
            Some(_) => Err(invalid(&family, format!("{flag} does not apply to {family}"))),
            None => Ok(()),
        };
        let spec = match family.as_str() {
            "rs" | "hh-xor" | "hh-xor+" | "hh-nonxor" => {
                refuse(parts.d, "--d")?;
                refuse(parts.l, "--l")?;
                refuse(parts.g, "--g")?;
                let (k, r) = (need(parts.k, "--k")?, need(parts.r, "--r")?);
                match family.as_str() {
                    "rs" => CodeSpec::Rs { k, r },
                    "hh-xor" => CodeSpec::HhXor { k, r },
                    "hh-xor+" => CodeSpec::HhXorPlus { k, r },
                    _ => CodeSpec::HhNonXor { k, r },
                }
            }
            "rep" => {
                refuse(parts.d, "--d")?;
                refuse(parts.l, "--l")?;
                refuse(parts.g, "--g")?;
                if parts.k.is_some_and(|k| k != 1) {
                    return Err(invalid("rep", "rep has exactly one data unit (k = 1)"));
                }
                // Saturating: an absurd r must fail validation, not wrap around it.
                CodeSpec::Rep { n: need(parts.r, "--r")?.saturating_add(1) }
            }
            "clay" => {
                refuse(parts.l, "--l")?;
                refuse(parts.g, "--g")?;
                let (k, r) = (need(parts.k, "--k")?, need(parts.r, "--r")?);
                let d = parts.d.unwrap_or_else(|| k.saturating_add(r).saturating_sub(1));
                CodeSpec::Clay { k, r, d }
            }
            "lrc" => {
                refuse(parts.d, "--d")?;
                let (k, l, g) =
                    (need(parts.k, "--k")?, need(parts.l, "--l")?, need(parts.g, "--g")?);
                if let Some(r) = parts.r {
                    if Some(r) != l.checked_add(g) {
                        return Err(invalid(
                            "lrc",
                            format!("--r {r} disagrees with --l {l} + --g {g} (r = l + g)"),
                        ));
                    }
                }
                CodeSpec::Lrc { k, l, g }
            }
            _ => return Err(CodeError::UnknownCode { name: parts.family.clone() }),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Short family name: `rs`, `rep`, `hh-xor`, `hh-xor+`, `hh-nonxor`, `clay`, `lrc`.
    pub fn family(&self) -> &'static str {
        match self {
            CodeSpec::Rs { .. } => "rs",
            CodeSpec::Rep { .. } => "rep",
            CodeSpec::HhXor { .. } => "hh-xor",
            CodeSpec::HhXorPlus { .. } => "hh-xor+",
            CodeSpec::HhNonXor { .. } => "hh-nonxor",
            CodeSpec::Clay { .. } => "clay",
            CodeSpec::Lrc { .. } => "lrc",
        }
    }

    /// Number of data units.
    pub fn k(&self) -> usize {
        match *self {
            CodeSpec::Rep { .. } => 1,
            CodeSpec::Rs { k, .. }
            | CodeSpec::HhXor { k, .. }
            | CodeSpec::HhXorPlus { k, .. }
            | CodeSpec::HhNonXor { k, .. }
            | CodeSpec::Clay { k, .. }
            | CodeSpec::Lrc { k, .. } => k,
        }
    }

    /// Number of parity units.
    pub fn r(&self) -> usize {
        match *self {
            CodeSpec::Rep { n } => n.saturating_sub(1),
            CodeSpec::Lrc { l, g, .. } => l.saturating_add(g),
            CodeSpec::Rs { r, .. }
            | CodeSpec::HhXor { r, .. }
            | CodeSpec::HhXorPlus { r, .. }
            | CodeSpec::HhNonXor { r, .. }
            | CodeSpec::Clay { r, .. } => r,
        }
    }

    /// Checks the parameters against the code's limits.
    pub fn validate(&self) -> Result<(), CodeError> {
        let name = self.to_string();
        let fail = |reason: String| Err(invalid(&name, reason));
        let (k, r) = (self.k(), self.r());
        if k == 0 {
            return fail("k must be at least 1".into());
        }
        // checked_add: parameters come from users and files; k + r must not wrap.
        match k.checked_add(r) {
            Some(n) if n <= MAX_TOTAL_UNITS => {}
            Some(n) => {
                return fail(format!(
                    "k + r = {n} exceeds {MAX_TOTAL_UNITS}, the most GF(2^8) allows"
                ))
            }
            None => {
                return fail(format!("k + r exceeds {MAX_TOTAL_UNITS}, the most GF(2^8) allows"))
            }
        }
        match *self {
            CodeSpec::Rs { r: 0, .. } => {
                fail("r must be at least 1 (r = 0 protects nothing)".into())
            }
            CodeSpec::Rep { n } if n < 2 => fail("rep needs n ≥ 2 copies".into()),
            CodeSpec::HhXor { k, r }
            | CodeSpec::HhXorPlus { k, r }
            | CodeSpec::HhNonXor { k, r }
                if k < 2 || r < 2 =>
            {
                fail("Hitchhiker needs k ≥ 2 and r ≥ 2 (piggybacks ride on parities 2..r)".into())
            }
            CodeSpec::Clay { k, r, d } => {
                if r < 2 {
                    return fail(
                        "Clay needs r ≥ 2 (with r = 1, repair reads k units as RS does)".into(),
                    );
                }
                if d < k + 1 || d > k + r - 1 {
                    return fail(format!(
                        "d must satisfy k + 1 ≤ d ≤ k + r − 1, i.e. {} ≤ d ≤ {}",
                        k + 1,
                        k + r - 1
                    ));
                }
                match clay_sub_chunks(k, r, d) {
                    Some(alpha) if alpha <= MAX_SUB_CHUNKS => Ok(()),
                    _ => fail(format!(
                        "α = q^⌈n/q⌉ with q = d − k + 1 exceeds {MAX_SUB_CHUNKS} sub-chunks; choose a larger d or a smaller n"
                    )),
                }
            }
            CodeSpec::Lrc { k, l, g } => {
                if l == 0 {
                    return fail("l must be at least 1 local group".into());
                }
                if k % l != 0 {
                    return fail(format!(
                        "l = {l} must divide k = {k}: every local group has k/l data units"
                    ));
                }
                if g == 0 {
                    return fail("g must be at least 1 global parity".into());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The code, built once per process and shared: building prepares tables (and for LRC
    /// searches coefficients), which is worth doing once, and codes are immutable after.
    pub fn build(&self) -> Result<Arc<dyn Code>, CodeError> {
        self.validate()?;
        static BUILT: OnceLock<Mutex<HashMap<CodeSpec, Arc<dyn Code>>>> = OnceLock::new();
        let built = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
        if let Some(code) = built.lock().expect("code cache poisoned").get(self) {
            return Ok(code.clone());
        }
        let code = self.build_uncached()?;
        let mut cache = built.lock().expect("code cache poisoned");
        if cache.len() >= MAX_CACHED_CODES {
            cache.clear();
        }
        Ok(cache.entry(*self).or_insert(code).clone())
    }

    fn build_uncached(&self) -> Result<Arc<dyn Code>, CodeError> {
        Ok(match *self {
            CodeSpec::Rs { k, r } => Arc::new(LinearCode::rs(k, r)?),
            CodeSpec::Rep { n } => Arc::new(LinearCode::rep(n)?),
            CodeSpec::HhXor { .. } | CodeSpec::HhXorPlus { .. } | CodeSpec::HhNonXor { .. } => {
                crate::hitchhiker::build(*self)?
            }
            CodeSpec::Clay { k, r, d } => crate::clay::build(k, r, d)?,
            CodeSpec::Lrc { k, l, g } => crate::lrc::build(k, l, g)?,
        })
    }
}

/// Family names as `parse` accepts them.
const FAMILY_NAMES: &[&str] = &["rs", "rep", "hh-xor", "hh-xor+", "hh-nonxor", "clay", "lrc"];

/// Clay's α = q^t with q = d − k + 1 and t = ⌈(k + r)/q⌉; `None` on overflow.
pub fn clay_sub_chunks(k: usize, r: usize, d: usize) -> Option<usize> {
    let q = d.checked_sub(k)?.checked_add(1)?;
    if q < 2 {
        return None;
    }
    let t = (k + r).div_ceil(q);
    q.checked_pow(u32::try_from(t).ok()?)
}

impl fmt::Display for CodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CodeSpec::Rs { k, r } => write!(f, "rs({k},{r})"),
            CodeSpec::Rep { n } => write!(f, "rep({n})"),
            CodeSpec::HhXor { k, r } => write!(f, "hh-xor({k},{r})"),
            CodeSpec::HhXorPlus { k, r } => write!(f, "hh-xor+({k},{r})"),
            CodeSpec::HhNonXor { k, r } => write!(f, "hh-nonxor({k},{r})"),
            // The default d is left out, so `clay(10,4)` reads as users write it.
            CodeSpec::Clay { k, r, d } if d == (k + r).saturating_sub(1) => {
                write!(f, "clay({k},{r})")
            }
            CodeSpec::Clay { k, r, d } => write!(f, "clay({k},{r},{d})"),
            CodeSpec::Lrc { k, l, g } => write!(f, "lrc({k},{l},{g})"),
        }
    }
}

impl FromStr for CodeSpec {
    type Err = CodeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CodeSpec::parse(s)
    }
}

impl serde::Serialize for CodeSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CodeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        CodeSpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(family: &str, k: Option<usize>, r: Option<usize>) -> CodeParts {
        CodeParts { family: family.into(), k, r, ..CodeParts::default() }
    }

    #[test]
    fn names_round_trip() {
        for spec in [
            CodeSpec::Rs { k: 10, r: 4 },
            CodeSpec::Rs { k: 1, r: 1 },
            CodeSpec::Rep { n: 3 },
            CodeSpec::HhXor { k: 10, r: 4 },
            CodeSpec::HhXorPlus { k: 6, r: 3 },
            CodeSpec::HhNonXor { k: 20, r: 5 },
            CodeSpec::Clay { k: 10, r: 4, d: 13 },
            CodeSpec::Clay { k: 8, r: 4, d: 10 },
            CodeSpec::Lrc { k: 10, l: 2, g: 2 },
        ] {
            assert_eq!(CodeSpec::parse(&spec.to_string()), Ok(spec), "{spec}");
        }
        assert_eq!(CodeSpec::Clay { k: 10, r: 4, d: 13 }.to_string(), "clay(10,4)");
        assert_eq!(CodeSpec::Clay { k: 8, r: 4, d: 10 }.to_string(), "clay(8,4,10)");
        assert_eq!(CodeSpec::parse("RS 6 3"), Ok(CodeSpec::Rs { k: 6, r: 3 }));
        assert_eq!(CodeSpec::parse("HH-XOR+ (10, 4)"), Ok(CodeSpec::HhXorPlus { k: 10, r: 4 }));
        assert_eq!(CodeSpec::from_parts(&parts("rep", None, Some(2))), Ok(CodeSpec::Rep { n: 3 }));
        assert_eq!(
            CodeSpec::from_parts(&parts("rs", Some(10), Some(4))),
            Ok(CodeSpec::Rs { k: 10, r: 4 })
        );
        let clay = CodeParts { d: Some(11), ..parts("clay", Some(8), Some(4)) };
        assert_eq!(CodeSpec::from_parts(&clay), Ok(CodeSpec::Clay { k: 8, r: 4, d: 11 }));
        let lrc = CodeParts { l: Some(2), g: Some(2), ..parts("lrc", Some(10), None) };
        assert_eq!(CodeSpec::from_parts(&lrc), Ok(CodeSpec::Lrc { k: 10, l: 2, g: 2 }));
        assert_eq!(CodeSpec::Lrc { k: 10, l: 2, g: 2 }.r(), 4);
    }

    #[test]
    fn built_codes_are_shared() {
        let spec = CodeSpec::Rs { k: 6, r: 3 };
        assert!(Arc::ptr_eq(&spec.build().unwrap(), &spec.build().unwrap()));
        let other = CodeSpec::Rs { k: 6, r: 2 }.build().unwrap();
        assert!(!Arc::ptr_eq(&spec.build().unwrap(), &other));
        assert_eq!(other.spec(), CodeSpec::Rs { k: 6, r: 2 });
    }

    #[test]
    fn clay_sub_chunk_counts() {
        assert_eq!(clay_sub_chunks(10, 4, 13), Some(256)); // q = 4, t = 4 (n = 14 shortened to 16)
        assert_eq!(clay_sub_chunks(8, 4, 11), Some(64)); // q = 4, t = 3
        assert_eq!(clay_sub_chunks(8, 4, 10), Some(81)); // q = 3, t = 4
        assert_eq!(clay_sub_chunks(8, 4, 8), None);
    }

    #[test]
    fn bad_specs_are_refused_with_reasons() {
        let refused = |text: &str, needle: &str| match CodeSpec::parse(text) {
            Err(CodeError::InvalidParameters { reason, .. }) => {
                assert!(reason.contains(needle), "{text}: {reason}")
            }
            other => panic!("{text} should be refused, got {other:?}"),
        };
        refused("rs(0,4)", "k must be at least 1");
        refused("rs(10,0)", "r must be at least 1");
        refused("rs(250,7)", "256");
        assert!(CodeSpec::parse("rs(250,6)").is_ok());
        refused("rs(10)", "rs(k,r)");
        assert!(matches!(CodeSpec::parse("zz(1,2)"), Err(CodeError::UnknownCode { .. })));
        refused("rep(1)", "n ≥ 2");
        refused("rs(99999999999999999999999999,2)", "whole numbers");
        refused(&format!("rs({},2)", usize::MAX), "exceeds");
        refused("hh-xor(10,1)", "r ≥ 2");
        refused("hh-nonxor(1,4)", "k ≥ 2");
        refused("clay(10,4,10)", "k + 1 ≤ d");
        refused("clay(10,4,14)", "k + 1 ≤ d");
        refused("clay(10,1)", "r ≥ 2");
        refused("clay(100,100,101)", "sub-chunks");
        refused("lrc(10,3,2)", "must divide");
        refused("lrc(10,0,2)", "at least 1");
        refused("lrc(10,2,0)", "global parity");
        assert!(CodeSpec::from_parts(&parts("rep", None, Some(usize::MAX))).is_err());
        let missing = CodeSpec::from_parts(&parts("rs", Some(4), None)).unwrap_err();
        assert!(missing.to_string().contains("--r"));
        let misplaced = CodeParts { d: Some(5), ..parts("rs", Some(4), Some(2)) };
        assert!(CodeSpec::from_parts(&misplaced).unwrap_err().to_string().contains("--d"));
        let disagree = CodeParts { l: Some(2), g: Some(2), ..parts("lrc", Some(10), Some(3)) };
        assert!(CodeSpec::from_parts(&disagree).unwrap_err().to_string().contains("disagrees"));
    }
}
