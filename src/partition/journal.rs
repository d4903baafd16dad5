//! A shard's journal as its flusher and partitions use it: the flusher copies a pass's small
//! appends into it and makes them durable with one fdatasync (`storage/journal.rs` has the
//! format, the replay, and why).
//!
//! The writer keeps the format's invariants:
//! - a record continues what is durable: it carries the bytes a partition wrote since its
//!   previous sync work (`SyncWork::from`), and passes are serialized by the journal's lock, so
//!   the previous work completed first;
//! - when the writer leaves a chunk it starts syncing the files the chunk's records cover, and
//!   it begins that chunk again only once those syncs completed; `fence` syncs every covered
//!   file before it voids the journal;
//! - a partition changes its files other than by appending (truncation, compaction's swap,
//!   removal) only after `fence`, holding the lock across the change, so no pass interleaves.
//!
//! A failed journal write or sync breaks the journal for the rest of the run: the flusher then
//! syncs those appends in their own files (their bytes are in the page cache either way).

use super::fifo_lock::{FifoLock, Guard, Ticket};
use crate::storage::catalog::TopicId;
use crate::storage::journal::{self as format, Stamp, Target, CHUNKS};
use crate::storage::log::{sync_files, SyncWork};
use crate::storage::positions::LogPosition;
use crate::storage::segment_file::SegmentFile;
use glommio::io::{BufferedFile, OpenOptions};
use glommio::Task;
use std::cell::RefCell;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The most bytes one pass writes to the journal: half a chunk, and no more than this.
const MAX_PASS_BYTES: u64 = 1024 * 1024;
/// Zeroes written at a time when a journal file is first made.
const ZERO_CHUNK_BYTES: usize = 1024 * 1024;

pub struct Journal {
    lock: FifoLock,
    state: RefCell<State>,
}

type Files = Vec<Rc<SegmentFile>>;

struct State {
    /// None: no journal (`log.journal_bytes` 0, or not opened yet).
    file: Option<Rc<BufferedFile>>,
    chunk_bytes: u64,
    stamp: Stamp,
    /// The chunk being filled, and where in it the next record goes.
    chunk: usize,
    head_bytes: u64,
    /// Whether the file holds no valid record (replay or `fence` voided it).
    voided: bool,
    broken: bool,
    /// Per chunk: the segment files its records cover, each once (the chunk being filled, and
    /// any left whose syncs were not started).
    covered: [Files; CHUNKS],
    /// Per chunk left: the syncs of the files it covered.
    syncing: [Option<Task<io::Result<u64>>>; CHUNKS],
}

/// One pass's appends chosen for the journal.
#[derive(Default)]
pub struct Batch {
    entries: Vec<Entry>,
    bytes: u64,
}

struct Entry {
    dir: String,
    topic_id: TopicId,
    file: Rc<SegmentFile>,
    from: LogPosition,
    len: usize,
}

impl Batch {
    pub fn records(&self) -> usize {
        self.entries.len()
    }
}

impl Journal {
    /// No journal until `open`: every append is synced in its own file.
    pub fn disabled() -> Journal {
        Journal {
            lock: FifoLock::default(),
            state: RefCell::new(State {
                file: None,
                chunk_bytes: 0,
                stamp: Stamp { run: 0, seq: 0 },
                chunk: 0,
                head_bytes: 0,
                voided: true,
                broken: false,
                covered: Default::default(),
                syncing: Default::default(),
            }),
        }
    }

    /// Opens the journal at `path`, making it (`capacity_bytes` of written zeroes) if it is
    /// missing or of another size. Replay has voided any journal there before. `run` tells this
    /// process's records from an earlier one's (random). Making it runs on the executor's
    /// blocking thread, so the shard's thread stays free (a slow disk took tens of seconds),
    /// and gives up (ErrorKind::Interrupted) once `stop` is set: the broker is stopping.
    pub async fn open(
        &self,
        path: &Path,
        capacity_bytes: u64,
        run: u64,
        stop: &'static AtomicBool,
    ) -> io::Result<()> {
        let owned = path.to_path_buf();
        let prepare = move || prepare(&owned, capacity_bytes, stop);
        glommio::executor().spawn_blocking(prepare).await?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .buffered_open(path)
            .await
            .map_err(io::Error::from)?;
        let mut s = self.state.borrow_mut();
        s.file = Some(Rc::new(file));
        s.chunk_bytes = format::chunk_bytes(capacity_bytes);
        s.stamp = Stamp { run, seq: 0 };
        Ok(())
    }

