//! The write path: an object streams from a reader to the nodes, cell by cell, with Okapi's
//! partial parities (§4.3, §5.1).
//!
//! Data flow: `begin` (meta places every unit) → one coding thread reads the object in object
//! order (stripe after stripe, row after row, one cell per data block of the stripe), adds
//! each cell into the partial parity of its group's row, and hands the cell to the PUT stream
//! of its data block → a parity row is sent to the group's r parity streams as soon as it is
//! final → every PUT is answered only once the node made the unit durable → `commit`.
//!
//! Coding ([`Coder`]): `pipelined` (the default) hands each stripe row's cells to the coding
//! engine as one add task per group, lending it the group's partial parity row, and reads the
//! next row while the rails code (UMR-EC's collecting / encoding / streaming overlap);
//! `blocking` adds each cell inline; `noop` adds nothing (zero parity, benchmarks only).
//!
//! Invariants:
//! - The commit carries the digest of every unit as sent (end-to-end checksums; see
//!   [`crate::digest`]): every unit of the object is opened and sent, so none lacks one.
//! - The object is committed only after every unit's PUT succeeded; on any failure nothing is
//!   committed and the units written are deleted (best effort; leftovers of a crashed client
//!   are garbage that meta's records never name). `put_file` then begins again, asking meta
//!   to avoid the nodes that failed (meta may not have noticed yet that they are down).
//! - Parity row (g, ρ) is final when the last stripe holding data blocks of group g has
//!   written row ρ of every one of them (earlier stripes of g wrote all their rows before);
//!   rows of g past the end of its last stripe's blocks are final when that stripe ends.
//!   Rows of a parity unit are sent in increasing order, so each parity PUT is one stream.
//! - Byte-local codes (rs, lrc) hold partial parity rows plus what is in flight. Partial
//!   rows: the group leaving the stripe for the next one grows by r cells per row while the
//!   group coming in from the previous stripe shrinks by r cells per row (≤ r·B + r·C
//!   together), plus one row (r cells) of a group wholly inside the stripe. In flight: data
//!   cells and sent parity rows share W + 1 permits, each held until the last byte of its
//!   buffer is handed to the socket. Bound: `r·B + (W + 1 + 2r)·C` ([`buffer_bound`]), under
//!   Okapi's `r·B + k·C` whenever W + 1 + 2r ≤ k (rs(20,3), W = 6: 37 vs 44 cells of 1 MiB).
//!   Pipelined, the engine holds one more row (W cells, permits included) and a zero-padded
//!   copy of the object's last short cell: `r·B + (2W + 2 + 2r)·C` (44 for that example). A
//!   lent accumulator stays metered; a row's add tasks complete in issue order, and a row is
//!   sent only after its last add came back.
//!   A data cell of at least 64 KiB bound for a local write is read into a buffer up to
//!   4095 bytes longer, so that it starts at its unit file's phase and is written from where
//!   it lies ([`crate::local`]): the bound adds that slack per in-flight cell. Cells are not
//!   read so when the slack would take a bound within Okapi's figure above it.
//!   Codes that mix bytes across a unit (Hitchhiker, Clay) need whole blocks: the cells of
//!   the current stripe (W·B), one zero-padded copy (B), the parity of the groups the stripe
//!   touches (⌈W/k⌉ + 1 of them) and the parity of a closed group still being sent (r·B):
//!   `(W + 1 + r·(⌈W/k⌉ + 2))·B`. Every buffer is metered ([`crate::BufferMeter`]); the stats report the
//!   measured peak, not an estimate.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    io::{Read, Seek, Write},
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::{
    runtime::Handle,
    sync::{mpsc, OwnedSemaphorePermit, Semaphore},
    task::JoinHandle,
};
use weft_codes::Code;
use weft_engine::{EncodeTask, Engine};
use weft_layout::{max_client_buffer_bytes, naive_group_buffer_bytes, StripedLayout, UnitId};

use crate::{
    meter::{BufferMeter, LentBuf, MeteredBuf},
    node::NodeFailure,
    Client, ClientError, ObjectInfo, Result, UnitInfo,
};

/// How a put computes its parity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Coder {
    /// On the coding engine's rails ([`weft_engine::shared`]), overlapped with reading the
    /// object and sending to the nodes: the coding thread issues each stripe row's add task
    /// and goes on reading while the engine codes it (UMR-EC's functional partitioning).
    /// Codes that mix bytes across a unit (Hitchhiker, Clay) code inline.
    #[default]
    Pipelined,
    /// Inline in the thread that reads the object: reading waits for coding.
    Blocking,
    /// No parity computed: parity units are written as zeros. For benchmarks only (the
    /// ceiling coding could reach); such an object cannot survive a lost unit.
    Noop,
}

impl Coder {
    pub fn name(self) -> &'static str {
        match self {
            Coder::Pipelined => "pipelined",
            Coder::Blocking => "blocking",
            Coder::Noop => "noop",
        }
    }

    pub fn parse(text: &str) -> Option<Coder> {
        [Coder::Pipelined, Coder::Blocking, Coder::Noop].into_iter().find(|c| c.name() == text)
    }
}

/// Options of a put.
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    /// Overrides the bucket's default policy.
    pub policy: Option<StripedLayout>,
    /// Bytes of the object read so far (for progress bars).
    pub progress: Option<Arc<AtomicU64>>,
    /// How parity is computed.
    pub coder: Coder,
    /// Store the object in the RAIDP tier (two replicas + Lstor parity) whatever its
    /// bucket's policy; meta needs a RAIDP map (a RAIDP bucket made one).
    pub raidp: bool,
    /// Attributes the commit carries (meta keeps them with the object): read when the
    /// commit is sent, so a caller may fill the slot while the body streams (the S3 gateway
    /// sets the ETag once it has hashed the last byte). A slot still empty at the commit
    /// fails the put, committing nothing.
    pub attributes: Option<AttributesSlot>,
    /// Commit only if this holds for the object then committed under the key (meta checks
    /// it in the commit's transaction); otherwise the put fails with meta's 412
    /// `precondition_failed` and nothing is committed.
    pub precondition: Option<Precondition>,
    /// The S3 object lock the new version gets (meta's `lock` JSON: `{"retention": {"mode",
    /// "until_ms"}, "legal_hold": bool}`); None: the bucket's default retention, if any.
    pub lock: Option<serde_json::Value>,
}

