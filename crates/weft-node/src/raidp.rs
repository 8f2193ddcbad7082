//! The RAIDP side of a node (docs/node-api.md, "RAIDP"): per disk run with `--lstor PATH`, its
//! superchunk slots and Lstor (`weft_store::raidp`), over HTTP.
//!
//! Invariants:
//! - A disk without `--lstor` has no RAIDP side: every RAIDP route answers 404
//!   `no_lstor` for it.
//! - The Lstor is created by the first RAIDP write, with the superchunk size and parity count
//!   that write names (meta's map fixes them cluster-wide); a later write naming others is
//!   refused (409 `raidp_mismatch`), so a disk never mixes two geometries.
//! - A disk whose Lstor is missing while it holds slots, or corrupt, or another disk's, is
//!   `refused` from start: it takes no RAIDP write (503 `lstor_refused` naming why), and its
//!   heartbeats say so, so meta counts its superchunks at risk. Its slots stay readable.
//! - A slot write carries its bytes' crc32c in the signed request head
//!   (`x-weft-crc32c`): an unsigned body that does not match is refused before anything is
//!   journaled. Bodies and ranges are bounded by [`MAX_SLOT_IO_BYTES`].
//! - A write is acknowledged only after its journal record, slot bytes and parity are
//!   durable (steps 1–3 of the protocol); the record stays pending until a `clear` names its
//!   sequence number, and the journal is emptied whenever nothing is pending after one.
//! - Every store call runs on a blocking task.

use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};

use axum::{
    body::{Body, Bytes},
    extract::{Path, Query, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Deserialize;
use serde_json::{json, Value};
use weft_store::lstor::{Lstor, LstorError};
use weft_store::raidp::{RaidpDisk, RaidpError, WriteStep};
use weft_wire::RaidpReport;

use crate::api::{ApiError, ApiResult};
use crate::Node;

pub use weft_wire::{RAIDP_CRC_HEADER as CRC_HEADER, RAIDP_MAX_IO_BYTES as MAX_SLOT_IO_BYTES};
/// Most sequence numbers one clear may name.
pub const MAX_CLEAR_SEQS: usize = 4096;

/// A crash drill (`WEFT_CRASH_DRILL=DIR`): a file named after a step in `dir` arms it — the
/// first RAIDP write (of any node sharing the directory) to reach that step removes the file
/// and stops its process on the spot, as kill -9 would: no response, no cleanup. Steps:
/// `journal` (record durable), `disk` (slot written), `parity` (parity updated, not yet
/// acknowledged), `ack` (acknowledged; the clear arriving). One shot per file: the restarted
/// node finds none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashDrill {
    pub dir: PathBuf,
}

/// The steps a crash drill can stop at.
pub const CRASH_STEPS: [&str; 4] = ["journal", "disk", "parity", "ack"];

impl CrashDrill {
    fn at(&self, step: &str) {
        // Only the caller that removes the file stops: one crash per arming.
        if std::fs::remove_file(self.dir.join(step)).is_ok() {
            eprintln!("crash drill: stopping at the RAIDP write step {step:?}");
            std::process::abort();
        }
    }
}

fn step_name(step: WriteStep) -> &'static str {
    match step {
        WriteStep::Journaled => "journal",
        WriteStep::DiskWritten => "disk",
        WriteStep::ParityUpdated => "parity",
    }
}

/// What a disk's RAIDP side is now.
#[derive(Debug)]
enum SideState {
    Unformatted,
    Ready(Arc<RaidpDisk>),
    Refused(String),
    /// The disk failed (a drill, `weft disk fail`): no slot is read or written; its Lstor,
    /// when it has one, stays readable for a dual-failure rebuild.
    Failed {
        cause: String,
        lstor: Option<Arc<Lstor>>,
    },
}

/// One disk's RAIDP side.
#[derive(Debug)]
pub(crate) struct RaidpSide {
    disk_dir: PathBuf,
    lstor_dir: PathBuf,
    disk_id: String,
    state: Mutex<SideState>,
    /// Bytes written to slots since the node started.
    slot_bytes_written: std::sync::atomic::AtomicU64,
}

/// The Lstor's identity for disk `index` of node `node_id` (kept in its header: an Lstor
/// moved to another disk is refused).
fn disk_id(node_id: u32, index: usize) -> String {
    format!("node-{node_id}-disk-{index}")
}

