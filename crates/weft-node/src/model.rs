//! The hardware model: disks that seek and links that saturate, on hardware that does neither
//! (`weft serve node --disk-model hdd|ssd --net-model 1Gbit`). The papers' results come from
//! spinning disks and saturated links; loopback and a page cache have neither, so a node can
//! delay its real IO as that hardware would. Data still lands on the real files: every
//! feature runs under the model unchanged, only slower.
//!
//! Disk ([`ModeledDisk`]): one IO at a time, from a FIFO queue (tokio's fair mutex). An IO
//! that does not start where the previous IO on the disk ended (same unit, next byte) first
//! pays a positioning time drawn uniformly from [¼, 1¾] × the model's mean (seek plus
//! rotation) — unless it starts a little further on in the same unit, where passing over the
//! gap at the transfer rate is shorter than that draw and is what it pays (a disk reads
//! through a short gap: Clay's repair reads every 4th sub-chunk) — then transfers at the
//! model's rate. A unit read (a GET's whole range) or write
//! (a PUT's whole unit) is one IO: a disk's queue and readahead keep one stream's sequential
//! reads together, so a 6 MB range costs one positioning and 6 MB of transfer, and reading a
//! unit's ranges in order costs one positioning in all. The modeled time is waited out
//! before the real IO, which then runs unmodeled. Defaults: HDD 8 ms and 150 MB/s, SSD 0.1 ms
//! and 500 MB/s (MB = 10^6 bytes).
//!
//! Link ([`Link`], shared with the client's link model in weft-wire): a node's link in each
//! direction is a queue of transfers at a fixed rate (a token bucket with no burst): a
//! transfer of n bytes starts when the previous one ended, or now, and lasts n / rate.
//!
//! Invariants:
//! - The model only delays: it never changes a byte, an error or an order of operations of the
//!   store beyond serializing IOs per disk.
//! - Counters ([`DiskModelStats`]) count what the model charged: `busy_us` is the sum of every
//!   IO's modeled positioning plus transfer time, whatever the real IO took; `queue_wait_us`
//!   is real time spent waiting for the disk.
//! - Positioning times come from a generator seeded per disk: a run's draws are reproducible.

use std::{
    fmt,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use tokio::{sync::Mutex, time::Instant};
use weft_store::UnitKey;
pub use weft_wire::link::Link;
use weft_wire::DiskModelStats;

/// A disk model's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiskModel {
    /// `hdd` or `ssd` (named only; the parameters decide).
    pub kind: DiskKind,
    /// Mean positioning time (seek plus rotation) of an IO that does not continue the last.
    pub position: Duration,
    /// Transfer rate, bytes per second.
    pub bytes_per_sec: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskKind {
    Hdd,
    Ssd,
}

impl DiskModel {
    /// A 7200 RPM disk of the Okapi paper's kind: 8 ms positioning, 150 MB/s.
    pub const HDD: DiskModel = DiskModel {
        kind: DiskKind::Hdd,
        position: Duration::from_millis(8),
        bytes_per_sec: 150_000_000,
    };
    /// A SATA SSD: 0.1 ms, 500 MB/s.
    pub const SSD: DiskModel = DiskModel {
        kind: DiskKind::Ssd,
        position: Duration::from_micros(100),
        bytes_per_sec: 500_000_000,
    };

    /// Time to transfer `bytes` at the model's rate.
    pub fn transfer(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64)
    }
}

impl fmt::Display for DiskModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DiskKind::Hdd => "hdd",
            DiskKind::Ssd => "ssd",
        };
        let position = self.position.as_secs_f64() * 1000.0;
        write!(f, "{kind} {position}ms {}MB/s", self.bytes_per_sec / 1_000_000)
    }
}

/// One disk's model as a flag gives it: `none`, `hdd`, `ssd`, optionally with parameters
/// (`hdd:position=6ms:rate=200MB`). `none` is no model.
pub fn parse_disk_model(text: &str) -> Result<Option<DiskModel>, String> {
    let mut parts = text.trim().split(':');
    let mut model = match parts.next().unwrap_or("").to_ascii_lowercase().as_str() {
        "none" | "" => return Ok(None),
        "hdd" => DiskModel::HDD,
        "ssd" => DiskModel::SSD,
        other => return Err(format!("unknown disk model {other:?}: use hdd, ssd or none")),
    };
    for part in parts {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not name=value (position=8ms, rate=150MB)"))?;
        match name {
            "position" | "seek" => model.position = parse_duration(value)?,
            "rate" => model.bytes_per_sec = parse_rate(value)?,
            _ => return Err(format!("unknown disk model parameter {name:?}: position, rate")),
        }
    }
    if model.bytes_per_sec == 0 {
        return Err("a disk's rate must be positive".into());
    }
    Ok(Some(model))
}

