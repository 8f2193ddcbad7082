//! Read traces: every get a client serves, as one JSON line — the input of `weft advise
//! stripe-width` and `weft bench reads --trace` (Okapi §4.6: choose the stripe width from the
//! application's read sizes).
//!
//! A line: `{"timestamp": 1764043200.123, "bucket": "b", "key": "k", "offset": 0,
//! "length": 1048576, "object_size": 4194304}` (timestamp in seconds since the Unix epoch,
//! when the read began; offset and length in bytes of the object).
//!
//! Invariants: one line per get, written whole with one `write` on a file opened for
//! appending, so concurrent gets (a gateway) and several processes never interleave inside a
//! line; a trace that cannot be written is logged and the read goes on (tracing never fails a
//! read).

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};

use crate::{ClientError, Result};

/// One traced read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TracedRead {
    /// Seconds since the Unix epoch.
    pub timestamp: f64,
    #[serde(default)]
    pub bucket: String,
    #[serde(default)]
    pub key: String,
    pub offset: u64,
    pub length: u64,
    /// Size of the object read, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_size: Option<u64>,
}

/// An append-only trace file.
#[derive(Debug)]
pub struct ReadTrace {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl ReadTrace {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &Path) -> Result<ReadTrace> {
        let file =
            std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|source| {
                ClientError::Io {
                    what: format!("opening the read trace {}", path.display()),
                    source,
                }
            })?;
        Ok(ReadTrace { path: path.to_path_buf(), file: Mutex::new(file) })
    }

    /// Appends one read.
    pub fn record(&self, bucket: &str, key: &str, offset: u64, length: u64, object_size: u64) {
        let timestamp =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let read = TracedRead {
            timestamp: (timestamp * 1000.0).round() / 1000.0,
            bucket: bucket.to_string(),
            key: key.to_string(),
            offset,
            length,
            object_size: Some(object_size),
        };
        let mut line = serde_json::to_vec(&read).expect("a read serializes");
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(error) = file.write_all(&line) {
            tracing::warn!(%error, path = %self.path.display(), "cannot write the read trace");
        }
    }
}

/// Reads a trace file: one JSON object per line (blank lines skipped), each with at least
/// `offset`, `length` and `timestamp`; a bad line is an error naming its number.
pub fn load(path: &Path) -> Result<Vec<TracedRead>> {
    let text = std::fs::read_to_string(path).map_err(|source| ClientError::Io {
        what: format!("reading the trace {}", path.display()),
        source,
    })?;
    let mut reads = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let read: TracedRead = serde_json::from_str(line).map_err(|e| {
            ClientError::Invalid(format!(
                "{} line {}: {e} (want {{\"offset\", \"length\", \"timestamp\"}})",
                path.display(),
                number + 1
            ))
        })?;
        if read.length == 0 {
            continue;
        }
        reads.push(read);
    }
    if reads.is_empty() {
        return Err(ClientError::Invalid(format!("{} holds no reads", path.display())));
    }
    Ok(reads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_reads_load_back_and_bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let trace = ReadTrace::open(&path).unwrap();
        trace.record("b", "k", 0, 1 << 20, 8 << 20);
        trace.record("b", "k2", 4096, 12 << 20, 64 << 20);
        let reads = load(&path).unwrap();
        assert_eq!(reads.len(), 2);
        assert_eq!(
            (reads[1].key.as_str(), reads[1].offset, reads[1].length),
            ("k2", 4096, 12 << 20)
        );
        assert!(reads[0].timestamp > 1.7e9);
        std::fs::write(&path, "{\"offset\": 0, \"length\": 5, \"timestamp\": 1}\n\nnot json\n")
            .unwrap();
        let error = load(&path).unwrap_err().to_string();
        assert!(error.contains("line 3"), "{error}");
        std::fs::write(&path, "{\"offset\": 7, \"length\": 5, \"timestamp\": 1.5}\n").unwrap();
        assert_eq!(load(&path).unwrap()[0].offset, 7, "bucket and key are optional");
    }
}
