//! A link at a fixed rate, in one direction: the hardware model's network (`--net-model` on a
//! node, `--client-link` on a benchmark's clients). Transfers queue one after another like a
//! token bucket with no burst: a transfer of n bytes starts when the previous one ended, or
//! now, and lasts n / rate.
//!
//! Invariants: the link only delays (it never reorders or changes bytes); [`Link::bytes`]
//! counts every byte handed to [`Link::transfer`]; time is tokio's, so tests on a paused clock
//! measure it exactly.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use tokio::time::Instant;

/// One direction of a link at a fixed rate: transfers queue one after another.
#[derive(Debug)]
pub struct Link {
    bytes_per_sec: u64,
    /// When the link is free again.
    free_at: std::sync::Mutex<Instant>,
    bytes: AtomicU64,
}

impl Link {
    pub fn new(bytes_per_sec: u64) -> Link {
        Link {
            bytes_per_sec: bytes_per_sec.max(1),
            free_at: std::sync::Mutex::new(Instant::now()),
            bytes: AtomicU64::new(0),
        }
    }

    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec
    }

    /// Waits until `bytes` have crossed the link after what was queued before them.
    pub async fn transfer(&self, bytes: u64) {
        let lasts = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
        let done = {
            let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*free_at).max(Instant::now());
            *free_at = start + lasts;
            *free_at
        };
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        tokio::time::sleep_until(done).await;
    }

    /// Bytes that crossed the link.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_link_carries_transfers_one_after_another_at_its_rate() {
        let link = std::sync::Arc::new(Link::new(125_000_000));
        let started = Instant::now();
        let sends: Vec<_> = (0..4)
            .map(|_| {
                let link = link.clone();
                tokio::spawn(async move { link.transfer(25_000_000).await })
            })
            .collect();
        for send in sends {
            send.await.unwrap();
        }
        // 100 MB at 125 MB/s: 0.8 s.
        let elapsed = started.elapsed();
        assert!(
            elapsed.abs_diff(Duration::from_millis(800)) < Duration::from_millis(2),
            "{elapsed:?}"
        );
        assert_eq!(link.bytes(), 100_000_000);
    }
}
