//! Counting the bytes a client holds: every buffer of the write path is a [`MeteredBuf`],
//! counted from its allocation until its last owner (including an HTTP body still being
//! sent, which holds it as [`Bytes`]) drops it.
//!
//! Invariants: `live` is the sum of the lengths of the metered buffers alive now, and `peak`
//! is the largest `live` ever seen; both are exact, not sampled, because the counts change
//! only in `MeteredBuf::new` and in the drop of its owner.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use bytes::Bytes;

/// Live and peak bytes of the metered buffers of one operation.
#[derive(Debug, Default)]
pub struct BufferMeter {
    live: AtomicU64,
    peak: AtomicU64,
}

impl BufferMeter {
    /// A new meter at zero.
    pub fn new() -> Arc<BufferMeter> {
        Arc::new(BufferMeter::default())
    }

    /// Bytes held now.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Acquire)
    }

    /// Most bytes ever held at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    fn add(&self, bytes: u64) {
        let now = self.live.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::AcqRel);
    }

    fn sub(&self, bytes: u64) {
        self.live.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A zero-filled buffer counted by a [`BufferMeter`] while it (or the [`Bytes`] made from it)
/// lives.
#[derive(Debug)]
pub struct MeteredBuf {
    buf: Vec<u8>,
    meter: Arc<BufferMeter>,
}

impl MeteredBuf {
    /// `len` zero bytes, counted from now.
    pub fn new(meter: &Arc<BufferMeter>, len: usize) -> MeteredBuf {
        meter.add(len as u64);
        MeteredBuf { buf: vec![0; len], meter: Arc::clone(meter) }
    }

    /// The bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Shrinks the buffer to `len` bytes (uncounting the rest).
    pub fn truncate(&mut self, len: usize) {
        let old = self.buf.len();
        if len < old {
            self.buf.truncate(len);
            self.meter.sub((old - len) as u64);
        }
    }

    /// Freezes the buffer into shareable bytes; still counted until every clone drops.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl MeteredBuf {
    /// Lends the bytes out (to the coding engine) while they stay counted; [`LentBuf::restore`]
    /// takes them back.
    pub fn lend(mut self) -> (Vec<u8>, LentBuf) {
        let buf = std::mem::take(&mut self.buf);
        let lent = LentBuf { len: buf.len(), meter: Arc::clone(&self.meter) };
        (buf, lent)
    }
}

/// The count of a [`MeteredBuf`] whose bytes are lent out: still counted until restored or
/// dropped.
#[derive(Debug)]
pub struct LentBuf {
    len: usize,
    meter: Arc<BufferMeter>,
}

impl LentBuf {
    /// The lent bytes back as a metered buffer; `buf` must have the length that was lent.
    pub fn restore(mut self, buf: Vec<u8>) -> MeteredBuf {
        assert_eq!(buf.len(), self.len, "a lent buffer comes back with its length");
        self.len = 0;
        MeteredBuf { buf, meter: Arc::clone(&self.meter) }
    }
}

impl Drop for LentBuf {
    fn drop(&mut self) {
        self.meter.sub(self.len as u64);
    }
}

impl AsRef<[u8]> for MeteredBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for MeteredBuf {
    fn drop(&mut self) {
        self.meter.sub(self.buf.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_until_the_last_clone_drops() {
        let meter = BufferMeter::new();
        let a = MeteredBuf::new(&meter, 100);
        let mut b = MeteredBuf::new(&meter, 50);
        assert_eq!(meter.live(), 150);
        b.truncate(20);
        assert_eq!(meter.live(), 120);
        let (bytes, lent) = b.lend();
        assert_eq!(meter.live(), 120, "lent bytes stay counted");
        let mut b = lent.restore(bytes);
        assert_eq!(meter.live(), 120);
        b.as_mut_slice()[0] = 1;
        let (_, lent) = b.lend();
        drop(lent);
        assert_eq!(meter.live(), 100, "a dropped loan uncounts its bytes");
        let b = MeteredBuf::new(&meter, 20);
        let bytes = a.into_bytes();
        let clone = bytes.clone();
        drop(bytes);
        assert_eq!(meter.live(), 120);
        drop(clone);
        assert_eq!(meter.live(), 20);
        drop(b);
        assert_eq!((meter.live(), meter.peak()), (0, 150));
    }
}
