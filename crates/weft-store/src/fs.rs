//! The filesystem as a parameter: the few calls a disk makes, behind [`Fs`], so tests (and the
//! simulator) can inject faults. [`RealFs`] is std::fs; [`FaultyFs`] wraps it and fails the N-th
//! mutating call (with a generic IO error, or with an errno such as ENOSPC), and can pretend
//! the filesystem has any free and total space.
//!
//! Invariants:
//! - `rename_no_replace` never replaces an existing file: it fails with `AlreadyExists`.
//! - Every call that changes the disk (create, write, fsync, rename, remove, mkdir) is one of
//!   the [`FsOp`]s that [`FaultyFs`] counts; reads and listings are never failed by it.
//! - [`Fs::space`] is statvfs(3) of the filesystem holding a path: what `df` shows, with the
//!   blocks reserved for root counted neither as free nor as used.

use std::{
    ffi::OsString,
    fmt, fs, io,
    mem::MaybeUninit,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::SystemTime,
};

/// An open file. Positional reads and writes, so one handle serves concurrent readers.
pub trait FsFile: Send + Sync + fmt::Debug {
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `bufs` one after the other from `offset`, as if concatenated: one mutating
    /// call. The default writes them one by one; [`RealFs`]'s files use pwritev(2), so
    /// pieces received apart reach the page cache without being gathered first.
    fn write_all_vectored_at(&self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        for buf in bufs {
            self.write_all_at(buf, offset)?;
            offset += buf.len() as u64;
        }
        Ok(())
    }
    /// Fills `buf` from `offset`; `UnexpectedEof` if the file is shorter.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// [`FsFile::read_exact_at`] into memory not yet initialized: every byte of `buf` is
    /// written when this returns `Ok`. The default zeroes `buf` first; [`RealFs`]'s files
    /// pread(2) straight into it (a read of a unit then never clears its buffer first).
    fn read_exact_at_uninit(&self, buf: &mut [MaybeUninit<u8>], offset: u64) -> io::Result<()> {
        buf.fill(MaybeUninit::new(0));
        // SAFETY: every element was just initialized.
        self.read_exact_at(unsafe { assume_init_mut(buf) }, offset)
    }
    /// fsync: data and metadata durable.
    fn sync_all(&self) -> io::Result<()>;
    /// Cuts or extends the file to `len` bytes (ftruncate(2)): a mutating call.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Asks the kernel to start writing `[offset, offset + len)` back to the device now,
    /// without waiting (sync_file_range(2) with `SYNC_FILE_RANGE_WRITE` on [`RealFs`]), so
    /// the `sync_all` that makes a unit durable finds most of it written. A hint only: it
    /// promises nothing about durability, and its failure is not reported (a real write
    /// error surfaces at `sync_all`). The default does nothing.
    fn start_writeback(&self, _offset: u64, _len: u64) {}
    /// Current length in bytes.
    fn len_bytes(&self) -> io::Result<u64>;
    /// The open file's descriptor, for calls that move its bytes inside the kernel
    /// (sendfile(2) of a unit's segments to a socket). None (the default) for files that must
    /// be read through [`FsFile::read_exact_at`] (a [`FaultyFile`] injects its faults there).
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// The filesystem calls a disk makes.
pub trait Fs: Send + Sync + fmt::Debug {
    /// mkdir -p.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates a new file for reading and writing; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// [`Fs::create_new`] for a file written only in whole [`DIRECT_ALIGN`] blocks, at
    /// offsets and from memory aligned to it: [`RealFs`] opens it with O_DIRECT, so its
    /// writes go from the caller's buffer to the device without a copy into the page cache
    /// (and without the page cache's writeback work), where the filesystem supports it
    /// (tmpfs does not: a plain file then). Durability is still the file's `sync_all`. The
    /// default is `create_new`.
    fn create_new_direct(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.create_new(path)
    }
    /// Opens an existing file for reading.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Moves `from` to `to` atomically, failing with `AlreadyExists` if `to` exists.
    fn rename_no_replace(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// fsyncs a directory, making entries created or removed in it durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// The names of the entries of a directory.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>>;
    /// The length of a file in bytes (`NotFound` if there is none).
    fn file_len(&self, path: &Path) -> io::Result<u64>;
    /// The length of a file in bytes and when its contents were last modified (`NotFound`
    /// if there is none).
    fn file_meta(&self, path: &Path) -> io::Result<(u64, SystemTime)>;
    /// Free and total space of the filesystem holding `path`.
    fn space(&self, path: &Path) -> io::Result<Space>;
}

/// The space of a filesystem, as `df` shows it (statvfs(3)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Space {
    /// Bytes an unprivileged writer may still use (`f_bavail · f_frsize`).
    pub free_bytes: u64,
    /// Size of the filesystem (`f_blocks · f_frsize`).
    pub total_bytes: u64,
    /// Bytes in use (`(f_blocks − f_bfree) · f_frsize`).
    pub used_bytes: u64,
    /// Inodes an unprivileged writer may still create; `None` when the filesystem does not
    /// count inodes (reports 0 of 0).
    pub free_inodes: Option<u64>,
}

impl Space {
    /// The used fraction as `df` computes it: used / (used + free), so the blocks reserved for
    /// root count neither way; 0 for an empty filesystem.
    pub fn used_ratio(&self) -> f64 {
        let usable = self.used_bytes.saturating_add(self.free_bytes);
        if usable == 0 {
            0.0
        } else {
            self.used_bytes as f64 / usable as f64
        }
    }
}

/// statvfs(3) of the filesystem holding `path`.
// The field types differ between platforms (u64 on Linux x86-64, u32 elsewhere).
#[allow(clippy::unnecessary_cast)]
pub fn statvfs(path: &Path) -> io::Result<Space> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string and `stat` points to a statvfs that the
    // call fills in (it is only read after the call reports success).
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let stat = unsafe { stat.assume_init() };
    let fragment = (stat.f_frsize as u64).max(1);
    let blocks = stat.f_blocks as u64;
    let free_inodes = ((stat.f_files as u64) > 0).then_some(stat.f_favail as u64);
    Ok(Space {
        free_bytes: (stat.f_bavail as u64).saturating_mul(fragment),
        total_bytes: blocks.saturating_mul(fragment),
        used_bytes: blocks.saturating_sub(stat.f_bfree as u64).saturating_mul(fragment),
        free_inodes,
    })
}