impl PutOptions {
    /// What the commit carries: the slot's attributes (none without a slot; an error when
    /// the slot was never filled), the precondition and the lock.
    pub(crate) fn commit_terms(&self) -> Result<CommitTerms> {
        let attributes = match &self.attributes {
            None => None,
            Some(slot) => Some(slot.get().cloned().ok_or_else(|| {
                ClientError::Invalid("the put's attributes were never set".to_string())
            })?),
        };
        Ok(CommitTerms { attributes, precondition: self.precondition, lock: self.lock.clone() })
    }
}

/// What a commit carries besides its digests ([`crate::MetaClient::commit_with`]).
#[derive(Clone, Debug, Default)]
pub struct CommitTerms {
    /// Kept with the object, uninterpreted by meta.
    pub attributes: Option<serde_json::Value>,
    /// Commit only if this holds for the object committed under the key.
    pub precondition: Option<Precondition>,
    /// The object lock of the new version (meta's `lock` JSON).
    pub lock: Option<serde_json::Value>,
}

/// Where a put finds the attributes its commit carries ([`PutOptions::attributes`]).
pub type AttributesSlot = Arc<std::sync::OnceLock<serde_json::Value>>;

/// What a commit (or a delete) requires of the object committed under its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// No object is committed under the key (S3's `If-None-Match: *`).
    Absent,
    /// The committed object has this generation (S3's `If-Match`, once its ETag was
    /// resolved to a generation).
    Generation(u64),
}

impl Precondition {
    /// The `"if"` field of meta's commit body.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Precondition::Absent => serde_json::json!("absent"),
            Precondition::Generation(generation) => serde_json::json!({ "generation": generation }),
        }
    }
}

/// What a put did.
#[derive(Clone, Debug)]
pub struct PutStats {
    /// The committed object.
    pub object: ObjectInfo,
    /// Object bytes.
    pub data_bytes: u64,
    /// Parity bytes written.
    pub parity_bytes: u64,
    /// Bytes sent to nodes: data + parity.
    pub bytes_sent: u64,
    /// Most bytes the client held at once (measured).
    pub peak_buffer_bytes: u64,
    /// The bound this implementation keeps for this layout ([`buffer_bound`]).
    pub buffer_bound_bytes: u64,
    /// Okapi's figure for partial parities, r·B + k·C.
    pub okapi_buffer_bytes: u64,
    /// What buffering whole groups would hold: (k + r)·B.
    pub naive_buffer_bytes: u64,
    /// Units written.
    pub units: usize,
    pub elapsed: Duration,
    /// Units of the object this put replaced that could not be deleted (garbage).
    pub leftover_units: usize,
    /// Bytes of an input of unknown length spooled to a temporary file first (0: none).
    pub spooled_bytes: u64,
}

/// Most nodes a put of a file avoids (after failing on them) before it gives up.
const MAX_AVOIDED_NODES: usize = 8;

/// Stripe rows whose add tasks may be with the engine while the coding thread reads on.
const PIPELINE_ROWS: usize = 1;

/// Cells at least this long are read into memory in their unit file's phase when written
/// locally ([`Writer::read_cell`]); their buffers are [`PHASE_SLACK_BYTES`] longer.
const PHASED_CELL_MIN_BYTES: usize = 64 << 10;
/// What a phased cell's buffer holds beyond its bytes (to start at any phase).
const PHASE_SLACK_BYTES: usize = crate::local::PHASE_ALIGN - 1;

/// Data cells and parity rows in flight at once, for byte-local codes: W + 1, plus the
/// cells of the rows with the engine when pipelined.
fn in_flight_cells(layout: &StripedLayout, coder: Coder) -> usize {
    let engine_rows = if coder == Coder::Pipelined { PIPELINE_ROWS } else { 0 };
    (engine_rows + 1) * layout.stripe_width + 1
}

/// The bound on client buffering of this implementation for a layout and coder (see the
/// module invariants); compare [`weft_layout::max_client_buffer_bytes`], Okapi's figure.
pub fn buffer_bound(layout: &StripedLayout, coder: Coder) -> u64 {
    let slack = if phased_cells(layout, coder) { phase_slack(layout, coder) } else { 0 };
    unphased_bound(layout, coder) + slack
}

/// [`buffer_bound`] of cells read wherever their buffers start.
fn unphased_bound(layout: &StripedLayout, coder: Coder) -> u64 {
    let (r, cell, block) = (layout.r() as u64, layout.cell_bytes, layout.block_bytes);
    if byte_local(layout) {
        // Pipelined: one zero-padded copy of the object's last short cell for the engine.
        let padded = u64::from(coder == Coder::Pipelined);
        r * block + (in_flight_cells(layout, coder) as u64 + padded + 2 * r) * cell
    } else {
        let width = layout.stripe_width as u64;
        let open_groups = width.div_ceil(layout.k() as u64) + 1;
        (width + 1 + r * (open_groups + 1)) * block
    }
}

fn byte_local(layout: &StripedLayout) -> bool {
    layout.code.build().map(|c| c.byte_local()).unwrap_or(false)
}

/// What data cells read in their unit files' phase hold beyond their bytes, at most (data
/// cells are at most the in-flight ones).
fn phase_slack(layout: &StripedLayout, coder: Coder) -> u64 {
    in_flight_cells(layout, coder) as u64 * PHASE_SLACK_BYTES as u64
}

/// Whether a put reads its data cells in their unit files' phase ([`Writer::read_cell`]):
/// byte-local codes with cells of at least [`PHASED_CELL_MIN_BYTES`], unless the slack would
/// take a bound within Okapi's `r·B + k·C` above it (that promise is kept where it was).
fn phased_cells(layout: &StripedLayout, coder: Coder) -> bool {
    if !byte_local(layout) || layout.cell_bytes < PHASED_CELL_MIN_BYTES as u64 {
        return false;
    }
    let (plain, okapi) = (unphased_bound(layout, coder), max_client_buffer_bytes(layout));
    plain > okapi || plain + phase_slack(layout, coder) <= okapi
}

/// One open PUT: the sender feeding its body and the task awaiting the node's answer.
struct Stream {
    tx: mpsc::Sender<Bytes>,
    /// The phase of the unit's byte 0 in its file, once a local write told it
    /// ([`Writer::read_cell`]).
    phase: Option<usize>,
}

