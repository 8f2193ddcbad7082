//! `weft ec`: erasure-code plain files with any weft code, no cluster (a better zfec).
//!
//! Invariants:
//! - A unit file holds exactly the unit's bytes and nothing else, so other tools can read it:
//!   data unit i < k is bytes `[i·L, (i+1)·L)` of the input, zero-padded past the input's end;
//!   parity unit i ≥ k is what [`Code::encode`] computes from those data units.
//! - `L = max(code.unit_len_for(N), code.unit_len_multiple())` is never 0, so an empty file
//!   still has units and round-trips.
//! - Every file appears atomically: written under a temporary name in its final directory,
//!   fsynced, renamed, then the directory fsynced. `encode` writes the manifest last and, with
//!   `--force`, removes the old manifest first, so a manifest never describes units that are not
//!   completely written. A failing command leaves no output file and no temporary file behind.
//! - Nothing read is trusted without its checksum. A unit segment that fails its crc32c, or is
//!   short or missing, is erased; every rebuilt byte is checked against the manifest before it
//!   is written.
//! - Memory is bounded: each unit is processed in windows of W bytes (default 1 MiB, a multiple
//!   of the segment size), with positioned reads and writes, so memory is about n·W whatever
//!   the file size. Limitation: codes that are not byte-local ([`Code::byte_local`] is false:
//!   sub-chunked codes such as Hitchhiker and Clay) couple bytes across a whole unit, so they
//!   are processed a whole unit at a time (W = L) and their erasures are per unit.
//! - A manifest is validated before any number in it sizes anything: S must be 65536, L must
//!   be exactly the L encode derives from N and the code (second invariant), and every
//!   checksum list must have ceil(L / S) entries. Then the manifest is checked against the
//!   files: `decode` and `repair` look at every unit's length first and refuse, before
//!   creating an output or allocating a window, when the units that are not exactly L bytes
//!   long are more than the code corrects; so a window of L bytes (W = L above) is only ever
//!   allocated when enough unit files really are L bytes long. Buffers are allocated
//!   fallibly: too little memory is an error, never an abort.
//! - A unit file shorter than L is truncated: its segments past the end are erased (as a
//!   missing segment). One longer than L is not the unit the manifest describes: all of it
//!   is erased, and every command reports it as damaged ("N bytes long, expected L").
//! - Only regular files are read or replaced, and nothing ever blocks on a file: unit files,
//!   the manifest and `encode`'s input are checked before they are opened (symbolic links
//!   are followed) and opened non-blocking, so a FIFO, device, socket or directory in their
//!   place is refused with an error naming it (a missing unit is still just lost). `decode`
//!   refuses an output path that is a FIFO, device or socket even with `--force`, and never
//!   opens an existing non-regular file at a temporary name.
//! - Every error is one line on stderr and a non-zero exit. A command refused for what it was
//!   given (a manifest that does not hold together or does not match the files, a path that
//!   is not a regular file, an output that must not be replaced) modifies nothing.
//! - For byte-local codes erasures are per segment: decode succeeds whenever, in every
//!   64 KiB segment position, the units that are bad there form a pattern the code corrects,
//!   even if more than r units are damaged in total.
//!
//! # On-disk format, version 1
//!
//! A directory written by `weft ec encode` holds n + 1 files:
//!
//! - `unit-XX` for every unit index i in `0..n` (n = k + r): `XX` is i in decimal, zero-padded
//!   to 2 digits, or to 3 digits when n > 100 (`unit-000` … `unit-100`). Exactly L bytes, the
//!   unit itself: no header, no trailer, no checksums.
//! - `manifest.json`: one JSON object (RFC 8259, UTF-8). weft writes the keys in the order
//!   below, one unit per line; readers must not rely on order or whitespace and ignore keys
//!   they do not know.
//!
//! | key             | JSON type         | meaning                                                    |
//! |-----------------|-------------------|------------------------------------------------------------|
//! | `format`        | string            | always `"weft-ec"`                                         |
//! | `version`       | integer           | `1`; a reader refuses any other version                    |
//! | `code`          | string            | the code's name as weft prints it: `"rs(10,4)"`, `"rep(3)"`; authoritative |
//! | `family`        | string            | the code family: `"rs"`, `"rep"`; must agree with `code`   |
//! | `k`             | integer           | data units; must agree with `code`                         |
//! | `r`             | integer           | parity units; must agree with `code` (`rep(3)` has k 1, r 2) |
//! | `original_len`  | integer           | N, the input's length in bytes                             |
//! | `unit_len`      | integer           | L ≥ 1, the smallest multiple of the code's unit_len_multiple with k·L ≥ N; a reader refuses any other value |
//! | `segment_bytes` | integer           | S = 65536, the checksum granularity; a reader refuses any other value |
//! | `checksum`      | string            | always `"crc32c"`                                          |
//! | `units`         | array of n objects| one per unit, in index order                               |
//!
//! Each element of `units` is `{"index": i, "file": "unit-XX", "segments": [...]}`: `index`
//! equals its position, `file` is a plain file name inside the directory, and `segments` holds
//! ceil(L / S) strings, one per segment: string j is the CRC-32C (Castagnoli, reflected
//! polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF, as in iSCSI and ext4) of
//! unit bytes `[j·S, min((j+1)·S, L))`, written as exactly 8 lowercase hex digits, most
//! significant first (`format!("{:08x}")`). Only the last segment may be shorter than S.
//!
//! Example, a 1000-byte file under `rep(3)`:
//!
//! ```text
//! {
//!   "format": "weft-ec",
//!   "version": 1,
//!   "code": "rep(3)",
//!   "family": "rep",
//!   "k": 1,
//!   "r": 2,
//!   "original_len": 1000,
//!   "unit_len": 1000,
//!   "segment_bytes": 65536,
//!   "checksum": "crc32c",
//!   "units": [
//!     {"index":0,"file":"unit-00","segments":["3f5a2c01"]},
//!     {"index":1,"file":"unit-01","segments":["3f5a2c01"]},
//!     {"index":2,"file":"unit-02","segments":["3f5a2c01"]}
//!   ]
//! }
//! ```
//!
//! # `repair --json`
//!
//! One line: `{"unit":I,"code":"rs(10,4)","unit_len":L,"reads":[{"unit":u,"offset":o,"len":l},
//! …],"bytes_read":N,"io_bytes":M,"discarded_reads":[…],"skipped":[…]}`. `reads` are the ranges
//! the rebuild used (in unit coordinates, sorted, touching ranges merged, so a whole unit read
//! window by window is one range) and `bytes_read` is their sum. `discarded_reads` are ranges
//! read and then rejected because a segment failed its checksum, each with a `reason`;
//! `skipped` lists every unit avoided and why. `io_bytes` is everything read from disk: the
//! reads, the discarded reads, and any widening of partial ranges to whole segments so their
//! checksums can be checked (zero extra for α = 1 codes).

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, IsTerminal, Read};
use std::ops::Range;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use weft_codes::{Code, CodeSpec, ReadRange, RepairPlan};

use crate::{cli_error, parse_size, CliError};

/// Name of the manifest inside an encoded directory.
const MANIFEST_FILE: &str = "manifest.json";
/// The manifest's `format` value.
const FORMAT_NAME: &str = "weft-ec";
/// The manifest version this code writes and the only one it reads.
const FORMAT_VERSION: u32 = 1;
/// The manifest's `checksum` value.
const CHECKSUM_NAME: &str = "crc32c";
/// Checksum granularity: one crc32c per this many bytes of every unit.
const SEGMENT_BYTES: usize = 64 * 1024;
/// Encode and decode show a progress bar for inputs larger than this.
const PROGRESS_MIN_BYTES: usize = 64 << 20;
/// Unit indices are written with 3 digits instead of 2 above this many units.
const TWO_DIGIT_MAX_UNITS: usize = 100;
/// A manifest larger than this is not one weft wrote (256 units × a 1 TiB unit is ~200 MiB of
/// checksums; anything bigger is refused rather than read into memory).
const MAX_MANIFEST_BYTES: u64 = 256 << 20;
/// `verify` reads each unit this many bytes at a time (rounded up to whole segments).
const VERIFY_READ_BYTES: usize = 1 << 20;

