//! The geometric layout's client side (RCStor, paper §5): the packer that moves warm objects
//! into their bucket's bins, and reads of packed objects.
//!
//! Pack data flow: meta plans a batch (`POST /v1/geometric/{bucket}/plan`: which objects, on
//! which placement group and disk, which chunks form which bin stripes, each stripe begun as
//! a write) → for each stripe, each data block is assembled from the warm copies of its
//! objects (healthy or degraded reads, like any get), added into the parity and written
//! (while the next block is assembled); then the parity units, all at once → meta commits
//! the stripes and swaps the objects in one transaction
//! (`.../commit`) → the warm units of the packed objects are deleted.
//!
//! Read data flow: meta's reply names the object's pieces (front, then chunks, smallest
//! first) and their stripes → a producer task reads the pieces in order — a healthy piece in
//! windows from its one disk (the first piece's ramped up from 1 MiB), an unavailable one
//! rebuilt whole from its stripe (Clay: β of
//! each of d helpers) — while the caller writes the previous piece out: chunk i + 1 is being
//! regenerated while chunk i is sent (paper §4.2, Figure 8).
//!
//! Invariants:
//! - A pack never leaves an object without a readable copy: warm units are deleted only
//!   after meta's commit answered that the object is packed; a pack that fails before aborts
//!   its stripe writes (their units are deleted, or collected by the sweeper once expired),
//!   and the objects stay warm. An object that changed after the plan is not packed: its
//!   bytes in the stripes are zeros, and meta's commit skips it.
//! - A whole read checks the object's crc32c, recorded by the packer from the warm bytes.
//! - A read holds at most three pieces' worth of rebuilt bytes (one being written out, one
//!   queued, one being rebuilt) and, for healthy pieces, two windows.

use std::{
    collections::{BTreeMap, HashMap},
    io::Write,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use weft_layout::UnitId;

use crate::{
    meta::encode_path, read::UnitRebuilder, Client, ClientError, GetStats, ObjectInfo, Result,
};

/// Bytes of one healthy read request of a piece.
const WINDOW_BYTES: u64 = 8 << 20;
/// Healthy read requests of a piece in flight at once.
const WINDOWS_IN_FLIGHT: usize = 2;
/// Pieces being read ahead of the one being written out.
const PIECES_AHEAD: usize = 1;
/// What writing a plan's stripes answers: each stripe's unit digests (in stripe order), the
/// crc pieces `(offset, bytes, crc32c)` of each object read, and the objects that changed
/// since the plan (with why).
type StripesWritten = (
    Vec<BTreeMap<UnitId, weft_wire::UnitDigest>>,
    HashMap<String, Vec<(u64, u64, u32)>>,
    HashMap<String, String>,
);

/// A unit write running in a task of its own ([`Client::spawn_put`]).
type UnitPut =
    (crate::UnitInfo, tokio::task::JoinHandle<std::result::Result<(), crate::node::NodeFailure>>);

/// Waits for a unit write; its failure names the unit.
async fn finish_put((unit, task): UnitPut) -> Result<()> {
    match task.await {
        Ok(outcome) => outcome.map_err(|f| f.for_unit(&unit)),
        Err(join) => Err(ClientError::Invalid(format!("a unit write's task failed: {join}"))),
    }
}

/// The first window of a read's first piece, doubled up to [`WINDOW_BYTES`]: a read's first
/// byte waits for one window, so a small one starts the output (and its pipeline) sooner.
const FIRST_WINDOW_BYTES: u64 = 1 << 20;

/// The windows `(offset, bytes)` a healthy read of `len` bytes asks for, in order: each
/// [`WINDOW_BYTES`], or — when `ramp` — [`FIRST_WINDOW_BYTES`] doubling up to it.
fn windows(len: u64, ramp: bool) -> impl Iterator<Item = (u64, u64)> {
    let mut at = 0u64;
    let mut next = if ramp { FIRST_WINDOW_BYTES } else { WINDOW_BYTES };
    std::iter::from_fn(move || {
        (at < len).then(|| {
            let window = next.min(len - at);
            let out = (at, window);
            at += window;
            next = (next * 2).min(WINDOW_BYTES);
            out
        })
    })
}

/// What one pack run asks meta for.
#[derive(Clone, Debug, Default)]
pub struct PackOptions {
    /// Most objects per batch (meta's limit: 1000).
    pub batch_objects: Option<usize>,
    /// Most bytes of objects per batch (meta's default: 4 GiB).
    pub batch_bytes: Option<u64>,
    /// Only objects written at least this long ago (0: all).
    pub min_age_ms: u64,
    /// Stop after this many batches (None: until nothing is left).
    pub max_batches: Option<usize>,
    /// Only these objects (one batch), when given.
    pub keys: Option<Vec<String>>,
}

/// An object a pack left warm, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Unpacked {
    pub key: String,
    pub reason: String,
}