impl RaidpSide {
    /// Opens disk `index`'s RAIDP side: its Lstor if it has one (pending journal records are
    /// made true on disk and in the parity; they stay pending until cleared), else
    /// unformatted when the disk holds no slot, else refused.
    pub(crate) fn open(
        node_id: u32,
        index: usize,
        disk_dir: &FsPath,
        lstor_dir: &FsPath,
        failed: Option<String>,
    ) -> Self {
        let disk_id = disk_id(node_id, index);
        if let Some(cause) = failed {
            // No replay: the disk's slots are gone; only the parity is kept.
            let lstor = Lstor::open(lstor_dir, &disk_id).ok().map(Arc::new);
            return RaidpSide {
                disk_dir: disk_dir.into(),
                lstor_dir: lstor_dir.into(),
                disk_id,
                state: Mutex::new(SideState::Failed { cause, lstor }),
                slot_bytes_written: Default::default(),
            };
        }
        let state = match RaidpDisk::open(disk_dir, lstor_dir, &disk_id, None) {
            Ok((disk, pending)) => {
                if !pending.is_empty() {
                    tracing::warn!(
                        disk = index,
                        records = pending.len(),
                        "RAIDP: journal records of writes in flight at the last stop made true \
                         again; they wait to be resolved with their partners"
                    );
                }
                SideState::Ready(Arc::new(disk))
            }
            Err(RaidpError::Lstor(LstorError::Missing { .. })) => {
                match RaidpDisk::has_slots(disk_dir) {
                    Ok(false) => SideState::Unformatted,
                    Ok(true) => SideState::Refused(format!(
                        "no Lstor at {} but the disk holds RAIDP slots: their parity is lost",
                        lstor_dir.display()
                    )),
                    Err(e) => SideState::Refused(e.to_string()),
                }
            }
            Err(e) => SideState::Refused(e.to_string()),
        };
        if let SideState::Refused(reason) = &state {
            tracing::error!(disk = index, %reason, "RAIDP refused on this disk");
        }
        RaidpSide {
            disk_dir: disk_dir.into(),
            lstor_dir: lstor_dir.into(),
            disk_id,
            state: Mutex::new(state),
            slot_bytes_written: Default::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SideState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open disk, creating its Lstor with `format` (superchunk bytes, parities) when it
    /// has none yet; refused when `format` differs from the Lstor's.
    fn ready(&self, format: Option<(u64, usize)>) -> ApiResult<Arc<RaidpDisk>> {
        let mut state = self.lock();
        match (&*state, format) {
            (SideState::Ready(disk), Some((bytes, parities)))
                if disk.lstor().superchunk_bytes() != bytes
                    || disk.lstor().parities() != parities =>
            {
                Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "raidp_mismatch",
                    format!(
                        "this disk's Lstor keeps {} parities of {}-byte superchunks; the write \
                         names {parities} of {bytes}",
                        disk.lstor().parities(),
                        disk.lstor().superchunk_bytes()
                    ),
                ))
            }
            (SideState::Ready(disk), _) => Ok(disk.clone()),
            (SideState::Refused(reason), _) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "lstor_refused",
                format!("this disk takes no RAIDP write: {reason}"),
            )),
            (SideState::Failed { cause, .. }, _) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "disk_failed",
                format!("the disk failed: {cause}"),
            )),
            (SideState::Unformatted, None) => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "raidp_unformatted",
                "this disk holds no RAIDP slot yet",
            )),
            (SideState::Unformatted, Some((bytes, parities))) => {
                let (disk, _) = RaidpDisk::open(
                    &self.disk_dir,
                    &self.lstor_dir,
                    &self.disk_id,
                    Some((bytes, parities)),
                )
                .map_err(raidp_error)?;
                let disk = Arc::new(disk);
                tracing::info!(dir = %self.lstor_dir.display(), bytes, parities, "Lstor created");
                *state = SideState::Ready(disk.clone());
                Ok(disk)
            }
        }
    }

    /// The disk failed: its slots are gone (the caller wiped them), its Lstor is kept.
    pub(crate) fn fail(&self, cause: &str) {
        let mut state = self.lock();
        let lstor = match &*state {
            SideState::Ready(disk) => Some(disk.shared_lstor()),
            SideState::Failed { lstor, .. } => lstor.clone(),
            SideState::Unformatted | SideState::Refused(_) => None,
        };
        *state = SideState::Failed { cause: cause.to_owned(), lstor };
    }

    /// An empty disk replaced the failed one: the old Lstor (the parity of slots that are
    /// gone) is removed, and the first RAIDP write creates a fresh one.
    pub(crate) fn replace(&self) -> std::io::Result<()> {
        let mut state = self.lock();
        match std::fs::remove_dir_all(&self.lstor_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir_all(&self.lstor_dir)?;
        *state = SideState::Unformatted;
        Ok(())
    }

    /// The Lstor for parity reads: the open disk's, or a failed disk's kept one.
    fn parity_source(&self) -> ApiResult<Arc<Lstor>> {
        match &*self.lock() {
            SideState::Ready(disk) => Ok(disk.shared_lstor()),
            SideState::Failed { lstor: Some(lstor), .. } => Ok(lstor.clone()),
            _ => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_parity",
                "this disk has no readable Lstor",
            )),
        }
    }

    /// What heartbeats and `/v1/health` say of this side.
    pub(crate) fn report(&self) -> RaidpReport {
        match &*self.lock() {
            SideState::Failed { cause, lstor } => RaidpReport {
                state: "failed".into(),
                reason: Some(cause.clone()),
                superchunk_bytes: lstor.as_ref().map(|l| l.superchunk_bytes()),
                parities: lstor.as_ref().map(|l| l.parities() as u32),
                pending: 0,
            },
            SideState::Unformatted => {
                RaidpReport { state: "unformatted".into(), ..Default::default() }
            }
            SideState::Refused(reason) => RaidpReport {
                state: "refused".into(),
                reason: Some(reason.clone()),
                ..Default::default()
            },
            SideState::Ready(disk) => RaidpReport {
                state: "ready".into(),
                reason: None,
                superchunk_bytes: Some(disk.lstor().superchunk_bytes()),
                parities: Some(disk.lstor().parities() as u32),
                pending: disk.lstor().pending_count() as u64,
            },
        }
    }
}