/// Erasure-code plain files: no cluster, no daemon, just files in a directory.
#[derive(Debug, Subcommand)]
pub enum EcCommand {
    /// Cut FILE into k data units and r parity units in DIR, plus DIR/manifest.json.
    ///
    /// Data unit i holds bytes [i·L, (i+1)·L) of FILE, zero-padded at the end; parity units
    /// hold the code's parity. Unit files contain exactly those bytes (no header), so other
    /// tools can read them; manifest.json records the code, the lengths and a crc32c per
    /// 64 KiB segment of every unit. Files appear atomically, the manifest last. Memory stays
    /// near n × WINDOW however large FILE is.
    ///
    /// Examples:
    ///   weft ec encode photo.raw --code rs --k 10 --r 4 -o photo.ec   # 14 units, any 4 may be lost
    ///   weft ec encode notes.txt --code 'rs(6,3)' -o notes.ec
    ///   weft ec encode db.bin --code rep --r 2 -o db.ec               # 3 copies
    ///   weft ec encode big.bin --code clay --k 10 --r 4 -o big.ec      # a repair reads 3.25 units
    ///   weft ec encode log.bin --code hh-xor+ --k 10 --r 4 -o log.ec   # a repair reads 6.5 units
    #[command(verbatim_doc_comment)]
    Encode(EncodeArgs),

    /// Rebuild the original file from DIR, even when units are missing or corrupt.
    ///
    /// Every segment read is checked against the manifest; a bad segment counts as lost for
    /// that part of the file only, so many units damaged in different places can still be
    /// decoded as long as the code can correct each part. Rebuilt data is verified before it
    /// is written; the output appears atomically and only if everything was recovered.
    ///
    /// Example:
    ///   weft ec decode photo.ec -o photo.raw
    #[command(verbatim_doc_comment)]
    Decode(DecodeArgs),

    /// Rebuild one unit file in DIR, reading only the byte ranges the code's repair plan names.
    ///
    /// Missing units and units whose checksums fail are avoided; the rebuilt unit is verified
    /// against the manifest before it replaces DIR/unit-XX. Reports which bytes were read from
    /// which units (--json: one line, {"unit":I,"reads":[{"unit":u,"offset":o,"len":l},…],
    /// "bytes_read":N,…}).
    ///
    /// Example:
    ///   weft ec repair photo.ec --unit 3 --json
    #[command(verbatim_doc_comment)]
    Repair(RepairArgs),

    /// Check every segment of every unit in DIR against the manifest.
    ///
    /// Reports which units are missing or corrupt (and where) and whether the set can still
    /// be decoded. Exits 0 only when every unit is intact.
    ///
    /// Example:
    ///   weft ec verify photo.ec --json
    #[command(verbatim_doc_comment)]
    Verify(VerifyArgs),

    /// Show what repairing each unit of a code reads, beside rs(k,r) with the same k and r.
    ///
    /// For every unit: the helpers, the bytes read as a multiple of one unit's size, and the
    /// contiguous ranges read per helper; then the averages over data units and over all
    /// units. No files are involved: this is the code's repair plan, the same one `weft ec
    /// repair` follows.
    ///
    /// Examples:
    ///   weft ec repair-cost --code hh-xor+ --k 10 --r 4
    ///   weft ec repair-cost --code clay --k 8 --r 4 --d 11 --json
    ///   weft ec repair-cost --code lrc --k 10 --l 2 --g 2 --unavailable 1
    #[command(verbatim_doc_comment)]
    RepairCost(crate::repair_cost::RepairCostArgs),
}

/// Arguments of `weft ec encode`.
#[derive(Debug, Args)]
pub struct EncodeArgs {
    /// The file to encode.
    file: PathBuf,
    #[command(flatten)]
    code: crate::CodeArgs,
    /// Directory for the units and manifest.json (created if missing).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    output: PathBuf,
    /// Replace an existing encoding in DIR.
    #[arg(long)]
    force: bool,
    /// Bytes of each unit processed at a time (rounded up to 64 KiB); memory ≈ n × WINDOW.
    #[arg(long, value_name = "WINDOW", default_value = "1MiB", value_parser = parse_size)]
    window: usize,
    /// Print one JSON line describing the result instead of a sentence (no progress bar).
    #[arg(long)]
    json: bool,
}

/// Arguments of `weft ec decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// Directory written by `weft ec encode`.
    dir: PathBuf,
    /// Where to write the rebuilt file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
    /// Bytes of each unit processed at a time (rounded up to 64 KiB); memory ≈ n × WINDOW.
    #[arg(long, value_name = "WINDOW", default_value = "1MiB", value_parser = parse_size)]
    window: usize,
    /// Print one JSON line describing the result instead of a sentence (no progress bar).
    #[arg(long)]
    json: bool,
}

/// Arguments of `weft ec repair`.
#[derive(Debug, Args)]
pub struct RepairArgs {
    /// Directory written by `weft ec encode`.
    dir: PathBuf,
    /// Index of the unit to rebuild (0-based: unit-03 is 3).
    #[arg(long)]
    unit: usize,
    /// Bytes of each unit processed at a time for codes with α = 1 (rounded up to 64 KiB).
    #[arg(long, value_name = "WINDOW", default_value = "1MiB", value_parser = parse_size)]
    window: usize,
    /// Print exactly one JSON line: {"unit":I,"reads":[…],"bytes_read":N,…}.
    #[arg(long)]
    json: bool,
}

/// Arguments of `weft ec verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Directory written by `weft ec encode`.
    dir: PathBuf,
    /// Print exactly one JSON line describing every unit.
    #[arg(long)]
    json: bool,
}

pub fn run(command: EcCommand) -> Result<(), CliError> {
    match command {
        EcCommand::Encode(args) => encode(&args),
        EcCommand::Decode(args) => decode(&args),
        EcCommand::Repair(args) => repair(&args),
        EcCommand::Verify(args) => verify(&args),
        EcCommand::RepairCost(args) => crate::repair_cost::run(&args),
    }
}

// ---------------------------------------------------------------------------------------------
// Codes, names, windows
// ---------------------------------------------------------------------------------------------

/// Parses a code name such as `rs(10,4)`.
fn parse_code_name(name: &str) -> Result<CodeSpec, CliError> {
    CodeSpec::parse(name).map_err(|e| cli_error!("{e}"))
}

/// `unit-07`, or `unit-007` when the code has more than 100 units.
fn unit_file_name(index: usize, total_units: usize) -> String {
    if total_units > TWO_DIGIT_MAX_UNITS {
        format!("unit-{index:03}")
    } else {
        format!("unit-{index:02}")
    }
}

/// The unit length for an input of `original_len` bytes: never 0.
fn unit_len_for(code: &dyn Code, original_len: usize) -> usize {
    code.unit_len_for(original_len).max(code.unit_len_multiple()).max(1)
}

/// Bytes of each unit one pass handles: `requested` rounded up to whole segments for
/// byte-local codes, the whole unit otherwise (sub-chunks couple bytes across the unit).
fn window_len(code: &dyn Code, unit_len: usize, segment_bytes: usize, requested: usize) -> usize {
    if !code.byte_local() {
        return unit_len;
    }
    let window = requested.max(1).div_ceil(segment_bytes).saturating_mul(segment_bytes);
    window.min(unit_len)
}

/// The (start, len) windows covering a unit, in order. Every start is a segment boundary.
fn windows(unit_len: usize, window: usize) -> impl Iterator<Item = (usize, usize)> {
    assert!(window > 0, "window must not be empty");
    (0..unit_len).step_by(window).map(move |start| (start, window.min(unit_len - start)))
}

/// Whether a plan reads every helper whole (what lets a byte-local repair run in windows).
fn plan_reads_whole_units(plan: &RepairPlan) -> bool {
    plan.reads.iter().all(|range| range.offset == 0 && range.len == plan.unit_len)
}

fn checksum_hex(bytes: &[u8]) -> String {
    format!("{:08x}", crc32c::crc32c(bytes))
}