/// The coding thread's view of the object and its open PUT streams.
struct Writer<R> {
    handle: Handle,
    client: Client,
    object: ObjectInfo,
    code: Arc<dyn Code>,
    reader: R,
    meter: Arc<BufferMeter>,
    cell_permits: Arc<Semaphore>,
    streams: HashMap<UnitId, Stream>,
    /// Each opened PUT, answering the digest of what it sent.
    puts: Vec<(UnitId, JoinHandle<Result<weft_wire::UnitDigest, NodeFailure>>)>,
    progress: Option<Arc<AtomicU64>>,
    parity_bytes: u64,
    coder: Coder,
    /// Data cells are read in their unit files' phase ([`phased_cells`]).
    phased: bool,
}

/// Objects of at most this many bytes in one group are written whole
/// ([`Writer::run_whole_object`]).
pub const WHOLE_OBJECT_MAX_BYTES: u64 = 4 << 20;

/// Whether a put of `size` bytes with `layout` is written whole: at most
/// [`WHOLE_OBJECT_MAX_BYTES`] in one group (small objects are fitted to one), with parity
/// (the `noop` coder keeps its streaming shape).
fn takes_whole(layout: &StripedLayout, size: u64, coder: Coder) -> bool {
    size <= WHOLE_OBJECT_MAX_BYTES && layout.groups(size) == 1 && coder != Coder::Noop
}

/// What a put written whole holds at most: its k data units and r parity units, each of the
/// group's unit length.
fn whole_object_bound(layout: &StripedLayout, size: u64) -> u64 {
    layout.n() as u64 * layout.unit_len(size, 0)
}

/// Partial parity rows by (group, row).
type Partial = BTreeMap<(usize, u64), Vec<MeteredBuf>>;

/// An add task with the engine: the accumulators of (group, row) are lent to it.
struct PendingAdd {
    future: weft_engine::EcFuture,
    group: usize,
    row: u64,
    /// Which stripe row (counted over the object) issued it.
    sequence: u64,
    lent: Vec<LentBuf>,
    /// The row is final once this add is in: send rows up to it.
    last: bool,
}

/// What an add task is for: (group, row) of the stripe row `sequence`; `last` when it
/// makes the row final.
struct AddRequest {
    group: usize,
    row: u64,
    sequence: u64,
    last: bool,
}

/// Why the coding thread stopped early.
enum Stop {
    /// A PUT stream closed: its task holds the node's error.
    StreamClosed(UnitId),
    Failed(ClientError),
}

impl From<ClientError> for Stop {
    fn from(error: ClientError) -> Stop {
        Stop::Failed(error)
    }
}

impl From<weft_codes::CodeError> for Stop {
    fn from(error: weft_codes::CodeError) -> Stop {
        Stop::Failed(error.into())
    }
}

impl<R: Read> Writer<R> {
    fn layout(&self) -> &StripedLayout {
        &self.object.layout
    }

    fn unit(&self, unit: UnitId) -> Result<&UnitInfo, Stop> {
        self.object.unit(unit).ok_or_else(|| {
            Stop::Failed(ClientError::Invalid(format!(
                "meta's placement lacks {} of the object",
                unit.short_name()
            )))
        })
    }

    /// A small object of one group, written whole: its cells are read straight into their
    /// data units, the parity is encoded over the whole units at once, and every unit goes
    /// to its node as one body with its digest computed up front. Per object that is one
    /// blocking call and one request per unit, where streaming cell by cell costs a channel
    /// send, a permit and a digest update per cell (a 1 MiB object in rs(9,3) has 256 cells
    /// of 4 KiB). Holds the n units at once ([`whole_object_bound`]).
    fn run_whole_object(&mut self) -> Result<(), Stop> {
        let layout = *self.layout();
        let size = self.object.size;
        let unit_len = layout.unit_len(size, 0) as usize;
        let mut data: Vec<MeteredBuf> =
            (0..layout.k()).map(|_| MeteredBuf::new(&self.meter, unit_len)).collect();
        for extent in layout.extents(0, size) {
            let at = extent.block_offset as usize;
            self.read_object_bytes(
                &mut data[extent.block].as_mut_slice()[at..at + extent.len as usize],
            )?;
        }
        let mut parity: Vec<MeteredBuf> =
            (0..layout.r()).map(|_| MeteredBuf::new(&self.meter, unit_len)).collect();
        {
            let sources: Vec<&[u8]> = data.iter().map(MeteredBuf::as_ref).collect();
            let mut outputs: Vec<&mut [u8]> =
                parity.iter_mut().map(MeteredBuf::as_mut_slice).collect();
            self.code.encode(&sources, &mut outputs)?;
        }
        let units = layout.group_units(size, 0);
        let mut pieces = data.into_iter().map(Some).collect::<Vec<_>>();
        let mut parity = parity.into_iter().map(Some).collect::<Vec<_>>();
        for unit in units {
            let info = self.unit(unit)?.clone();
            let mut buf = match unit {
                UnitId::Data(x) => pieces[x].take(),
                UnitId::Parity { index, .. } => parity[index].take(),
            }
            .expect("each unit of the group once");
            buf.truncate(layout.stored_len(size, unit) as usize);
            if let UnitId::Parity { .. } = unit {
                self.parity_bytes += buf.as_ref().len() as u64;
            }
            let digest = self.client.nodes.digest_key().digest(buf.as_ref());
            let bytes = buf.into_bytes();
            let nodes = self.client.nodes.clone();
            let task =
                self.handle.spawn(async move { nodes.put(&info, bytes).await.map(|()| digest) });
            self.puts.push((unit, task));
        }
        Ok(())
    }

    /// Opens the PUT of `unit` (stored length from meta).
    fn open(&mut self, unit: UnitId, capacity: usize) -> Result<(), Stop> {
        let info = self.unit(unit)?.clone();
        let (tx, rx) = mpsc::channel(capacity);
        let nodes = self.client.nodes.clone();
        let task = self.handle.spawn(async move { nodes.put_stream(&info, info.len, rx).await });
        self.puts.push((unit, task));
        self.streams.insert(unit, Stream { tx, phase: None });
        Ok(())
    }

