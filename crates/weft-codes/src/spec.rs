//! Code specifications: the names users type (`rs(10,4)`, `rep(3)`) and their parameters.
//!
//! Invariants:
//! - `CodeSpec::parse(spec.to_string()) == spec` for every valid spec (the name round-trips),
//!   so a spec can be stored in a manifest or metadata as its name.
//! - A spec that passes `validate` builds a code; limits are the named constants below.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::{Code, CodeError, LinearCode};

/// GF(2^8) has 256 elements, so a code has at most 256 units (k + r ≤ 256).
pub const MAX_TOTAL_UNITS: usize = 256;

/// Families `CodeSpec::parse` understands.
pub const KNOWN_FAMILIES: &[&str] = &["rs(k,r)", "rep(n)"];

/// A code and its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CodeSpec {
    /// Reed-Solomon on ISA-L's Cauchy matrix: k data units, r parity units, any r lost.
    Rs { k: usize, r: usize },
    /// n copies: one data unit, n − 1 parity units that equal it.
    Rep { n: usize },
}

impl CodeSpec {
    /// Parses `rs(10,4)`, `rs 10 4`, `rs-10-4`, `rep(3)`.
    pub fn parse(text: &str) -> Result<CodeSpec, CodeError> {
        let cleaned: String = text.trim().to_ascii_lowercase();
        let (family, rest) = match cleaned.find(['(', ' ', '-']) {
            Some(at) => (&cleaned[..at], &cleaned[at..]),
            None => (cleaned.as_str(), ""),
        };
        let numbers: Result<Vec<usize>, _> = rest
            .split(['(', ')', ',', ' ', '-'])
            .filter(|s| !s.is_empty())
            .map(str::parse::<usize>)
            .collect();
        let unknown = || CodeError::UnknownCode { name: text.to_string() };
        let numbers = match numbers {
            Ok(numbers) => numbers,
            Err(_) if family == "rs" || family == "rep" => {
                return Err(CodeError::InvalidParameters {
                    code: text.to_string(),
                    reason: format!(
                        "parameters must be whole numbers with k + r ≤ {MAX_TOTAL_UNITS}"
                    ),
                })
            }
            Err(_) => return Err(unknown()),
        };
        let spec = match (family, numbers.as_slice()) {
            ("rs", &[k, r]) => CodeSpec::Rs { k, r },
            ("rep", &[n]) => CodeSpec::Rep { n },
            ("rs", _) | ("rep", _) => {
                return Err(CodeError::InvalidParameters {
                    code: text.to_string(),
                    reason: format!(
                        "expected {}",
                        if family == "rs" { "rs(k,r)" } else { "rep(n)" }
                    ),
                })
            }
            _ => return Err(unknown()),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Builds a spec from a family name and separate parameters, as the CLI's
    /// `--code rs --k 10 --r 4` gives them. For `rep`, n is `k + r` with k = 1 (`--r 2` is
    /// three copies) unless `n` is given.
    pub fn from_parts(
        family: &str,
        k: Option<usize>,
        r: Option<usize>,
    ) -> Result<CodeSpec, CodeError> {
        let missing = |what: &str| CodeError::InvalidParameters {
            code: family.to_string(),
            reason: format!("{what} is required"),
        };
        let spec = match family.trim().to_ascii_lowercase().as_str() {
            "rs" => CodeSpec::Rs {
                k: k.ok_or_else(|| missing("--k"))?,
                r: r.ok_or_else(|| missing("--r"))?,
            },
            "rep" => {
                let k = k.unwrap_or(1);
                if k != 1 {
                    return Err(CodeError::InvalidParameters {
                        code: family.to_string(),
                        reason: "rep has exactly one data unit (k = 1)".into(),
                    });
                }
                let r = r.ok_or_else(|| missing("--r"))?;
                // Saturating: an absurd r must fail validation, not wrap around it.
                CodeSpec::Rep { n: r.saturating_add(1) }
            }
            _ => return Err(CodeError::UnknownCode { name: family.to_string() }),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Short family name: `rs`, `rep`.
    pub fn family(&self) -> &'static str {
        match self {
            CodeSpec::Rs { .. } => "rs",
            CodeSpec::Rep { .. } => "rep",
        }
    }

    /// Number of data units.
    pub fn k(&self) -> usize {
        match *self {
            CodeSpec::Rs { k, .. } => k,
            CodeSpec::Rep { .. } => 1,
        }
    }

    /// Number of parity units.
    pub fn r(&self) -> usize {
        match *self {
            CodeSpec::Rs { r, .. } => r,
            CodeSpec::Rep { n } => n.saturating_sub(1),
        }
    }

    /// Checks the parameters against the code's limits.
    pub fn validate(&self) -> Result<(), CodeError> {
        let invalid =
            |reason: String| CodeError::InvalidParameters { code: self.to_string(), reason };
        match *self {
            CodeSpec::Rs { k, r } => {
                if k == 0 {
                    return Err(invalid("k must be at least 1".into()));
                }
                if r == 0 {
                    return Err(invalid("r must be at least 1 (r = 0 protects nothing)".into()));
                }
                // checked_add: parameters come from users and files; k + r must not wrap.
                match k.checked_add(r) {
                    Some(n) if n <= MAX_TOTAL_UNITS => {}
                    Some(n) => {
                        return Err(invalid(format!(
                            "k + r = {n} exceeds {MAX_TOTAL_UNITS}, the most GF(2^8) allows"
                        )))
                    }
                    None => {
                        return Err(invalid(format!(
                            "k + r exceeds {MAX_TOTAL_UNITS}, the most GF(2^8) allows"
                        )))
                    }
                }
            }
            CodeSpec::Rep { n } => {
                if n < 2 {
                    return Err(invalid("rep needs n ≥ 2 copies".into()));
                }
                if n > MAX_TOTAL_UNITS {
                    return Err(invalid(format!("n = {n} exceeds {MAX_TOTAL_UNITS}")));
                }
            }
        }
        Ok(())
    }

    /// Builds the code.
    pub fn build(&self) -> Result<Arc<dyn Code>, CodeError> {
        self.validate()?;
        Ok(match *self {
            CodeSpec::Rs { k, r } => Arc::new(LinearCode::rs(k, r)?),
            CodeSpec::Rep { n } => Arc::new(LinearCode::rep(n)?),
        })
    }
}

impl fmt::Display for CodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeSpec::Rs { k, r } => write!(f, "rs({k},{r})"),
            CodeSpec::Rep { n } => write!(f, "rep({n})"),
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

    #[test]
    fn names_round_trip() {
        for spec in
            [CodeSpec::Rs { k: 10, r: 4 }, CodeSpec::Rs { k: 1, r: 1 }, CodeSpec::Rep { n: 3 }]
        {
            assert_eq!(CodeSpec::parse(&spec.to_string()), Ok(spec));
        }
        assert_eq!(CodeSpec::parse("RS 6 3"), Ok(CodeSpec::Rs { k: 6, r: 3 }));
        assert_eq!(CodeSpec::parse("rs-12-4"), Ok(CodeSpec::Rs { k: 12, r: 4 }));
        assert_eq!(CodeSpec::from_parts("rep", None, Some(2)), Ok(CodeSpec::Rep { n: 3 }));
        assert_eq!(CodeSpec::from_parts("rs", Some(10), Some(4)), Ok(CodeSpec::Rs { k: 10, r: 4 }));
    }

    #[test]
    fn bad_specs_are_refused_with_reasons() {
        assert!(matches!(CodeSpec::parse("rs(0,4)"), Err(CodeError::InvalidParameters { .. })));
        assert!(matches!(CodeSpec::parse("rs(10,0)"), Err(CodeError::InvalidParameters { .. })));
        assert!(matches!(CodeSpec::parse("rs(250,7)"), Err(CodeError::InvalidParameters { .. })));
        assert!(CodeSpec::parse("rs(250,6)").is_ok());
        assert!(matches!(CodeSpec::parse("rs(10)"), Err(CodeError::InvalidParameters { .. })));
        assert!(matches!(CodeSpec::parse("zz(1,2)"), Err(CodeError::UnknownCode { .. })));
        assert!(matches!(CodeSpec::parse("rep(1)"), Err(CodeError::InvalidParameters { .. })));
        let too_long = "rs(99999999999999999999999999,2)";
        assert!(matches!(CodeSpec::parse(too_long), Err(CodeError::InvalidParameters { .. })));
        let huge = format!("rs({},2)", usize::MAX);
        assert!(matches!(CodeSpec::parse(&huge), Err(CodeError::InvalidParameters { .. })));
        assert!(CodeSpec::from_parts("rep", None, Some(usize::MAX)).is_err());
        assert!(CodeSpec::from_parts("rs", Some(4), None).unwrap_err().to_string().contains("--r"));
        let message = CodeSpec::parse("rs(250,7)").unwrap_err().to_string();
        assert!(message.contains("256"), "{message}");
    }
}