    /// A place in line for the journal: a flusher pass holds it throughout (and `fence`
    /// returns it held).
    pub fn lock(&self) -> Ticket {
        self.lock.lock()
    }

    /// Takes `job`, the sync work of the partition in directory `dir`, into `batch` if it is
    /// small and within one segment; false: sync its files directly.
    pub fn admit(&self, batch: &mut Batch, dir: &str, topic_id: TopicId, job: &SyncWork) -> bool {
        let s = self.state.borrow();
        if s.file.is_none() || s.broken {
            return false;
        }
        let ([file], true) = (
            &job.files[..],
            job.from.segment_base == job.target.segment_base,
        ) else {
            return false; // a segment closed since: synced in its files
        };
        let len = job.target.file_position.checked_sub(job.from.file_position);
        let len = len.expect("sync work moves forward within a segment");
        let bytes = format::record_bytes(dir, len as usize) as u64;
        let limit = MAX_PASS_BYTES.min(s.chunk_bytes / 2);
        if len == 0 || len as usize > format::MAX_PAYLOAD_BYTES || batch.bytes + bytes > limit {
            return false;
        }
        batch.entries.push(Entry {
            dir: dir.to_string(),
            topic_id,
            file: file.clone(),
            from: job.from,
            len: len as usize,
        });
        batch.bytes += bytes;
        true
    }

    /// Writes `batch`'s records and fdatasyncs the journal (first moving to the next chunk if
    /// they do not fit in this one). Returns the fdatasyncs issued. An error breaks the
    /// journal: the caller syncs the batch's files directly.
    pub async fn commit(&self, batch: &Batch) -> io::Result<u64> {
        if batch.entries.is_empty() {
            return Ok(0);
        }
        let result = self.write(batch).await;
        if result.is_err() {
            self.state.borrow_mut().broken = true;
        }
        result
    }

    async fn write(&self, batch: &Batch) -> io::Result<u64> {
        let (file, fits) = {
            let s = self.state.borrow();
            let file = s.file.clone().expect("admitted by an open journal");
            (file, s.head_bytes + batch.bytes <= s.chunk_bytes)
        };
        let fsyncs = if fits { 0 } else { self.next_chunk().await? };
        let (stamp, at) = {
            let s = self.state.borrow();
            (s.stamp, s.chunk as u64 * s.chunk_bytes + s.head_bytes)
        };
        let mut records = Vec::with_capacity(batch.bytes as usize);
        for e in &batch.entries {
            let target = Target {
                dir: &e.dir,
                topic_id: e.topic_id,
                segment_base: e.from.segment_base,
                position: e.from.file_position,
            };
            let from = e.from.file_position;
            format::encode(&mut records, stamp, &target, e.len, |b| {
                e.file.read_exact_at(b, from)
            })?;
        }
        assert_eq!(records.len() as u64, batch.bytes, "admitted sizes");
        self.state.borrow_mut().voided = false;
        write_at(&file, &records, at)?;
        file.fdatasync().await.map_err(io::Error::from)?;
        let mut s = self.state.borrow_mut();
        s.head_bytes += batch.bytes;
        let chunk = s.chunk;
        for e in &batch.entries {
            if !s.covered[chunk].iter().any(|f| Rc::ptr_eq(f, &e.file)) {
                s.covered[chunk].push(e.file.clone());
            }
        }
        Ok(fsyncs + 1)
    }