    fn send(&mut self, unit: UnitId, bytes: Bytes) -> Result<(), Stop> {
        let stream = self.streams.get(&unit).expect("streams are opened before use");
        stream.tx.blocking_send(bytes).map_err(|_| Stop::StreamClosed(unit))
    }

    /// Waits for one of the in-flight permits (data cells and parity rows share them).
    fn permit(&self) -> Result<OwnedSemaphorePermit, Stop> {
        let permits = Arc::clone(&self.cell_permits);
        self.handle
            .block_on(permits.acquire_owned())
            .map_err(|_| Stop::Failed(ClientError::Invalid("write cancelled".into())))
    }

    /// After the object's last byte: the input must end there. An input longer than the size
    /// the write began with (a file that grew while it was read) fails the write rather than
    /// storing fewer bytes than were given.
    fn check_input_ended(&mut self) -> Result<(), Stop> {
        let mut probe = [0u8; 1];
        loop {
            match self.reader.read(&mut probe) {
                Ok(0) => return Ok(()),
                Ok(_) => {
                    return Err(Stop::Failed(ClientError::Invalid(format!(
                        "the input is longer than the {} bytes the write began with (did it grow while it was read?); nothing was stored",
                        self.object.size
                    ))))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Stop::Failed(ClientError::Io {
                        what: "reading the object".into(),
                        source,
                    }))
                }
            }
        }
    }

    /// Reads the next `len` object bytes into a metered cell holding one in-flight permit.
    /// A cell of at least [`PHASED_CELL_MIN_BYTES`] bound for unit offset `at` of `unit`
    /// (byte-local codes, see [`phased_cells`]) starts where its unit file's blocks would have
    /// it start, once a local write of such a unit told
    /// ([`crate::node::NodeClient::write_phase`]): the write then takes it from where it
    /// lies instead of copying it.
    fn read_cell(&mut self, len: usize, at: Option<(UnitId, u64)>) -> Result<MeteredCell, Stop> {
        let permit = self.permit()?;
        let phase = match at {
            Some((unit, offset)) if self.phased && len >= PHASED_CELL_MIN_BYTES => self
                .unit_phase(unit)
                .map(|phase| ((phase as u64 + offset) % crate::local::PHASE_ALIGN as u64) as usize),
            _ => None,
        };
        let (mut buf, start) = match phase {
            Some(phase) => {
                let buf = MeteredBuf::for_overwrite(&self.meter, len + PHASE_SLACK_BYTES);
                let address = buf.as_ref().as_ptr() as usize;
                let align = crate::local::PHASE_ALIGN;
                (buf, (phase + align - address % align) % align)
            }
            None => (MeteredBuf::for_overwrite(&self.meter, len), 0),
        };
        // read_exact fills every byte or fails.
        self.read_object_bytes(&mut buf.as_mut_slice()[start..start + len])?;
        Ok(MeteredCell { buf, start, len, _permit: permit })
    }

    /// The phase of `unit`'s byte 0 in its file: asked of the node client until it knows,
    /// then kept with the unit's stream.
    fn unit_phase(&mut self, unit: UnitId) -> Option<usize> {
        if let Some(phase) = self.streams.get(&unit)?.phase {
            return Some(phase);
        }
        let phase = self.client.nodes.write_phase(self.object.unit(unit)?)?;
        self.streams.get_mut(&unit)?.phase = Some(phase);
        Some(phase)
    }

    /// Fills `buf` with the next object bytes (an input that ends early fails the write,
    /// saying so) and counts them for progress bars.
    fn read_object_bytes(&mut self, buf: &mut [u8]) -> Result<(), Stop> {
        self.reader.read_exact(buf).map_err(|source| {
            let what = if source.kind() == std::io::ErrorKind::UnexpectedEof {
                format!(
                    "the input ended before the {} bytes the write began with (did it shrink while it was read?); nothing was stored",
                    self.object.size
                )
            } else {
                "reading the object".into()
            };
            Stop::Failed(ClientError::Io { what, source })
        })?;
        if let Some(progress) = &self.progress {
            progress.fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sends row `row` of group g's parity (zeros when nothing was added), opening the
    /// parity streams on the group's first row.
    fn flush_row(&mut self, partial: &mut Partial, group: usize, row: u64) -> Result<(), Stop> {
        let layout = *self.layout();
        let (cell, unit_len) = (layout.cell_bytes, self.object.unit_len(group));
        let row_len = cell.min(unit_len - row * cell) as usize;
        let rows = partial
            .remove(&(group, row))
            .unwrap_or_else(|| zero_rows(&self.meter, layout.r(), row_len));
        for (index, buf) in rows.into_iter().enumerate() {
            let unit = UnitId::Parity { group, index };
            if row == 0 {
                self.open(unit, 1)?;
            }
            self.parity_bytes += buf.as_ref().len() as u64;
            let len = buf.as_ref().len();
            let held = MeteredCell { buf, start: 0, len, _permit: self.permit()? };
            self.send(unit, held.into_bytes())?;
        }
        Ok(())
    }

    /// The stripe holding group g's last data block.
    fn last_stripe(&self, group: usize) -> usize {
        let layout = self.layout();
        let blocks = layout.group_blocks(self.object.size, group);
        layout.stripe_of(blocks.end - 1)
    }

    /// Byte-local codes: partial parity per (group, row), rows sent as soon as final.
    /// Blocking and noop code (or skip) each cell as it is read; pipelined issues a stripe
    /// row's cells to the engine as one add task per group and completes the tasks of
    /// earlier rows (in issue order) while reading on.
    fn run_byte_local(&mut self) -> Result<(), Stop> {
        let layout = *self.layout();
        let size = self.object.size;
        let (k, cell) = (layout.k(), layout.cell_bytes);
        let engine = (self.coder == Coder::Pipelined).then(weft_engine::shared);
        let mut partial: Partial = BTreeMap::new();
        // Next row to send per group whose last stripe is being written.
        let mut next_row: HashMap<usize, u64> = HashMap::new();
        let mut pending: VecDeque<PendingAdd> = VecDeque::new();
        let mut sequence = 0u64;
        for stripe in 0..layout.stripes(size) {
            let blocks = layout.stripe_blocks(size, stripe);
            for x in blocks.clone() {
                self.open(UnitId::Data(x), 1)?;
            }
            let closing: Vec<usize> = (layout.group_of(blocks.start)
                ..=layout.group_of(blocks.end - 1))
                .filter(|&g| self.last_stripe(g) == stripe)
                .collect();
            let cells: Vec<(u64, usize, u64, usize)> =
                stripe_cells(&layout, size, stripe).collect();
            for row_cells in cells.chunk_by(|a, b| a.0 == b.0) {
                // This row's cells per group, for the engine: (position, bytes).
                let mut batch: BTreeMap<usize, Vec<(usize, Bytes)>> = BTreeMap::new();
                let mut last_rows: Vec<usize> = Vec::new();
                for &(row, x, offset, len) in row_cells {
                    let data = self.read_cell(len, Some((UnitId::Data(x), offset)))?;
                    let (group, position) = (x / k, x % k);
                    let row_len = cell.min(self.object.unit_len(group) - offset) as usize;
                    if engine.is_none() {
                        let meter = Arc::clone(&self.meter);
                        let accumulators = partial
                            .entry((group, row))
                            .or_insert_with(|| zero_rows(&meter, layout.r(), row_len));
                        if self.coder == Coder::Blocking {
                            let mut outs: Vec<&mut [u8]> = accumulators
                                .iter_mut()
                                .map(|b| &mut b.as_mut_slice()[..len])
                                .collect();
                            self.code.encode_add(position, data.as_ref(), &mut outs)?;
                        }
                    }
                    let bytes = data.into_bytes();
                    if engine.is_some() {
                        // The engine adds units of one length: pad the object's last cell.
                        let unit = if len < row_len {
                            let mut padded = MeteredBuf::new(&self.meter, row_len);
                            padded.as_mut_slice()[..len].copy_from_slice(&bytes);
                            padded.into_bytes()
                        } else {
                            bytes.clone()
                        };
                        batch.entry(group).or_default().push((position, unit));
                    }
                    self.send(UnitId::Data(x), bytes)?;
                    // The group's row is final once its last block in this stripe has it.
                    let group_end = layout.group_blocks(size, group).end;
                    if closing.contains(&group) && (x + 1 == group_end || x + 1 == blocks.end) {
                        if engine.is_some() {
                            last_rows.push(group);
                        } else {
                            self.flush_rows_upto(&mut partial, &mut next_row, group, row + 1)?;
                        }
                    }
                }
                if let Some(engine) = &engine {
                    let row = row_cells[0].0;
                    for (group, cells) in batch {
                        let add =
                            AddRequest { group, row, sequence, last: last_rows.contains(&group) };
                        self.issue_add(
                            engine,
                            add,
                            cells,
                            &mut partial,
                            &mut pending,
                            &mut next_row,
                        )?;
                    }
                    sequence += 1;
                    while pending
                        .front()
                        .is_some_and(|p| p.sequence + PIPELINE_ROWS as u64 <= sequence)
                    {
                        let oldest = pending.pop_front().expect("front exists");
                        self.complete_add(oldest, &mut partial, &mut next_row)?;
                    }
                }
            }
            while let Some(oldest) = pending.pop_front() {
                self.complete_add(oldest, &mut partial, &mut next_row)?;
            }
            for x in blocks {
                self.streams.remove(&UnitId::Data(x));
            }
            for group in closing {
                let rows = self.object.unit_len(group).div_ceil(cell);
                self.flush_rows_upto(&mut partial, &mut next_row, group, rows)?;
                for index in 0..layout.r() {
                    self.streams.remove(&UnitId::Parity { group, index });
                }
            }
        }
        Ok(())
    }

    /// Lends (group, row)'s accumulators to an add task of `cells`, or, for the row's first
    /// cells, buffers of unspecified contents to a first add (which writes them without
    /// reading them); first completes earlier tasks still holding the accumulators.
    fn issue_add(
        &mut self,
        engine: &Engine,
        add: AddRequest,
        cells: Vec<(usize, Bytes)>,
        partial: &mut Partial,
        pending: &mut VecDeque<PendingAdd>,
        next_row: &mut HashMap<usize, u64>,
    ) -> Result<(), Stop> {
        let AddRequest { group, row, sequence, last } = add;
        while pending.iter().any(|p| (p.group, p.row) == (group, row)) {
            let oldest = pending.pop_front().expect("a pending add exists");
            self.complete_add(oldest, partial, next_row)?;
        }
        let len = cells[0].1.len();
        let (first, accumulators) = match partial.remove(&(group, row)) {
            Some(accumulators) => (false, accumulators),
            None => {
                let r = self.layout().r();
                (true, (0..r).map(|_| MeteredBuf::for_overwrite(&self.meter, len)).collect())
            }
        };
        let (buffers, lent): (Vec<Vec<u8>>, Vec<LentBuf>) =
            accumulators.into_iter().map(MeteredBuf::lend).unzip();
        let (positions, data): (Vec<usize>, Vec<Bytes>) = cells.into_iter().unzip();
        let code = self.object.layout.code;
        let task = if first {
            EncodeTask::first_add(code, positions, data, buffers)
        } else {
            EncodeTask::add(code, positions, data, buffers)
        };
        // One piece per row task: rows are a cell long (1 MiB by default), already big enough
        // to amortise a hand-off; splitting them only adds wake-ups.
        let task = task.chunk_size(0);
        let future = engine.iencode(task);
        pending.push_back(PendingAdd { future, group, row, sequence, lent, last });
        Ok(())
    }

    /// Waits for an add task, takes its accumulators back and sends the rows it made final.
    fn complete_add(
        &mut self,
        add: PendingAdd,
        partial: &mut Partial,
        next_row: &mut HashMap<usize, u64>,
    ) -> Result<(), Stop> {
        let output = add.future.wait().map_err(|error| {
            Stop::Failed(ClientError::Invalid(format!("the coding engine failed: {error}")))
        })?;
        let accumulators =
            add.lent.into_iter().zip(output.parity).map(|(lent, buf)| lent.restore(buf)).collect();
        partial.insert((add.group, add.row), accumulators);
        if add.last {
            self.flush_rows_upto(partial, next_row, add.group, add.row + 1)?;
        }
        Ok(())
    }

    fn flush_rows_upto(
        &mut self,
        partial: &mut Partial,
        next_row: &mut HashMap<usize, u64>,
        group: usize,
        end: u64,
    ) -> Result<(), Stop> {
        let next = next_row.entry(group).or_insert(0);
        let start = *next;
        *next = (*next).max(end);
        for row in start..end {
            self.flush_row(partial, group, row)?;
        }
        Ok(())
    }

    /// Codes that mix bytes across a unit: whole blocks are added once their stripe is done.
    fn run_whole_blocks(&mut self) -> Result<(), Stop> {
        let layout = *self.layout();
        let size = self.object.size;
        let (k, cell) = (layout.k(), layout.cell_bytes);
        let mut parity: BTreeMap<usize, Vec<MeteredBuf>> = BTreeMap::new();
        for stripe in 0..layout.stripes(size) {
            let blocks = layout.stripe_blocks(size, stripe);
            for x in blocks.clone() {
                self.open(UnitId::Data(x), 1)?;
            }
            let mut cells: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
            for (_, x, _, len) in stripe_cells(&layout, size, stripe) {
                let data = self.read_cell(len, None)?.into_bytes();
                cells.entry(x).or_default().push(data.clone());
                self.send(UnitId::Data(x), data)?;
            }
            for x in blocks.clone() {
                self.streams.remove(&UnitId::Data(x));
                let group = x / k;
                let unit_len = self.object.unit_len(group) as usize;
                let mut padded = MeteredBuf::new(&self.meter, unit_len);
                let mut at = 0;
                for piece in cells.remove(&x).unwrap_or_default() {
                    padded.as_mut_slice()[at..at + piece.len()].copy_from_slice(&piece);
                    at += piece.len();
                }
                let meter = Arc::clone(&self.meter);
                let accumulators =
                    parity.entry(group).or_insert_with(|| zero_rows(&meter, layout.r(), unit_len));
                if self.coder != Coder::Noop {
                    let mut outs: Vec<&mut [u8]> =
                        accumulators.iter_mut().map(|b| b.as_mut_slice()).collect();
                    self.code.encode_add(x % k, padded.as_ref(), &mut outs)?;
                }
            }
            let groups = layout.group_of(blocks.start)..=layout.group_of(blocks.end - 1);
            let closing: Vec<usize> = groups.filter(|&g| self.last_stripe(g) == stripe).collect();
            for group in closing {
                let buffers = parity.remove(&group).expect("a group's blocks were added");
                for (index, buf) in buffers.into_iter().enumerate() {
                    let unit = UnitId::Parity { group, index };
                    self.open(unit, 2)?;
                    let whole = buf.into_bytes();
                    self.parity_bytes += whole.len() as u64;
                    let mut at = 0;
                    while at < whole.len() {
                        let end = (at + cell as usize).min(whole.len());
                        self.send(unit, whole.slice(at..end))?;
                        at = end;
                    }
                    self.streams.remove(&unit);
                }
            }
        }
        Ok(())
    }
}

/// `r` zeroed, metered parity rows of `len` bytes: a group row's accumulators.
fn zero_rows(meter: &Arc<BufferMeter>, r: usize, len: usize) -> Vec<MeteredBuf> {
    (0..r).map(|_| MeteredBuf::new(meter, len)).collect()
}

/// The cells of stripe `stripe` in object order: (row, data block, offset in the block,
/// length). Row ρ holds one cell of every block of the stripe that is longer than ρ cells.
fn stripe_cells(
    layout: &StripedLayout,
    size: u64,
    stripe: usize,
) -> impl Iterator<Item = (u64, usize, u64, usize)> {
    let blocks = layout.stripe_blocks(size, stripe);
    let cell = layout.cell_bytes;
    let rows = layout.block_len(size, blocks.start).div_ceil(cell);
    let layout = *layout;
    (0..rows).flat_map(move |row| {
        blocks.clone().filter_map(move |x| {
            let (offset, block_len) = (row * cell, layout.block_len(size, x));
            (offset < block_len).then(|| (row, x, offset, cell.min(block_len - offset) as usize))
        })
    })
}

/// Input of unknown length held in memory up to this many bytes; longer input is spooled.
pub const IN_MEMORY_PUT_BYTES: usize = 16 << 20;

/// An input of unknown length, taken whole.
enum Taken {
    InMemory(Bytes),
    /// An unnamed temporary file and how many bytes it holds.
    Spooled(std::fs::File, u64),
}

/// Reads `reader` to its end: into memory if it ends within [`IN_MEMORY_PUT_BYTES`], else
/// into an unnamed temporary file (blocking).
fn take_input<R: Read>(mut reader: R) -> Result<Taken> {
    let reading = |source| ClientError::Io { what: "reading the input".into(), source };
    let mut head = Vec::new();
    (&mut reader).take(IN_MEMORY_PUT_BYTES as u64 + 1).read_to_end(&mut head).map_err(reading)?;
    if head.len() <= IN_MEMORY_PUT_BYTES {
        return Ok(Taken::InMemory(Bytes::from(head)));
    }
    let spooling = |source| ClientError::Io {
        what: format!(
            "spooling the input to {} (an input of unknown length is taken whole before it is \
             placed; point TMPDIR at a disk with room)",
            std::env::temp_dir().display()
        ),
        source,
    };
    let mut file = tempfile::tempfile().map_err(spooling)?;
    file.write_all(&head).map_err(spooling)?;
    let mut spooled = head.len() as u64;
    drop(head);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(reading(e)),
        };
        file.write_all(&buf[..n]).map_err(spooling)?;
        spooled += n as u64;
    }
    Ok(Taken::Spooled(file, spooled))
}