/// The real filesystem (Unix).
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile(fs::File);

/// `buf` as initialized bytes.
///
/// # Safety
/// Every element of `buf` must be initialized.
pub(crate) unsafe fn assume_init_mut(buf: &mut [MaybeUninit<u8>]) -> &mut [u8] {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the caller vouches that every
    // element is initialized.
    unsafe { &mut *(buf as *mut [MaybeUninit<u8>] as *mut [u8]) }
}

/// The alignment of every write to a file from [`Fs::create_new_direct`]: its offsets,
/// lengths and buffer addresses are multiples of it (4096 covers devices of 512-byte and
/// 4 KiB logical blocks).
pub const DIRECT_ALIGN: usize = 4096;

/// Most buffers one pwritev(2) takes (IOV_MAX on Linux).
const IOV_MAX: usize = 1024;

impl FsFile for RealFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn write_all_vectored_at(&self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut slices: Vec<io::IoSlice<'_>> =
            bufs.iter().map(|buf| io::IoSlice::new(buf)).collect();
        let mut rest: &mut [io::IoSlice<'_>] = &mut slices;
        io::IoSlice::advance_slices(&mut rest, 0); // drops leading empty buffers
        while !rest.is_empty() {
            let count = rest.len().min(IOV_MAX);
            let offset_arg = libc::off_t::try_from(offset)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
            // SAFETY: `IoSlice` is ABI-compatible with `iovec` (std guarantees it on Unix);
            // the first `count` of them are valid for reads of their lengths for the whole
            // call, and pwritev only reads them.
            let written = unsafe {
                libc::pwritev(
                    self.0.as_raw_fd(),
                    rest.as_ptr().cast::<libc::iovec>(),
                    count as libc::c_int,
                    offset_arg,
                )
            };
            if written < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if written == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
            }
            offset += written as u64;
            io::IoSlice::advance_slices(&mut rest, written as usize);
        }
        Ok(())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn read_exact_at_uninit(
        &self,
        mut buf: &mut [MaybeUninit<u8>],
        mut offset: u64,
    ) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        while !buf.is_empty() {
            let offset_arg = libc::off_t::try_from(offset)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
            // SAFETY: `buf` is valid for writes of its length for the whole call; pread only
            // writes bytes into it (never reads them), and the bytes it reports written are
            // initialized from then on.
            let read = unsafe {
                libc::pread(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset_arg)
            };
            if read < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if read == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file is shorter"));
            }
            buf = &mut buf[read as usize..];
            offset += read as u64;
        }
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    #[cfg(target_os = "linux")]
    fn start_writeback(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (libc::off64_t::try_from(offset), libc::off64_t::try_from(len))
        else {
            return;
        };
        // SAFETY: a plain syscall on a file descriptor this handle owns; it reads no memory
        // of ours.
        let _ = unsafe {
            libc::sync_file_range(self.0.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.0.as_raw_fd())
    }
}

