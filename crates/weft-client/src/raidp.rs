//! RAIDP objects (docs/raidp.md): written to both replicas of each superchunk they span,
//! read from either.
//!
//! Invariants:
//! - A put sends every piece (at most [`PIECE_BYTES`]) to both replicas of its superchunk,
//!   at the same slot and offset, and commits the object only after both acknowledged every
//!   piece (each replica's node journaled it in its Lstor, wrote its disk and updated its
//!   parity before answering). Then, and only then, both replicas' journal records of the
//!   piece are cleared: a record cleared on one side is on the other too.
//! - A failed put aborts its write in meta; the bytes it wrote stay in superchunk space
//!   nobody references (appends never reuse it), so both replicas' parities stay true.
//! - A read takes each piece from one replica (alternating by piece, so two readers of one
//!   object spread over both) and from the other when the first is down, failed or answers
//!   an error; a replica is never decoded from parity on a read. Each piece's bytes were
//!   checked against the node's segment checksums.

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Value};
use weft_wire::{RAIDP_CRC_HEADER, RAIDP_MAX_IO_BYTES};

use crate::node::{failure_of, transport, FailureKind, NodeFailure};
use crate::object::{RaidpExtentInfo, ReplicaInfo};
use crate::{Client, ClientError, GetStats, NodeClient, ObjectInfo, PutOptions, PutStats, Result};

/// Bytes per slot write and read: a journal record holds one piece (and its parity).
pub const PIECE_BYTES: u64 = 4 << 20;
/// Most records one clear names (the node's bound).
const MAX_CLEAR_SEQS: usize = 4096;
/// Pieces of one put in flight at once.
const PIPELINE: usize = 4;
const _: () = assert!(PIECE_BYTES <= RAIDP_MAX_IO_BYTES);

fn base(replica: &ReplicaInfo) -> std::result::Result<String, NodeFailure> {
    replica.endpoint.as_deref().map(|e| e.trim_end_matches('/').to_owned()).ok_or_else(|| {
        NodeFailure::new(
            FailureKind::Unreachable,
            format!("meta knows no endpoint for node {}", replica.node),
        )
    })
}

impl NodeClient {
    /// Sends a signed request to node `node`; a non-success answer is its failure.
    async fn send_ok(
        &self,
        node: u32,
        request: reqwest::RequestBuilder,
    ) -> std::result::Result<reqwest::Response, NodeFailure> {
        let response = self.send(node, request).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
        Ok(response)
    }

    /// Writes `bytes` at `offset` of `slot` on a replica's disk through its Lstor; returns the
    /// journal record's sequence number.
    #[allow(clippy::too_many_arguments)]
    pub async fn raidp_write(
        &self,
        replica: &ReplicaInfo,
        slot: u32,
        offset: u64,
        superchunk_bytes: u64,
        parities: usize,
        bytes: Bytes,
    ) -> std::result::Result<u64, NodeFailure> {
        let url = format!(
            "{}/v1/disks/{}/raidp/slots/{slot}?offset={offset}&superchunk_bytes={superchunk_bytes}&parities={parities}",
            base(replica)?,
            replica.disk
        );
        if let Some(link) = self.link() {
            link.up.transfer(bytes.len() as u64).await;
        }
        let crc = crc32c::crc32c(&bytes);
        let request = self.http().put(url).header(RAIDP_CRC_HEADER, crc.to_string()).body(bytes);
        let response = self.send_ok(replica.node, request).await?;
        let answer: Value = response.json().await.map_err(transport)?;
        answer["seq"].as_u64().ok_or_else(|| {
            NodeFailure::new(FailureKind::Other, format!("a slot write answered {answer}"))
        })
    }

    /// `len` bytes at `offset` of `slot` on a replica's disk, checked by its segment checksums.
    pub async fn raidp_read(
        &self,
        replica: &ReplicaInfo,
        slot: u32,
        offset: u64,
        len: u64,
    ) -> std::result::Result<Bytes, NodeFailure> {
        let url = format!(
            "{}/v1/disks/{}/raidp/slots/{slot}?offset={offset}&len={len}",
            base(replica)?,
            replica.disk
        );
        let response = self.send_ok(replica.node, self.http().get(url)).await?;
        let bytes = response.bytes().await.map_err(transport)?;
        if bytes.len() as u64 != len {
            return Err(NodeFailure::new(
                FailureKind::Other,
                format!("asked for {len} bytes of slot {slot}, got {}", bytes.len()),
            ));
        }
        if let Some(link) = self.link() {
            link.down.transfer(len).await;
        }
        Ok(bytes)
    }

    /// Empties `slot` on a replica's disk (compaction): its bytes are folded out of the
    /// Lstor's parity and its files removed. Returns the bytes it held.
    pub async fn raidp_trim(
        &self,
        replica: &ReplicaInfo,
        slot: u32,
    ) -> std::result::Result<u64, NodeFailure> {
        let url = format!("{}/v1/disks/{}/raidp/slots/{slot}/trim", base(replica)?, replica.disk);
        let response = self.send_ok(replica.node, self.http().post(url)).await?;
        let answer: Value = response.json().await.map_err(transport)?;
        answer["trimmed_bytes"].as_u64().ok_or_else(|| {
            NodeFailure::new(FailureKind::Other, format!("a slot trim answered {answer}"))
        })
    }

    /// Clears journal records `seqs` on a replica's disk (their partner has the bytes).
    pub async fn raidp_clear(
        &self,
        replica: &ReplicaInfo,
        seqs: &[u64],
    ) -> std::result::Result<(), NodeFailure> {
        let url = format!("{}/v1/disks/{}/raidp/clear", base(replica)?, replica.disk);
        let request = self.http().post(url).json(&json!({ "seqs": seqs }));
        self.send_ok(replica.node, request).await?;
        Ok(())
    }

    /// A call answering JSON on disk `disk` of node `node` (`POST` with `body`, else `GET`):
    /// `raidp` (state), `raidp/pending`, `raidp/verify`, the drills `fail` and `replace`.
    pub async fn disk_json(
        &self,
        node: u32,
        endpoint: &str,
        disk: u32,
        route: &str,
        body: Option<Value>,
    ) -> std::result::Result<Value, NodeFailure> {
        let url = format!("{}/v1/disks/{disk}/{route}", endpoint.trim_end_matches('/'));
        let request = match body {
            Some(body) => self.http().post(url).json(&body),
            None => self.http().get(url),
        };
        let response = self.send_ok(node, request).await?;
        response.json().await.map_err(transport)
    }
}