fn raidp_error(error: RaidpError) -> ApiError {
    let message = error.to_string();
    match error {
        RaidpError::Corrupt { slot, segment } => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", message)
                .with("slot", json!(slot))
                .with("segment", json!(segment))
        }
        RaidpError::OutOfRange { .. } => ApiError::bad_request("range", message),
        RaidpError::Lstor(LstorError::BadWrite { .. }) => ApiError::bad_request("write", message),
        RaidpError::Lstor(_) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "lstor_failed", message)
        }
        RaidpError::Io { .. } => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "io", message),
    }
}

/// Runs a blocking RAIDP call on a blocking task.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, RaidpError> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(raidp_error),
        Err(join) => Err(ApiError::internal(format!("RAIDP task failed: {join}"))),
    }
}

fn side_of<'a>(node: &'a Node, disk: &str) -> ApiResult<&'a RaidpSide> {
    let (index, _) = crate::api::disk_of(node, disk)?;
    node.raidp.get(index).and_then(Option::as_ref).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_lstor",
            format!("disk {index} has no Lstor (serve it with --lstor PATH to use RAIDP)"),
        )
    })
}

fn bounded(what: &str, len: u64) -> ApiResult<()> {
    if len > MAX_SLOT_IO_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("{what} of {len} bytes; at most {MAX_SLOT_IO_BYTES} per request"),
        )
        .with("max_bytes", json!(MAX_SLOT_IO_BYTES)));
    }
    Ok(())
}

/// `GET /v1/disks/{disk}/raidp`: the side's state and its slots' lengths.
pub(crate) async fn state(
    State(node): State<Arc<Node>>,
    Path(disk): Path<String>,
) -> ApiResult<Json<Value>> {
    let side = side_of(&node, &disk)?;
    let report = side.report();
    let mut lstor_written = 0;
    let slots = match side.ready(None) {
        Ok(disk) => {
            lstor_written = disk.lstor().bytes_written();
            blocking(move || {
                disk.slots()?
                    .into_iter()
                    .map(|slot| Ok(json!({ "slot": slot, "bytes": disk.slot_len(slot)? })))
                    .collect::<Result<Vec<_>, RaidpError>>()
            })
            .await?
        }
        Err(_) => Vec::new(),
    };
    let mut out = serde_json::to_value(report).expect("a report serializes");
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    out["slot_bytes_written"] = json!(count(&side.slot_bytes_written));
    out["lstor_bytes_written"] = json!(lstor_written);
    out["slots"] = json!(slots);
    out["lstor"] = json!(side.lstor_dir.display().to_string());
    Ok(Json(out))
}