/// "segment 4" or "segments 2, 5-7".
fn describe_segments(segments: &[usize]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut index = 0;
    while index < segments.len() {
        let first = segments[index];
        let mut last = first;
        while index + 1 < segments.len() && segments[index + 1] == last + 1 {
            index += 1;
            last = segments[index];
        }
        runs.push(if first == last { format!("{first}") } else { format!("{first}-{last}") });
        index += 1;
    }
    let plural = if segments.len() == 1 { "" } else { "s" };
    format!("segment{plural} {}", runs.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

fn io_error(action: &str, path: &Path, error: io::Error) -> CliError {
    cli_error!("cannot {action} {}: {error}", path.display())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// What a path that is not a regular file is, for an error message.
fn file_kind(file_type: fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// Why [`open_regular`] returned no file.
#[derive(Debug)]
enum OpenRegularError {
    /// Nothing at the path (a dangling symbolic link counts as nothing).
    NotFound(io::Error),
    /// A FIFO, device, socket or directory: what it is.
    NotRegular(&'static str),
    Io(io::Error),
}

/// Opens `path` for reading if it is a regular file (symbolic links are followed), and returns
/// its length. Anything else is refused before it is opened, so a FIFO never blocks the open
/// and a device is never touched; the open is also non-blocking and the opened file is checked
/// again, so a path swapped for a FIFO between the check and the open cannot hang us either.
/// (O_NONBLOCK stays set: it has no effect on regular files.)
fn open_regular(path: &Path) -> Result<(File, u64), OpenRegularError> {
    let classify = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => OpenRegularError::NotFound(e),
        _ => OpenRegularError::Io(e),
    };
    let metadata = fs::metadata(path).map_err(classify)?;
    if !metadata.is_file() {
        return Err(OpenRegularError::NotRegular(file_kind(metadata.file_type())));
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(classify)?;
    let metadata = file.metadata().map_err(OpenRegularError::Io)?;
    if !metadata.is_file() {
        return Err(OpenRegularError::NotRegular(file_kind(metadata.file_type())));
    }
    Ok((file, metadata.len()))
}

/// A zeroed buffer of `len` bytes, or an error instead of an abort when memory is short.
fn zeroed_buffer(len: usize, what: &str) -> Result<Vec<u8>, CliError> {
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(len)
        .map_err(|_| cli_error!("cannot allocate {len} bytes for {what}; nothing written"))?;
    buffer.resize(len, 0);
    Ok(buffer)
}

/// Makes renames and removals in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), CliError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("sync directory", dir, e))
}

/// A file written under a temporary name beside its final path and renamed into place only by
/// [`AtomicFile::commit`], so nobody ever sees it half written. Dropped uncommitted (any
/// error), the temporary file is removed.
#[derive(Debug)]
struct AtomicFile {
    file: File,
    temp_path: PathBuf,
    final_path: PathBuf,
    committed: bool,
}

impl AtomicFile {
    fn create(final_path: &Path) -> Result<AtomicFile, CliError> {
        let name = final_path
            .file_name()
            .ok_or_else(|| cli_error!("{} is not a file name", final_path.display()))?;
        let temp_name = format!(".{}.{}.weft-tmp", name.to_string_lossy(), std::process::id());
        let temp_path = parent_dir(final_path).join(temp_name);
        let not_regular = |kind: &str| {
            cli_error!(
                "{} is {kind}, not a regular file; refusing to write through it",
                temp_path.display()
            )
        };
        // Never write into whatever already sits at the temporary name unless it is a plain
        // file: no following a symbolic link, no blocking on a FIFO, no writing to a device.
        match fs::symlink_metadata(&temp_path) {
            Ok(metadata) if !metadata.is_file() => {
                return Err(not_regular(file_kind(metadata.file_type())))
            }
            _ => {}
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&temp_path)
            .map_err(|e| io_error("create", &temp_path, e))?;
        let metadata = file.metadata().map_err(|e| io_error("create", &temp_path, e))?;
        if !metadata.is_file() {
            return Err(not_regular(file_kind(metadata.file_type())));
        }
        Ok(AtomicFile { file, temp_path, final_path: final_path.to_path_buf(), committed: false })
    }

    fn write_at(&self, bytes: &[u8], offset: usize) -> Result<(), CliError> {
        self.file
            .write_all_at(bytes, offset as u64)
            .map_err(|e| io_error("write", &self.temp_path, e))
    }

    /// fsync, then rename into place. The caller fsyncs the directory (once for many files).
    fn commit(mut self) -> Result<(), CliError> {
        self.file.sync_all().map_err(|e| io_error("sync", &self.temp_path, e))?;
        fs::rename(&self.temp_path, &self.final_path)
            .map_err(|e| io_error("rename into place", &self.final_path, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.temp_path);
        }
    }
}

/// Reads up to `buf.len()` bytes at `offset`; fewer only at end of file.
fn read_at_most(file: &File, buf: &mut [u8], offset: usize) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], (offset + done) as u64) {
            Ok(0) => break,
            Ok(read) => done += read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

pub(crate) fn progress_bar(total_bytes: usize, quiet: bool, message: &'static str) -> ProgressBar {
    if quiet || total_bytes <= PROGRESS_MIN_BYTES || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total_bytes as u64);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .expect("the progress template is valid")
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(message);
    bar
}

// ---------------------------------------------------------------------------------------------
// Manifest
// ---------------------------------------------------------------------------------------------

/// `manifest.json` as stored; see the module documentation for the byte-level format.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Manifest {
    format: String,
    version: u32,
    code: String,
    family: String,
    k: usize,
    r: usize,
    original_len: u64,
    unit_len: u64,
    segment_bytes: u64,
    checksum: String,
    units: Vec<ManifestUnit>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct ManifestUnit {
    index: usize,
    file: String,
    segments: Vec<String>,
}

impl Manifest {
    /// Pretty enough to read, compact enough for thousands of segments: one unit per line.
    fn render(&self) -> String {
        let header = json!({
            "format": self.format,
            "version": self.version,
            "code": self.code,
            "family": self.family,
            "k": self.k,
            "r": self.r,
            "original_len": self.original_len,
            "unit_len": self.unit_len,
            "segment_bytes": self.segment_bytes,
            "checksum": self.checksum,
        });
        let mut text = String::from("{\n");
        // serde_json is built with preserve_order, so the header keeps the order above.
        for (key, value) in header.as_object().expect("the header is an object") {
            text.push_str(&format!("  {}: {},\n", json!(key), value));
        }
        text.push_str("  \"units\": [\n");
        for (position, unit) in self.units.iter().enumerate() {
            let line = serde_json::to_string(unit).expect("a manifest unit serializes");
            let comma = if position + 1 < self.units.len() { "," } else { "" };
            text.push_str(&format!("    {line}{comma}\n"));
        }
        text.push_str("  ]\n}\n");
        text
    }
}

/// An encoded directory whose manifest has been read and checked.
#[derive(Debug)]
struct UnitSet {
    dir: PathBuf,
    spec: CodeSpec,
    code: Arc<dyn Code>,
    original_len: usize,
    unit_len: usize,
    segment_bytes: usize,
    /// `checksums[unit][segment]`.
    checksums: Vec<Vec<u32>>,
    names: Vec<String>,
}

impl UnitSet {
    fn load(dir: &Path) -> Result<UnitSet, CliError> {
        let path = dir.join(MANIFEST_FILE);
        let not_encoded = || {
            cli_error!(
                "{} has no {MANIFEST_FILE}: not a directory written by `weft ec encode`",
                dir.display()
            )
        };
        let too_big = |len: u64| {
            cli_error!(
                "{} is {len} bytes, more than any weft manifest ({MAX_MANIFEST_BYTES})",
                path.display()
            )
        };
        let (file, len) = match open_regular(&path) {
            Ok(opened) => opened,
            Err(OpenRegularError::NotFound(_)) => return Err(not_encoded()),
            Err(OpenRegularError::NotRegular(kind)) => {
                return Err(cli_error!("{} is {kind}, not a regular file", path.display()))
            }
            Err(OpenRegularError::Io(e)) => return Err(io_error("read", &path, e)),
        };
        if len > MAX_MANIFEST_BYTES {
            return Err(too_big(len));
        }
        let mut bytes = Vec::new();
        file.take(MAX_MANIFEST_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error("read", &path, e))?;
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(too_big(bytes.len() as u64));
        }
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| cli_error!("{} is not a weft-ec manifest: {e}", path.display()))?;
        UnitSet::from_manifest(dir, &path, manifest)
    }

    fn from_manifest(dir: &Path, path: &Path, manifest: Manifest) -> Result<UnitSet, CliError> {
        let bad = |what: String| cli_error!("{} is damaged or not weft's: {what}", path.display());
        if manifest.format != FORMAT_NAME {
            return Err(bad(format!("format is {:?}, expected {FORMAT_NAME:?}", manifest.format)));
        }
        if manifest.version != FORMAT_VERSION {
            return Err(cli_error!(
                "{} has version {}; this weft reads version {FORMAT_VERSION} only",
                path.display(),
                manifest.version
            ));
        }
        if manifest.checksum != CHECKSUM_NAME {
            return Err(bad(format!(
                "checksum is {:?}, expected {CHECKSUM_NAME:?}",
                manifest.checksum
            )));
        }
        let spec = parse_code_name(&manifest.code).map_err(|e| bad(e.0))?;
        if spec.family() != manifest.family || spec.k() != manifest.k || spec.r() != manifest.r {
            return Err(bad(format!(
                "code {} disagrees with family {:?}, k {}, r {}",
                manifest.code, manifest.family, manifest.k, manifest.r
            )));
        }
        let code = spec.build().map_err(|e| bad(e.to_string()))?;
        let too_big = |what: &str| bad(format!("{what} does not fit in memory addresses"));
        let original_len =
            usize::try_from(manifest.original_len).map_err(|_| too_big("original_len"))?;
        let unit_len = usize::try_from(manifest.unit_len).map_err(|_| too_big("unit_len"))?;
        // Every later size (windows, buffers, offsets) derives from these numbers, so they are
        // pinned to the values encode writes: S is the format's constant and L follows from N.
        if manifest.segment_bytes != SEGMENT_BYTES as u64 {
            return Err(bad(format!(
                "segment_bytes is {}; version {FORMAT_VERSION} always uses {SEGMENT_BYTES}",
                manifest.segment_bytes
            )));
        }
        let segment_bytes = SEGMENT_BYTES;
        // No file is longer than i64::MAX bytes (and this keeps the arithmetic below exact).
        if manifest.original_len > i64::MAX as u64 {
            return Err(bad(format!("original_len {} is larger than any file", original_len)));
        }
        if unit_len == 0 || code.check_unit_len(unit_len).is_err() {
            return Err(bad(format!("unit_len {unit_len} is not a valid unit length for {spec}")));
        }
        let expected_unit_len = unit_len_for(code.as_ref(), original_len);
        if unit_len != expected_unit_len {
            return Err(bad(format!(
                "unit_len {unit_len} does not fit original_len {original_len}: {spec} cuts \
                 {original_len} bytes into units of {expected_unit_len}"
            )));
        }
        let n = code.total_units();
        if manifest.units.len() != n {
            return Err(bad(format!("{} units listed, {spec} has {n}", manifest.units.len())));
        }
        let segments = unit_len.div_ceil(segment_bytes);
        let mut checksums = Vec::with_capacity(n);
        let mut names: Vec<String> = Vec::with_capacity(n);
        for (position, unit) in manifest.units.iter().enumerate() {
            if unit.index != position {
                return Err(bad(format!("unit at position {position} has index {}", unit.index)));
            }
            // The name comes from a file anyone may edit: never let it leave the directory.
            let plain = !unit.file.is_empty()
                && unit.file != "."
                && unit.file != ".."
                && unit.file != MANIFEST_FILE
                && !unit.file.contains(['/', '\\', '\0']);
            if !plain || names.contains(&unit.file) {
                return Err(bad(format!("unit {position} has file name {:?}", unit.file)));
            }
            if unit.segments.len() != segments {
                return Err(bad(format!(
                    "unit {position} lists {} segment checksums, {segments} expected",
                    unit.segments.len()
                )));
            }
            let parsed: Option<Vec<u32>> = unit
                .segments
                .iter()
                .map(|hex| {
                    let valid = hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit());
                    valid.then(|| u32::from_str_radix(hex, 16).ok()).flatten()
                })
                .collect();
            let parsed = parsed.ok_or_else(|| {
                bad(format!("unit {position} has a checksum that is not 8 hex digits"))
            })?;
            checksums.push(parsed);
            names.push(unit.file.clone());
        }
        Ok(UnitSet {
            dir: dir.to_path_buf(),
            spec,
            code,
            original_len,
            unit_len,
            segment_bytes,
            checksums,
            names,
        })
    }

    fn total_units(&self) -> usize {
        self.code.total_units()
    }

    fn unit_path(&self, unit: usize) -> PathBuf {
        self.dir.join(&self.names[unit])
    }

    /// Opens every unit file and checks it against the manifest: a missing one is `Missing`,
    /// one that fails to open `Unreadable`, one longer than `unit_len` `TooLong`. A unit that
    /// is not a regular file (FIFO, device, socket, directory) is refused outright: it is not
    /// a damaged unit but something that must not be read (a FIFO would block forever).
    fn open_units(&self) -> Result<Vec<UnitFile>, CliError> {
        (0..self.total_units())
            .map(|unit| {
                let path = self.unit_path(unit);
                Ok(match open_regular(&path) {
                    Ok((_, len)) if len > self.unit_len as u64 => UnitFile::TooLong(len),
                    Ok((file, len)) => UnitFile::Present { file, len },
                    Err(OpenRegularError::NotFound(_)) => UnitFile::Missing,
                    Err(OpenRegularError::Io(e)) => UnitFile::Unreadable(e.to_string()),
                    Err(OpenRegularError::NotRegular(kind)) => {
                        return Err(cli_error!(
                            "unit {unit} ({}) is {kind}, not a regular file; move it away \
                             (a missing unit counts as lost); nothing read or written",
                            path.display()
                        ))
                    }
                })
            })
            .collect()
    }

    /// Why a unit file cannot be used whole, from its length alone (nothing is read): `None`
    /// when it is exactly `unit_len` bytes long.
    fn unusable(&self, file: &UnitFile) -> Option<String> {
        let unit_len = self.unit_len;
        match file {
            UnitFile::Present { len, .. } if *len == unit_len as u64 => None,
            UnitFile::Present { len, .. } => Some(format!("truncated ({len} of {unit_len} bytes)")),
            UnitFile::TooLong(len) => Some(too_long(*len, unit_len)),
            UnitFile::Missing => Some("missing".into()),
            UnitFile::Unreadable(error) => Some(format!("unreadable ({error})")),
        }
    }

    /// Reads unit bytes `[start, start + buf.len())` (`start` on a segment boundary) into `buf`
    /// and checks every segment they cover. The contents of `buf` are unspecified in segments
    /// that are not intact.
    fn read_window(
        &self,
        unit: usize,
        file: &UnitFile,
        start: usize,
        buf: &mut [u8],
    ) -> WindowCheck {
        debug_assert_eq!(start % self.segment_bytes, 0);
        let segment_count = buf.len().div_ceil(self.segment_bytes);
        let whole = |state| WindowCheck { states: vec![state; segment_count], error: None };
        let got = match file {
            UnitFile::Missing => return whole(SegmentState::Missing),
            UnitFile::Unreadable(error) => {
                return WindowCheck {
                    error: Some(error.clone()),
                    ..whole(SegmentState::Unreadable)
                }
            }
            UnitFile::TooLong(len) => {
                return WindowCheck {
                    error: Some(too_long(*len, self.unit_len)),
                    ..whole(SegmentState::TooLong)
                }
            }
            // Nothing to read past the end of a short file.
            UnitFile::Present { len, .. } if start as u64 >= *len => {
                return whole(SegmentState::Short)
            }
            UnitFile::Present { file, .. } => match read_at_most(file, buf, start) {
                Ok(got) => got,
                Err(e) => {
                    return WindowCheck {
                        error: Some(e.to_string()),
                        ..whole(SegmentState::Unreadable)
                    }
                }
            },
        };
        buf[got..].fill(0);
        let first_segment = start / self.segment_bytes;
        let states = buf
            .chunks(self.segment_bytes)
            .enumerate()
            .map(|(position, bytes)| {
                let end = position * self.segment_bytes + bytes.len();
                if end > got {
                    SegmentState::Short
                } else if crc32c::crc32c(bytes) != self.checksums[unit][first_segment + position] {
                    SegmentState::Corrupt
                } else {
                    SegmentState::Intact
                }
            })
            .collect();
        WindowCheck { states, error: None }
    }

    /// Checks rebuilt unit bytes starting at `start` (a segment boundary) against the
    /// manifest; the error names the first segment that differs.
    fn verify_rebuilt(&self, unit: usize, start: usize, bytes: &[u8]) -> Result<(), CliError> {
        let first_segment = start / self.segment_bytes;
        for (position, segment) in bytes.chunks(self.segment_bytes).enumerate() {
            if crc32c::crc32c(segment) != self.checksums[unit][first_segment + position] {
                return Err(cli_error!(
                    "rebuilt {} segment {} does not match its checksum in {}: some unit is \
                     damaged in a way its checksums did not show, or the manifest is wrong; \
                     nothing written",
                    self.names[unit],
                    first_segment + position,
                    MANIFEST_FILE
                ));
            }
        }
        Ok(())
    }
}