impl Fs for RealFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let file = fs::OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        Ok(Box::new(RealFile(file)))
    }
    #[cfg(target_os = "linux")]
    fn create_new_direct(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        match direct {
            Ok(file) => Ok(Box::new(RealFile(file))),
            // The filesystem refuses O_DIRECT (tmpfs): a plain file. Some filesystems create
            // the file before refusing, so it may exist now.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let _ = fs::remove_file(path);
                self.create_new(path)
            }
            Err(e) => Err(e),
        }
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        Ok(Box::new(RealFile(fs::File::open(path)?)))
    }
    /// `link` then `unlink`: link(2) fails atomically if the target exists, which rename(2)
    /// does not (renameat2's RENAME_NOREPLACE is Linux-only and not on every filesystem). A
    /// crash between the two leaves the temp name behind; `Disk::open` removes it.
    fn rename_no_replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)?;
        fs::remove_file(from)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        fs::File::open(path)?.sync_all()
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        fs::read_dir(path)?.map(|entry| entry.map(|e| e.file_name())).collect()
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }
    fn file_meta(&self, path: &Path) -> io::Result<(u64, SystemTime)> {
        let metadata = fs::metadata(path)?;
        Ok((metadata.len(), metadata.modified()?))
    }
    fn space(&self, path: &Path) -> io::Result<Space> {
        statvfs(path)
    }
}

/// A mutating filesystem call, as counted by [`FaultyFs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FsOp {
    CreateDir,
    Create,
    Write,
    Sync,
    Rename,
    Remove,
    SyncDir,
}

#[derive(Debug, Default)]
struct FaultState {
    /// Mutating calls left before the one that fails; `None`: never fail.
    countdown: Option<u64>,
    /// The errno the armed fault fails with; `None`: a generic "injected fault" error.
    errno: Option<i32>,
    /// What `space` answers instead of the real statvfs.
    space: Option<Space>,
    log: Vec<(FsOp, PathBuf)>,
    injected: Option<(FsOp, PathBuf)>,
}

/// Wraps [`RealFs`] and fails one chosen mutating call, for tests.
///
/// Clones share one state, so a test keeps a clone to arm faults and read the log while the
/// disk owns another. A failed `Write` first writes half its buffer (a torn write).
#[derive(Clone, Debug, Default)]
pub struct FaultyFs {
    inner: RealFs,
    state: Arc<Mutex<FaultState>>,
}

impl FaultyFs {
    /// No fault armed.
    pub fn new() -> FaultyFs {
        FaultyFs::default()
    }

    /// The `n`-th mutating call from now (1-based) fails; later calls succeed again.
    pub fn fail_nth(&self, n: u64) {
        assert!(n >= 1, "calls are counted from 1");
        let mut state = self.lock();
        state.countdown = Some(n);
        state.errno = None;
    }

    /// The `n`-th mutating call from now (1-based) fails with OS error `errno` (e.g.
    /// `libc::ENOSPC`); later calls succeed again.
    pub fn fail_nth_with(&self, n: u64, errno: i32) {
        assert!(n >= 1, "calls are counted from 1");
        let mut state = self.lock();
        state.countdown = Some(n);
        state.errno = Some(errno);
    }

