//! Where a partition log's files live (`Volume`) and one segment's data file (`SegmentFile`).
//!
//! The broker's are the operating system's: segment files through glommio (io_uring), each
//! with a duplicate descriptor that fetches send from (sendfile), the small files beside them
//! (indexes, epoch cache, transaction index, snapshots) through `OsDisk`. The simulator's are
//! files of a simulated `Disk` that loses what was not synced when its node crashes, so that
//! `sluice-sim` runs `PartitionLog` itself over them: the same appends, syncs, truncations and
//! recovery, the same order of writes and syncs. Its futures never wait.

use super::disk::{Disk, OsDisk};
use crate::metrics::SEGMENT_DESCRIPTORS;
use crate::protocol::batch::{self, BatchHeader};
use glommio::io::{BufferedFile, OpenOptions, ReadResult};
use std::io;
use std::ops::Deref;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
#[cfg(feature = "simulation")]
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Where a log's files are.
#[derive(Clone)]
pub enum Volume {
    /// The operating system's file systems.
    Os,
    /// A simulated disk.
    #[cfg(feature = "simulation")]
    Simulated(Rc<dyn Disk>),
}

impl Volume {
    /// The small files' disk (`Disk`'s synchronous calls, made on the shard's thread).
    pub fn disk(&self) -> Rc<dyn Disk> {
        match self {
            Volume::Os => Rc::new(OsDisk::default()),
            #[cfg(feature = "simulation")]
            Volume::Simulated(disk) => disk.clone(),
        }
    }

    /// Opens (creating it if missing) the segment file at `path`, for reading and writing.
    pub async fn open_segment(&self, path: &Path) -> io::Result<SegmentFile> {
        match self {
            Volume::Os => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .buffered_open(path)
                    .await?;
                SegmentFile::os(file)
            }
            #[cfg(feature = "simulation")]
            Volume::Simulated(disk) => {
                disk.append(path, &[])?; // creates it: its name is durable from here
                Ok(SegmentFile::Simulated {
                    disk: disk.clone(),
                    path: path.to_path_buf(),
                })
            }
        }
    }

    /// Writes a whole small file (index, marker, snapshot) and makes its bytes durable; its
    /// name is durable once its directory is synced.
    pub async fn write_file(&self, path: &Path, data: Vec<u8>) -> io::Result<()> {
        match self {
            Volume::Os => super::log::write_file(path, data).await,
            #[cfg(feature = "simulation")]
            Volume::Simulated(disk) => {
                disk.truncate(path, 0)?;
                disk.append(path, &data)?;
                disk.sync(path)
            }
        }
    }

    /// Makes the names in `dir` durable (new, renamed and removed files).
    pub async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match self {
            Volume::Os => super::log::sync_dir(dir).await,
            #[cfg(feature = "simulation")]
            Volume::Simulated(disk) => disk.sync_dir(dir),
        }
    }
}

/// A segment's data file.
pub enum SegmentFile {
    Os(OsFile),
    #[cfg(feature = "simulation")]
    Simulated {
        disk: Rc<dyn Disk>,
        path: PathBuf,
    },
}

/// A segment file of the operating system's.
pub struct OsFile {
    file: BufferedFile,
    /// A duplicate of the file's descriptor that any shard may send from (sendfile), kept
    /// open by in-flight responses even if the segment is deleted meanwhile.
    send_fd: Arc<OwnedFd>,
}

/// Descriptors a segment file holds: its file, and the duplicate fetches send from.
const DESCRIPTORS_PER_SEGMENT: u64 = 2;

impl Drop for OsFile {
    fn drop(&mut self) {
        // In-flight fetches may keep the duplicate open a moment longer; the gauge counts what
        // the logs hold.
        SEGMENT_DESCRIPTORS.fetch_sub(DESCRIPTORS_PER_SEGMENT, Ordering::Relaxed);
    }
}

/// Bytes read from a segment file: glommio's buffer, or the simulated disk's copy.
pub enum Read {
    Os(ReadResult),
    #[cfg(feature = "simulation")]
    Simulated(Vec<u8>),
}

impl Deref for Read {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Read::Os(r) => r,
            #[cfg(feature = "simulation")]
            Read::Simulated(v) => v,
        }
    }
}

/// Most pieces one pwritev(2) takes (Linux's IOV_MAX).
const MAX_IOVECS: usize = 1024;

impl SegmentFile {
    fn os(file: BufferedFile) -> io::Result<SegmentFile> {
        // SAFETY: `file` is open for the whole call; the duplicate is an independent descriptor.
        let send_fd = unsafe { BorrowedFd::borrow_raw(file.as_raw_fd()) }.try_clone_to_owned()?;
        SEGMENT_DESCRIPTORS.fetch_add(DESCRIPTORS_PER_SEGMENT, Ordering::Relaxed);
        Ok(SegmentFile::Os(OsFile {
            file,
            send_fd: Arc::new(send_fd),
        }))
    }