/// The error of a replica's failure, naming the superchunk, node and disk.
fn replica_error(
    extent: &RaidpExtentInfo,
    replica: &ReplicaInfo,
    failure: NodeFailure,
) -> ClientError {
    ClientError::Node {
        node_id: replica.node,
        endpoint: replica.endpoint.clone().unwrap_or_else(|| "(unknown endpoint)".into()),
        unit: format!(
            "superchunk {} (slot {} of disk {})",
            extent.superchunk, extent.slot, replica.disk
        ),
        cause: failure.cause,
    }
}

impl Client {
    /// Writes a RAIDP object begun in meta (`object` lists its extents) from `reader`
    /// (`size` bytes), then commits it. A failure returns the nodes at fault.
    pub(crate) async fn put_raidp<R: Read + Send + 'static>(
        &self,
        object: ObjectInfo,
        size: u64,
        reader: R,
        options: &PutOptions,
        started: Instant,
    ) -> std::result::Result<PutStats, (ClientError, Vec<u32>)> {
        let (bucket, key, generation) =
            (object.bucket.clone(), object.key.clone(), object.generation);
        match self.write_raidp(&object, size, reader, options).await {
            Ok(()) => {}
            Err((error, nodes)) => {
                if let Err(abort) = self.meta.abort(&bucket, &key, generation).await {
                    tracing::warn!(%abort, bucket, key, generation, "could not abort the RAIDP write; it expires");
                }
                return Err((error, nodes));
            }
        }
        let no_digests = std::collections::BTreeMap::new();
        let commit = match options.commit_terms() {
            Ok(terms) => {
                self.meta.commit_with(&bucket, &key, generation, &no_digests, &terms).await
            }
            Err(error) => Err(error),
        };
        let committed = match commit {
            Ok((committed, _replaced)) => committed,
            Err(error) => {
                // Refused (a precondition, bad attributes) or unanswered: meta keeps nothing
                // unless the commit landed, and then the abort is refused.
                if let Err(abort) = self.meta.abort(&bucket, &key, generation).await {
                    tracing::warn!(%abort, bucket, key, generation, "could not abort the RAIDP write; it expires");
                }
                return Err((error, Vec::new()));
            }
        };
        Ok(PutStats {
            data_bytes: size,
            parity_bytes: size,
            bytes_sent: 2 * size,
            peak_buffer_bytes: PIECE_BYTES.min(size),
            buffer_bound_bytes: PIECE_BYTES,
            okapi_buffer_bytes: 0,
            naive_buffer_bytes: 0,
            units: 0,
            elapsed: started.elapsed(),
            leftover_units: 0,
            spooled_bytes: 0,
            object: committed,
        })
    }

    async fn write_raidp<R: Read + Send + 'static>(
        &self,
        object: &ObjectInfo,
        size: u64,
        reader: R,
        options: &PutOptions,
    ) -> std::result::Result<(), (ClientError, Vec<u32>)> {
        let raidp = object.raidp.as_ref().expect("a RAIDP object");
        // The input is read on a blocking thread, a piece ahead of the writes.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(1);
        let pieces: Vec<(usize, u64, u64)> = raidp
            .extents
            .iter()
            .enumerate()
            .flat_map(|(i, e)| {
                (0..e.bytes.div_ceil(PIECE_BYTES)).map(move |p| {
                    let at = p * PIECE_BYTES;
                    (i, e.offset + at, (e.bytes - at).min(PIECE_BYTES))
                })
            })
            .collect();
        let lengths: Vec<u64> = pieces.iter().map(|p| p.2).collect();
        let feeder = tokio::task::spawn_blocking(move || {
            let mut reader = reader;
            for len in lengths {
                let mut buffer = vec![0u8; len as usize];
                let read = reader.read_exact(&mut buffer).map(|()| Bytes::from(buffer));
                let failed = read.is_err();
                if tx.blocking_send(read).is_err() || failed {
                    return Ok(());
                }
            }
            // The input must end where the object does.
            let mut probe = [0u8; 1];
            match reader.read(&mut probe) {
                Ok(0) => Ok(()),
                Ok(_) => Err(format!("the input holds more than the {size} bytes declared")),
                Err(e) => Err(format!("reading the input failed at its end: {e}")),
            }
        });
        let mut done: std::collections::BTreeMap<(u32, u32), (&ReplicaInfo, Vec<u64>)> =
            Default::default();
        // Up to PIPELINE pieces in flight: pieces of other superchunks go to other disks.
        let mut in_flight = futures_util::stream::FuturesUnordered::new();
        let mut pieces = pieces.into_iter();
        loop {
            let next = if in_flight.len() < PIPELINE { pieces.next() } else { None };
            let Some((index, offset, len)) = next else {
                // Full, or nothing left to send: take a finished piece (none left: done).
                let Some(finished) = futures_util::StreamExt::next(&mut in_flight).await else {
                    break;
                };
                let (seqs, len): (Vec<(&ReplicaInfo, u64)>, u64) = finished?;
                for (replica, seq) in seqs {
                    // Cleared in one batch per replica once every piece is written (each
                    // clear syncs the disk's slots written since the last: a group commit).
                    let entry: &mut (&ReplicaInfo, Vec<u64>) = done
                        .entry((replica.node, replica.disk))
                        .or_insert_with(|| (replica, Vec::new()));
                    entry.1.push(seq);
                }
                if let Some(progress) = &options.progress {
                    progress.fetch_add(len, Ordering::Relaxed);
                }
                continue;
            };
            let extent = &raidp.extents[index];
            let bytes = match rx.recv().await {
                Some(Ok(bytes)) => bytes,
                Some(Err(e)) => {
                    return Err((
                        ClientError::Io {
                            what: format!("reading the input ({size} bytes declared)"),
                            source: e,
                        },
                        Vec::new(),
                    ))
                }
                None => {
                    return Err((
                        ClientError::Invalid("the input reader stopped".into()),
                        Vec::new(),
                    ))
                }
            };
            debug_assert_eq!(bytes.len() as u64, len);
            in_flight.push(self.write_piece(
                extent,
                offset,
                len,
                bytes,
                raidp.superchunk_bytes,
                raidp.lstors,
            ));
        }
        let clears = done.values().map(|(replica, seqs)| async move {
            for batch in seqs.chunks(MAX_CLEAR_SEQS) {
                self.nodes.raidp_clear(replica, batch).await?;
            }
            Ok::<(), NodeFailure>(())
        });
        for (cleared, (node, disk)) in
            futures_util::future::join_all(clears).await.into_iter().zip(done.keys())
        {
            if let Err(error) = cleared {
                // The bytes are on both replicas: the records left pending are settled later.
                tracing::warn!(%error, node, disk, "could not clear RAIDP journal records");
            }
        }
        match feeder.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err((ClientError::Invalid(message), Vec::new())),
            Err(join) => {
                Err((ClientError::Invalid(format!("the input reader failed: {join}")), Vec::new()))
            }
        }
    }

    /// One piece to both replicas of its superchunk: their journal records, or the error
    /// naming the first replica that failed and the nodes at fault.
    #[allow(clippy::type_complexity)]
    async fn write_piece<'a>(
        &self,
        extent: &'a RaidpExtentInfo,
        offset: u64,
        len: u64,
        bytes: Bytes,
        superchunk_bytes: u64,
        lstors: usize,
    ) -> std::result::Result<(Vec<(&'a ReplicaInfo, u64)>, u64), (ClientError, Vec<u32>)> {
        let writes = extent.replicas.iter().map(|replica| {
            let bytes = bytes.clone();
            async move {
                self.nodes
                    .raidp_write(replica, extent.slot, offset, superchunk_bytes, lstors, bytes)
                    .await
            }
        });
        let results = futures_util::future::join_all(writes).await;
        let mut seqs = Vec::new();
        let mut failed = Vec::new();
        let mut first_error = None;
        for (result, replica) in results.into_iter().zip(&extent.replicas) {
            match result {
                Ok(seq) => seqs.push((replica, seq)),
                Err(failure) => {
                    if matches!(failure.kind, FailureKind::Unreachable | FailureKind::Other) {
                        failed.push(replica.node);
                    }
                    first_error.get_or_insert_with(|| replica_error(extent, replica, failure));
                }
            }
        }
        match first_error {
            Some(error) => Err((error, failed)),
            None => Ok((seqs, len)),
        }
    }

    /// Bytes `[start, start + len)` of a RAIDP object to `out`.
    pub(crate) async fn get_raidp<W: Write>(
        &self,
        object: &ObjectInfo,
        start: u64,
        len: u64,
        out: &mut W,
        progress: Option<&std::sync::atomic::AtomicU64>,
    ) -> Result<GetStats> {
        let started = Instant::now();
        let raidp = object.raidp.as_ref().expect("a RAIDP object");
        let mut stats = GetStats::default();
        let mut extent_start = 0u64;
        let end = start + len;
        let mut turn = object.generation as usize;
        for extent in &raidp.extents {
            let extent_end = extent_start + extent.bytes;
            let from = start.max(extent_start);
            let to = end.min(extent_end);
            let mut at = from;
            while at < to {
                let piece = (to - at).min(PIECE_BYTES);
                let offset = extent.offset + (at - extent_start);
                turn += 1;
                let bytes = self.read_either(extent, offset, piece, turn, &mut stats).await?;
                out.write_all(&bytes).map_err(|source| ClientError::Io {
                    what: "writing the object out".into(),
                    source,
                })?;
                if let Some(progress) = progress {
                    progress.fetch_add(piece, Ordering::Relaxed);
                }
                stats.bytes += piece;
                stats.bytes_fetched += piece;
                at += piece;
            }
            extent_start = extent_end;
        }
        stats.elapsed = started.elapsed();
        Ok(stats)
    }

    /// A piece from one replica, the other when that one cannot answer.
    async fn read_either(
        &self,
        extent: &RaidpExtentInfo,
        offset: u64,
        len: u64,
        turn: usize,
        stats: &mut GetStats,
    ) -> Result<Bytes> {
        let n = extent.replicas.len().max(1);
        let mut order: Vec<&ReplicaInfo> =
            (0..extent.replicas.len()).map(|i| &extent.replicas[(turn + i) % n]).collect();
        // Replicas meta calls up first.
        order.sort_by_key(|r| !r.is_up());
        let mut errors = Vec::new();
        for replica in order {
            match self.nodes.raidp_read(replica, extent.slot, offset, len).await {
                Ok(bytes) => return Ok(bytes),
                Err(failure) => {
                    stats.degraded_units.push((
                        format!(
                            "superchunk {} on node {} disk {}",
                            extent.superchunk, replica.node, replica.disk
                        ),
                        failure.cause.clone(),
                    ));
                    errors.push(replica_error(extent, replica, failure).to_string());
                }
            }
        }
        Err(ClientError::Invalid(format!(
            "no replica of superchunk {} could be read ({} bytes at {offset} of slot {}): {}",
            extent.superchunk,
            len,
            extent.slot,
            errors.join("; ")
        )))
    }
}

