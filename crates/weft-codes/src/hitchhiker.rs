//! Hitchhiker codes (placeholder: being written).

use std::sync::Arc;

use crate::{Code, CodeError, CodeSpec};

pub(crate) fn build(spec: CodeSpec) -> Result<Arc<dyn Code>, CodeError> {
    Err(CodeError::InvalidParameters { code: spec.to_string(), reason: "not built yet".into() })
}
