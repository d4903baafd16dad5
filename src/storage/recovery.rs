//! Start-up recovery of one partition directory, with blocking I/O through `Disk` (the
//! operating system's files in the broker, the simulator's disk in `sluice-sim`, which runs
//! this code after every simulated crash): it runs before the shard serves anything, and
//! scanning is sequential reads the page cache handles well.
//!
//! - Segments are found by name and sorted by base offset.
//! - The last segment is scanned from its last trusted position (the last index entry after a
//!   clean shutdown, the start otherwise), validating each batch's CRC32C; the first torn or
//!   corrupt batch and everything after it is truncated away, with a log line.
//! - Older segments keep their index files when those are sane; otherwise the index is rebuilt
//!   by scanning batch headers.

use super::disk::Disk;
use super::index::{OffsetIndex, TimeIndex};
use super::segment::{SegmentMeta, MAX_RELATIVE_OFFSET};
use super::txn_index::{self, AbortedTxn, Rebuilder};
use crate::protocol::batch::{self, HEADER_BYTES};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Marker written by a clean close; its presence lets recovery trust the indexes.
pub const CLEAN_MARKER: &str = ".clean_shutdown";
/// Largest batch recovery will read: larger length fields are corruption, not data.
const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;

pub struct Recovered {
    pub segments: Vec<SegmentMeta>,
    /// Bytes cut from the tail, for the log line and for tests.
    pub truncated_bytes: u64,
}

/// Sequential reads of one file through `Disk::read_at`, for a `BufReader`.
struct Sequential<'a> {
    disk: &'a dyn Disk,
    path: &'a Path,
    at: u64,
}

impl Read for Sequential<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let got = self.disk.read_at(self.path, self.at, buf.len())?;
        buf[..got.len()].copy_from_slice(&got);
        self.at += got.len() as u64;
        Ok(got.len())
    }
}

impl Seek for Sequential<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.at = match to {
            SeekFrom::Start(at) => at,
            SeekFrom::Current(by) => self
                .at
                .checked_add_signed(by)
                .ok_or(io::ErrorKind::InvalidInput)?,
            SeekFrom::End(_) => return Err(io::ErrorKind::Unsupported.into()),
        };
        Ok(self.at)
    }
}

/// A buffered sequential reader of `path` from byte `at`.
fn reader<'a>(disk: &'a dyn Disk, path: &'a Path, at: u64) -> BufReader<Sequential<'a>> {
    BufReader::with_capacity(1 << 20, Sequential { disk, path, at })
}

fn exists(disk: &dyn Disk, path: &Path) -> io::Result<bool> {
    Ok(disk.len(path)?.is_some())
}

/// Recovers the segments of `dir` on `disk`. `interval` is `index.interval.bytes`.
pub fn recover(disk: &dyn Disk, dir: &Path, interval: u32, now_ms: u64) -> io::Result<Recovered> {
    let clean = exists(disk, &dir.join(CLEAN_MARKER))?;
    // An index left aside by a swap is settled while the copies still tell which swaps ran.
    let unswapped = |base| exists(disk, &cleaned_path(dir, base)).unwrap_or(false);
    txn_index::settle_swaps(disk, dir, unswapped)?;
    remove_unfinished_compactions(disk, dir)?;
    let mut bases: Vec<i64> = disk
        .list(dir)?
        .iter()
        .filter_map(|name| name.strip_suffix(".log")?.parse::<i64>().ok())
        .collect();
    bases.sort_unstable();
    let mut out = Recovered {
        segments: Vec::with_capacity(bases.len()),
        truncated_bytes: 0,
    };
    for (i, &base) in bases.iter().enumerate() {
        let is_last = i + 1 == bases.len();
        let path = SegmentMeta::log_path(dir, base);
        let file_len = disk.len(&path)?.ok_or(io::ErrorKind::NotFound)?;
        let trust_indexes = clean || !is_last;
        let (meta, valid_end, reason) = recover_segment(
            (disk, dir),
            base,
            (file_len, trust_indexes, is_last),
            (interval, now_ms),
        )?;
        out.segments.push(meta);
        if valid_end < file_len {
            let cut = file_len - valid_end;
            log::warn!(
                "recovery: {}: {} at byte {valid_end}; truncating {cut} bytes",
                path.display(),
                reason.unwrap_or("torn batch"),
            );
            disk.truncate(&path, valid_end)?;
            out.truncated_bytes += cut;
            // A tear inside an older segment means everything after it followed a gap.
            for &later in &bases[i + 1..] {
                log::warn!("recovery: dropping segment {later} after a torn segment");
                remove_segment(disk, dir, later)?;
            }
            break;
        }
    }
    if clean {
        disk.remove(&dir.join(CLEAN_MARKER))?;
    }
    Ok(out)
}