/// A disk as meta's RAIDP plans name it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct PlanDisk {
    pub node: u32,
    pub disk: u32,
    #[serde(default)]
    pub endpoint: Option<String>,
}

impl PlanDisk {
    fn replica(&self) -> ReplicaInfo {
        ReplicaInfo {
            node: self.node,
            disk: self.disk,
            endpoint: self.endpoint.clone(),
            state: "up".into(),
        }
    }
}

#[derive(Debug, Clone, serde::Deserialize)]
struct PlannedTransfer {
    superchunk: u64,
    slot: u32,
    bytes: u64,
    from: PlanDisk,
    to: PlanDisk,
}

#[derive(Debug, Clone, serde::Deserialize)]
struct RebuildSource {
    slot: u32,
    superchunk: u64,
    disk: PlanDisk,
}

#[derive(Debug, Clone, serde::Deserialize)]
struct RebuildVia {
    via: PlanDisk,
    sources: Vec<RebuildSource>,
}

#[derive(Debug, Clone, serde::Deserialize)]
struct LostSuperchunk {
    superchunk: u64,
    slot: u32,
    bytes: u64,
    via: Vec<RebuildVia>,
    onto: Option<Vec<PlanDisk>>,
}

#[derive(Debug, Clone, serde::Deserialize)]
struct LostInPair {
    slot: u32,
    superchunk: u64,
    bytes: u64,
}

/// Two lost superchunks of one failed disk with P+Q Lstors, rebuilt together.
#[derive(Debug, Clone, serde::Deserialize)]
struct LostPair {
    via: PlanDisk,
    lost: Vec<LostInPair>,
    sources: Vec<RebuildSource>,
    onto: Vec<Vec<PlanDisk>>,
}