/// One unit file as found on disk, checked against the manifest.
#[derive(Debug)]
enum UnitFile {
    /// A regular file of `len` ≤ `unit_len` bytes; segments past its end are `Short`.
    Present {
        file: File,
        len: u64,
    },
    /// A regular file longer than `unit_len` (its length): not the unit the manifest
    /// describes, so none of it is used.
    TooLong(u64),
    Missing,
    Unreadable(String),
}

/// "75001 bytes long, expected 75000".
fn too_long(len: u64, unit_len: usize) -> String {
    format!("{len} bytes long, expected {unit_len}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SegmentState {
    Intact,
    Missing,
    Unreadable,
    /// The unit file ends before this segment does.
    Short,
    /// The unit file is longer than `unit_len`, so none of it is used.
    TooLong,
    Corrupt,
}

/// The segments one window of one unit covers, and the IO error if it could not be read (or,
/// for `TooLong`, the unit's length).
#[derive(Debug, Clone)]
struct WindowCheck {
    states: Vec<SegmentState>,
    error: Option<String>,
}

/// What is wrong with one unit, gathered over the segments looked at.
#[derive(Debug, Default, Clone)]
struct UnitDamage {
    missing: bool,
    unreadable: Option<String>,
    too_long: Option<String>,
    short: Vec<usize>,
    corrupt: Vec<usize>,
}

impl UnitDamage {
    /// Adds the states of `check` for window segments `positions`; `first_segment` is the
    /// unit segment index of window position 0.
    fn record(&mut self, check: &WindowCheck, first_segment: usize, positions: Range<usize>) {
        for position in positions {
            let segment = first_segment + position;
            match check.states[position] {
                SegmentState::Intact => {}
                SegmentState::Missing => self.missing = true,
                SegmentState::Unreadable => {
                    self.unreadable = Some(check.error.clone().unwrap_or_default());
                }
                SegmentState::TooLong => self.too_long = check.error.clone(),
                SegmentState::Short => self.short.push(segment),
                SegmentState::Corrupt => self.corrupt.push(segment),
            }
        }
    }

    fn is_damaged(&self) -> bool {
        self.missing
            || self.unreadable.is_some()
            || self.too_long.is_some()
            || !self.short.is_empty()
            || !self.corrupt.is_empty()
    }

    /// "missing", "corrupt in segment 2", "truncated (segments 3-9 absent)", ...
    fn describe(&self) -> String {
        if self.missing {
            return "missing".into();
        }
        let mut parts = Vec::new();
        if let Some(error) = &self.unreadable {
            parts.push(format!("unreadable ({error})"));
        }
        if let Some(length) = &self.too_long {
            parts.push(length.clone());
        }
        if !self.corrupt.is_empty() {
            parts.push(format!("corrupt in {}", describe_segments(&self.corrupt)));
        }
        if !self.short.is_empty() {
            parts.push(format!("truncated ({} absent)", describe_segments(&self.short)));
        }
        parts.join(" and ")
    }
}

/// Remembers which erasure patterns the code corrects (solving one can cost O(k³)).
#[derive(Debug)]
struct Decodability<'a> {
    code: &'a dyn Code,
    known: HashMap<Vec<usize>, bool>,
}