#[derive(Deserialize)]
pub(crate) struct WriteQuery {
    offset: u64,
    superchunk_bytes: u64,
    parities: usize,
}

/// `PUT /v1/disks/{disk}/raidp/slots/{slot}?offset=&superchunk_bytes=&parities=`: writes
/// the body at `offset` of the slot through the Lstor protocol; answers `{"seq": n}`, the
/// journal record to clear once the partner has the same bytes.
pub(crate) async fn write(
    State(node): State<Arc<Node>>,
    Path((disk, slot)): Path<(String, u32)>,
    Query(query): Query<WriteQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let side = side_of(&node, &disk)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::LENGTH_REQUIRED,
                "length_required",
                "a slot write needs a Content-Length",
            )
        })?;
    bounded("a slot write", declared)?;
    let crc: u32 =
        headers.get(CRC_HEADER).and_then(|v| v.to_str().ok()?.parse().ok()).ok_or_else(|| {
            ApiError::bad_request(CRC_HEADER, format!("a slot write needs {CRC_HEADER}"))
        })?;
    let data = axum::body::to_bytes(body, MAX_SLOT_IO_BYTES as usize).await.map_err(|e| {
        ApiError::bad_request("body", format!("reading the body failed: {e}"))
            .with("error", json!("short_body"))
    })?;
    if data.len() as u64 != declared {
        return Err(ApiError::bad_request(
            "body",
            format!("Content-Length says {declared} bytes, the body had {}", data.len()),
        )
        .with("error", json!("short_body")));
    }
    if crc32c::crc32c(&data) != crc {
        return Err(ApiError::bad_request(
            "body",
            "the body does not match its crc32c (damaged on the way): nothing was written",
        )
        .with("error", json!("bad_checksum")));
    }
    node.metrics.bytes_in(data.len() as u64);
    let disk = side.ready(Some((query.superchunk_bytes, query.parities)))?;
    let offset = query.offset;
    let len = data.len() as u64;
    let drill = node.crash_drill.clone();
    let seq = blocking(move || {
        disk.write_observed(slot, offset, &data, &|step| {
            if let Some(drill) = &drill {
                drill.at(step_name(step));
            }
        })
    })
    .await?;
    use std::sync::atomic::Ordering::Relaxed;
    side.slot_bytes_written.fetch_add(len, Relaxed);
    Ok((StatusCode::OK, Json(json!({ "seq": seq }))).into_response())
}

#[derive(Deserialize)]
pub(crate) struct RangeQuery {
    offset: u64,
    len: u64,
}

/// `GET /v1/disks/{disk}/raidp/slots/{slot}?offset=&len=`: bytes of the slot, verified
/// against its segment checksums (zeros past what was written).
pub(crate) async fn read(
    State(node): State<Arc<Node>>,
    Path((disk, slot)): Path<(String, u32)>,
    Query(query): Query<RangeQuery>,
) -> ApiResult<Response> {
    bounded("a slot read", query.len)?;
    let side = side_of(&node, &disk)?;
    let (offset, len) = (query.offset, query.len as usize);
    let bytes = match side.ready(None) {
        Ok(disk) => blocking(move || disk.read(slot, offset, len)).await?,
        Err(failed) if failed.is("disk_failed") => return Err(failed),
        Err(_) => {
            // Refused (or never written): the slots stay readable without the Lstor.
            let dir = side.disk_dir.clone();
            blocking(move || RaidpDisk::read_without_lstor(&dir, slot, offset, len)).await?
        }
    };
    node.metrics.bytes_out(bytes.len() as u64);
    Ok(octets(bytes))
}

