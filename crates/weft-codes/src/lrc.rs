//! Locally repairable codes (placeholder: being written).

use std::sync::Arc;

use crate::{Code, CodeError, CodeSpec};

pub(crate) fn build(k: usize, l: usize, g: usize) -> Result<Arc<dyn Code>, CodeError> {
    let code = CodeSpec::Lrc { k, l, g }.to_string();
    Err(CodeError::InvalidParameters { code, reason: "not built yet".into() })
}
