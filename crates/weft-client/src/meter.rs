//! Counting the bytes a client holds: every buffer of the write path is a [`MeteredBuf`],
//! counted from its allocation until its last owner (including an HTTP body still being
//! sent, which holds it as [`Bytes`]) drops it. A dropped buffer goes to its meter's spares
//! and is handed out again by the next [`MeteredBuf`] of the operation, so a put does not
//! allocate (and fault in, and zero) a fresh megabyte for every cell.
//!
//! Invariants:
//! - `live` is the sum of the lengths of the metered buffers alive now, `spare` the bytes of
//!   the buffers waiting for reuse, and `peak` the largest `live + spare` ever seen: all that
//!   the operation's buffers held at once. They are exact, not sampled: they change together,
//!   under one lock, only in [`MeteredBuf::new`] / [`MeteredBuf::for_overwrite`], in
//!   `truncate` and in the drop of a buffer's last owner.
//! - `live + spare` grows only while there are no spares (a new buffer takes a spare of its
//!   length, or frees one of another length first), so `peak` is no more than the peak of
//!   `live` the same operation would reach without reuse.
//! - Only buffers whose length is their capacity are kept as spares; spares are freed with
//!   the meter, when the operation's last buffer is gone.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

/// Live, spare and peak bytes of the metered buffers of one operation.
#[derive(Debug, Default)]
pub struct BufferMeter {
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    live: u64,
    spare: u64,
    peak: u64,
    /// Dropped buffers kept for reuse (`spare` is the sum of their lengths).
    spares: Vec<Vec<u8>>,
}

impl Counts {
    fn add_live(&mut self, bytes: u64) {
        self.live += bytes;
        self.peak = self.peak.max(self.live + self.spare);
    }
}

impl BufferMeter {
    /// A new meter at zero.
    pub fn new() -> Arc<BufferMeter> {
        Arc::new(BufferMeter::default())
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().expect("buffer meter lock")
    }

    /// Bytes of the buffers alive now.
    pub fn live(&self) -> u64 {
        self.counts().live
    }

    /// Bytes of dropped buffers kept for reuse.
    pub fn spare(&self) -> u64 {
        self.counts().spare
    }

    /// Most bytes ever held at once, live and spare.
    pub fn peak(&self) -> u64 {
        self.counts().peak
    }

    fn sub(&self, bytes: u64) {
        self.counts().live -= bytes;
    }

    /// A buffer of `len` bytes for a new [`MeteredBuf`], counted live: a spare of that length
    /// (with its old contents, `false`), else fresh zeros (`true`) after freeing spares of
    /// other lengths worth `len` bytes (or all of them), so that live + spare grows only when
    /// no spares are left.
    fn take(&self, len: usize) -> (Vec<u8>, bool) {
        let mut counts = self.counts();
        if let Some(at) = counts.spares.iter().rposition(|b| b.len() == len) {
            let buf = counts.spares.swap_remove(at);
            counts.spare -= len as u64;
            counts.add_live(len as u64);
            return (buf, false);
        }
        let mut unfit = Vec::new();
        let mut freed = 0;
        while freed < len {
            let Some(buf) = counts.spares.pop() else { break };
            freed += buf.len();
            unfit.push(buf);
        }
        counts.spare -= freed as u64;
        counts.add_live(len as u64);
        drop(counts);
        drop(unfit);
        (vec![0; len], true)
    }

    /// Keeps a dropped buffer for reuse, or frees it if its capacity is not its length.
    fn give_back(&self, buf: Vec<u8>) {
        let len = buf.len() as u64;
        let mut counts = self.counts();
        counts.live -= len;
        if !buf.is_empty() && buf.len() == buf.capacity() {
            counts.spare += len;
            counts.spares.push(buf);
        }
    }
}

/// A buffer counted by a [`BufferMeter`] while it (or the [`Bytes`] made from it) lives.
#[derive(Debug)]
pub struct MeteredBuf {
    buf: Vec<u8>,
    meter: Arc<BufferMeter>,
}

impl MeteredBuf {
    /// `len` zero bytes, counted from now.
    pub fn new(meter: &Arc<BufferMeter>, len: usize) -> MeteredBuf {
        let (mut buf, zeroed) = meter.take(len);
        if !zeroed {
            buf.fill(0);
        }
        MeteredBuf { buf, meter: Arc::clone(meter) }
    }

    /// `len` bytes of unspecified contents (a reused buffer's old bytes, or zeros), counted
    /// from now: for a caller that overwrites every byte.
    pub fn for_overwrite(meter: &Arc<BufferMeter>, len: usize) -> MeteredBuf {
        MeteredBuf { buf: meter.take(len).0, meter: Arc::clone(meter) }
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
        self.meter.give_back(std::mem::take(&mut self.buf));
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
        assert_eq!(
            meter.spare(),
            120,
            "a's 100 and the second b's 20 are kept; truncated ones are not"
        );
    }

    #[test]
    fn spares_are_reused_and_never_raise_the_peak_above_live_alone() {
        let meter = BufferMeter::new();
        let mut cells: Vec<MeteredBuf> = (0..4).map(|_| MeteredBuf::new(&meter, 1000)).collect();
        cells[0].as_mut_slice().fill(7);
        let address = cells[0].as_ref().as_ptr();
        cells.clear();
        assert_eq!((meter.live(), meter.spare(), meter.peak()), (0, 4000, 4000));
        // A spare of the same length comes back with its old bytes (for_overwrite) or zeroed.
        let reused: Vec<MeteredBuf> =
            (0..4).map(|_| MeteredBuf::for_overwrite(&meter, 1000)).collect();
        assert!(reused.iter().any(|b| b.as_ref().as_ptr() == address), "no spare was reused");
        assert!(reused.iter().any(|b| b.as_ref().iter().all(|&x| x == 7)));
        drop(reused);
        let zeroed: Vec<MeteredBuf> = (0..4).map(|_| MeteredBuf::new(&meter, 1000)).collect();
        assert!(zeroed.iter().all(|b| b.as_ref().iter().all(|&x| x == 0)));
        assert_eq!((meter.live(), meter.spare(), meter.peak()), (4000, 0, 4000));
        drop(zeroed);
        // Another length frees spares worth it first: live + spare stays at 4000.
        let long = MeteredBuf::new(&meter, 2500);
        assert_eq!((meter.live(), meter.spare(), meter.peak()), (2500, 1000, 4000));
        let short = MeteredBuf::for_overwrite(&meter, 10);
        assert_eq!((meter.live(), meter.spare(), meter.peak()), (2510, 0, 4000));
        // No spares left: a new buffer is fresh and the peak is live's.
        let more = MeteredBuf::new(&meter, 2000);
        assert_eq!((meter.live(), meter.spare(), meter.peak()), (4510, 0, 4510));
        drop((long, short, more));
        assert_eq!(meter.live(), 0);
    }
}