impl<'a> Decodability<'a> {
    fn new(code: &'a dyn Code) -> Self {
        Decodability { code, known: HashMap::new() }
    }

    fn check(&mut self, lost: &[usize]) -> bool {
        if lost.is_empty() {
            return true;
        }
        if let Some(&known) = self.known.get(lost) {
            return known;
        }
        let decodable = self.code.is_decodable(lost);
        self.known.insert(lost.to_vec(), decodable);
        decodable
    }
}

/// Runs of window segments that share one erasure pattern. A unit not read (`None`) counts as
/// lost. For codes that are not byte-local one run covers the whole window, erasing a unit if
/// any of its segments is bad.
fn erasure_runs(
    checks: &[Option<WindowCheck>],
    byte_local: bool,
    segment_count: usize,
) -> Vec<(Range<usize>, Vec<usize>)> {
    let lost_in = |positions: Range<usize>| -> Vec<usize> {
        (0..checks.len())
            .filter(|&unit| match &checks[unit] {
                None => true,
                Some(check) => {
                    check.states[positions.clone()].iter().any(|&s| s != SegmentState::Intact)
                }
            })
            .collect()
    };
    if !byte_local {
        return vec![(0..segment_count, lost_in(0..segment_count))];
    }
    let mut runs: Vec<(Range<usize>, Vec<usize>)> = Vec::new();
    for position in 0..segment_count {
        let lost = lost_in(position..position + 1);
        match runs.last_mut() {
            Some((range, previous)) if *previous == lost => range.end = position + 1,
            _ => runs.push((position..position + 1, lost)),
        }
    }
    runs
}

// ---------------------------------------------------------------------------------------------
// encode
// ---------------------------------------------------------------------------------------------