/// How the coding thread ended.
enum OutcomeKind {
    /// Every byte was handed to the PUT streams.
    Sent,
    /// A PUT stream closed under it.
    Closed,
    /// It failed on its own (reading the object, coding).
    Failed,
}

/// A cell read from the object (`buf[start..start + len]`), holding one in-flight permit
/// until its last owner drops.
struct MeteredCell {
    buf: MeteredBuf,
    start: usize,
    len: usize,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for MeteredCell {
    fn as_ref(&self) -> &[u8] {
        &self.buf.as_ref()[self.start..self.start + self.len]
    }
}

impl MeteredCell {
    fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl Client {
    /// Stores the file at `path` as (bucket, key). A regular file is read in place (its
    /// size from its metadata, checked again against what is read); a pipe, FIFO, device or
    /// socket has no size up front and goes through [`Client::put_unsized`]. A directory is
    /// refused before anything is begun.
    pub async fn put_file(
        &self,
        bucket: &str,
        key: &str,
        path: &Path,
        options: &PutOptions,
    ) -> Result<PutStats> {
        let io = |what: String| move |source| ClientError::Io { what, source };
        let file =
            std::fs::File::open(path).map_err(io(format!("cannot open {}", path.display())))?;
        let metadata = file.metadata().map_err(io(format!("cannot stat {}", path.display())))?;
        if metadata.is_dir() {
            return Err(ClientError::Invalid(format!(
                "{} is a directory; a put stores one file (put each file of it under its own key)",
                path.display()
            )));
        }
        if !metadata.is_file() {
            return self.put_unsized(bucket, key, file, options).await;
        }
        let shown = path.display().to_string();
        self.put_retrying(bucket, key, options, move || {
            let mut attempt = file.try_clone().map_err(io(format!("cannot reopen {shown}")))?;
            attempt.rewind().map_err(io(format!("cannot rewind {shown}")))?;
            let size = attempt.metadata().map_err(io(format!("cannot stat {shown}")))?.len();
            Ok((size, attempt))
        })
        .await
    }

    /// Stores everything `reader` yields until its end, of a length not known up front (a
    /// pipe, stdin), as (bucket, key). Placement needs the size, so the input is first taken
    /// whole: up to [`IN_MEMORY_PUT_BYTES`] in memory, beyond that spooled to an unnamed temporary file in `$TMPDIR` (gone when the put
    /// ends, even if it crashes). Either copy can be re-read, so a write failed on a node is
    /// retried like [`Client::put_file`]'s. The stats name the bytes spooled.
    pub async fn put_unsized<R: Read + Send + 'static>(
        &self,
        bucket: &str,
        key: &str,
        reader: R,
        options: &PutOptions,
    ) -> Result<PutStats> {
        let taken = tokio::task::spawn_blocking(move || take_input(reader))
            .await
            .map_err(|e| ClientError::Invalid(format!("reading the input failed: {e}")))??;
        match taken {
            Taken::InMemory(bytes) => {
                self.put_retrying(bucket, key, options, move || {
                    Ok((bytes.len() as u64, std::io::Cursor::new(bytes.clone())))
                })
                .await
            }
            Taken::Spooled(file, spooled) => {
                let io = |what: &str| {
                    let what = what.to_string();
                    move |source| ClientError::Io { what, source }
                };
                let mut stats = self
                    .put_retrying(bucket, key, options, move || {
                        let mut attempt = file.try_clone().map_err(io("reopening the spool"))?;
                        attempt.rewind().map_err(io("rewinding the spool"))?;
                        Ok((spooled, attempt))
                    })
                    .await?;
                stats.spooled_bytes = spooled;
                Ok(stats)
            }
        }
    }

