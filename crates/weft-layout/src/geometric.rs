//! The geometric layout (RCStor's Geometric Partitioning, paper §4–§5): an object lives on one
//! data disk of a placement group; its front (size mod s0, as left by the partition) goes to
//! the group's RS-coded small bin, the rest is cut into chunks of sizes s0·q^i, and chunks of
//! one size from different objects on the k data disks of the group are coded together, one
//! chunk per disk, as the units of one *bin stripe*.
//!
//! - [`GeometricPolicy`]: the bins' code, the small bin's code, s0, q, the largest chunk and
//!   how many placement groups; [`GeometricPolicy::validate`] refuses what cannot work.
//! - [`partition`]: the paper's two-pass Algorithm 1, with chunks capped at `chunk_max`.
//! - [`placement_groups`]: `count` groups of n disks on distinct failure domains, spread so
//!   a failed disk's groups have as many distinct partners as possible.
//! - [`GeoPlace`]: where one object's bytes are, and its compact encoding (what the paper
//!   counts as ≈ 40 bytes of metadata per object).
//!
//! Invariants:
//! - `partition(size)` has chunks summing to `size − front`, every class below the largest
//!   used has at least one chunk (a_i ≥ 1 for i < n), and `front < s0`. Chunk sizes are
//!   multiples of s0, so of the code's unit multiple whenever s0 is (validate checks it).
//! - An object's bytes are, in order: its front, then its chunks from the smallest class to
//!   the largest (smallest first, so a degraded read regenerates small chunks while earlier
//!   bytes are sent).
//! - The members of a placement group are on distinct failure domains; members `0..k` hold
//!   data (objects), members `k..n` hold the parity of the group's bin stripes.
//! - `GeoPlace::decode(encode(p), policy) == p`; the encoding stores no chunk count or class:
//!   both follow from the size and the policy.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use weft_codes::CodeSpec;

use crate::placement::mix;
use crate::{DiskLocation, DomainId, FailureDomain, LayoutError, Topology, MAX_BLOCK_BYTES};

/// Most placement groups a geometric bucket may have.
pub const MAX_PGS: u32 = 4096;
/// Placement groups of a geometric bucket unless asked otherwise.
pub const DEFAULT_PGS: u32 = 256;
/// The largest chunk unless asked otherwise (the paper caps chunks at 256 MB).
pub const DEFAULT_CHUNK_MAX: u64 = 256 << 20;
/// The paper's weight unit of recovery tasks: one per 4 MB of chunk.
pub const RECOVERY_WEIGHT_BYTES: u64 = 4 << 20;

/// How a geometric bucket stores its objects once packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeometricPolicy {
    /// The code of the chunk bins (clay is the point; any code works).
    pub code: CodeSpec,
    /// The code of the small bin (fronts of any size), same k and r. A byte-local code (rs,
    /// lrc: the default) rebuilds just the bytes a degraded read wants; another one (clay)
    /// regenerates whole small-bin units — what a layout of fixed chunks shared by several
    /// objects costs (s0 = chunk_max, small code clay: the paper's Contiguous layout).
    pub small_code: CodeSpec,
    /// The smallest chunk, s0.
    pub s0: u64,
    /// The ratio of successive chunk sizes, q ≥ 2.
    pub q: u64,
    /// The largest chunk: classes are s0·q^i up to this.
    pub chunk_max: u64,
    /// Placement groups.
    pub pgs: u32,
}

impl GeometricPolicy {
    /// Data units per bin stripe.
    pub fn k(&self) -> usize {
        self.code.k()
    }

    /// Parity units per bin stripe.
    pub fn r(&self) -> usize {
        self.code.r()
    }

    /// Disks per placement group, k + r.
    pub fn n(&self) -> usize {
        self.k() + self.r()
    }