/// Scans one segment from its indexes' end (when they are trusted and load) or its start;
/// returns its bookkeeping, where its valid bytes end, and why they end there. The last
/// segment's tail is CRC-checked; older ones only structurally. `shape` is (file length,
/// whether the index files may be trusted, whether it is the last segment); `settings` is
/// (index interval, the time).
fn recover_segment(
    (disk, dir): (&dyn Disk, &Path),
    base: i64,
    shape: (u64, bool, bool),
    settings: (u32, u64),
) -> io::Result<(SegmentMeta, u64, Option<&'static str>)> {
    let ((file_len, trust_indexes, is_last), (interval, now_ms)) = (shape, settings);
    let path = SegmentMeta::log_path(dir, base);
    let loaded = if trust_indexes {
        load_indexes(disk, dir, base, file_len)
    } else {
        None
    };
    let indexed = loaded.is_some();
    let (mut meta, scan_from) = match loaded {
        Some((offset_index, time_index)) => {
            let meta = SegmentMeta::with_indexes(base, now_ms, offset_index, time_index);
            let from = meta.size_bytes;
            (meta, from)
        }
        None => (SegmentMeta::new(base, now_ms), 0),
    };
    let mut found = scan((disk, &path), scan_from, &mut meta, interval, is_last)?;
    if indexed && found.valid_end < file_len {
        // The index may be what is wrong (bit rot, a stale file): before cutting data,
        // rebuild from the segment alone, which trusts only the batches themselves.
        log::warn!(
            "recovery: {}: scan from the index stopped at byte {}; rescanning the segment",
            path.display(),
            found.valid_end
        );
        meta = SegmentMeta::new(base, now_ms);
        found = scan((disk, &path), 0, &mut meta, interval, is_last)?;
    }
    Ok((meta, found.valid_end, found.reason))
}

/// Compacted copies of segments not yet swapped in when the broker stopped: the segment itself
/// is still whole, so the copy is only in the way.
fn remove_unfinished_compactions(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    for name in disk.list(dir)? {
        let path = dir.join(name);
        if path.extension().is_some_and(|e| e == CLEANED_SUFFIX) {
            log::warn!(
                "recovery: removing unfinished compaction {}",
                path.display()
            );
            disk.remove(&path)?;
        }
    }
    Ok(())
}

/// The extension of a compacted segment copy while it is written (`<base>.log.cleaned`).
pub const CLEANED_SUFFIX: &str = "cleaned";

/// Where the compacted copy of segment `base` is written before it is swapped in.
pub fn cleaned_path(dir: &Path, base: i64) -> std::path::PathBuf {
    dir.join(format!("{base:020}.log.{CLEANED_SUFFIX}"))
}

fn load_indexes(
    disk: &dyn Disk,
    dir: &Path,
    base: i64,
    file_len: u64,
) -> Option<(OffsetIndex, TimeIndex)> {
    let offsets = disk.read(&SegmentMeta::index_path(dir, base)).ok()??;
    let times = disk.read(&SegmentMeta::time_index_path(dir, base)).ok()??;
    Some((
        OffsetIndex::from_bytes(&offsets, file_len)?,
        TimeIndex::from_bytes(&times)?,
    ))
}

struct Scan {
    valid_end: u64,
    reason: Option<&'static str>,
}