#[derive(Debug, Clone, serde::Deserialize)]
struct Plan {
    #[serde(default)]
    pairs: Vec<LostPair>,
    #[serde(default)]
    superchunk_bytes: u64,
    #[serde(default)]
    lstors: usize,
    rounds: Vec<Vec<PlannedTransfer>>,
    unplaced: Vec<u64>,
    lost: Vec<LostSuperchunk>,
}

/// What [`Client::raidp_recover`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RecoveryReport {
    /// `matching` or `naive`.
    pub receivers: String,
    /// Lost superchunks rebuilt from an Lstor and their mirrors.
    pub rebuilt: Vec<u64>,
    /// Seconds the rebuilds took.
    pub rebuild_seconds: f64,
    /// Rounds of transfers run (each round's transfers in parallel).
    pub rounds: usize,
    /// Superchunks re-mirrored.
    pub transfers: usize,
    /// Bytes copied by transfers and written by rebuilds (each counted once).
    pub bytes: u64,
    /// Seconds the transfers took.
    pub transfer_seconds: f64,
    /// At-risk superchunks no disk could take now (they wait for a replaced disk).
    pub unplaced: Vec<u64>,
    /// Lost superchunks that could not be rebuilt, with why.
    pub unrebuilt: Vec<(u64, String)>,
}