    /// Refuses parameters that cannot work, saying why.
    pub fn validate(&self) -> Result<(), LayoutError> {
        let refuse = |reason: String| Err(LayoutError::Geometric { reason });
        self.code.validate()?;
        self.small_code.validate()?;
        let code = self.code.build()?;
        self.small_code.build()?;
        if (self.small_code.k(), self.small_code.r()) != (self.code.k(), self.code.r()) {
            return refuse(format!(
                "the small bin's code {} must have the bins' k and r ({} has k = {}, r = {})",
                self.small_code,
                self.code,
                self.code.k(),
                self.code.r()
            ));
        }
        let multiple = code.unit_len_multiple() as u64;
        if self.s0 == 0 || !self.s0.is_multiple_of(multiple) {
            return refuse(format!(
                "s0 of {} bytes: a unit of {} must be a multiple of {multiple} bytes ({} \
                 sub-chunks), so s0 must be a positive multiple of {multiple} bytes",
                self.s0,
                self.code,
                code.sub_chunks()
            ));
        }
        if self.q < 2 {
            return refuse(format!(
                "q = {}: chunk sizes grow by q each class, so q must be at least 2",
                self.q
            ));
        }
        if self.chunk_max < self.s0 || self.chunk_max > MAX_BLOCK_BYTES {
            return refuse(format!(
                "the largest chunk ({} bytes) must be at least s0 ({} bytes) and at most \
                 {MAX_BLOCK_BYTES} bytes",
                self.chunk_max, self.s0
            ));
        }
        if self.pgs == 0 || self.pgs > MAX_PGS {
            return refuse(format!("{} placement groups: give 1 to {MAX_PGS}", self.pgs));
        }
        Ok(())
    }

    /// The chunk sizes of the bins, smallest first: s0·q^i while at most `chunk_max`.
    pub fn classes(&self) -> Vec<u64> {
        classes(self.s0, self.q, self.chunk_max)
    }

    /// The partition of an object of `size` bytes under this policy.
    pub fn partition(&self, size: u64) -> Partition {
        partition(size, self.s0, self.q, self.chunk_max)
    }
}

/// Chunk sizes s0·q^i, smallest first, while at most `chunk_max` (empty if s0 > chunk_max).
pub fn classes(s0: u64, q: u64, chunk_max: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = s0;
    while size > 0 && size <= chunk_max {
        sizes.push(size);
        if q < 2 {
            break;
        }
        match size.checked_mul(q) {
            Some(next) => size = next,
            None => break,
        }
    }
    sizes
}

/// How an object is cut: a front of `front` bytes and `counts[i]` chunks of class i.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Bytes of the front (< s0), stored in the small bin; 0 when there is none.
    pub front: u64,
    /// Chunk sizes of the classes used, smallest first (`sizes[i] = s0·q^i`).
    pub sizes: Vec<u64>,
    /// Chunks of each class (a_i), every one ≥ 1.
    pub counts: Vec<u64>,
}

/// One chunk of a partition, in object order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Its class (bin): its size is `s0·q^class`.
    pub class: usize,
    /// Where it starts in the object.
    pub object_offset: u64,
    pub bytes: u64,
}

impl Partition {
    /// The chunks in object order: after the front, smallest class first.
    pub fn chunks(&self) -> Vec<ChunkSpan> {
        let mut at = self.front;
        let mut spans = Vec::new();
        for (class, (&bytes, &count)) in self.sizes.iter().zip(&self.counts).enumerate() {
            for _ in 0..count {
                spans.push(ChunkSpan { class, object_offset: at, bytes });
                at += bytes;
            }
        }
        spans
    }

    /// How many chunks.
    pub fn chunk_count(&self) -> usize {
        self.counts.iter().sum::<u64>() as usize
    }
}