/// Reads batches from `from` to the end of the file, noting each in `meta`. Stops at the first
/// batch that is torn, structurally invalid, or (with `check_crc`) corrupt. (Producer state is
/// read back from the recovered log afterwards: `producer_snapshots`.)
fn scan(
    (disk, path): (&dyn Disk, &Path),
    from: u64,
    meta: &mut SegmentMeta,
    interval: u32,
    check_crc: bool,
) -> io::Result<Scan> {
    let file_len = disk.len(path)?.ok_or(io::ErrorKind::NotFound)?;
    let mut reader = reader(disk, path, from);
    let mut pos = from;
    let mut buf = vec![0u8; HEADER_BYTES];
    let mut expected_base = meta.next_offset;
    loop {
        if pos == file_len {
            return Ok(Scan {
                valid_end: pos,
                reason: None,
            });
        }
        let bad = |reason| {
            Ok(Scan {
                valid_end: pos,
                reason: Some(reason),
            })
        };
        if file_len - pos < HEADER_BYTES as u64 {
            return bad("torn batch header");
        }
        buf.resize(HEADER_BYTES, 0);
        reader.read_exact(&mut buf)?;
        let size = match batch::peek_size(&buf) {
            Some(s) if s <= MAX_BATCH_BYTES => s,
            _ => return bad("impossible batch length"),
        };
        if pos + size as u64 > file_len {
            return bad("torn batch");
        }
        buf.resize(size, 0);
        reader.read_exact(&mut buf[HEADER_BYTES..])?;
        let planted = crate::inject::active(crate::inject::Bug::RecoverySkipsCrc);
        let header = if check_crc && !planted {
            batch::validate(&buf)
        } else {
            batch::parse_header(&buf)
        };
        let header = match header {
            Ok(h) => h,
            Err(batch::BatchError::CorruptCrc) => return bad("CRC mismatch"),
            Err(_) => return bad("invalid batch header"),
        };
        if header.base_offset < expected_base {
            return bad("offsets go backwards");
        }
        if header.last_offset() - meta.base_offset > MAX_RELATIVE_OFFSET {
            return bad("offsets run past what the segment can index");
        }
        meta.note_batch(&header, pos, interval);
        expected_base = header.next_offset();
        pos += size as u64;
    }
}

/// Rebuilds the aborted-transaction index from the segments `bases` (recovered, in order):
/// every batch header is read, and each transactional control batch whole, to learn whether
/// it commits. Transactions open before the first segment are unknown (their records lie
/// below the log start anyway).
pub fn rebuild_aborted(disk: &dyn Disk, dir: &Path, bases: &[i64]) -> io::Result<Vec<AbortedTxn>> {
    let mut rebuilder = Rebuilder::new([]);
    let mut buf = vec![0u8; HEADER_BYTES];
    for &base in bases {
        let path = SegmentMeta::log_path(dir, base);
        let file_len = disk.len(&path)?.ok_or(io::ErrorKind::NotFound)?;
        let mut file = reader(disk, &path, 0);
        let mut pos = 0u64;
        while pos + HEADER_BYTES as u64 <= file_len {
            buf.resize(HEADER_BYTES, 0);
            file.read_exact(&mut buf)?;
            let h = match batch::parse_header(&buf) {
                Ok(h)
                    if h.size_bytes <= MAX_BATCH_BYTES && pos + h.size_bytes as u64 <= file_len =>
                {
                    h
                }
                _ => break, // recovery already cut the log at its first bad batch
            };
            let commits = if h.is_transactional() && h.is_control() {
                buf.resize(h.size_bytes, 0);
                file.read_exact(&mut buf[HEADER_BYTES..])?;
                crate::protocol::control::commits(&buf)
            } else {
                // Past the records to the next header, keeping what is buffered.
                file.seek_relative((h.size_bytes - HEADER_BYTES) as i64)?;
                None
            };
            rebuilder.note(&h, commits);
            pos += h.size_bytes as u64;
        }
    }
    Ok(rebuilder.finish().0)
}