    /// Writes, beginning again avoiding the nodes a failed attempt blames (at most
    /// [`MAX_AVOIDED_NODES`]); `open` gives each attempt the size and a reader at the start.
    async fn put_retrying<R, F>(
        &self,
        bucket: &str,
        key: &str,
        options: &PutOptions,
        mut open: F,
    ) -> Result<PutStats>
    where
        R: Read + Send + 'static,
        F: FnMut() -> Result<(u64, R)>,
    {
        let mut avoid: Vec<u32> = Vec::new();
        loop {
            let (size, reader) = open()?;
            if let Some(progress) = &options.progress {
                progress.store(0, Ordering::Relaxed);
            }
            match self.put_attempt(bucket, key, size, reader, options, &avoid).await {
                Ok(stats) => return Ok(stats),
                Err((error, failed)) => {
                    let fresh: Vec<u32> =
                        failed.into_iter().filter(|n| !avoid.contains(n)).collect();
                    if fresh.is_empty() || avoid.len() >= MAX_AVOIDED_NODES {
                        return Err(error);
                    }
                    tracing::warn!(%error, nodes = ?fresh, "put failed on these nodes; retrying without them");
                    avoid.extend(fresh);
                }
            }
        }
    }

    /// Stores exactly `size` bytes read from `reader` as (bucket, key): a reader that ends
    /// sooner or yields more fails the write (nothing is committed). A reader cannot be
    /// rewound, so unlike [`Client::put_file`] a failed write is not retried.
    pub async fn put_reader<R: Read + Send + 'static>(
        &self,
        bucket: &str,
        key: &str,
        size: u64,
        reader: R,
        options: &PutOptions,
    ) -> Result<PutStats> {
        self.put_attempt(bucket, key, size, reader, options, &[]).await.map_err(|(e, _)| e)
    }