fn encode(args: &EncodeArgs) -> Result<(), CliError> {
    // Everything that can be refused is refused before the first byte is written.
    let spec = args.code.spec()?;
    let code = spec.build().map_err(|e| cli_error!("{e}"))?;
    let (input, input_len) = open_regular(&args.file).map_err(|e| match e {
        OpenRegularError::NotFound(e) | OpenRegularError::Io(e) => {
            io_error("open input file", &args.file, e)
        }
        OpenRegularError::NotRegular(kind) => {
            cli_error!("{} is {kind}, not a regular file", args.file.display())
        }
    })?;
    let original_len = usize::try_from(input_len)
        .map_err(|_| cli_error!("{} is too large for this machine", args.file.display()))?;
    let k = code.data_units();
    let n = code.total_units();
    let unit_len = unit_len_for(code.as_ref(), original_len);
    code.check_unit_len(unit_len).map_err(|e| cli_error!("{e}"))?;
    let window = window_len(code.as_ref(), unit_len, SEGMENT_BYTES, args.window);
    let mut buffers: Vec<Vec<u8>> =
        (0..n).map(|_| zeroed_buffer(window, "the encode window")).collect::<Result<_, _>>()?;

    let dir = &args.output;
    if dir.exists() && !dir.is_dir() {
        return Err(cli_error!("{} exists and is not a directory", dir.display()));
    }
    let manifest_path = dir.join(MANIFEST_FILE);
    if manifest_path.exists() {
        if !args.force {
            return Err(cli_error!(
                "{} already holds an encoding ({MANIFEST_FILE}); pass --force to replace it",
                dir.display()
            ));
        }
        // Old manifest first: it must never describe the new, half-written units.
        fs::remove_file(&manifest_path).map_err(|e| io_error("remove", &manifest_path, e))?;
        sync_dir(dir)?;
    }
    fs::create_dir_all(dir).map_err(|e| io_error("create directory", dir, e))?;

    let names: Vec<String> = (0..n).map(|unit| unit_file_name(unit, n)).collect();
    let outputs = names
        .iter()
        .map(|name| AtomicFile::create(&dir.join(name)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut checksums: Vec<Vec<String>> =
        vec![Vec::with_capacity(unit_len.div_ceil(SEGMENT_BYTES)); n];
    let bar = progress_bar(original_len, args.json, "encoding");
    for (start, len) in windows(unit_len, window) {
        for (unit, buffer) in buffers.iter_mut().take(k).enumerate() {
            let buffer = &mut buffer[..len];
            let file_start = (unit * unit_len + start).min(original_len);
            let file_end = (unit * unit_len + start + len).min(original_len);
            let present = file_end - file_start;
            input.read_exact_at(&mut buffer[..present], file_start as u64).map_err(|e| {
                cli_error!(
                    "cannot read {} (did it shrink while encoding?): {e}",
                    args.file.display()
                )
            })?;
            buffer[present..].fill(0);
            bar.inc(present as u64);
        }
        let (data, parity) = buffers.split_at_mut(k);
        let data: Vec<&[u8]> = data.iter().map(|b| &b[..len]).collect();
        let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|b| &mut b[..len]).collect();
        code.encode(&data, &mut parity).map_err(|e| cli_error!("{e}"))?;
        for (unit, output) in outputs.iter().enumerate() {
            let bytes = &buffers[unit][..len];
            checksums[unit].extend(bytes.chunks(SEGMENT_BYTES).map(checksum_hex));
            output.write_at(bytes, start)?;
        }
    }
    bar.finish_and_clear();
    for output in outputs {
        output.commit()?;
    }
    sync_dir(dir)?;

    let manifest = Manifest {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        code: spec.to_string(),
        family: spec.family().into(),
        k: spec.k(),
        r: spec.r(),
        original_len: original_len as u64,
        unit_len: unit_len as u64,
        segment_bytes: SEGMENT_BYTES as u64,
        checksum: CHECKSUM_NAME.into(),
        units: names
            .iter()
            .zip(checksums)
            .enumerate()
            .map(|(index, (file, segments))| ManifestUnit { index, file: file.clone(), segments })
            .collect(),
    };
    let manifest_file = AtomicFile::create(&manifest_path)?;
    manifest_file.write_at(manifest.render().as_bytes(), 0)?;
    manifest_file.commit()?;
    sync_dir(dir)?;

    if args.json {
        let line = json!({
            "dir": dir.display().to_string(),
            "code": spec.to_string(),
            "original_len": original_len,
            "unit_len": unit_len,
            "units": names,
        });
        println!("{line}");
    } else {
        println!(
            "encoded {} ({original_len} bytes) with {spec} into {}: {n} units of {unit_len} \
             bytes, {} to {}; any {} may be lost",
            args.file.display(),
            dir.display(),
            names[0],
            names[n - 1],
            code.parity_units()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// decode
// ---------------------------------------------------------------------------------------------

/// Refuses an output path that must not be replaced: a directory, anything that is not a
/// regular file or a symbolic link (a FIFO, a device: never written through, never replaced,
/// even with --force), and an existing file without --force. The output itself is written
/// under a temporary name and renamed over the path, so a symbolic link is replaced, not
/// followed.
fn check_output(path: &Path, force: bool) -> Result<(), CliError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("inspect", path, e)),
    };
    let file_type = metadata.file_type();
    if file_type.is_dir() || (file_type.is_symlink() && path.is_dir()) {
        return Err(cli_error!("{} is a directory; give a file name", path.display()));
    }
    if !file_type.is_file() && !file_type.is_symlink() {
        return Err(cli_error!(
            "{} is {}, not a regular file; refusing to replace it",
            path.display(),
            file_kind(file_type)
        ));
    }
    if !force {
        return Err(cli_error!("{} exists; pass --force to replace it", path.display()));
    }
    Ok(())
}

/// "rs(4,2) recovers at most 2" or "… cannot recover this combination".
fn tolerance(set: &UnitSet, lost: usize) -> String {
    let limit = set.code.parity_units();
    if lost > limit {
        format!("{} recovers at most {limit}", set.spec)
    } else {
        format!("{} cannot recover this combination", set.spec)
    }
}

fn decode(args: &DecodeArgs) -> Result<(), CliError> {
    let set = UnitSet::load(&args.dir)?;
    check_output(&args.output, args.force)?;
    let code = set.code.as_ref();
    let (k, n) = (code.data_units(), code.total_units());
    let unit_len = set.unit_len;
    let segment_bytes = set.segment_bytes;
    let byte_local = code.byte_local();
    let window = window_len(code, unit_len, segment_bytes, args.window);
    let files = set.open_units()?;
    let mut decodability = Decodability::new(code);

    // The manifest against the files, before anything is created or sized from its numbers:
    // a unit that is not exactly unit_len bytes is lost at least in the last segment (a short
    // one there, a missing or too long one everywhere), so if those units are too many the
    // decode would fail there anyway. Say so now, from the lengths alone.
    let unusable: Vec<(usize, String)> = files
        .iter()
        .enumerate()
        .filter_map(|(unit, file)| set.unusable(file).map(|why| (unit, why)))
        .collect();
    let lost: Vec<usize> = unusable.iter().map(|&(unit, _)| unit).collect();
    if !decodability.check(&lost) {
        let list: Vec<String> =
            unusable.iter().map(|(unit, why)| format!("{} {why}", set.names[*unit])).collect();
        return Err(cli_error!(
            "cannot decode: {} units lost or corrupt ({}); {}; nothing written",
            lost.len(),
            list.join(", "),
            tolerance(&set, lost.len())
        ));
    }

    let mut buffers: Vec<Vec<u8>> =
        (0..n).map(|_| zeroed_buffer(window, "the decode window")).collect::<Result<_, _>>()?;
    let output = AtomicFile::create(&args.output)?;
    output
        .file
        .set_len(set.original_len as u64)
        .map_err(|e| io_error("size", &output.temp_path, e))?;
    let mut damage: BTreeMap<usize, UnitDamage> = BTreeMap::new();
    let mut rebuilt_bytes = 0usize;
    let bar = progress_bar(set.original_len, args.json, "decoding");
    for (start, len) in windows(unit_len, window) {
        let first_segment = start / segment_bytes;
        let segment_count = len.div_ceil(segment_bytes);
        // Data units first; parity only while some part of the window is still undecodable.
        let mut checks: Vec<Option<WindowCheck>> = vec![None; n];
        for unit in 0..n {
            if unit >= k {
                let runs = erasure_runs(&checks, byte_local, segment_count);
                if runs.iter().all(|(_, lost)| decodability.check(lost)) {
                    break;
                }
            }
            let check = set.read_window(unit, &files[unit], start, &mut buffers[unit][..len]);
            damage.entry(unit).or_default().record(&check, first_segment, 0..segment_count);
            checks[unit] = Some(check);
        }
        for (positions, lost) in erasure_runs(&checks, byte_local, segment_count) {
            if !decodability.check(&lost) {
                return Err(undecodable(
                    &set,
                    &checks,
                    first_segment,
                    positions,
                    &lost,
                    byte_local,
                ));
            }
            let wanted: Vec<usize> = lost.iter().copied().filter(|&unit| unit < k).collect();
            if wanted.is_empty() {
                continue;
            }
            let bytes = positions.start * segment_bytes..(positions.end * segment_bytes).min(len);
            let mut rebuilt: Vec<Vec<u8>> =
                wanted.iter().map(|&unit| std::mem::take(&mut buffers[unit])).collect();
            {
                let present: Vec<Option<&[u8]>> = (0..n)
                    .map(|unit| (!lost.contains(&unit)).then(|| &buffers[unit][bytes.clone()]))
                    .collect();
                let mut out: Vec<&mut [u8]> =
                    rebuilt.iter_mut().map(|b| &mut b[bytes.clone()]).collect();
                code.reconstruct(&present, &wanted, &mut out).map_err(|e| cli_error!("{e}"))?;
            }
            for (&unit, buffer) in wanted.iter().zip(rebuilt) {
                set.verify_rebuilt(unit, start + bytes.start, &buffer[bytes.clone()])?;
                buffers[unit] = buffer;
                rebuilt_bytes += bytes.len();
            }
        }
        for (unit, buffer) in buffers.iter().take(k).enumerate() {
            let file_start = (unit * unit_len + start).min(set.original_len);
            let file_end = (unit * unit_len + start + len).min(set.original_len);
            if file_start < file_end {
                output.write_at(&buffer[..file_end - file_start], file_start)?;
                bar.inc((file_end - file_start) as u64);
            }
        }
    }
    bar.finish_and_clear();
    output.commit()?;
    sync_dir(&parent_dir(&args.output))?;

    let damaged: Vec<(usize, String)> = damage
        .iter()
        .filter(|(_, d)| d.is_damaged())
        .map(|(&unit, d)| (unit, d.describe()))
        .collect();
    if args.json {
        let damaged: Vec<_> = damaged
            .iter()
            .map(|(unit, what)| json!({"unit": unit, "file": set.names[*unit], "problem": what}))
            .collect();
        let line = json!({
            "output": args.output.display().to_string(),
            "code": set.spec.to_string(),
            "original_len": set.original_len,
            "rebuilt_bytes": rebuilt_bytes,
            "damaged": damaged,
        });
        println!("{line}");
    } else {
        println!(
            "decoded {} into {} ({} bytes) with {}",
            set.dir.display(),
            args.output.display(),
            set.original_len,
            set.spec
        );
        if !damaged.is_empty() {
            let list: Vec<String> =
                damaged.iter().map(|(unit, what)| format!("{} {what}", set.names[*unit])).collect();
            println!(
                "rebuilt {rebuilt_bytes} data bytes from parity; damaged: {}. Run `weft ec \
                 repair` for each damaged unit to restore full protection.",
                list.join(", ")
            );
        }
    }
    Ok(())
}

/// The error for a part of the file the code cannot recover: which units, why, and how many
/// the code tolerates.
fn undecodable(
    set: &UnitSet,
    checks: &[Option<WindowCheck>],
    first_segment: usize,
    positions: Range<usize>,
    lost: &[usize],
    byte_local: bool,
) -> CliError {
    let list: Vec<String> = lost
        .iter()
        .map(|&unit| {
            let what = match &checks[unit] {
                None => "not read".to_string(),
                Some(check) => {
                    let mut damage = UnitDamage::default();
                    damage.record(check, first_segment, positions.clone());
                    damage.describe()
                }
            };
            format!("{} {what}", set.names[unit])
        })
        .collect();
    let place = if byte_local {
        let segments: Vec<usize> =
            (first_segment + positions.start..first_segment + positions.end).collect();
        format!(" in {}", describe_segments(&segments))
    } else {
        String::new()
    };
    cli_error!(
        "cannot decode: {} units lost or corrupt{place} ({}); {}; nothing written",
        lost.len(),
        list.join(", "),
        tolerance(set, lost.len())
    )
}

// ---------------------------------------------------------------------------------------------
// repair
// ---------------------------------------------------------------------------------------------

/// A unit the repair did not use, and why.
#[derive(Debug)]
struct Skipped {
    unit: usize,
    reason: String,
}

/// Bytes read from a helper and then thrown away because a segment failed its checksum.
#[derive(Debug)]
struct Discarded {
    range: ReadRange,
    reason: String,
}

fn repair(args: &RepairArgs) -> Result<(), CliError> {
    let set = UnitSet::load(&args.dir)?;
    let code = set.code.as_ref();
    let n = code.total_units();
    let target = args.unit;
    if target >= n {
        return Err(cli_error!(
            "there is no unit {target}: {} has units 0 to {} ({} to {})",
            set.spec,
            n - 1,
            set.names[0],
            set.names[n - 1]
        ));
    }
    let unit_len = set.unit_len;
    let segment_bytes = set.segment_bytes;
    let files = set.open_units()?;
    // Cheap checks first: a missing file, or one whose length is not unit_len, is unavailable
    // without reading a byte.
    let mut skipped: Vec<Skipped> = Vec::new();
    for (unit, file) in files.iter().enumerate().filter(|&(unit, _)| unit != target) {
        if let Some(reason) = set.unusable(file) {
            skipped.push(Skipped { unit, reason });
        }
    }
    let plan_for = |skipped: &[Skipped]| -> Result<RepairPlan, CliError> {
        let unavailable: Vec<usize> = skipped.iter().map(|s| s.unit).collect();
        code.repair_plan(target, &unavailable, unit_len).map_err(|e| {
            let list: Vec<String> =
                skipped.iter().map(|s| format!("{} {}", set.names[s.unit], s.reason)).collect();
            let lost = skipped.len() + 1;
            let tolerance = if lost > code.parity_units() {
                format!("{} recovers at most {}", set.spec, code.parity_units())
            } else {
                e.to_string()
            };
            cli_error!(
                "cannot repair {}: with it, {lost} units are lost or corrupt ({}); {tolerance}; \
                 nothing written",
                set.names[target],
                list.join(", ")
            )
        })
    };
    let first_plan = plan_for(&skipped)?;
    // Byte-local codes whose plans read whole units are repaired a window at a time; any
    // other plan (sub-chunk ranges) is carried out as given, on whole-unit buffers.
    let windowed = code.byte_local() && plan_reads_whole_units(&first_plan);
    let window =
        if windowed { window_len(code, unit_len, segment_bytes, args.window) } else { unit_len };

    let output = AtomicFile::create(&set.unit_path(target))?;
    let mut used: Vec<ReadRange> = Vec::new();
    let mut discarded: Vec<Discarded> = Vec::new();
    let mut io_bytes = 0usize;
    let mut rebuilt = zeroed_buffer(window, "the rebuilt unit")?;
    for (start, len) in windows(unit_len, window) {
        // Each pass either rebuilds the window or skips one more helper (and `plan_for` fails
        // once too many are skipped), so there are at most n passes.
        let mut window_rebuilt = false;
        // Ranges already read and verified in this window, so a re-plan does not read them again.
        let mut verified: HashMap<(usize, usize, usize), Vec<u8>> = HashMap::new();
        for _pass in 0..=n {
            let plan = plan_for(&skipped)?;
            let (ranges, window_plan) = if windowed {
                if !plan_reads_whole_units(&plan) {
                    return Err(cli_error!(
                        "{} gave a repair plan with partial ranges after whole-unit ones; \
                         cannot continue window by window",
                        set.spec
                    ));
                }
                let reads = |offset: usize| -> Vec<ReadRange> {
                    plan.reads.iter().map(|r| ReadRange { unit: r.unit, offset, len }).collect()
                };
                let window_plan = RepairPlan { target, unit_len: len, reads: reads(0) };
                (reads(start), window_plan)
            } else {
                (plan.reads.clone(), plan)
            };
            let mut rejected = None;
            for range in &ranges {
                let key = (range.unit, range.offset, range.len);
                if verified.contains_key(&key) {
                    continue;
                }
                let read = read_verified(&set, &files[range.unit], range)?;
                io_bytes += read.io_bytes;
                match read.result {
                    Ok(bytes) => {
                        verified.insert(key, bytes);
                    }
                    Err(reason) => {
                        rejected = Some((*range, reason));
                        break;
                    }
                }
            }
            if let Some((range, reason)) = rejected {
                discarded.push(Discarded { range, reason: reason.clone() });
                skipped.push(Skipped { unit: range.unit, reason });
                continue;
            }
            let reads: Vec<&[u8]> = ranges
                .iter()
                .map(|range| verified[&(range.unit, range.offset, range.len)].as_slice())
                .collect();
            code.repair(&window_plan, &reads, &mut rebuilt[..len])
                .map_err(|e| cli_error!("{e}"))?;
            set.verify_rebuilt(target, start, &rebuilt[..len])?;
            output.write_at(&rebuilt[..len], start)?;
            used.extend(ranges);
            window_rebuilt = true;
            break;
        }
        assert!(window_rebuilt, "every pass skips a helper, so planning fails before this");
    }
    output.commit()?;
    sync_dir(&set.dir)?;

    let reads = merge_ranges(used);
    let bytes_read: usize = reads.iter().map(|r| r.len).sum();
    let mut helpers: Vec<usize> = reads.iter().map(|r| r.unit).collect();
    helpers.dedup();
    if args.json {
        let line = json!({
            "unit": target,
            "code": set.spec.to_string(),
            "unit_len": unit_len,
            "reads": reads,
            "bytes_read": bytes_read,
            "io_bytes": io_bytes,
            "discarded_reads": discarded.iter().map(|d| json!({
                "unit": d.range.unit, "offset": d.range.offset, "len": d.range.len,
                "reason": d.reason,
            })).collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|s| json!({"unit": s.unit, "reason": s.reason}))
                .collect::<Vec<_>>(),
        });
        println!("{line}");
    } else {
        println!(
            "rebuilt {} ({unit_len} bytes, {}), verified against {MANIFEST_FILE}",
            set.names[target], set.spec
        );
        let list: Vec<String> = reads
            .iter()
            .map(|r| format!("{} [{}, {})", set.names[r.unit], r.offset, r.offset + r.len))
            .collect();
        println!("read {bytes_read} bytes from {} units: {}", helpers.len(), list.join(", "));
        if !skipped.is_empty() {
            let list: Vec<String> =
                skipped.iter().map(|s| format!("{} {}", set.names[s.unit], s.reason)).collect();
            println!("avoided: {}", list.join(", "));
        }
        if io_bytes != bytes_read {
            println!(
                "{io_bytes} bytes read from disk in all (checksum alignment, discarded reads)"
            );
        }
    }
    Ok(())
}