/// The aborted-transaction index as recovery left the log of segments `bases` (the entries of
/// markers it kept, in `span`: log start to log end); a damaged file is rebuilt from the
/// segments' batches and rewritten, and one that names markers past the log end (lost in a
/// crash) is rewritten without them.
pub fn load_aborted(
    disk: &dyn Disk,
    dir: &Path,
    bases: &[i64],
    (log_start, log_end): (i64, i64),
) -> io::Result<Vec<AbortedTxn>> {
    let txn_index::Loaded {
        entries,
        intact,
        stale,
    } = txn_index::load(disk, dir, log_start, log_end);
    if intact && stale {
        log::warn!(
            "{}: dropping aborted-transaction entries of markers lost in a crash",
            dir.display()
        );
        txn_index::rewrite(disk, dir, &entries)?;
    }
    if intact {
        return Ok(entries);
    }
    let rebuilt = rebuild_aborted(disk, dir, bases)?;
    log::warn!(
        "{}: the aborted-transaction index was damaged ({} entries readable); rebuilt from the log: {} entries",
        dir.display(),
        entries.len(),
        rebuilt.len()
    );
    txn_index::rewrite(disk, dir, &rebuilt)?;
    Ok(rebuilt)
}

pub fn remove_segment(disk: &dyn Disk, dir: &Path, base: i64) -> io::Result<()> {
    // Indexes first: a crash midway leaves a segment that recovery re-indexes (and retention
    // deletes again), never an index file that no segment lists.
    remove_indexes(disk, dir, base)?;
    disk.remove(&SegmentMeta::log_path(dir, base))
}