/// `GET /v1/disks/{disk}/raidp/parity/{index}?offset=&len=`: bytes of the Lstor's parity
/// `index` (0: XOR, 1: the GF(2^8) one), for a dual-failure rebuild.
pub(crate) async fn parity(
    State(node): State<Arc<Node>>,
    Path((disk, index)): Path<(String, usize)>,
    Query(query): Query<RangeQuery>,
) -> ApiResult<Response> {
    bounded("a parity read", query.len)?;
    let lstor = side_of(&node, &disk)?.parity_source()?;
    if index >= lstor.parities() {
        return Err(ApiError::bad_request(
            "parity",
            format!("this Lstor keeps {} parities", lstor.parities()),
        ));
    }
    let bytes =
        blocking(move || Ok(lstor.parity(index, query.offset, query.len as usize)?)).await?;
    node.metrics.bytes_out(bytes.len() as u64);
    Ok(octets(bytes))
}

fn octets(bytes: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/octet-stream")], Bytes::from(bytes))
        .into_response()
}

#[derive(Deserialize)]
pub(crate) struct ClearBody {
    seqs: Vec<u64>,
}

/// `POST /v1/disks/{disk}/raidp/clear` `{"seqs":[…]}`: the partners have these writes; their
/// records are done. Empties the journal when nothing is left pending.
pub(crate) async fn clear(
    State(node): State<Arc<Node>>,
    Path(disk): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let body: ClearBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request("body", format!("expected {{\"seqs\":[…]}}: {e}")))?;
    if body.seqs.len() > MAX_CLEAR_SEQS {
        return Err(ApiError::bad_request(
            "seqs",
            format!("{} sequence numbers; at most {MAX_CLEAR_SEQS} per clear", body.seqs.len()),
        ));
    }
    let disk = side_of(&node, &disk)?.ready(None)?;
    if let Some(drill) = &node.crash_drill {
        drill.at("ack");
    }
    let compacted = blocking(move || disk.clear(&body.seqs)).await?;
    Ok(Json(json!({ "cleared": true, "journal_emptied": compacted })))
}

/// `POST /v1/disks/{disk}/raidp/slots/{slot}/trim`: empties the slot (compaction reclaimed
/// its superchunk), folding its bytes out of the parity first — `{"trimmed_bytes"}`. A slot
/// with a segment failing its checksum is refused (500 `corrupt`, naming it), nothing changed.
pub(crate) async fn trim(
    State(node): State<Arc<Node>>,
    Path((disk, slot)): Path<(String, u32)>,
) -> ApiResult<Json<Value>> {
    let disk = side_of(&node, &disk)?.ready(None)?;
    let trimmed = blocking(move || disk.trim(slot)).await?;
    Ok(Json(json!({ "trimmed_bytes": trimmed })))
}

/// `GET /v1/disks/{disk}/raidp/pending`: the journal records not cleared
/// (`[{"seq","slot","offset","bytes"}]`); their bytes are on the slot already.
pub(crate) async fn pending(
    State(node): State<Arc<Node>>,
    Path(disk): Path<String>,
) -> ApiResult<Json<Value>> {
    let disk = side_of(&node, &disk)?.ready(None)?;
    let records = blocking(move || Ok(disk.lstor().pending()?)).await?;
    let records: Vec<Value> = records
        .iter()
        .map(|r| json!({ "seq": r.seq, "slot": r.slot, "offset": r.offset, "bytes": r.len }))
        .collect();
    Ok(Json(json!({ "pending": records })))
}

/// `POST /v1/disks/{disk}/raidp/verify`: folds every slot and compares with the Lstor (the
/// tier's scrub) — `{"clean", "slots", "parity_matches", "corrupt_slots"}`.
pub(crate) async fn verify(
    State(node): State<Arc<Node>>,
    Path(disk): Path<String>,
) -> ApiResult<Json<Value>> {
    let side = side_of(&node, &disk)?;
    let disk = match side.ready(None) {
        Ok(disk) => disk,
        Err(_) => {
            let report = side.report();
            let clean = report.state == "unformatted";
            return Ok(Json(json!({
                "clean": clean,
                "state": report.state,
                "reason": report.reason,
                "slots": 0,
            })));
        }
    };
    let report = blocking(move || disk.verify()).await?;
    Ok(Json(json!({
        "clean": report.clean(),
        "state": "ready",
        "slots": report.slots,
        "parity_matches": report.parity_matches,
        "corrupt_slots": report.corrupt_slots,
        "slot_crcs": report.slot_crcs.iter().map(|(slot, crc)| json!({"slot": slot, "crc32c": crc})).collect::<Vec<_>>(),
    })))
}