/// One helper range read for a repair.
#[derive(Debug)]
struct VerifiedRead {
    /// The range's bytes, or why they cannot be used.
    result: Result<Vec<u8>, String>,
    /// Bytes actually read from disk (the range widened to whole segments to check them).
    io_bytes: usize,
}

/// Reads `range` of a unit, widened to whole segments so every byte used is checked.
fn read_verified(
    set: &UnitSet,
    file: &UnitFile,
    range: &ReadRange,
) -> Result<VerifiedRead, CliError> {
    let end = range.offset.checked_add(range.len).filter(|&end| end <= set.unit_len);
    let Some(end) = end else {
        return Err(cli_error!(
            "{} planned to read {} bytes at {} of {}, past its end ({} bytes)",
            set.spec,
            range.len,
            range.offset,
            set.names[range.unit],
            set.unit_len
        ));
    };
    let aligned_start = range.offset / set.segment_bytes * set.segment_bytes;
    let aligned_end =
        end.div_ceil(set.segment_bytes).saturating_mul(set.segment_bytes).min(set.unit_len);
    let mut buffer = zeroed_buffer(aligned_end - aligned_start, "a repair read")?;
    let check = set.read_window(range.unit, file, aligned_start, &mut buffer);
    let io_bytes = match file {
        UnitFile::Present { .. } => buffer.len(),
        _ => 0,
    };
    let mut damage = UnitDamage::default();
    damage.record(&check, aligned_start / set.segment_bytes, 0..check.states.len());
    if damage.is_damaged() {
        return Ok(VerifiedRead { result: Err(damage.describe()), io_bytes });
    }
    buffer.truncate(end - aligned_start);
    buffer.drain(..range.offset - aligned_start);
    Ok(VerifiedRead { result: Ok(buffer), io_bytes })
}