    /// From now on `space` answers `space` (`None`: the real filesystem's again).
    pub fn set_space(&self, space: Option<Space>) {
        self.lock().space = space;
    }

    /// Disarms any pending fault.
    pub fn disarm(&self) {
        self.lock().countdown = None;
    }

    /// The mutating calls made so far, in order, including the failed one.
    pub fn log(&self) -> Vec<(FsOp, PathBuf)> {
        self.lock().log.clone()
    }

    /// Clears the log.
    pub fn clear_log(&self) {
        self.lock().log.clear();
    }

    /// The call that was made to fail, if one was.
    pub fn injected(&self) -> Option<(FsOp, PathBuf)> {
        self.lock().injected.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the call; `Err` if it is the one to fail.
    fn step(&self, op: FsOp, path: &Path) -> io::Result<()> {
        step(&self.state, op, path)
    }
}

fn step(state: &Mutex<FaultState>, op: FsOp, path: &Path) -> io::Result<()> {
    let mut state = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    state.log.push((op, path.to_path_buf()));
    match state.countdown {
        Some(1) => {
            state.countdown = None;
            state.injected = Some((op, path.to_path_buf()));
            match state.errno.take() {
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
                None => Err(io::Error::other(format!("injected fault: {op:?} {}", path.display()))),
            }
        }
        Some(n) => {
            state.countdown = Some(n - 1);
            Ok(())
        }
        None => Ok(()),
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: Box<dyn FsFile>,
    path: PathBuf,
    state: Arc<Mutex<FaultState>>,
}

impl FsFile for FaultyFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Err(fault) = step(&self.state, FsOp::Write, &self.path) {
            // Half, in whole aligned blocks when the write is (a direct file takes no less).
            let half = match buf.len().is_multiple_of(DIRECT_ALIGN) {
                true => buf.len() / 2 / DIRECT_ALIGN * DIRECT_ALIGN,
                false => buf.len() / 2,
            };
            self.inner.write_all_at(&buf[..half], offset)?;
            return Err(fault);
        }
        self.inner.write_all_at(buf, offset)
    }
    fn write_all_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        if let Err(fault) = step(&self.state, FsOp::Write, &self.path) {
            // As a failed write_all_at: the first half of the bytes got written.
            let first = bufs.iter().find(|buf| !buf.is_empty()).copied().unwrap_or_default();
            let total: usize = bufs.iter().map(|buf| buf.len()).sum();
            self.inner.write_all_at(&first[..first.len().min(total / 2)], offset)?;
            return Err(fault);
        }
        self.inner.write_all_vectored_at(bufs, offset)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn sync_all(&self) -> io::Result<()> {
        step(&self.state, FsOp::Sync, &self.path)?;
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        step(&self.state, FsOp::Write, &self.path)?;
        self.inner.set_len(len)
    }
    fn len_bytes(&self) -> io::Result<u64> {
        self.inner.len_bytes()
    }
}

impl Fs for FaultyFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.step(FsOp::CreateDir, path)?;
        self.inner.create_dir_all(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.step(FsOp::Create, path)?;
        let inner = self.inner.create_new(path)?;
        Ok(Box::new(FaultyFile { inner, path: path.to_path_buf(), state: self.state.clone() }))
    }
    fn create_new_direct(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.step(FsOp::Create, path)?;
        let inner = self.inner.create_new_direct(path)?;
        Ok(Box::new(FaultyFile { inner, path: path.to_path_buf(), state: self.state.clone() }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.inner.open_read(path)
    }
    fn rename_no_replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step(FsOp::Rename, to)?;
        self.inner.rename_no_replace(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.step(FsOp::Remove, path)?;
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.step(FsOp::SyncDir, path)?;
        self.inner.sync_dir(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.inner.list_dir(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_len(path)
    }
    fn file_meta(&self, path: &Path) -> io::Result<(u64, SystemTime)> {
        self.inner.file_meta(path)
    }
    fn space(&self, path: &Path) -> io::Result<Space> {
        match self.lock().space {
            Some(space) => Ok(space),
            None => self.inner.space(path),
        }
    }
}