    /// Leaves the chunk being filled, starting the syncs of the files it covers, and takes the
    /// next once the syncs started when it was left last have completed. Returns how many
    /// files those synced.
    async fn next_chunk(&self) -> io::Result<u64> {
        let waiting = {
            let mut s = self.state.borrow_mut();
            let left = s.chunk;
            let files = std::mem::take(&mut s.covered[left]);
            let syncs = async move { sync_files(&files).await };
            s.syncing[left] = Some(glommio::spawn_local(syncs));
            s.chunk = (left + 1) % CHUNKS;
            s.head_bytes = 0;
            s.stamp.seq += 1;
            let next = s.chunk;
            s.syncing[next].take()
        };
        match waiting {
            Some(task) => task.await,
            None => Ok(0),
        }
    }

    /// Takes the journal's lock, makes every covered file durable in its own right and voids
    /// the journal, so that no record of it is replayed over a change the caller makes next;
    /// returns the lock, for the caller to hold until its change is done (no pass runs
    /// between). An error means the journal may still be replayed: the caller must not make
    /// its change. Also returns the fdatasyncs it issued or waited for.
    pub async fn fence(&self) -> io::Result<(Guard, u64)> {
        let held = self.lock.lock().await;
        let fsyncs = self.void().await?;
        Ok((held, fsyncs))
    }

    async fn void(&self) -> io::Result<u64> {
        let (file, chunk_bytes, tasks, files) = {
            let mut s = self.state.borrow_mut();
            let file = match &s.file {
                Some(file) if !s.voided => file.clone(),
                _ => return Ok(0),
            };
            let tasks: Vec<_> = s.syncing.iter_mut().filter_map(Option::take).collect();
            let files: Files = s.covered.iter_mut().flat_map(std::mem::take).collect();
            (file, s.chunk_bytes, tasks, files)
        };
        let mut fsyncs = 0;
        for task in tasks {
            fsyncs += task.await?;
        }
        fsyncs += sync_files(&files).await?;
        format::zero_headers(&std_file(&file), chunk_bytes * CHUNKS as u64)?;
        file.fdatasync().await.map_err(io::Error::from)?;
        let mut s = self.state.borrow_mut();
        s.voided = true;
        s.chunk = 0;
        s.head_bytes = 0;
        s.stamp.seq += 1;
        Ok(fsyncs + 1)
    }
}

/// Makes the journal file of `capacity_bytes` written zeroes, unless one is there: written, not
/// fallocated, so that overwriting it never changes the file's block map (an fdatasync then
/// writes data blocks only).
fn prepare(path: &Path, capacity_bytes: u64, stop: &AtomicBool) -> io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == capacity_bytes) {
        return Ok(());
    }
    log::info!(
        "journal {}: writing {capacity_bytes} bytes of zeroes",
        path.display()
    );
    let dir = path.parent().expect("a journal lives in a directory");
    crate::storage::disk::create_dir_durably(dir)?;
    let tmp = path.with_extension("tmp");
    if let Err(e) = write_zeroes(&tmp, capacity_bytes, stop) {
        let _ = std::fs::remove_file(&tmp); // a full disk gets its room back
        return Err(e);
    }
    std::fs::rename(&tmp, path)?;
    crate::storage::disk::sync_parent(path)?;
    log::info!("journal {}: {capacity_bytes} bytes", path.display());
    Ok(())
}

/// Makes `path` a file of `bytes` written zeroes, durably; Interrupted once `stop` is set.
fn write_zeroes(path: &Path, bytes: u64, stop: &AtomicBool) -> io::Result<()> {
    let file = std::fs::File::create(path)?;
    let zeroes = vec![0; ZERO_CHUNK_BYTES];
    let mut at = 0;
    while at < bytes {
        if stop.load(Ordering::Relaxed) {
            let why = "the broker is stopping: journal left unmade";
            return Err(io::Error::new(io::ErrorKind::Interrupted, why));
        }
        let n = ZERO_CHUNK_BYTES.min((bytes - at) as usize);
        file.write_all_at(&zeroes[..n], at)?;
        at += n as u64;
    }
    file.sync_data()
}