/// The paper's Algorithm 1 (two passes), with chunk sizes capped at `chunk_max`.
///
/// Pass 1 takes one chunk of each class, smallest first, while the rest holds it; pass 2
/// takes as many chunks as fit of each class used, largest first. What is left (< s0) is the
/// front. 73.5 MB with s0 = 4 MB, q = 2: pass 1 takes 4 + 8 + 16 + 32, pass 2 8 + 4, front 1.5:
/// 1.5 + 2×4 + 2×8 + 16 + 32.
pub fn partition(size: u64, s0: u64, q: u64, chunk_max: u64) -> Partition {
    let all = classes(s0, q, chunk_max);
    let mut left = size;
    let mut used = 0;
    while used < all.len() && left >= all[used] {
        left -= all[used];
        used += 1;
    }
    let sizes = all[..used].to_vec();
    let mut counts = vec![1; used];
    for class in (0..used).rev() {
        counts[class] += left / sizes[class];
        left %= sizes[class];
    }
    Partition { front: left, sizes, counts }
}

/// A piece of a bin stripe: data block `block` of bin stripe `stripe` (the stripe's sequence
/// number within its placement group and bin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    pub stripe: u64,
    pub block: u32,
}

/// Where an object's front is: `offset` bytes into data block `block` of small-bin stripe
/// `stripe` (its length is the partition's front).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontRef {
    pub stripe: u64,
    pub block: u32,
    pub offset: u64,
}

/// Where a packed object's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeoPlace {
    /// Its placement group.
    pub pg: u32,
    /// The data member (0..k) of the group whose disk holds it.
    pub member: u32,
    /// The object's size.
    pub size: u64,
    /// crc32c of the whole object, checked by whole reads.
    pub crc32c: u32,
    /// Its front in the small bin, when the partition leaves one.
    pub front: Option<FrontRef>,
    /// Its chunks in object order.
    pub chunks: Vec<ChunkRef>,
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at).ok_or("the record ends inside a number")?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a number longer than 64 bits".into())
}

impl GeoPlace {
    /// The compact encoding: varints of size, group, member, each chunk's stripe and block
    /// (class and count follow from the size), the front's stripe, block and offset when the
    /// partition has one, and the crc32c (4 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 4 * self.chunks.len());
        put_varint(&mut out, self.size);
        put_varint(&mut out, u64::from(self.pg));
        put_varint(&mut out, u64::from(self.member));
        if let Some(front) = &self.front {
            put_varint(&mut out, front.stripe);
            put_varint(&mut out, u64::from(front.block));
            put_varint(&mut out, front.offset);
        }
        for chunk in &self.chunks {
            put_varint(&mut out, chunk.stripe);
            put_varint(&mut out, u64::from(chunk.block));
        }
        out.extend_from_slice(&self.crc32c.to_le_bytes());
        out
    }

    /// Reads [`GeoPlace::encode`]'s bytes back, with the policy the object was packed under.
    pub fn decode(bytes: &[u8], policy: &GeometricPolicy) -> Result<GeoPlace, String> {
        let mut at = 0;
        let small = |value: u64, what: &str| {
            u32::try_from(value).map_err(|_| format!("{what} {value} is out of range"))
        };
        let size = get_varint(bytes, &mut at)?;
        let pg = small(get_varint(bytes, &mut at)?, "placement group")?;
        let member = small(get_varint(bytes, &mut at)?, "member")?;
        let partition = policy.partition(size);
        let front = if partition.front > 0 {
            Some(FrontRef {
                stripe: get_varint(bytes, &mut at)?,
                block: small(get_varint(bytes, &mut at)?, "block")?,
                offset: get_varint(bytes, &mut at)?,
            })
        } else {
            None
        };
        let mut chunks = Vec::with_capacity(partition.chunk_count());
        for _ in 0..partition.chunk_count() {
            let stripe = get_varint(bytes, &mut at)?;
            let block = small(get_varint(bytes, &mut at)?, "block")?;
            chunks.push(ChunkRef { stripe, block });
        }
        let crc: [u8; 4] = bytes
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .ok_or("the record ends before its checksum")?;
        if at + 4 != bytes.len() {
            return Err(format!("{} bytes past the record's end", bytes.len() - at - 4));
        }
        Ok(GeoPlace { pg, member, size, crc32c: u32::from_le_bytes(crc), front, chunks })
    }
}

