//! Bytes that remember the file range they were read from, so that a writer to a socket can
//! send that range with sendfile(2) straight from the page cache instead of copying the
//! bytes out of memory (the S3 gateway's response writer does; docs/s3.md, "GET from the
//! page cache").
//!
//! A local read ([`crate::local`]) reads a unit's range into a buffer and verifies it; the
//! buffer becomes [`Bytes`] through [`file_backed`], which records in a process-wide table
//! that the buffer's bytes are those of `file` from `offset` on. [`source_of`] answers, for
//! any slice, whether it lies inside such a buffer and where its bytes are in the file.
//!
//! Invariants:
//! - An entry lives exactly as long as its buffer: it is added before the [`Bytes`] exists
//!   and removed in the owner's `Drop`, before the buffer's memory is freed, so an address
//!   the allocator hands out again is never mistaken for a file range.
//! - The file is held open by the entry ([`Arc<File>`]) for as long as any slice of the
//!   bytes is alive, so a writer that found the range can always send from it.
//! - The buffer still holds the bytes: a writer that does not send from the file (no
//!   sendfile, a TLS stream, a copy) writes the same verified bytes. Sending from the file
//!   is only ever a way to write bytes equal to those: unit files are never written again
//!   once their unit is finished (a repair or a transition writes a new file).

use std::{
    collections::BTreeMap,
    fs::File,
    sync::{Arc, Mutex},
};

use bytes::Bytes;

/// Buffer start address → (length, file, file offset of its first byte).
type Table = BTreeMap<usize, (usize, Arc<File>, u64)>;

static TABLE: Mutex<Table> = Mutex::new(BTreeMap::new());

fn table() -> std::sync::MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A buffer read from `file` at `offset`, registered while it lives.
struct FileRange {
    buf: Vec<u8>,
}

impl AsRef<[u8]> for FileRange {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for FileRange {
    fn drop(&mut self) {
        // Before `buf` is freed (fields drop after this body).
        table().remove(&(self.buf.as_ptr() as usize));
    }
}

/// `buf`, which holds the bytes of `file` from `offset` on, as [`Bytes`] whose slices
/// [`source_of`] can place in the file. An empty buffer is not registered.
pub fn file_backed(buf: Vec<u8>, file: Arc<File>, offset: u64) -> Bytes {
    if buf.is_empty() {
        return Bytes::new();
    }
    table().insert(buf.as_ptr() as usize, (buf.len(), file, offset));
    Bytes::from_owner(FileRange { buf })
}

/// Where `slice`'s bytes are in a file: the file and the offset of the slice's first byte,
/// when the slice lies wholly inside a live [`file_backed`] buffer.
pub fn source_of(slice: &[u8]) -> Option<(Arc<File>, u64)> {
    locate(slice.as_ptr() as usize, slice.len())
}

/// [`source_of`] for the `len` bytes at address `start`.
fn locate(start: usize, len: usize) -> Option<(Arc<File>, u64)> {
    if len == 0 {
        return None;
    }
    let table = table();
    let (&base, (held, file, offset)) = table.range(..=start).next_back()?;
    let within = start - base;
    (within + len <= *held).then(|| (file.clone(), offset + within as u64))
}

/// `bytes` holding no file open: a copy when they are [`file_backed`], else themselves
/// (for what is kept long, such as the degraded-read cache).
pub fn detached(bytes: Bytes) -> Bytes {
    match source_of(&bytes) {
        Some(_) => Bytes::copy_from_slice(&bytes),
        None => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file() -> Arc<File> {
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(b"unused").expect("write");
        Arc::new(file)
    }

    #[test]
    fn slices_are_placed_in_their_file_and_forgotten_with_their_buffer() {
        let file = temp_file();
        let bytes = file_backed((0u8..100).collect(), file.clone(), 4096);
        let inner = bytes.slice(10..30);
        let (found, offset) = source_of(&inner).expect("a slice inside the buffer");
        assert!(Arc::ptr_eq(&found, &file));
        assert_eq!(offset, 4096 + 10);
        assert_eq!(source_of(&bytes).map(|(_, o)| o), Some(4096));
        assert_eq!(source_of(&bytes[99..]).map(|(_, o)| o), Some(4096 + 99));
        // A copy lives elsewhere; an empty slice is nowhere.
        let copy: Vec<u8> = bytes.to_vec();
        assert!(source_of(&copy).is_none());
        assert!(source_of(&bytes[5..5]).is_none());
        let kept = detached(bytes.slice(20..40));
        assert_eq!(kept, bytes.slice(20..40));
        assert!(source_of(&kept).is_none(), "a detached range holds no file");
        // A range that runs past the buffer's end is not inside it.
        let base = bytes.as_ptr() as usize;
        assert!(locate(base, 101).is_none());
        assert!(locate(base + 50, 51).is_none());
        assert_eq!(locate(base + 50, 50).map(|(_, o)| o), Some(4096 + 50));
        drop(bytes);
        // The slice keeps the buffer (and its entry) alive.
        assert_eq!(source_of(&inner).map(|(_, o)| o), Some(4096 + 10));
        let address = inner.as_ptr() as usize;
        drop(inner);
        assert!(!table().contains_key(&(address - 10)), "the entry went with the buffer");
    }

    #[test]
    fn empty_buffers_are_not_registered() {
        let bytes = file_backed(Vec::new(), temp_file(), 0);
        assert!(bytes.is_empty());
        assert!(source_of(&bytes).is_none());
    }
}