/// Removes a segment's index files, if there are any: recovery rebuilds them from the segment.
pub fn remove_indexes(disk: &dyn Disk, dir: &Path, base: i64) -> io::Result<()> {
    disk.remove(&SegmentMeta::index_path(dir, base))?;
    disk.remove(&SegmentMeta::time_index_path(dir, base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::synthetic;
    use crate::storage::disk::OsDisk;
    use std::fs;

    fn write_segment(dir: &Path, base: i64, batches: &[Vec<u8>]) -> Vec<u8> {
        let mut all = Vec::new();
        let mut next = base;
        for b in batches {
            let mut b = b.clone();
            let h = batch::validate(&b).unwrap();
            batch::assign(&mut b, next, 0, None);
            next += h.record_count as i64;
            all.extend(b);
        }
        fs::write(SegmentMeta::log_path(dir, base), &all).unwrap();
        all
    }

    #[test]
    fn torn_tail_is_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let batches: Vec<_> = (0..10)
            .map(|i| synthetic(0, 3, 100 + i, 1000 + i as i64))
            .collect();
        let all = write_segment(dir.path(), 0, &batches);
        let whole = all.len() as u64;
        let f = fs::OpenOptions::new()
            .write(true)
            .open(SegmentMeta::log_path(dir.path(), 0))
            .unwrap();
        f.set_len(whole - 50).unwrap();
        let r = recover(&OsDisk::default(), dir.path(), 256, 0).unwrap();
        let seg = &r.segments[0];
        assert_eq!(seg.next_offset, 27, "nine whole batches of three records");
        assert_eq!(seg.size_bytes + batches[9].len() as u64 - 50, whole - 50);
        assert!(r.truncated_bytes > 0);
        assert_eq!(
            fs::metadata(SegmentMeta::log_path(dir.path(), 0))
                .unwrap()
                .len(),
            seg.size_bytes
        );
        assert!(seg.offset_index.len() > 1, "index rebuilt");
    }

    #[test]
    fn corrupt_crc_in_tail_is_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let batches: Vec<_> = (0..4).map(|_| synthetic(0, 2, 50, 5)).collect();
        let mut all = write_segment(dir.path(), 0, &batches);
        let n = all.len();
        all[n - 3] ^= 0xff;
        fs::write(SegmentMeta::log_path(dir.path(), 0), &all).unwrap();
        let r = recover(&OsDisk::default(), dir.path(), 4096, 0).unwrap();
        assert_eq!(r.segments[0].next_offset, 6);
    }

    #[test]
    fn several_segments_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), 0, &[synthetic(0, 5, 10, 1)]);
        write_segment(dir.path(), 5, &[synthetic(0, 5, 10, 2)]);
        let mut tail = fs::read(SegmentMeta::log_path(dir.path(), 5)).unwrap();
        tail.extend([0xffu8; 30]);
        fs::write(SegmentMeta::log_path(dir.path(), 5), &tail).unwrap();
        let r = recover(&OsDisk::default(), dir.path(), 4096, 0).unwrap();
        assert_eq!(r.segments.len(), 2);
        assert_eq!(r.segments[1].next_offset, 10);
        assert_eq!(r.truncated_bytes, 30);
    }

    #[test]
    fn a_bad_index_is_rebuilt_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let batches: Vec<_> = (0..4).map(|_| synthetic(0, 2, 50, 5)).collect();
        let all = write_segment(dir.path(), 0, &batches);
        write_segment(dir.path(), 8, &[synthetic(0, 1, 10, 6)]);
        // The older segment's index points into the middle of a batch.
        let mut bad = OffsetIndex::default();
        bad.push(3, 7);
        fs::write(SegmentMeta::index_path(dir.path(), 0), bad.to_bytes()).unwrap();
        fs::write(SegmentMeta::time_index_path(dir.path(), 0), []).unwrap();
        let r = recover(&OsDisk::default(), dir.path(), 4096, 0).unwrap();
        assert_eq!(r.truncated_bytes, 0, "no data is cut for a bad index");
        assert_eq!(r.segments.len(), 2);
        assert_eq!(r.segments[0].next_offset, 8);
        assert_eq!(r.segments[0].size_bytes, all.len() as u64);
        assert_eq!(r.segments[1].next_offset, 9);
    }

    #[test]
    fn loaded_indexes_keep_the_largest_timestamp_of_unscanned_batches() {
        let dir = tempfile::tempdir().unwrap();
        // Timestamps out of order: the largest is in the first batch, which a start from the
        // last index entry does not scan again.
        let batches = [
            synthetic(0, 2, 50, 9000),
            synthetic(0, 2, 50, 10),
            synthetic(0, 2, 50, 20),
        ];
        write_segment(dir.path(), 0, &batches);
        write_segment(dir.path(), 6, &[synthetic(0, 1, 10, 30)]);
        let first = recover(&OsDisk::default(), dir.path(), 1, 0).unwrap();
        assert_eq!(first.segments[0].max_timestamp, 9000);
        let seg = &first.segments[0];
        fs::write(
            SegmentMeta::index_path(dir.path(), 0),
            seg.offset_index.to_bytes(),
        )
        .unwrap();
        let times = seg.time_index.to_bytes();
        fs::write(SegmentMeta::time_index_path(dir.path(), 0), times).unwrap();
        let again = recover(&OsDisk::default(), dir.path(), 1, 0).unwrap();
        assert_eq!(again.segments[0].max_timestamp, 9000);
        assert_eq!(again.segments[0].next_offset, 6);
    }

    /// Found by the recovery fuzz target: a batch whose offsets sit more than i32::MAX past the
    /// segment's base cannot be indexed; it ends the valid log.
    #[test]
    fn offsets_past_the_segment_range_end_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut far = synthetic(0, 1, 10, 2);
        batch::assign(&mut far, 1 << 32, 0, None);
        let mut all = write_segment(dir.path(), 0, &[synthetic(0, 2, 10, 1)]);
        all.extend(&far);
        fs::write(SegmentMeta::log_path(dir.path(), 0), &all).unwrap();
        let r = recover(&OsDisk::default(), dir.path(), 1, 0).unwrap();
        assert_eq!(r.segments[0].next_offset, 2);
        assert_eq!(r.truncated_bytes, far.len() as u64);
    }

    /// Found by the simulator: an abort marker's entry is synced before the marker; a crash
    /// that loses the marker must take the entry out of the file too, or once the log grows
    /// past its offset again a later restart takes it for a marker of the new batches.
    #[test]
    fn index_entries_of_markers_lost_in_a_crash_leave_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |last_offset| AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset,
            last_stable_offset: last_offset + 1,
        };
        let disk = OsDisk::default();
        txn_index::rewrite(&disk, dir.path(), &[entry(3), entry(5)]).unwrap();
        // Recovery kept offsets 0..5: the marker at 5 was lost.
        let kept = load_aborted(&disk, dir.path(), &[0], (0, 5)).unwrap();
        assert_eq!(kept, vec![entry(3)]);
        // The log grew past 5 again, with no marker there.
        let later = load_aborted(&disk, dir.path(), &[0], (0, 9)).unwrap();
        assert_eq!(
            later,
            vec![entry(3)],
            "the lost marker's entry does not come back"
        );
    }
}