/// The object size a [`GeoPlace::encode`] record starts with, without the policy.
pub fn encoded_size(bytes: &[u8]) -> Option<u64> {
    get_varint(bytes, &mut 0).ok()
}

/// `count` placement groups of `width` disks of `topology`, each on `width` distinct failure
/// domains at `level`: member lists, members `0..width − parity` for data, the last `parity`
/// for parity.
///
/// Greedy and deterministic (the seed breaks ties): each group starts from a least-loaded
/// disk; each next member is the disk of an unused domain that has shared the fewest groups
/// with the members chosen so far, then the least loaded. So disks carry groups alike, and
/// the groups of one disk spread over as many other disks as the counts allow — a failed
/// disk's groups then recover from and onto many disks at once (paper §5.1). Roles: the
/// `parity` members are those that hold parity in the fewest groups so far, so data and
/// parity are spread alike too.
pub fn placement_groups(
    topology: &Topology,
    level: FailureDomain,
    width: usize,
    parity: usize,
    count: usize,
    seed: u64,
) -> Result<Vec<Vec<DiskLocation>>, LayoutError> {
    let disks = topology.disks();
    let domains: Vec<DomainId> = disks.iter().map(|d| d.domain(level)).collect();
    let distinct = domains.iter().collect::<BTreeSet<_>>().len();
    if width == 0 || parity >= width {
        return Err(LayoutError::Geometric {
            reason: format!("a placement group of {width} disks with {parity} parity members"),
        });
    }
    if distinct < width {
        return Err(LayoutError::TooFewDomains {
            level,
            available: distinct,
            needed: width,
            units_per_group: width,
            stripe_width: width - parity,
        });
    }
    let mut load = vec![0u64; disks.len()];
    let mut parity_load = vec![0u64; disks.len()];
    let mut shared: HashMap<(usize, usize), u64> = HashMap::new();
    let pair = |a: usize, b: usize| if a < b { (a, b) } else { (b, a) };
    let tie = |pg: usize, disk: usize| mix(seed ^ mix(pg as u64) ^ (disk as u64).rotate_left(32));
    let mut groups = Vec::with_capacity(count);
    for pg in 0..count {
        let mut chosen: Vec<usize> = Vec::with_capacity(width);
        let mut used: BTreeSet<&DomainId> = BTreeSet::new();
        while chosen.len() < width {
            let best = (0..disks.len())
                .filter(|&d| !used.contains(&domains[d]))
                .min_by_key(|&d| {
                    let together: u64 =
                        chosen.iter().map(|&c| shared.get(&pair(c, d)).copied().unwrap_or(0)).sum();
                    (together, load[d], tie(pg, d))
                })
                .expect("enough domains were checked");
            used.insert(&domains[best]);
            chosen.push(best);
        }
        for (i, &a) in chosen.iter().enumerate() {
            load[a] += 1;
            for &b in &chosen[i + 1..] {
                *shared.entry(pair(a, b)).or_insert(0) += 1;
            }
        }
        // Parity to the members that hold it least so far.
        let mut by_parity = chosen.clone();
        by_parity.sort_by_key(|&d| (parity_load[d], load[d], tie(pg + count, d)));
        let parity_members: BTreeSet<usize> = by_parity[..parity].iter().copied().collect();
        for &d in &parity_members {
            parity_load[d] += 1;
        }
        let members: Vec<DiskLocation> = chosen
            .iter()
            .filter(|d| !parity_members.contains(d))
            .chain(by_parity[..parity].iter())
            .map(|&d| disks[d])
            .collect();
        groups.push(members);
    }
    Ok(groups)
}