/// `file`'s descriptor as a std `File`, for positioned reads and writes on this thread (open
/// while `file` lives, which each caller's borrow outlives).
fn std_file(file: &BufferedFile) -> ManuallyDrop<std::fs::File> {
    crate::storage::disk::borrow_file(file.as_raw_fd())
}

/// Writes `bytes` to `file` at `at`, on this thread: a copy into page-cache pages of a
/// preallocated, written file (no block allocation), cheaper than a round trip through the
/// ring and its wake-up (the segment appends' reasoning, `storage/log.rs`).
fn write_at(file: &BufferedFile, bytes: &[u8], at: u64) -> io::Result<()> {
    std_file(file).write_all_at(bytes, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::segment_file::Volume;

    /// A stop flag never set.
    static NEVER: AtomicBool = AtomicBool::new(false);

    fn at(file_position: u64) -> LogPosition {
        LogPosition {
            offset: file_position as i64,
            segment_base: 0,
            file_position,
        }
    }

    /// Writes `len` bytes (each its position's low byte) at `from` and returns the work for them.
    async fn appended(file: &Rc<SegmentFile>, from: u64, len: u64) -> SyncWork {
        let bytes: Vec<u8> = (from..from + len).map(|i| i as u8).collect();
        file.write_at(from, &[&bytes]).unwrap();
        SyncWork {
            files: vec![file.clone()],
            from: at(from),
            target: at(from + len),
        }
    }

    #[test]
    fn records_carry_the_new_bytes_chunks_are_reused_once_synced_and_a_fence_voids_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j").join("shard-0");
        let segment_path = dir.path().join("segment");
        let executor = glommio::LocalExecutorBuilder::default().spawn(move || async move {
            let journal = Journal::disabled();
            journal.open(&path, 1024 * 1024, 7, &NEVER).await.unwrap();
            let segment = Rc::new(Volume::Os.open_segment(&segment_path).await.unwrap());
            let chunk = format::MAX_PAYLOAD_BYTES as u64;
            let records = || format::journal_records(&std::fs::read(&path).unwrap()).len();
            let mut syncs = 0;
            // 64 KiB records: a 256 KiB chunk takes 3, so every third pass after the first
            // moves to the next chunk, syncing the file when it comes back to a chunk.
            for i in 0..20 {
                let mut batch = Batch::default();
                let job = appended(&segment, i * chunk, chunk).await;
                assert!(journal.admit(&mut batch, "t-0", [1; 16], &job));
                // A second partition's work past the pass's bound goes to its own file.
                let big = appended(&segment, 0, chunk * 2).await;
                assert!(!journal.admit(&mut batch, "t-1", [1; 16], &big));
                syncs += journal.commit(&batch).await.unwrap();
            }
            // Chunks were begun at passes 3, 6, ..., 18; from the fourth on (pass 12) each
            // waited for the sync of the file its earlier records covered.
            assert_eq!(
                syncs,
                20 + 3,
                "one journal sync per pass, and the chunks' syncs"
            );
            // Every chunk's records are valid; the newest chunk holds the last two.
            assert_eq!(records(), 3 * 3 + 2);
            let raw = std::fs::read(&path).unwrap();
            let all = format::journal_records(&raw);
            let positions: Vec<u64> = all.iter().map(|r| r.target.position / chunk).collect();
            assert_eq!(positions, (9..20).collect::<Vec<u64>>());
            let last = all.last().unwrap();
            assert!(last
                .payload
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (19 * chunk + i as u64) as u8));
            // Work spanning a closed segment, or nothing new, is not journaled.
            let mut batch = Batch::default();
            let mut job = appended(&segment, 0, 10).await;
            job.files.push(segment.clone());
            assert!(!journal.admit(&mut batch, "t-0", [1; 16], &job));
            let (_, fsyncs) = journal.fence().await.unwrap();
            assert!(fsyncs >= 1, "the journal itself is synced");
            assert_eq!(records(), 0);
        });
        executor.unwrap().join().unwrap();
    }
}