    /// The descriptor fetches send from (sendfile); None for a simulated file, which is read.
    pub fn send_fd(&self) -> Option<&Arc<OwnedFd>> {
        match self {
            SegmentFile::Os(f) => Some(&f.send_fd),
            #[cfg(feature = "simulation")]
            SegmentFile::Simulated { .. } => None,
        }
    }

    /// Up to `len` bytes from `at` (fewer where the file ends first).
    pub async fn read_at(&self, at: u64, len: usize) -> io::Result<Read> {
        match self {
            SegmentFile::Os(f) => Ok(Read::Os(f.file.read_at(at, len).await?)),
            #[cfg(feature = "simulation")]
            SegmentFile::Simulated { disk, path } => {
                Ok(Read::Simulated(disk.read_at(path, at, len)?))
            }
        }
    }

    /// The header of the batch that starts at `at`.
    pub async fn read_header(&self, at: u64) -> io::Result<BatchHeader> {
        let head = self.read_at(at, batch::HEADER_BYTES).await?;
        batch::parse_header(&head)
            .map_err(|e| io::Error::other(format!("corrupt batch at {at}: {e:?}")))
    }

    /// Fills `buf` from `at`, synchronously on this thread (the shard journal copies a
    /// partition's new bytes from the page cache).
    pub fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        match self {
            SegmentFile::Os(f) => {
                use std::os::unix::fs::FileExt;
                super::disk::borrow_file(f.file.as_raw_fd()).read_exact_at(buf, at)
            }
            #[cfg(feature = "simulation")]
            SegmentFile::Simulated { disk, path } => {
                let got = disk.read_at(path, at, buf.len())?;
                if got.len() < buf.len() {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                buf.copy_from_slice(&got);
                Ok(())
            }
        }
    }

    /// Writes `pieces` one after another from byte `at`, synchronously on the shard's thread:
    /// a buffered write is a copy into the page cache, which io_uring would also do on this
    /// core (or punt to a worker); glommio's buffered write takes only an owned Vec, which
    /// would force a copy of every batch. Dirty pages stay few because the flusher syncs
    /// continuously, so the call does not wait on writeback in practice.
    pub fn write_at(&self, at: u64, pieces: &[&[u8]]) -> io::Result<()> {
        match self {
            SegmentFile::Os(f) => pwritev_all(f.file.as_raw_fd(), at, pieces),
            #[cfg(feature = "simulation")]
            SegmentFile::Simulated { disk, path } => {
                // A log writes only at its segment's end: the simulated disk appends.
                let len = disk.len(path)?.unwrap_or(0);
                assert_eq!(len, at, "a segment is written at its end");
                disk.append(path, &pieces.concat())
            }
        }
    }

    /// Makes every write to the file durable (fdatasync).
    pub async fn fdatasync(&self) -> io::Result<()> {
        match self {
            SegmentFile::Os(f) => Ok(f.file.fdatasync().await?),
            #[cfg(feature = "simulation")]
            SegmentFile::Simulated { disk, path } => disk.sync(path),
        }
    }

    /// Cuts the file at `len` bytes (durable after `fdatasync`).
    pub async fn truncate(&self, len: u64) -> io::Result<()> {
        match self {
            SegmentFile::Os(f) => Ok(f.file.truncate(len).await?),
            #[cfg(feature = "simulation")]
            SegmentFile::Simulated { disk, path } => disk.truncate(path, len),
        }
    }
}

/// Writes `pieces` from `position` of `fd` with pwritev(2): no copy of record bytes in user
/// space. A short write means the disk filled up mid-write; the retry of the rest returns the
/// real error (ENOSPC).
fn pwritev_all(fd: std::os::fd::RawFd, mut position: u64, pieces: &[&[u8]]) -> io::Result<()> {
    // The first piece not wholly written, and the bytes of it already written.
    let (mut first, mut skip) = (0, 0);
    // Every pass writes at least one byte or returns.
    while first < pieces.len() {
        let iov: Vec<libc::iovec> = pieces[first..]
            .iter()
            .take(MAX_IOVECS)
            .enumerate()
            .map(|(i, p)| {
                let p = if i == 0 { &p[skip..] } else { p };
                libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                }
            })
            .collect();
        // SAFETY: every iovec points into `pieces`, alive and unchanged for the call.
        let n = unsafe {
            libc::pwritev(
                fd,
                iov.as_ptr(),
                iov.len() as libc::c_int,
                position as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        position += n as u64;
        skip += n as usize;
        while first < pieces.len() && skip >= pieces[first].len() {
            skip -= pieces[first].len();
            first += 1;
        }
    }
    Ok(())
}