impl Client {
    /// One recovery pass of the RAIDP tier: every lost superchunk rebuilt (through a failed
    /// disk's Lstor XOR its other superchunks' mirrors; with two Lstors able to, windows are
    /// split between them and run in parallel) onto the pair meta chose, then every at-risk
    /// superchunk re-mirrored from its survivor, round by round, to the receivers `receivers`
    /// (`matching` or `naive`) picks. Each finished piece of work is recorded in meta's map.
    pub async fn raidp_recover(&self, receivers: &str, seed: u64) -> Result<RecoveryReport> {
        let path = format!("/v1/raidp/plan?receivers={receivers}&seed={seed}");
        let fetch = || async {
            let value = self.meta.get_json(&path).await?;
            serde_json::from_value::<Plan>(value)
                .map_err(|e| ClientError::Invalid(format!("meta sent a bad RAIDP plan: {e}")))
        };
        let mut plan = fetch().await?;
        let mut report = RecoveryReport { receivers: receivers.into(), ..Default::default() };
        let started = Instant::now();
        // One rebuild at a time, planned again after each: a rebuilt superchunk's new pair
        // shares it now, and it may be the mirror another rebuild needs.
        let mut failed: Vec<(u64, String)> = Vec::new();
        loop {
            let tried = |id: &u64| failed.iter().any(|(f, _)| f == id);
            if let Some(lost) =
                plan.lost.iter().find(|l| !l.via.is_empty() && !tried(&l.superchunk))
            {
                match self.rebuild_lost(&plan, lost).await {
                    Ok(bytes) => {
                        report.rebuilt.push(lost.superchunk);
                        report.bytes += bytes;
                    }
                    Err(e) => failed.push((lost.superchunk, e.to_string())),
                }
            } else if let Some(pair) =
                plan.pairs.iter().find(|p| p.lost.iter().all(|l| !tried(&l.superchunk)))
            {
                match self.rebuild_pair(&plan, pair).await {
                    Ok(bytes) => {
                        report.rebuilt.extend(pair.lost.iter().map(|l| l.superchunk));
                        report.bytes += bytes;
                    }
                    Err(e) => {
                        failed.extend(pair.lost.iter().map(|l| (l.superchunk, e.to_string())))
                    }
                }
            } else {
                break;
            }
            plan = fetch().await?;
        }
        for lost in &plan.lost {
            let why =
                failed.iter().find(|(id, _)| *id == lost.superchunk).map(|(_, why)| why.clone());
            let why = why.unwrap_or_else(|| {
                "no failed disk's Lstor can rebuild it (its other superchunks are lost too)".into()
            });
            report.unrebuilt.push((lost.superchunk, why));
        }
        report.rebuild_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        for round in &plan.rounds {
            let copies = round.iter().map(|t| self.transfer(&plan, t));
            let mut first_error = None;
            for (done, t) in futures_util::future::join_all(copies).await.into_iter().zip(round) {
                match done {
                    Ok(()) => {
                        report.transfers += 1;
                        report.bytes += t.bytes;
                    }
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            report.rounds += 1;
            if let Some(error) = first_error {
                return Err(error);
            }
        }
        report.transfer_seconds = started.elapsed().as_secs_f64();
        report.unplaced = plan.unplaced.clone();
        Ok(report)
    }

    /// Copies an at-risk superchunk's filled bytes from its survivor to its receiver, then
    /// records the transfer in meta.
    async fn transfer(&self, plan: &Plan, t: &PlannedTransfer) -> Result<()> {
        let (from, to) = (t.from.replica(), t.to.replica());
        let mut at = 0;
        while at < t.bytes {
            let len = (t.bytes - at).min(PIECE_BYTES);
            let extent = RaidpExtentInfo {
                superchunk: t.superchunk,
                slot: t.slot,
                offset: at,
                bytes: len,
                replicas: vec![from.clone(), to.clone()],
            };
            let bytes = self
                .nodes
                .raidp_read(&from, t.slot, at, len)
                .await
                .map_err(|f| replica_error(&extent, &from, f))?;
            self.write_and_clear(&extent, &[&to], at, bytes, plan.superchunk_bytes, plan.lstors)
                .await?;
            at += len;
        }
        let body = json!({
            "superchunk": t.superchunk,
            "from": { "node": t.from.node, "disk": t.from.disk },
            "to": { "node": t.to.node, "disk": t.to.disk },
        });
        self.meta.post_json("/v1/raidp/recovered", body).await?;
        Ok(())
    }

    /// Writes one piece to `replicas` through their Lstors and clears their records.
    async fn write_and_clear(
        &self,
        extent: &RaidpExtentInfo,
        replicas: &[&ReplicaInfo],
        offset: u64,
        bytes: Bytes,
        superchunk_bytes: u64,
        lstors: usize,
    ) -> Result<()> {
        let writes = replicas.iter().map(|replica| {
            let bytes = bytes.clone();
            async move {
                let seq = self
                    .nodes
                    .raidp_write(replica, extent.slot, offset, superchunk_bytes, lstors, bytes)
                    .await
                    .map_err(|f| replica_error(extent, replica, f))?;
                Ok::<_, ClientError>((*replica, seq))
            }
        });
        let written = futures_util::future::try_join_all(writes).await?;
        for (replica, seq) in written {
            if let Err(f) = self.nodes.raidp_clear(replica, &[seq]).await {
                tracing::warn!(error = %f, "could not clear a RAIDP journal record");
            }
        }
        Ok(())
    }

    /// Rebuilds a lost superchunk onto the pair meta chose; returns the bytes written (once).
    async fn rebuild_lost(&self, plan: &Plan, lost: &LostSuperchunk) -> Result<u64> {
        let onto = match &lost.onto {
            Some(pair) if pair.len() == 2 => [pair[0].replica(), pair[1].replica()],
            _ => {
                return Err(ClientError::Invalid(format!(
                    "no pair of disks can take superchunk {} at slot {} now (replace a disk)",
                    lost.superchunk, lost.slot
                )))
            }
        };
        if lost.via.is_empty() {
            return Err(ClientError::Invalid(format!(
                "superchunk {} is lost and no failed disk's Lstor can rebuild it (a third \
                 failure took a mirror it needs)",
                lost.superchunk
            )));
        }
        let windows: Vec<u64> = (0..lost.bytes.div_ceil(PIECE_BYTES)).collect();
        // Windows alternate between the Lstors able to rebuild, a window per Lstor at a time.
        let vias = lost.via.len() as u64;
        let onto = &onto;
        for batch in windows.chunks(lost.via.len()) {
            let pieces = batch.iter().map(|&w| {
                let via = &lost.via[(w % vias) as usize];
                let at = w * PIECE_BYTES;
                let len = (lost.bytes - at).min(PIECE_BYTES);
                async move {
                    let bytes = self.rebuild_window(lost, via, at, len).await?;
                    let extent = RaidpExtentInfo {
                        superchunk: lost.superchunk,
                        slot: lost.slot,
                        offset: at,
                        bytes: len,
                        replicas: onto.to_vec(),
                    };
                    self.write_and_clear(
                        &extent,
                        &[&onto[0], &onto[1]],
                        at,
                        bytes,
                        plan.superchunk_bytes,
                        plan.lstors,
                    )
                    .await
                }
            });
            futures_util::future::try_join_all(pieces).await?;
        }
        let body = json!({
            "superchunk": lost.superchunk,
            "replicas": [
                { "node": onto[0].node, "disk": onto[0].disk },
                { "node": onto[1].node, "disk": onto[1].disk },
            ],
        });
        self.meta.post_json("/v1/raidp/recovered", body).await?;
        Ok(lost.bytes)
    }

    /// Parity `index` of a failed disk's Lstor, bytes `[at, at + len)`.
    async fn read_parity(
        &self,
        via: &PlanDisk,
        index: usize,
        at: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        let parity = via.replica();
        let url_base = base(&parity).map_err(|f| ClientError::Invalid(f.cause))?;
        let url = format!(
            "{url_base}/v1/disks/{}/raidp/parity/{index}?offset={at}&len={len}",
            parity.disk
        );
        let named = |cause: String| {
            ClientError::Invalid(format!(
                "the Lstor of node {} disk {}: {cause}",
                parity.node, parity.disk
            ))
        };
        let response = self
            .nodes
            .send(parity.node, self.nodes.http().get(url))
            .await
            .map_err(|f| named(f.cause))?;
        if !response.status().is_success() {
            return Err(named(failure_of(response).await.cause));
        }
        let bytes = response.bytes().await.map_err(|e| named(e.to_string()))?;
        if bytes.len() as u64 != len {
            return Err(named(format!("sent {} of {len} bytes", bytes.len())));
        }
        Ok(bytes.to_vec())
    }

    /// Rebuilds two lost superchunks of one failed disk at once from its P+Q Lstor: P and Q
    /// with every other superchunk it held folded out leave the two, which `solve_two`
    /// separates. Returns the bytes written (once).
    async fn rebuild_pair(&self, plan: &Plan, pair: &LostPair) -> Result<u64> {
        if pair.lost.len() != 2 || pair.onto.len() != 2 || pair.onto.iter().any(|o| o.len() != 2) {
            return Err(ClientError::Invalid("meta sent a malformed pair rebuild".into()));
        }
        let len_of = pair.lost.iter().map(|l| l.bytes).max().unwrap_or(0);
        let onto: Vec<[ReplicaInfo; 2]> =
            pair.onto.iter().map(|o| [o[0].replica(), o[1].replica()]).collect();
        let mut at = 0;
        while at < len_of {
            let len = (len_of - at).min(PIECE_BYTES);
            let mut p = self.read_parity(&pair.via, 0, at, len).await?;
            let mut q = self.read_parity(&pair.via, 1, at, len).await?;
            let reads = pair.sources.iter().map(|source| async move {
                let replica = source.disk.replica();
                let read = self.nodes.raidp_read(&replica, source.slot, at, len).await;
                let bytes = read.map_err(|f| {
                    ClientError::Invalid(format!(
                        "superchunk {}'s mirror on node {} disk {}: {f}",
                        source.superchunk, replica.node, replica.disk
                    ))
                })?;
                Ok::<_, ClientError>((source.slot, bytes))
            });
            for (slot, bytes) in futures_util::future::try_join_all(reads).await? {
                weft_gf::mul_add_region(weft_gf::pq::coefficient(0, slot), &bytes, &mut p);
                weft_gf::mul_add_region(weft_gf::pq::coefficient(1, slot), &bytes, &mut q);
            }
            let (x, y) = weft_gf::pq::solve_two(&p, &q, pair.lost[0].slot, pair.lost[1].slot);
            for ((lost, bytes), onto) in pair.lost.iter().zip([x, y]).zip(&onto) {
                if at >= lost.bytes {
                    continue;
                }
                let keep = (lost.bytes - at).min(len) as usize;
                let extent = RaidpExtentInfo {
                    superchunk: lost.superchunk,
                    slot: lost.slot,
                    offset: at,
                    bytes: keep as u64,
                    replicas: onto.to_vec(),
                };
                let piece = Bytes::from(bytes).slice(..keep);
                let (superchunk_bytes, lstors) = (plan.superchunk_bytes, plan.lstors);
                self.write_and_clear(
                    &extent,
                    &[&onto[0], &onto[1]],
                    at,
                    piece,
                    superchunk_bytes,
                    lstors,
                )
                .await?;
            }
            at += len;
        }
        for (lost, onto) in pair.lost.iter().zip(&onto) {
            let body = json!({
                "superchunk": lost.superchunk,
                "replicas": [
                    { "node": onto[0].node, "disk": onto[0].disk },
                    { "node": onto[1].node, "disk": onto[1].disk },
                ],
            });
            self.meta.post_json("/v1/raidp/recovered", body).await?;
        }
        Ok(pair.lost.iter().map(|l| l.bytes).sum())
    }

    /// Bytes `[at, at + len)` of a lost superchunk: the failed disk's XOR parity there, XOR
    /// the same bytes of every other superchunk it held (read from their mirrors).
    async fn rebuild_window(
        &self,
        lost: &LostSuperchunk,
        via: &RebuildVia,
        at: u64,
        len: u64,
    ) -> Result<Bytes> {
        let mut acc = self.read_parity(&via.via, 0, at, len).await?;
        let reads = via.sources.iter().map(|source| async move {
            let replica = source.disk.replica();
            self.nodes.raidp_read(&replica, source.slot, at, len).await.map_err(|f| {
                ClientError::Invalid(format!(
                    "superchunk {}'s mirror on node {} disk {} (rebuilding superchunk {}): {f}",
                    source.superchunk, replica.node, replica.disk, lost.superchunk
                ))
            })
        });
        for bytes in futures_util::future::try_join_all(reads).await? {
            for (a, b) in acc.iter_mut().zip(bytes.iter()) {
                *a ^= b;
            }
        }
        Ok(Bytes::from(acc))
    }
}

/// The crc32c of `len` zero bytes: a slot never written, as its partner's crc must read.
fn zeros_crc(len: u64) -> u32 {
    let zeros = vec![0u8; 1 << 20];
    let mut crc = 0;
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        crc = crc32c::crc32c_append(crc, &zeros[..n]);
        left -= n as u64;
    }
    crc
}

/// A map disk as `GET /v1/raidp` lists it.
#[derive(Debug, Clone, serde::Deserialize)]
struct MapDisk {
    node: u32,
    disk: u32,
    failed: bool,
    state: String,
    endpoint: Option<String>,
    superchunks: Vec<MapHeld>,
}

#[derive(Debug, Clone, serde::Deserialize)]
struct MapHeld {
    slot: u32,
    superchunk: u64,
}

impl MapDisk {
    fn replica(&self) -> ReplicaInfo {
        ReplicaInfo {
            node: self.node,
            disk: self.disk,
            endpoint: self.endpoint.clone(),
            state: self.state.clone(),
        }
    }
}

impl Client {
    /// Settles journal records left pending by crashes: a record pending on a disk in two
    /// listings `settle` apart (a write in flight clears its records within moments) has its
    /// bytes — already true on that disk — copied to the superchunk's partner replica through
    /// its Lstor, then both records are cleared. A record whose partner is gone (the
    /// superchunk is at risk) is cleared: recovery copies this disk's bytes. Returns how many
    /// records were settled. Assumes no new write of the same bytes is in flight (true for
    /// records a crash left behind).
    pub async fn raidp_resolve(&self, settle: std::time::Duration) -> Result<usize> {
        let map = self.meta.get_json("/v1/raidp").await?;
        let disks: Vec<MapDisk> = serde_json::from_value(map["disks"].clone())
            .map_err(|e| ClientError::Invalid(format!("meta sent a bad RAIDP map: {e}")))?;
        let superchunk_bytes = map["superchunk_bytes"].as_u64().unwrap_or(0);
        let lstors = map["lstors"].as_u64().unwrap_or(1) as usize;
        let live: Vec<&MapDisk> = disks.iter().filter(|d| !d.failed && d.state == "up").collect();
        let pending = |disk: &MapDisk| {
            let disk = disk.clone();
            async move {
                let endpoint = disk.endpoint.clone().unwrap_or_default();
                let listed = self
                    .nodes
                    .disk_json(disk.node, &endpoint, disk.disk, "raidp/pending", None)
                    .await;
                let records: Vec<(u64, u32, u64, u64)> = match listed {
                    Ok(value) => value["pending"]
                        .as_array()
                        .map(|records| {
                            records
                                .iter()
                                .filter_map(|r| {
                                    Some((
                                        r["seq"].as_u64()?,
                                        r["slot"].as_u64()? as u32,
                                        r["offset"].as_u64()?,
                                        r["bytes"].as_u64()?,
                                    ))
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    // An Lstor that is refused or unformatted has nothing pending.
                    Err(_) => Vec::new(),
                };
                records
            }
        };
        let first = futures_util::future::join_all(live.iter().map(|d| pending(d))).await;
        if first.iter().all(Vec::is_empty) {
            return Ok(0);
        }
        tokio::time::sleep(settle).await;
        let second = futures_util::future::join_all(live.iter().map(|d| pending(d))).await;
        let mut settled = 0;
        for ((disk, before), now) in live.iter().zip(first).zip(second) {
            let replica = disk.replica();
            for record in now.iter().filter(|r| before.contains(r)) {
                let (seq, slot, offset, len) = *record;
                let superchunk =
                    disk.superchunks.iter().find(|h| h.slot == slot).map(|h| h.superchunk);
                let partner = superchunk.and_then(|id| {
                    disks.iter().find(|d| {
                        (d.node, d.disk) != (disk.node, disk.disk)
                            && !d.failed
                            && d.superchunks.iter().any(|h| h.superchunk == id && h.slot == slot)
                    })
                });
                if let Some(partner) = partner.filter(|p| p.state == "up") {
                    let extent = RaidpExtentInfo {
                        superchunk: superchunk.unwrap_or_default(),
                        slot,
                        offset,
                        bytes: len,
                        replicas: vec![replica.clone(), partner.replica()],
                    };
                    let bytes = self
                        .nodes
                        .raidp_read(&replica, slot, offset, len)
                        .await
                        .map_err(|f| replica_error(&extent, &replica, f))?;
                    let partner = partner.replica();
                    self.write_and_clear(
                        &extent,
                        &[&partner],
                        offset,
                        bytes,
                        superchunk_bytes,
                        lstors,
                    )
                    .await?;
                }
                self.nodes.raidp_clear(&replica, &[seq]).await.map_err(|f| {
                    ClientError::Invalid(format!(
                        "clearing record {seq} on node {} disk {}: {f}",
                        disk.node, disk.disk
                    ))
                })?;
                settled += 1;
            }
        }
        Ok(settled)
    }

    /// The RAIDP tier's scrub: every up map disk folds its slots and compares them with its
    /// Lstor, and the two replicas of every superchunk must hold the same bytes (their
    /// slots' crc32c over the whole superchunk). `{"clean": true}` only when every Lstor
    /// matches, no slot is corrupt, every mirror pair agrees, every disk answered and no
    /// superchunk is lost.
    pub async fn raidp_verify(&self) -> Result<Value> {
        let map = self.meta.get_json("/v1/raidp").await?;
        if map["exists"] != true {
            return Ok(json!({ "clean": true, "exists": false, "disks": [], "superchunks": 0 }));
        }
        let disks: Vec<MapDisk> = serde_json::from_value(map["disks"].clone())
            .map_err(|e| ClientError::Invalid(format!("meta sent a bad RAIDP map: {e}")))?;
        let superchunk_bytes = map["superchunk_bytes"].as_u64().unwrap_or(0);
        let checks = disks.iter().filter(|d| !d.failed).map(|disk| async move {
            let endpoint = disk.endpoint.clone().unwrap_or_default();
            let answer = self
                .nodes
                .disk_json(disk.node, &endpoint, disk.disk, "raidp/verify", Some(json!({})))
                .await;
            (disk, answer)
        });
        let mut crcs: std::collections::BTreeMap<(u32, u32, u32), u32> = Default::default();
        let mut reports = Vec::new();
        let mut unreachable = Vec::new();
        let mut clean = true;
        for (disk, answer) in futures_util::future::join_all(checks).await {
            match answer {
                Ok(report) => {
                    // An Lstor never formatted holds nothing: clean when the disk holds nothing.
                    let disk_clean = report["clean"] == true;
                    clean &= disk_clean;
                    for entry in report["slot_crcs"].as_array().into_iter().flatten() {
                        if let (Some(slot), Some(crc)) =
                            (entry["slot"].as_u64(), entry["crc32c"].as_u64())
                        {
                            crcs.insert((disk.node, disk.disk, slot as u32), crc as u32);
                        }
                    }
                    reports.push(json!({
                        "node": disk.node,
                        "disk": disk.disk,
                        "clean": disk_clean,
                        "state": report["state"],
                        "slots": report["slots"],
                        "parity_matches": report["parity_matches"],
                        "corrupt_slots": report["corrupt_slots"],
                        "reason": report["reason"],
                    }));
                }
                Err(failure) => {
                    clean = false;
                    unreachable.push(format!("node {} disk {}: {failure}", disk.node, disk.disk));
                    reports.push(json!({
                        "node": disk.node,
                        "disk": disk.disk,
                        "clean": false,
                        "error": failure.cause,
                    }));
                }
            }
        }
        let zeros = zeros_crc(superchunk_bytes);
        let mut mismatches = Vec::new();
        let mut checked = 0;
        for superchunk in map["superchunks"].as_array().into_iter().flatten() {
            let replicas = superchunk["replicas"].as_array().cloned().unwrap_or_default();
            let (Some(id), Some(slot)) = (superchunk["id"].as_u64(), superchunk["slot"].as_u64())
            else {
                continue;
            };
            if replicas.len() != 2 {
                continue;
            }
            let crc_of = |r: &Value| {
                let key = (r["node"].as_u64()? as u32, r["disk"].as_u64()? as u32, slot as u32);
                Some(crcs.get(&key).copied().unwrap_or(zeros))
            };
            checked += 1;
            if crc_of(&replicas[0]) != crc_of(&replicas[1]) {
                mismatches.push(id);
            }
        }
        let lost = map["lost"].as_array().cloned().unwrap_or_default();
        clean &= mismatches.is_empty() && lost.is_empty();
        Ok(json!({
            "clean": clean,
            "exists": true,
            "disks": reports,
            "superchunks": checked,
            "mirror_mismatches": mismatches,
            "at_risk": map["at_risk"],
            "lost": lost,
            "unreachable": unreachable,
        }))
    }
}

/// What [`Client::raidp_update`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct UpdateStats {
    /// Bytes of the object replaced.
    pub bytes: u64,
    /// Bytes sent to nodes (two replicas each).
    pub bytes_sent: u64,
    /// Writes (pieces) made, each to both replicas.
    pub pieces: usize,
    pub elapsed_seconds: f64,
}

impl Client {
    /// Replaces bytes `[offset, offset + len)` of RAIDP object (bucket, key) in place with
    /// `len` bytes of `reader`: each piece goes to both replicas of its superchunk, whose
    /// nodes read the old bytes to update their parity (read-modify-write). Refused for a
    /// striped object (immutable: put it again), past the object's end, and while a
    /// superchunk it touches has one replica (at risk: the Lstor rebuild of a second failure
    /// needs its bytes as they were; retry once `weft raidp recover` re-mirrored it).
    pub async fn raidp_update<R: Read + Send + 'static>(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        len: u64,
        reader: R,
    ) -> Result<UpdateStats> {
        let started = Instant::now();
        // The lease first (compaction leaves the object's superchunks alone while it lasts),
        // then the object: the generation the lease was granted for.
        let lease = self
            .meta
            .post_json("/v1/raidp/update", json!({ "bucket": bucket, "key": key }))
            .await
            .map_err(|e| match e {
                ClientError::Meta { status: 409, message, .. } => ClientError::Invalid(message),
                other => other,
            })?;
        let updated = self.update_leased(bucket, key, offset, len, reader, &lease, started).await;
        // Done, written or not: compaction may have the superchunks again (a lapsed lease
        // does the same).
        let done = json!({ "bucket": bucket, "key": key, "done": lease["lease"] });
        if let Err(e) = self.meta.post_json("/v1/raidp/update", done).await {
            tracing::warn!(error = %e, bucket, key, "could not end the update's lease; it lapses");
        }
        updated
    }

    /// [`Client::raidp_update`] under `lease` (meta's answer granting it).
    #[allow(clippy::too_many_arguments)]
    async fn update_leased<R: Read + Send + 'static>(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        len: u64,
        reader: R,
        lease: &Value,
        started: Instant,
    ) -> Result<UpdateStats> {
        let lease_ms = lease["lease_ms"].as_u64().unwrap_or(0);
        let object = self.meta.get_object(bucket, key).await?;
        if Some(object.generation) != lease["generation"].as_u64() {
            return Err(ClientError::Invalid(format!(
                "{bucket}/{key} was replaced while the update began: nothing was written; \
                 retry"
            )));
        }
        let Some(raidp) = &object.raidp else {
            return Err(ClientError::Invalid(format!(
                "{bucket}/{key} is erasure-coded ({}): its units are immutable; in-place \
                 updates are for RAIDP objects (put the object again instead)",
                object.layout.code
            )));
        };
        if offset.checked_add(len).is_none_or(|end| end > object.size) {
            return Err(ClientError::Invalid(format!(
                "{len} bytes at offset {offset} run past the end of {bucket}/{key} ({} bytes); \
                 an update replaces bytes, it does not grow the object",
                object.size
            )));
        }
        // The pieces: (extent, offset in its superchunk, length), in object order.
        let mut pieces = Vec::new();
        let mut extent_start = 0u64;
        for extent in &raidp.extents {
            let from = offset.max(extent_start);
            let to = (offset + len).min(extent_start + extent.bytes);
            let mut at = from;
            while at < to {
                let piece = (to - at).min(PIECE_BYTES);
                pieces.push((extent, extent.offset + (at - extent_start), piece));
                at += piece;
            }
            extent_start += extent.bytes;
        }
        if let Some((extent, ..)) = pieces.iter().find(|(e, ..)| e.replicas.len() < 2) {
            return Err(ClientError::Invalid(format!(
                "superchunk {} has one replica left (a disk failed): updates to it wait until \
                 it is re-mirrored (`weft raidp recover`)",
                extent.superchunk
            )));
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(1);
        let lengths: Vec<u64> = pieces.iter().map(|p| p.2).collect();
        let feeder = tokio::task::spawn_blocking(move || {
            let mut reader = reader;
            for len in lengths {
                let mut buffer = vec![0u8; len as usize];
                let read = reader.read_exact(&mut buffer).map(|()| Bytes::from(buffer));
                let failed = read.is_err();
                if tx.blocking_send(read).is_err() || failed {
                    return;
                }
            }
        });
        let mut stats = UpdateStats::default();
        for (extent, at, piece) in &pieces {
            let bytes = match rx.recv().await {
                Some(Ok(bytes)) => bytes,
                Some(Err(source)) => {
                    return Err(ClientError::Io { what: "reading the update".into(), source })
                }
                None => return Err(ClientError::Invalid("the update's reader stopped".into())),
            };
            if started.elapsed().as_millis() as u64 >= lease_ms {
                return Err(ClientError::Invalid(format!(
                    "the update outlasted its lease ({} s): {} of {len} bytes were replaced; \
                     run it again",
                    lease_ms / 1000,
                    stats.bytes
                )));
            }
            let replicas: Vec<&ReplicaInfo> = extent.replicas.iter().collect();
            self.write_and_clear(
                extent,
                &replicas,
                *at,
                bytes,
                raidp.superchunk_bytes,
                raidp.lstors,
            )
            .await?;
            stats.bytes += piece;
            stats.bytes_sent += piece * replicas.len() as u64;
            stats.pieces += 1;
        }
        let _ = feeder.await;
        stats.elapsed_seconds = started.elapsed().as_secs_f64();
        Ok(stats)
    }
}

/// What [`Client::raidp_compact`] did (or, dry, would do).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CompactReport {
    pub dry_run: bool,
    /// Superchunks emptied (both replicas trimmed): they take appends again.
    pub reclaimed: Vec<Value>,
    /// Bytes appended to them (now free in each of their two replicas).
    pub freed_bytes: u64,
    /// Bytes the nodes folded out of their Lstors (both replicas).
    pub trimmed_bytes: u64,
    /// Superchunks with dead bytes left as they are, and why (live bytes in them: their
    /// objects must be rewritten or deleted first; an update in flight; a replica down).
    pub skipped: Vec<Value>,
    /// Dead and live bytes of the tier before.
    pub dead_bytes: u64,
    pub live_bytes: u64,
    pub elapsed_seconds: f64,
}

impl Client {
    /// Reclaims the RAIDP tier's wholly dead superchunks (every object in them deleted or
    /// overwritten): meta marks them so no append goes there, each replica's node folds
    /// the slot's bytes out of its Lstor parity (read-modify-write) and removes it, then
    /// meta opens them for appends again. `dry_run` only reports. A compaction stopped
    /// midway leaves its superchunks marked; the next one finishes them.
    pub async fn raidp_compact(&self, dry_run: bool) -> Result<CompactReport> {
        let started = Instant::now();
        let usage = self.meta.get_json("/v1/raidp/usage").await?;
        let mut report = CompactReport {
            dry_run,
            dead_bytes: usage["dead_bytes"].as_u64().unwrap_or(0),
            live_bytes: usage["live_bytes"].as_u64().unwrap_or(0),
            ..CompactReport::default()
        };
        // meta decides what can go (dry: the same plan, nothing marked).
        let plan = self.meta.post_json("/v1/raidp/reclaim", json!({ "dry_run": dry_run })).await?;
        report.skipped = plan["skipped"].as_array().cloned().unwrap_or_default();
        if dry_run {
            report.reclaimed = plan["reclaim"].as_array().cloned().unwrap_or_default();
            report.freed_bytes =
                report.reclaimed.iter().filter_map(|r| r["filled_bytes"].as_u64()).sum();
            report.elapsed_seconds = started.elapsed().as_secs_f64();
            return Ok(report);
        }
        let mut done = Vec::new();
        for entry in plan["reclaim"].as_array().into_iter().flatten() {
            let id = entry["superchunk"].as_u64().unwrap_or(u64::MAX);
            let slot = entry["slot"].as_u64().unwrap_or(0) as u32;
            let replicas: Vec<ReplicaInfo> = entry["replicas"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| ReplicaInfo {
                    node: r["node"].as_u64().unwrap_or(0) as u32,
                    disk: r["disk"].as_u64().unwrap_or(0) as u32,
                    endpoint: r["endpoint"].as_str().map(str::to_owned),
                    state: "up".into(),
                })
                .collect();
            let trims = replicas.iter().map(|r| self.nodes.raidp_trim(r, slot));
            let mut failed = None;
            for (result, replica) in
                futures_util::future::join_all(trims).await.into_iter().zip(&replicas)
            {
                match result {
                    Ok(bytes) => report.trimmed_bytes += bytes,
                    Err(failure) => {
                        failed.get_or_insert(format!(
                            "trimming slot {slot} on node {} disk {} failed: {}",
                            replica.node, replica.disk, failure.cause
                        ));
                    }
                }
            }
            match failed {
                // Left marked: the next compaction tries it again.
                Some(reason) => report.skipped.push(json!({ "superchunk": id, "reason": reason })),
                None => {
                    report.freed_bytes += entry["filled_bytes"].as_u64().unwrap_or(0);
                    report.reclaimed.push(entry.clone());
                    done.push(id);
                }
            }
        }
        if !done.is_empty() {
            self.meta.post_json("/v1/raidp/reclaimed", json!({ "superchunks": done })).await?;
        }
        report.elapsed_seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }
}