    /// One write, placed avoiding `avoid`; a failure also returns the nodes whose PUTs
    /// failed for reasons another node would not have (unreachable, disk failed).
    async fn put_attempt<R: Read + Send + 'static>(
        &self,
        bucket: &str,
        key: &str,
        size: u64,
        reader: R,
        options: &PutOptions,
        avoid: &[u32],
    ) -> Result<PutStats, (ClientError, Vec<u32>)> {
        let started = Instant::now();
        let object = self
            .meta
            .begin_with(bucket, key, size, options.policy.as_ref(), avoid, options.raidp)
            .await
            .map_err(|e| (e, Vec::new()))?;
        if object.raidp.is_some() {
            return self.put_raidp(object, size, reader, options, started).await;
        }
        let code = match object.layout.code.build() {
            Ok(code) => code,
            Err(error) => {
                self.abandon(bucket, key, object.generation, &[]).await;
                return Err((error.into(), Vec::new()));
            }
        };
        let meter = BufferMeter::new();
        let mut writer = Writer {
            handle: Handle::current(),
            client: self.clone(),
            object: object.clone(),
            code: Arc::clone(&code),
            reader,
            meter: Arc::clone(&meter),
            // Whole-block codes keep a stripe's cells until the stripe ends: no cap there.
            cell_permits: Arc::new(Semaphore::new(if code.byte_local() {
                in_flight_cells(&object.layout, options.coder)
            } else {
                Semaphore::MAX_PERMITS
            })),
            streams: HashMap::new(),
            puts: Vec::new(),
            progress: options.progress.clone(),
            parity_bytes: 0,
            coder: options.coder,
            phased: phased_cells(&object.layout, options.coder),
        };
        let whole = takes_whole(&object.layout, size, options.coder);
        let (writer, outcome) = tokio::task::spawn_blocking(move || {
            let outcome = if whole {
                writer.run_whole_object()
            } else if code.byte_local() {
                writer.run_byte_local()
            } else {
                writer.run_whole_blocks()
            }
            .and_then(|()| writer.check_input_ended());
            writer.streams.clear();
            (writer, outcome)
        })
        .await
        .map_err(|e| {
            (ClientError::Invalid(format!("the coding thread failed: {e}")), Vec::new())
        })?;
        let Writer { puts, parity_bytes, .. } = writer;
        let (mut first_error, closed, outcome_kind) = match outcome {
            Ok(()) => (None, None, OutcomeKind::Sent),
            Err(Stop::Failed(error)) => (Some(error), None, OutcomeKind::Failed),
            // The PUT task of that unit says why; if it does not, say which stream closed.
            Err(Stop::StreamClosed(unit)) => (None, Some(unit), OutcomeKind::Closed),
        };
        let mut written = Vec::new();
        let mut digests = BTreeMap::new();
        let mut failed_nodes = Vec::new();
        for (unit, task) in puts {
            let info = object.unit(unit).expect("opened units exist").clone();
            match task.await {
                Ok(Ok(digest)) => {
                    written.push(info);
                    digests.insert(unit, digest);
                }
                Ok(Err(failure)) => {
                    // Once the coding thread stopped, every other stream was cut short too:
                    // only the stream that closed first names a node at fault. When all data
                    // went out, every failure is the node's own.
                    let at_fault = match (&outcome_kind, closed) {
                        (OutcomeKind::Sent, _) => true,
                        (OutcomeKind::Closed, Some(first)) => first == unit,
                        _ => false,
                    };
                    if at_fault || failure.kind == crate::node::FailureKind::Unreachable {
                        failed_nodes.push(info.node_id);
                    }
                    let error = failure.for_unit(&info);
                    if at_fault {
                        // The cause beats the cut-short streams as the error reported.
                        first_error = Some(error);
                    } else {
                        first_error.get_or_insert(error);
                    }
                }
                Err(join) => {
                    first_error
                        .get_or_insert(ClientError::Invalid(format!("PUT task failed: {join}")));
                }
            }
        }
        if let (None, Some(unit)) = (&first_error, closed) {
            first_error = Some(ClientError::Invalid(format!(
                "the PUT of {} ended before the unit was sent",
                unit.short_name()
            )));
        }
        if let Some(error) = first_error {
            self.abandon(bucket, key, object.generation, &written).await;
            failed_nodes.sort_unstable();
            failed_nodes.dedup();
            return Err((error, failed_nodes));
        }
        let units = written.len();
        let terms = match options.commit_terms() {
            Ok(terms) => terms,
            Err(error) => {
                self.abandon(bucket, key, object.generation, &written).await;
                return Err((error, Vec::new()));
            }
        };
        let commit = self.meta.commit_with(bucket, key, object.generation, &digests, &terms);
        let (committed, replaced) = match commit.await {
            Ok(done) => done,
            Err(error) => {
                // The commit may have landed with only its answer lost: abandon() deletes
                // nothing unless meta confirms the write is still pending.
                self.abandon(bucket, key, object.generation, &written).await;
                return Err((error, Vec::new()));
            }
        };
        let leftover_units = match replaced {
            Some(old) => self.delete_units(&old.units.values().cloned().collect::<Vec<_>>()).await,
            None => 0,
        };
        Ok(PutStats {
            data_bytes: size,
            parity_bytes,
            bytes_sent: size + parity_bytes,
            peak_buffer_bytes: meter.peak(),
            buffer_bound_bytes: match whole {
                true => whole_object_bound(&committed.layout, size),
                false => buffer_bound(&committed.layout, options.coder),
            },
            okapi_buffer_bytes: max_client_buffer_bytes(&committed.layout),
            naive_buffer_bytes: naive_group_buffer_bytes(&committed.layout),
            units,
            elapsed: started.elapsed(),
            leftover_units,
            spooled_bytes: 0,
            object: committed,
        })
    }

    /// Gives up a write that failed after its begin: meta aborts it first, and only once meta
    /// confirmed (nothing references the units any more) are the units written deleted.
    /// When the abort fails (meta unreachable, or the write is no longer pending: a commit
    /// whose answer was lost may have landed), nothing is deleted: the write expires and the
    /// sweeper collects whatever no record names.
    async fn abandon(&self, bucket: &str, key: &str, generation: u64, written: &[UnitInfo]) {
        match self.meta.abort(bucket, key, generation).await {
            Ok(()) => {
                self.delete_units(written).await;
            }
            Err(error) => {
                tracing::warn!(%error, bucket, key, generation, "could not abort the write; its units are left to expiry and the sweeper");
            }
        }
    }

    /// Deletes units (best effort, concurrently); returns how many could not be deleted.
    pub async fn delete_units(&self, units: &[UnitInfo]) -> usize {
        let deletes = units.iter().map(|unit| {
            let nodes = self.nodes.clone();
            async move {
                let result = nodes.delete(unit).await;
                if let Err(failure) = &result {
                    tracing::warn!(unit = %unit.unit_key, node = unit.node_id, %failure, "unit left behind");
                }
                result.is_err()
            }
        });
        futures_util::future::join_all(deletes).await.into_iter().filter(|failed| *failed).count()
    }

    /// Deletes (bucket, key) from meta, then the units of what meta removed for good from
    /// the nodes (in a versioned bucket the object may stay as a version: see
    /// [`crate::Deletion`]). Returns what meta did and how many units could not be deleted
    /// (their nodes are down: garbage).
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(crate::Deletion, usize)> {
        self.delete_object_if(bucket, key, None).await
    }

    /// [`Client::delete_object`] of generation `generation` only, when given (meta answers
    /// 412 `precondition_failed` for another, deleting nothing).
    pub async fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        generation: Option<u64>,
    ) -> Result<(crate::Deletion, usize)> {
        let deletion = self.meta.delete_object_if(bucket, key, generation).await?;
        let units: Vec<UnitInfo> = match &deletion.removed {
            Some(object) => object.units.values().cloned().collect(),
            None => Vec::new(),
        };
        let left = self.delete_units(&units).await;
        Ok((deletion, left))
    }
}