/// For each disk, how many groups it is in and how many distinct other disks share one with
/// it: what [`placement_groups`] spreads.
pub fn group_spread(groups: &[Vec<DiskLocation>]) -> BTreeMap<DiskLocation, (usize, usize)> {
    let mut partners: BTreeMap<DiskLocation, (usize, BTreeSet<DiskLocation>)> = BTreeMap::new();
    for group in groups {
        for a in group {
            let entry = partners.entry(*a).or_default();
            entry.0 += 1;
            entry.1.extend(group.iter().filter(|b| *b != a));
        }
    }
    partners.into_iter().map(|(disk, (count, set))| (disk, (count, set.len()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn the_papers_examples() {
        // 73.5 MB = 1.5 + 2×4 + 2×8 + 16 + 32 (s0 4 MB, q 2).
        let p = partition(73 * MB + MB / 2, 4 * MB, 2, 256 * MB);
        assert_eq!(p.front, MB + MB / 2);
        assert_eq!(p.sizes, vec![4 * MB, 8 * MB, 16 * MB, 32 * MB]);
        assert_eq!(p.counts, vec![2, 2, 1, 1]);
        let sizes: Vec<u64> = p.chunks().iter().map(|c| c.bytes).collect();
        assert_eq!(sizes, vec![4 * MB, 4 * MB, 8 * MB, 8 * MB, 16 * MB, 32 * MB]);
        // 32 MB = 4 + 4 + 8 + 16 (§4.2).
        let p = partition(32 * MB, 4 * MB, 2, 256 * MB);
        assert_eq!((p.front, p.counts.clone()), (0, vec![2, 1, 1]));
        // 20 MB is 4 + 8 + 8, never 4 + 16 (§4.3: every coefficient non-zero).
        let p = partition(20 * MB, 4 * MB, 2, 256 * MB);
        assert_eq!((p.front, p.counts.clone()), (0, vec![1, 2]));
        // Smaller than s0: all front.
        let p = partition(3 * MB, 4 * MB, 2, 256 * MB);
        assert_eq!((p.front, p.counts.len()), (3 * MB, 0));
        assert_eq!(partition(0, 4 * MB, 2, 256 * MB).front, 0);
    }

    #[test]
    fn the_cap_repeats_the_largest_chunk() {
        // 4 + 8 + 16 = 28 MB in pass 1, then 16 MB chunks: 100 = 28 + 4×16 + 8.
        let p = partition(100 * MB, 4 * MB, 2, 16 * MB);
        assert_eq!(p.sizes, vec![4 * MB, 8 * MB, 16 * MB]);
        assert_eq!((p.front, p.counts), (0, vec![1, 2, 5]));
    }

    #[test]
    fn places_round_trip_compactly() {
        let policy = GeometricPolicy {
            code: CodeSpec::parse("clay(10,4)").unwrap(),
            small_code: CodeSpec::parse("rs(10,4)").unwrap(),
            s0: 4 * MB,
            q: 2,
            chunk_max: 256 * MB,
            pgs: 256,
        };
        policy.validate().unwrap();
        let size = 100 * MB + 12345;
        let partition = policy.partition(size);
        let place = GeoPlace {
            pg: 201,
            member: 7,
            size,
            crc32c: 0xdead_beef,
            front: Some(FrontRef { stripe: 40_000, block: 3, offset: 1_234_567 }),
            chunks: (0..partition.chunk_count())
                .map(|i| ChunkRef { stripe: 300 + i as u64, block: (i % 10) as u32 })
                .collect(),
        };
        let bytes = place.encode();
        assert_eq!(GeoPlace::decode(&bytes, &policy), Ok(place.clone()));
        // A 100 MB object: about the paper's 40 bytes.
        assert!(bytes.len() <= 40, "{} bytes", bytes.len());
        assert!(GeoPlace::decode(&bytes[..bytes.len() - 1], &policy).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(GeoPlace::decode(&longer, &policy).is_err());
    }
}
