//! Row sets on stdout for scripts: `--json` prints one JSON document (the rows as an array,
//! or the command's object holding them) once the set is complete; `--json-lines` prints each
//! row as it is made, one object per line (for long runs watched as they go).
//!
//! Invariants:
//! - With `--json` nothing reaches stdout before [`JsonRows::finish`], which prints exactly one
//!   document; with `--json-lines` every [`JsonRows::push`] prints one line at once; a silent
//!   set (the human table is printed elsewhere) prints nothing.
//! - Every row pushed is kept, whatever the mode, for `--plot` ([`JsonRows::rows`]).

use serde::Serialize;
use serde_json::Value;

/// Collects or streams the rows of one command.
pub struct JsonRows {
    lines: bool,
    silent: bool,
    rows: Vec<Value>,
}

impl JsonRows {
    /// `lines`: print each row at once (`--json-lines`), else collect them (`--json`).
    pub fn new(lines: bool) -> JsonRows {
        JsonRows { lines, silent: false, rows: Vec::new() }
    }

    /// Rows kept and never printed (for `--plot` beside a human table).
    pub fn silent() -> JsonRows {
        JsonRows { lines: false, silent: true, rows: Vec::new() }
    }

    /// One row: printed now with `--json-lines`, kept for [`JsonRows::finish`] and
    /// [`JsonRows::rows`].
    pub fn push(&mut self, row: &impl Serialize) {
        let value = serde_json::to_value(row).expect("rows serialize");
        if self.lines && !self.silent {
            crate::cluster_cli::print_json(&value);
        }
        self.rows.push(value);
    }

    /// The rows pushed so far.
    pub fn rows(&self) -> &[Value] {
        &self.rows
    }

    /// With `--json`, prints the rows as one array (nothing more with `--json-lines` or
    /// silent).
    pub fn finish(&self) {
        if !self.lines && !self.silent {
            crate::cluster_cli::print_json(&Value::Array(self.rows.clone()));
        }
    }
}