/// `8ms`, `100us`, `0.1ms`, `1s`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) =
        text.split_at(text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len()));
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 8ms"))?;
    let seconds = match unit {
        "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        _ => return Err(format!("{text:?}: use s, ms or us")),
    };
    if !(0.0..=60.0).contains(&seconds) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A rate in bytes per second: `150MB` (10^6 bytes), `1GB`, `1Gbit`, `100Mbit`, `64MiB`, or a
/// plain number of bytes.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let text = text.trim().trim_end_matches("/s");
    let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a rate like 150MB"))?;
    let factor = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "kbit" => 1e3 / 8.0,
        "mbit" => 1e6 / 8.0,
        "gbit" => 1e9 / 8.0,
        _ => return Err(format!("{text:?}: use B, KB, MB, GB, KiB, MiB, GiB, Kbit, Mbit, Gbit")),
    };
    let rate = value * factor;
    if !(1.0..1e15).contains(&rate) {
        return Err(format!("{text:?} is not a usable rate"));
    }
    Ok(rate as u64)
}

/// Where the head is and the draws of positioning times.
#[derive(Debug)]
struct Head {
    /// The unit and byte offset the last IO ended at.
    at: Option<(UnitKey, u64)>,
    /// When the last IO's modeled time ends: the next one starts then (or now, if later), so
    /// the timer's rounding never adds up over IOs.
    free_at: Option<Instant>,
    rng: u64,
}

impl Head {
    /// The next uniform draw in [0, 1) (splitmix64).
    fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d4_049b_b133_111b);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A disk under a model: IOs wait their turn, then the modeled time.
#[derive(Debug)]
pub struct ModeledDisk {
    model: DiskModel,
    head: Mutex<Head>,
    ios: AtomicU64,
    seeks: AtomicU64,
    bytes: AtomicU64,
    busy_us: AtomicU64,
    queue_wait_us: AtomicU64,
}

/// The disk, held for one IO: the real IO runs while this lives.
#[derive(Debug)]
pub struct DiskTurn<'a> {
    _head: tokio::sync::MutexGuard<'a, Head>,
}

impl ModeledDisk {
    /// A disk of `model` whose positioning draws start from `seed`.
    pub fn new(model: DiskModel, seed: u64) -> ModeledDisk {
        ModeledDisk {
            model,
            head: Mutex::new(Head { at: None, free_at: None, rng: seed }),
            ios: AtomicU64::new(0),
            seeks: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            busy_us: AtomicU64::new(0),
            queue_wait_us: AtomicU64::new(0),
        }
    }

    pub fn model(&self) -> DiskModel {
        self.model
    }

    /// Waits for the disk, then for the IO of `len` bytes of `unit` at `offset` as the model
    /// times it; the caller does the real IO while holding the turn.
    pub async fn io(&self, unit: UnitKey, offset: u64, len: u64) -> DiskTurn<'_> {
        let queued = Instant::now();
        let mut head = self.head.lock().await;
        let waited = queued.elapsed();
        // Continuing the last IO costs nothing; a short skip forward in the same unit costs
        // the time the gap takes to pass under the head, when that is less than a seek.
        let (seek, position) = match head.at {
            Some((at, end)) if at == unit && offset == end => (false, Duration::ZERO),
            Some((at, end)) if at == unit && offset > end => {
                let pass = self.model.transfer(offset - end);
                let draw = self.model.position.mul_f64(0.25 + 1.5 * head.uniform());
                if pass <= draw {
                    (false, pass)
                } else {
                    (true, draw)
                }
            }
            _ => (true, self.model.position.mul_f64(0.25 + 1.5 * head.uniform())),
        };
        let busy = position + self.model.transfer(len);
        head.at = Some((unit, offset + len));
        self.ios.fetch_add(1, Ordering::Relaxed);
        self.seeks.fetch_add(u64::from(seek), Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        self.busy_us.fetch_add(busy.as_micros() as u64, Ordering::Relaxed);
        self.queue_wait_us.fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        let now = Instant::now();
        let end = head.free_at.map_or(now, |free| free.max(now)) + busy;
        head.free_at = Some(end);
        tokio::time::sleep_until(end).await;
        DiskTurn { _head: head }
    }

