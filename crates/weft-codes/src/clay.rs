//! Clay codes (placeholder: being written).

use std::sync::Arc;

use crate::{Code, CodeError, CodeSpec};

pub(crate) fn build(k: usize, r: usize, d: usize) -> Result<Arc<dyn Code>, CodeError> {
    let code = CodeSpec::Clay { k, r, d }.to_string();
    Err(CodeError::InvalidParameters { code, reason: "not built yet".into() })
}