/// What a pack did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PackReport {
    pub bucket: String,
    /// Objects moved into the bins.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bin stripes written (chunk bins and small bins).
    pub stripes: u64,
    pub batches: u64,
    /// Bytes read from the warm copies.
    pub bytes_read: u64,
    /// Data bytes written to the bins (chunks, small-bin regions with their padding).
    pub data_bytes_written: u64,
    /// Parity bytes written.
    pub parity_bytes_written: u64,
    /// Warm units deleted after the commits, and those left to the sweeper (node down).
    pub warm_units_deleted: u64,
    pub warm_units_left: u64,
    /// Objects meta did not pack (changed since the plan, ...), and those it did not plan
    /// (their placement group has a disk down, too many chunks, ...).
    pub skipped: Vec<Unpacked>,
    pub deferred: Vec<Unpacked>,
    pub elapsed_ms: u64,
}

/// A piece of a planned stripe's block: (object key, generation, object offset, len, block
/// offset).
type PlanPiece = (String, u64, u64, u64, u64);

/// A stripe of a plan, parsed.
struct PlannedStripe {
    key: String,
    object: ObjectInfo,
    /// Per data block, its pieces.
    blocks: Vec<Vec<PlanPiece>>,
}

fn bad_plan(reason: impl std::fmt::Display) -> ClientError {
    ClientError::Invalid(format!("meta sent a bad pack plan: {reason}"))
}