    /// The counters so far.
    pub fn stats(&self) -> DiskModelStats {
        DiskModelStats {
            model: self.model.to_string(),
            ios: self.ios.load(Ordering::Relaxed),
            seeks: self.seeks.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            busy_us: self.busy_us.load(Ordering::Relaxed),
            queue_wait_us: self.queue_wait_us.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn unit(block: u32) -> UnitKey {
        UnitKey::data(7, block, 0)
    }

    /// The model's own check: 8 sequential 1 MiB reads of a unit pay one positioning; the
    /// same reads in another order pay one each; both transfer the same bytes. Busy time is
    /// positioning plus transfer, within the draw's bounds, and is what the (paused) clock
    /// advanced by.
    #[tokio::test(start_paused = true)]
    async fn sequential_and_random_reads_cost_what_the_model_says() {
        let model = DiskModel::HDD;
        let transfer = model.transfer(8 * MIB);
        for (order, seeks) in [([0, 1, 2, 3, 4, 5, 6, 7], 1u64), ([7, 5, 3, 1, 6, 4, 2, 0], 8)] {
            let disk = ModeledDisk::new(model, 42);
            let started = Instant::now();
            for chunk in order {
                drop(disk.io(unit(0), chunk * MIB, MIB).await);
            }
            let stats = disk.stats();
            assert_eq!((stats.ios, stats.seeks, stats.bytes), (8, seeks, 8 * MIB), "{order:?}");
            let busy = Duration::from_micros(stats.busy_us);
            let (least, most) = (model.position.mul_f64(0.25), model.position.mul_f64(1.75));
            assert!(busy >= transfer + least * seeks as u32, "{busy:?} {order:?}");
            assert!(busy <= transfer + most * seeks as u32, "{busy:?} {order:?}");
            // The clock moved by the busy time, give or take the timer's 1 ms tick per IO.
            let elapsed = started.elapsed();
            assert!(elapsed + Duration::from_millis(1) >= busy, "{elapsed:?} vs {busy:?}");
            assert!(elapsed <= busy + Duration::from_millis(8), "{elapsed:?} vs {busy:?}");
        }
        // Another unit, or a long gap forward (3 MiB: 21 ms to pass over, more than the
        // longest positioning), or any step back, is a seek; continuing either is not.
        let disk = ModeledDisk::new(model, 1);
        let steps = [(0, 0), (0, MIB), (1, 0), (1, MIB), (1, 5 * MIB), (1, 6 * MIB), (1, 0)];
        for (u, offset) in steps {
            drop(disk.io(unit(u), offset, MIB).await);
        }
        assert_eq!(disk.stats().seeks, 4);
        // A short gap forward (64 KiB: 0.44 ms, less than the shortest positioning) is passed
        // over, as a disk reads through it: Clay's repair reads of every 4th sub-chunk.
        let disk = ModeledDisk::new(model, 2);
        let started = Instant::now();
        for i in 0..16u64 {
            drop(disk.io(unit(0), i * 4 * 64 * 1024, 64 * 1024).await);
        }
        let stats = disk.stats();
        assert_eq!(stats.seeks, 1, "{stats:?}");
        let passed = model.transfer(15 * 3 * 64 * 1024);
        let busy = Duration::from_micros(stats.busy_us);
        let least = model.transfer(16 * 64 * 1024) + passed + model.position.mul_f64(0.25);
        assert!(busy + Duration::from_micros(20) >= least, "{busy:?} < {least:?}");
        assert!(busy <= least + model.position.mul_f64(1.5) + Duration::from_micros(20));
        assert!(started.elapsed() + Duration::from_millis(1) >= busy);
    }

    /// Two readers on one disk queue: the second waits for the first's whole IO.
    #[tokio::test(start_paused = true)]
    async fn a_disk_serves_one_io_at_a_time() {
        let disk = std::sync::Arc::new(ModeledDisk::new(DiskModel::SSD, 3));
        let started = Instant::now();
        let readers: Vec<_> = (0..4)
            .map(|u| {
                let disk = disk.clone();
                tokio::spawn(async move { drop(disk.io(unit(u), 0, 5 * MIB).await) })
            })
            .collect();
        for reader in readers {
            reader.await.unwrap();
        }
        let stats = disk.stats();
        assert_eq!((stats.ios, stats.seeks), (4, 4));
        assert!(started.elapsed() >= DiskModel::SSD.transfer(20 * MIB), "{:?}", started.elapsed());
        assert!(stats.queue_wait_us > 0, "{stats:?}");
    }

    #[test]
    fn models_and_rates_parse() {
        assert_eq!(parse_disk_model("none").unwrap(), None);
        assert_eq!(parse_disk_model("hdd").unwrap(), Some(DiskModel::HDD));
        let tuned = parse_disk_model("hdd:position=6ms:rate=200MB").unwrap().unwrap();
        assert_eq!((tuned.position, tuned.bytes_per_sec), (Duration::from_millis(6), 200_000_000));
        assert_eq!(DiskModel::HDD.to_string(), "hdd 8ms 150MB/s");
        assert!(parse_disk_model("tape").is_err());
        assert!(parse_disk_model("hdd:speed=1").is_err());
        assert_eq!(parse_rate("1Gbit").unwrap(), 125_000_000);
        assert_eq!(parse_rate("100Mbit").unwrap(), 12_500_000);
        assert_eq!(parse_rate("64MiB").unwrap(), 64 << 20);
        assert!(parse_rate("fast").is_err() && parse_rate("0").is_err());
    }
}
