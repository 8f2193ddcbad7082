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
        let response = self.send(replica.node, request).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
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
        let response = self.send(replica.node, self.http().get(url)).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
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

    /// Clears journal records `seqs` on a replica's disk (their partner has the bytes).
    pub async fn raidp_clear(
        &self,
        replica: &ReplicaInfo,
        seqs: &[u64],
    ) -> std::result::Result<(), NodeFailure> {
        let url = format!("{}/v1/disks/{}/raidp/clear", base(replica)?, replica.disk);
        let request = self.http().post(url).json(&json!({ "seqs": seqs }));
        let response = self.send(replica.node, request).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
        Ok(())
    }

    /// A RAIDP call answering JSON on disk `disk` of node `node` (`GET` when `body` is None):
    /// `raidp` (state), `raidp/pending`, `raidp/verify`.
    pub async fn raidp_json(
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
        let response = self.send(node, request).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
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
        let (committed, _replaced) = self
            .meta
            .commit(&bucket, &key, generation, &no_digests)
            .await
            .map_err(|e| (e, Vec::new()))?;
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
        for (index, offset, len) in pieces {
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
            let writes = extent.replicas.iter().map(|replica| {
                let bytes = bytes.clone();
                async move {
                    self.nodes
                        .raidp_write(
                            replica,
                            extent.slot,
                            offset,
                            raidp.superchunk_bytes,
                            raidp.lstors,
                            bytes,
                        )
                        .await
                        .map_err(|f| (replica, f))
                }
            });
            let results = futures_util::future::join_all(writes).await;
            let mut seqs = Vec::new();
            let mut failed = Vec::new();
            let mut first_error = None;
            for (result, replica) in results.into_iter().zip(&extent.replicas) {
                match result {
                    Ok(seq) => seqs.push((replica, seq)),
                    Err((replica, failure)) => {
                        if matches!(failure.kind, FailureKind::Unreachable | FailureKind::Other) {
                            failed.push(replica.node);
                        }
                        first_error.get_or_insert_with(|| replica_error(extent, replica, failure));
                    }
                }
            }
            if let Some(error) = first_error {
                return Err((error, failed));
            }
            // Both replicas have the piece: their records are done.
            let clears = seqs.iter().map(|(replica, seq)| async move {
                self.nodes
                    .raidp_clear(replica, &[*seq])
                    .await
                    .map_err(|f| replica_error(extent, replica, f))
            });
            for cleared in futures_util::future::join_all(clears).await {
                if let Err(error) = cleared {
                    // The bytes are on both replicas; a record left pending is resolved later.
                    tracing::warn!(%error, "could not clear a RAIDP journal record");
                }
            }
            if let Some(progress) = &options.progress {
                progress.fetch_add(len, Ordering::Relaxed);
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