/// Sorts ranges by unit and offset and joins the ones that touch, so a whole unit read window
/// by window reports as one range.
fn merge_ranges(mut ranges: Vec<ReadRange>) -> Vec<ReadRange> {
    ranges.sort_by_key(|r| (r.unit, r.offset));
    let mut merged: Vec<ReadRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if last.unit == range.unit && last.offset + last.len == range.offset => {
                last.len += range.len;
            }
            _ => merged.push(range),
        }
    }
    merged
}

// ---------------------------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------------------------

fn verify(args: &VerifyArgs) -> Result<(), CliError> {
    let set = UnitSet::load(&args.dir)?;
    let code = set.code.as_ref();
    let n = code.total_units();
    let segment_bytes = set.segment_bytes;
    let segment_count = set.unit_len.div_ceil(segment_bytes);
    let files = set.open_units()?;
    // Checking is per segment whatever the code, so any whole number of segments per read will
    // do: about 1 MiB keeps memory small.
    let window = VERIFY_READ_BYTES.div_ceil(segment_bytes).saturating_mul(segment_bytes);
    let mut buffer = vec![0u8; window.min(set.unit_len)];
    let mut states: Vec<Vec<SegmentState>> = Vec::with_capacity(n);
    let mut damage: Vec<UnitDamage> = Vec::with_capacity(n);
    let mut lengths: Vec<Option<u64>> = Vec::with_capacity(n);
    for (unit, file) in files.iter().enumerate() {
        let mut unit_states = Vec::with_capacity(segment_count);
        let mut unit_damage = UnitDamage::default();
        for (start, len) in windows(set.unit_len, buffer.len()) {
            let check = set.read_window(unit, file, start, &mut buffer[..len]);
            unit_damage.record(&check, start / segment_bytes, 0..check.states.len());
            unit_states.extend(check.states);
        }
        lengths.push(match file {
            UnitFile::Present { len, .. } | UnitFile::TooLong(len) => Some(*len),
            _ => None,
        });
        states.push(unit_states);
        damage.push(unit_damage);
    }
    // Decodable exactly when `decode` would succeed: per segment for byte-local codes, per
    // unit otherwise.
    let mut decodability = Decodability::new(code);
    let decodable = if code.byte_local() {
        (0..segment_count).all(|segment| {
            let lost: Vec<usize> =
                (0..n).filter(|&u| states[u][segment] != SegmentState::Intact).collect();
            decodability.check(&lost)
        })
    } else {
        let lost: Vec<usize> = (0..n).filter(|&u| damage[u].is_damaged()).collect();
        decodability.check(&lost)
    };
    let wrong_length = |unit: usize| lengths[unit].is_some_and(|len| len != set.unit_len as u64);
    let damaged: Vec<usize> =
        (0..n).filter(|&u| damage[u].is_damaged() || wrong_length(u)).collect();
    let describe = |unit: usize| -> String {
        if damage[unit].is_damaged() {
            damage[unit].describe()
        } else {
            format!("{} bytes long, expected {}", lengths[unit].unwrap_or(0), set.unit_len)
        }
    };

    if args.json {
        let units: Vec<_> = (0..n)
            .map(|unit| {
                let state = if damage[unit].missing {
                    "missing"
                } else if damaged.contains(&unit) {
                    "damaged"
                } else {
                    "intact"
                };
                let bad: Vec<usize> = (0..segment_count)
                    .filter(|&s| states[unit][s] != SegmentState::Intact)
                    .collect();
                json!({
                    "unit": unit,
                    "file": set.names[unit],
                    "state": state,
                    "len": lengths[unit],
                    "bad_segments": bad,
                    "problem": damaged.contains(&unit).then(|| describe(unit)),
                })
            })
            .collect();
        let line = json!({
            "dir": set.dir.display().to_string(),
            "code": set.spec.to_string(),
            "unit_len": set.unit_len,
            "segments_per_unit": segment_count,
            "intact": damaged.is_empty(),
            "decodable": decodable,
            "units": units,
        });
        println!("{line}");
    } else if damaged.is_empty() {
        println!("{}: all {n} units of {} intact", set.dir.display(), set.spec);
    } else {
        for &unit in &damaged {
            println!("{} {}", set.names[unit], describe(unit));
        }
    }
    if damaged.is_empty() {
        return Ok(());
    }
    if decodable {
        Err(cli_error!(
            "{} of {n} units damaged in {}; still decodable: `weft ec repair {} --unit I` \
             restores each",
            damaged.len(),
            set.dir.display(),
            set.dir.display()
        ))
    } else {
        Err(cli_error!(
            "{} of {n} units damaged in {}; NOT decodable: {} cannot recover this much loss",
            damaged.len(),
            set.dir.display(),
            set.spec
        ))
    }
}