fn parse_stripe(value: &Value) -> Result<PlannedStripe> {
    let key = value["key"].as_str().ok_or_else(|| bad_plan("a stripe without a key"))?.to_owned();
    let object = ObjectInfo::from_json(value["object"].clone())?;
    let blocks = value["blocks"]
        .as_array()
        .ok_or_else(|| bad_plan(format!("stripe {key} without blocks")))?
        .iter()
        .map(|pieces| {
            pieces
                .as_array()
                .ok_or_else(|| bad_plan("a block that is not a list"))?
                .iter()
                .map(|p| {
                    let n = |name: &str| {
                        p[name].as_u64().ok_or_else(|| bad_plan(format!("piece without {name}")))
                    };
                    let key = p["key"].as_str().ok_or_else(|| bad_plan("piece without key"))?;
                    Ok((
                        key.to_owned(),
                        n("generation")?,
                        n("object_offset")?,
                        n("len")?,
                        n("block_offset")?,
                    ))
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let count = object.layout.data_blocks(object.size);
    if blocks.len() != count {
        return Err(bad_plan(format!("stripe {key}: {} blocks for {count}", blocks.len())));
    }
    for (x, pieces) in blocks.iter().enumerate() {
        let len = object.layout.block_len(object.size, x);
        if pieces.iter().any(|p| p.4.checked_add(p.3).is_none_or(|end| end > len)) {
            return Err(bad_plan(format!("stripe {key}: a piece past block {x}'s end")));
        }
    }
    Ok(PlannedStripe { key, object, blocks })
}

/// Rebuilds bytes `[offset, offset + len)` of `unit` and sends them down `tx`: in windows
/// for byte-local codes (each rebuilt from the same window of k others), whole for the
/// others (Clay regenerates a chunk from β of each of its d helpers). Answers whether the
/// read is over (the reader gone, or a failure sent).
async fn rebuild_piece(
    rebuilder: &mut UnitRebuilder,
    unit: UnitId,
    offset: u64,
    len: u64,
    tx: &mpsc::Sender<Result<Bytes>>,
) -> bool {
    let step = match rebuilder.object.layout.code.build() {
        Ok(code) if code.byte_local() => WINDOW_BYTES,
        _ => len.max(1),
    };
    let mut done = 0;
    while done < len {
        let window = step.min(len - done);
        let rebuilt = rebuilder.rebuild(unit, offset + done, window).await;
        let failed = rebuilt.is_err();
        if tx.send(rebuilt).await.is_err() || failed {
            return true;
        }
        done += window;
    }
    false
}

/// crc32c of pieces of an object, combined in object order once all are in.
#[derive(Default)]
struct ObjectCrc {
    pieces: Vec<(u64, u64, u32)>,
}

impl ObjectCrc {
    fn whole(mut self, size: u64) -> Option<u32> {
        self.pieces.sort_unstable();
        let mut crc = 0u32;
        let mut at = 0u64;
        for (offset, len, piece) in self.pieces {
            if offset != at {
                return None;
            }
            crc = crc32c::crc32c_combine(crc, piece, len as usize);
            at += len;
        }
        (at == size).then_some(crc)
    }
}

impl Client {
    /// Moves the warm objects of geometric bucket `bucket` into its bins, batch after batch
    /// (see the module's data flow). `progress` counts object bytes read.
    pub async fn pack(
        &self,
        bucket: &str,
        options: &PackOptions,
        progress: Option<&AtomicU64>,
    ) -> Result<PackReport> {
        let started = Instant::now();
        let mut report = PackReport { bucket: bucket.to_owned(), ..PackReport::default() };
        let mut start_after: Option<String> = None;
        loop {
            if options.max_batches.is_some_and(|most| report.batches as usize >= most) {
                break;
            }
            let mut body = json!({ "min_age_ms": options.min_age_ms });
            if let Some(n) = options.batch_objects {
                body["max_objects"] = json!(n);
            }
            if let Some(n) = options.batch_bytes {
                body["max_bytes"] = json!(n);
            }
            if let Some(after) = &start_after {
                body["start_after"] = json!(after);
            }
            if let Some(keys) = &options.keys {
                body["keys"] = json!(keys);
            }
            let path = format!("/v1/geometric/{}/plan", encode_path(bucket));
            let plan = self.meta.post_json(&path, body).await?;
            for d in plan["deferred"].as_array().into_iter().flatten() {
                report.deferred.push(Unpacked {
                    key: d["key"].as_str().unwrap_or_default().to_owned(),
                    reason: d["reason"].as_str().unwrap_or_default().to_owned(),
                });
            }
            let planned = plan["objects"].as_array().map_or(0, Vec::len);
            if planned > 0 {
                self.pack_batch(bucket, &plan, &mut report, progress).await?;
                report.batches += 1;
            }
            match plan["next_start_after"].as_str() {
                Some(next) => start_after = Some(next.to_owned()),
                None => break,
            }
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Moves (bucket, key) of a geometric bucket into the bucket's bins now (a pack of that
    /// one object), reported like every transition; a packed object is left as it is.
    /// `dry_run` predicts the IO of full stripes and writes nothing.
    pub async fn transition_to_geometric(
        &self,
        bucket: &str,
        key: &str,
        dry_run: bool,
    ) -> Result<crate::TransitionReport> {
        let started = Instant::now();
        let object = self.meta.get_object(bucket, key).await?;
        let record = self.meta.get_json(&format!("/v1/buckets/{}", encode_path(bucket))).await?;
        let policy = &record["geometric"];
        if !policy.is_object() {
            return Err(ClientError::Invalid(format!(
                "bucket {bucket:?} is not geometric: objects are packed into the bins of a \
                 geometric bucket (weft bucket create NAME --layout geometric)"
            )));
        }
        let spec =
            |name: &str| policy[name].as_str().and_then(|s| weft_codes::CodeSpec::parse(s).ok());
        let (k, r) = spec("code").map_or((1, 0), |c| (c.k() as u64, c.r() as u64));
        let size = object.size;
        let mut report = crate::TransitionReport {
            bucket: object.bucket.clone(),
            key: object.key.clone(),
            mode: weft_layout::TransitionMode::Restripe,
            from: object.layout,
            to: object.layout,
            size,
            dry_run,
            io: weft_layout::TransitionIo::default(),
            predicted: json!({ "pack": {
                "bytes_read": size,
                "data_bytes_written": size,
                "parity_bytes_written": size * r / k.max(1),
                "relocated_bytes": 0,
            }}),
            relocated_blocks: 0,
            elapsed_ms: 0,
            unchanged: object.packed,
            attempts: u64::from(!object.packed) as usize,
            from_raidp: object.raidp.is_some(),
            to_raidp: false,
            from_geometric: object.packed,
            to_geometric: true,
        };
        if object.packed || dry_run {
            return Ok(report);
        }
        let options = PackOptions {
            keys: Some(vec![key.to_owned()]),
            max_batches: Some(1),
            ..Default::default()
        };
        let packed = self.pack(bucket, &options, None).await?;
        if packed.objects == 0 {
            let why = packed
                .skipped
                .iter()
                .chain(&packed.deferred)
                .map(|u| u.reason.clone())
                .next()
                .unwrap_or_else(|| "meta planned nothing".into());
            return Err(ClientError::Invalid(format!("{bucket}/{key} was not packed: {why}")));
        }
        report.io = weft_layout::TransitionIo {
            bytes_read: packed.bytes_read,
            data_bytes_written: packed.data_bytes_written,
            parity_bytes_written: packed.parity_bytes_written,
            relocated_bytes: 0,
            network_bytes: packed.bytes_read
                + packed.data_bytes_written
                + packed.parity_bytes_written,
        };
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Writes one plan's stripes and commits it; on failure aborts its stripe writes.
    async fn pack_batch(
        &self,
        bucket: &str,
        plan: &Value,
        report: &mut PackReport,
        progress: Option<&AtomicU64>,
    ) -> Result<()> {
        let stripe_bucket =
            plan["stripe_bucket"].as_str().ok_or_else(|| bad_plan("no stripe bucket"))?.to_owned();
        let stripes = plan["stripes"]
            .as_array()
            .ok_or_else(|| bad_plan("no stripes"))?
            .iter()
            .map(parse_stripe)
            .collect::<Result<Vec<_>>>()?;
        let mut written = Vec::new();
        let outcome = self.write_stripes(bucket, &stripes, &mut written, report, progress).await;
        let (digests, crcs, changed) = match outcome {
            Ok(done) => done,
            Err(error) => {
                self.abandon_stripes(&stripe_bucket, &stripes, &written).await;
                return Err(error);
            }
        };
        let mut objects = Vec::new();
        for object in plan["objects"].as_array().into_iter().flatten() {
            let key = object["key"].as_str().ok_or_else(|| bad_plan("object without key"))?;
            let size = object["size"].as_u64().ok_or_else(|| bad_plan("object without size"))?;
            if let Some(why) = changed.get(key) {
                report.skipped.push(Unpacked { key: key.to_owned(), reason: why.clone() });
                continue;
            }
            let crc = crcs
                .get(key)
                .map_or(Some(0), |c| ObjectCrc { pieces: c.clone() }.whole(size))
                .ok_or_else(|| bad_plan(format!("the pieces of {key} do not cover it")))?;
            let mut place = object["place"].clone();
            place["crc32c"] = json!(crc);
            objects.push(json!({ "key": key, "generation": object["generation"], "place": place }));
        }
        let stripes_body: Vec<Value> = stripes
            .iter()
            .zip(&digests)
            .map(|(s, d)| {
                json!({ "key": s.key, "generation": s.object.generation, "digests": crate::digest::by_name(d) })
            })
            .collect();
        let path = format!("/v1/geometric/{}/commit", encode_path(bucket));
        let committed = match self
            .meta
            .post_json(&path, json!({ "stripes": stripes_body, "objects": objects }))
            .await
        {
            Ok(answer) => answer,
            Err(error @ ClientError::Meta { .. }) => {
                // meta refused: nothing was committed.
                self.abandon_stripes(&stripe_bucket, &stripes, &written).await;
                return Err(error);
            }
            // Unanswered: the commit may have landed; the sweeper settles what is left.
            Err(error) => return Err(error),
        };
        report.stripes += stripes.len() as u64;
        for skipped in committed["skipped"].as_array().into_iter().flatten() {
            report.skipped.push(Unpacked {
                key: skipped["key"].as_str().unwrap_or_default().to_owned(),
                reason: skipped["reason"].as_str().unwrap_or_default().to_owned(),
            });
        }
        for packed in committed["packed"].as_array().into_iter().flatten() {
            let old = ObjectInfo::from_json(packed["replaced"].clone())?;
            report.objects += 1;
            report.bytes += old.size;
            let units: Vec<crate::UnitInfo> = old.units.values().cloned().collect();
            let left = self.delete_units(&units).await as u64;
            report.warm_units_deleted += units.len() as u64 - left;
            report.warm_units_left += left;
        }
        Ok(())
    }

    /// Starts writing `bytes` as `unit` in a task of its own.
    fn spawn_put(&self, unit: &crate::UnitInfo, bytes: Bytes) -> UnitPut {
        let (nodes, target) = (self.nodes.clone(), unit.clone());
        let task = tokio::spawn(async move { nodes.put(&target, bytes).await });
        (unit.clone(), task)
    }

    /// Aborts the stripe writes of a failed pack and deletes what it wrote of them.
    async fn abandon_stripes(
        &self,
        stripe_bucket: &str,
        stripes: &[PlannedStripe],
        written: &[crate::UnitInfo],
    ) {
        let mut aborted = true;
        for stripe in stripes {
            if let Err(error) =
                self.meta.abort(stripe_bucket, &stripe.key, stripe.object.generation).await
            {
                tracing::warn!(%error, stripe = %stripe.key, "could not abort a stripe write; the sweeper collects it once expired");
                aborted = false;
            }
        }
        if aborted {
            self.delete_units(written).await;
        }
    }

    /// Writes every stripe of a plan; answers their unit digests (in stripe order), the crc
    /// pieces of each object read, and the objects that changed since the plan (with why).
    /// A data block's write runs while the next block is read and encoded (one write in
    /// flight), a stripe's parity units are written at once; every write has ended, in
    /// success or not, when this returns, and each unit it began is in `written`.
    async fn write_stripes(
        &self,
        bucket: &str,
        stripes: &[PlannedStripe],
        written: &mut Vec<crate::UnitInfo>,
        report: &mut PackReport,
        progress: Option<&AtomicU64>,
    ) -> Result<StripesWritten> {
        let mut in_flight = None;
        let outcome = self
            .write_stripes_into(bucket, stripes, written, report, progress, &mut in_flight)
            .await;
        // A write still running (this failed meanwhile) ends before the caller cleans up.
        let last = match in_flight {
            Some(put) => finish_put(put).await,
            None => Ok(()),
        };
        let done = outcome?;
        last?;
        Ok(done)
    }

    async fn write_stripes_into(
        &self,
        bucket: &str,
        stripes: &[PlannedStripe],
        written: &mut Vec<crate::UnitInfo>,
        report: &mut PackReport,
        progress: Option<&AtomicU64>,
        in_flight: &mut Option<UnitPut>,
    ) -> Result<StripesWritten> {
        let mut warm: HashMap<String, ObjectInfo> = HashMap::new();
        let mut changed: HashMap<String, String> = HashMap::new();
        let mut crcs: HashMap<String, Vec<(u64, u64, u32)>> = HashMap::new();
        let mut all_digests = Vec::new();
        for stripe in stripes {
            let object = &stripe.object;
            let code = object.layout.code.build()?;
            let r = object.layout.r();
            let block_bytes = object.layout.block_bytes as usize;
            let mut parity = vec![vec![0u8; block_bytes]; r];
            let mut digests = BTreeMap::new();
            for (x, pieces) in stripe.blocks.iter().enumerate() {
                let len = object.layout.block_len(object.size, x) as usize;
                let mut block = vec![0u8; len];
                for (key, generation, offset, bytes, at) in pieces {
                    if !warm.contains_key(key) && !changed.contains_key(key) {
                        match self.meta.get_object(bucket, key).await {
                            Ok(info) if info.generation == *generation && !info.packed => {
                                warm.insert(key.clone(), info);
                            }
                            Ok(info) => {
                                changed.insert(
                                    key.clone(),
                                    format!(
                                        "changed since the plan (generation {})",
                                        info.generation
                                    ),
                                );
                            }
                            Err(ClientError::Meta { status: 404, .. }) => {
                                changed.insert(key.clone(), "deleted since the plan".into());
                            }
                            Err(other) => return Err(other),
                        }
                    }
                    let Some(info) = warm.get(key) else { continue };
                    let target = &mut block[*at as usize..(*at + *bytes) as usize];
                    let mut into: &mut [u8] = target;
                    self.get_object_range(
                        info.clone(),
                        Some((*offset, *bytes)),
                        &mut into,
                        progress,
                    )
                    .await?;
                    let target = &block[*at as usize..(*at + *bytes) as usize];
                    crcs.entry(key.clone()).or_default().push((
                        *offset,
                        *bytes,
                        crc32c::crc32c(target),
                    ));
                    report.bytes_read += bytes;
                }
                let mut accumulators: Vec<&mut [u8]> =
                    parity.iter_mut().map(|p| &mut p[..len]).collect();
                code.encode_add(x, &block, &mut accumulators)?;
                let unit = UnitId::Data(x);
                let info = object.unit(unit).ok_or_else(|| {
                    bad_plan(format!("stripe {}: no unit for block {x}", stripe.key))
                })?;
                digests.insert(unit, self.nodes.digest_key().digest(&block));
                report.data_bytes_written += len as u64;
                if let Some(previous) = in_flight.take() {
                    finish_put(previous).await?;
                }
                written.push(info.clone());
                *in_flight = Some(self.spawn_put(info, Bytes::from(block)));
            }
            if let Some(previous) = in_flight.take() {
                finish_put(previous).await?;
            }
            // The parity units' places first: nothing is started unless all are known.
            let places = (0..parity.len())
                .map(|index| {
                    let unit = UnitId::Parity { group: 0, index };
                    object.unit(unit).map(|info| (unit, info)).ok_or_else(|| {
                        bad_plan(format!("stripe {}: no parity {index}", stripe.key))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let mut puts = Vec::new();
            for ((unit, info), bytes) in places.into_iter().zip(parity) {
                digests.insert(unit, self.nodes.digest_key().digest(&bytes));
                report.parity_bytes_written += bytes.len() as u64;
                written.push(info.clone());
                puts.push(self.spawn_put(info, Bytes::from(bytes)));
            }
            // Every parity write ends before the first failure (if any) is answered.
            let mut failure = None;
            for put in puts {
                if let Err(error) = finish_put(put).await {
                    failure.get_or_insert(error);
                }
            }
            if let Some(error) = failure {
                return Err(error);
            }
            all_digests.push(digests);
        }
        Ok((all_digests, crcs, changed))
    }

    /// Writes bytes `[start, start + len)` of a packed object to `out` (see the module's
    /// read data flow).
    pub(crate) async fn get_geometric<W: Write>(
        &self,
        object: &ObjectInfo,
        start: u64,
        len: u64,
        out: &mut W,
        progress: Option<&AtomicU64>,
    ) -> Result<GetStats> {
        let started = Instant::now();
        let geo = object.geometric.clone().ok_or_else(|| {
            ClientError::Invalid(format!(
                "{}/{} is packed but meta's reply does not say where its bytes are",
                object.bucket, object.key
            ))
        })?;
        // The pieces the range touches: (piece index, offset in its block, bytes).
        let mut wanted = Vec::new();
        let mut at = 0u64;
        for (i, piece) in geo.pieces.iter().enumerate() {
            let (from, to) = (start.max(at), (start + len).min(at + piece.bytes));
            if from < to {
                wanted.push((i, piece.offset + (from - at), to - from));
            }
            at += piece.bytes;
        }
        let whole = start == 0 && len == object.size;
        // Each piece is read by a task of its own into a channel of its own; the pieces'
        // channels queue in object order, at most PIECES_AHEAD behind the one being written
        // out: the next piece is fetched — or regenerated — while this one is sent.
        let (pieces_tx, mut pieces_rx) =
            mpsc::channel::<mpsc::Receiver<Result<Bytes>>>(PIECES_AHEAD);
        let client = self.clone();
        let pieces = geo.pieces.clone();
        let stripes = geo.stripes.clone();
        let totals = std::sync::Arc::new(std::sync::Mutex::new((0u64, Vec::new())));
        let counted = std::sync::Arc::clone(&totals);
        let producer = tokio::spawn(async move {
            let mut tasks = Vec::new();
            for (n, (i, offset, bytes)) in wanted.into_iter().enumerate() {
                let (tx, rx) = mpsc::channel::<Result<Bytes>>(WINDOWS_IN_FLIGHT);
                if pieces_tx.send(rx).await.is_err() {
                    break; // the reader is gone
                }
                let (client, piece) = (client.clone(), pieces[i].clone());
                let stripe = stripes[&piece.stripe].clone();
                let counted = std::sync::Arc::clone(&counted);
                tasks.push(tokio::spawn(async move {
                    let (fetched, degraded) =
                        client.read_piece(&stripe, &piece, offset, bytes, n == 0, &tx).await;
                    let mut totals = counted.lock().expect("totals");
                    totals.0 += fetched;
                    totals.1.extend(degraded);
                }));
            }
            for task in tasks {
                let _ = task.await;
            }
        });
        let mut stats = GetStats::default();
        let mut crc = 0u32;
        let mut outcome = Ok(());
        'pieces: while let Some(mut piece) = pieces_rx.recv().await {
            while let Some(bytes) = piece.recv().await {
                let bytes = match bytes {
                    Ok(bytes) => bytes,
                    Err(error) => {
                        outcome = Err(error);
                        break 'pieces;
                    }
                };
                if whole {
                    crc = crc32c::crc32c_append(crc, &bytes);
                }
                for part in bytes.chunks(WINDOW_BYTES as usize) {
                    if let Err(source) = out.write_all(part) {
                        outcome =
                            Err(ClientError::Io { what: "writing the object out".into(), source });
                        break 'pieces;
                    }
                    if let Some(progress) = progress {
                        progress.fetch_add(part.len() as u64, Ordering::Relaxed);
                    }
                    stats.bytes += part.len() as u64;
                }
            }
        }
        drop(pieces_rx);
        producer
            .await
            .map_err(|e| ClientError::Invalid(format!("the read's producing task failed: {e}")))?;
        let (fetched, degraded) = std::mem::take(&mut *totals.lock().expect("totals"));
        outcome?;
        if stats.bytes != len {
            return Err(ClientError::Invalid(format!(
                "read {} of the {len} bytes asked of {}/{}",
                stats.bytes, object.bucket, object.key
            )));
        }
        if whole && crc != geo.crc32c {
            return Err(ClientError::Invalid(format!(
                "{}: the bytes of {}/{} read back have crc32c {crc:08x}, not the {:08x} the \
                 packer recorded",
                crate::digest::MISMATCH,
                object.bucket,
                object.key,
                geo.crc32c
            )));
        }
        stats.bytes_fetched = fetched;
        stats.degraded_units = degraded;
        stats.degraded_units.sort();
        stats.elapsed = started.elapsed();
        Ok(stats)
    }

    /// The most bytes a get of packed `object` holds at once: the piece being written out,
    /// one queued, one being rebuilt with what its repair plan reads, and two windows.
    pub fn geometric_buffer_bound(object: &ObjectInfo) -> Option<u64> {
        let geo = object.geometric.as_ref()?;
        let mut bound = (2 + WINDOWS_IN_FLIGHT as u64) * WINDOW_BYTES;
        for piece in &geo.pieces {
            let stripe = geo.stripes.get(&piece.stripe)?;
            let code = stripe.layout.code.build().ok()?;
            let unit = stripe.layout.block_bytes;
            let rebuilt = if code.byte_local() { WINDOW_BYTES.min(unit) } else { unit };
            let plan = code.repair_plan(0, &[], rebuilt as usize).ok()?.bytes_read() as u64;
            bound = bound.max(2 * piece.bytes + rebuilt + plan + 2 * WINDOW_BYTES);
        }
        Some(bound)
    }

    /// Reads bytes `[offset, offset + len)` of `piece` down `tx`: from its own disk, or —
    /// from where that failed — rebuilt from its stripe. Answers the bytes fetched from
    /// nodes and the units found unavailable (named `<stripe>:<unit>`, with why). The
    /// read's `first` piece starts with small windows (its first bytes go out sooner).
    async fn read_piece(
        &self,
        stripe: &ObjectInfo,
        piece: &crate::GeoPiece,
        offset: u64,
        len: u64,
        first: bool,
        tx: &mpsc::Sender<Result<Bytes>>,
    ) -> (u64, Vec<(String, String)>) {
        let unit = UnitId::Data(piece.block);
        let (sent, failure) = match self.send_healthy(stripe, unit, offset, len, first, tx).await {
            Ok(sent) => return (sent, Vec::new()),
            Err(failed) => failed,
        };
        // One rebuilder per piece, dropped with it: a stripe holds one chunk of an object,
        // and its cache must not outlive the piece.
        let mut rebuilder = match UnitRebuilder::new(self, stripe.clone(), true) {
            Ok(r) => r.caching(),
            Err(error) => {
                let _ = tx.send(Err(error)).await;
                return (sent, Vec::new());
            }
        };
        if let Some(failure) = failure {
            rebuilder.mark_failed(unit, failure);
        }
        rebuild_piece(&mut rebuilder, unit, offset + sent, len - sent, tx).await;
        rebuilder.finish_reports().await;
        let degraded = rebuilder
            .failures()
            .map(|(u, f)| (format!("{}:{}", piece.stripe, u.short_name()), f.cause.clone()))
            .collect();
        (sent + rebuilder.bytes_fetched, degraded)
    }

    /// Sends bytes `[offset, offset + len)` of `unit` of `stripe` down `tx` in windows, read
    /// from its own disk ([`windows`]; ramped up from 1 MiB when `ramp`). Answers how many
    /// bytes went (less than `len` only when the reader is gone), or, when the unit cannot be
    /// read, how many went before and the failure.
    async fn send_healthy(
        &self,
        stripe: &ObjectInfo,
        unit: UnitId,
        offset: u64,
        len: u64,
        ramp: bool,
        tx: &mpsc::Sender<Result<Bytes>>,
    ) -> std::result::Result<u64, (u64, Option<crate::node::NodeFailure>)> {
        let Some(info) = stripe.unit(unit) else {
            return Err((0, None));
        };
        if info.is_down() {
            return Err((0, None));
        }
        // WINDOWS_IN_FLIGHT requests at once, in order: the disk reads the next window
        // while the node sends the previous one (a disk's readahead and a socket's buffer).
        use futures_util::StreamExt;
        let mut fetches = futures_util::stream::iter(windows(len, ramp).map(|(at, window)| {
            let nodes = self.nodes.clone();
            async move { (window, nodes.get_range(info, offset + at, window).await) }
        }))
        .buffered(WINDOWS_IN_FLIGHT);
        let mut sent = 0;
        while let Some((window, fetched)) = fetches.next().await {
            match fetched {
                Ok(bytes) => {
                    if tx.send(Ok(bytes)).await.is_err() {
                        return Ok(sent);
                    }
                    sent += window;
                }
                Err(failure) => return Err((sent, Some(failure))),
            }
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows cover `[0, len)` in order without gaps; a ramp starts small and doubles.
    #[test]
    fn windows_cover_the_range_and_ramp_up() {
        for len in [0, 1, FIRST_WINDOW_BYTES - 1, 5 << 20, 15 << 20, 40 << 20, (40 << 20) + 3] {
            for ramp in [false, true] {
                let all: Vec<(u64, u64)> = windows(len, ramp).collect();
                let mut at = 0;
                for &(offset, bytes) in &all {
                    assert_eq!(offset, at, "len {len} ramp {ramp}: {all:?}");
                    assert!(bytes > 0 && bytes <= WINDOW_BYTES);
                    at += bytes;
                }
                assert_eq!(at, len, "len {len} ramp {ramp}");
            }
        }
        let mib = |list: &[u64]| list.iter().map(|m| m << 20).collect::<Vec<u64>>();
        let ramped: Vec<u64> = windows(40 << 20, true).map(|w| w.1).collect();
        assert_eq!(ramped, mib(&[1, 2, 4, 8, 8, 8, 8, 1]));
        let flat: Vec<u64> = windows(40 << 20, false).map(|w| w.1).collect();
        assert_eq!(flat, mib(&[8, 8, 8, 8, 8]));
    }
}
