//! A partition's producer-state snapshots (`producer_state::Snapshot`), one file per offset
//! (`<offset>.snapshot`, as Kafka names them): written at every segment roll (as of the new
//! segment's base) and at clean close (as of the log end); the newest `KEPT` stay.
//!
//! Why several: the producer state at an offset is a snapshot at or below it plus the
//! batches between (Kafka's `loadProducerState`). A log that restarts after losing its tail,
//! or that replication truncates, needs one below the cut: the state of the cut tail is wrong
//! for what remains (a marker there closed a transaction that begun below the cut and is open
//! again once the marker is gone). Only a snapshot past the cut is useless, so those are
//! removed with the tail (`remove_above`).

use super::disk::Disk;
use super::producer_state::{decode_snapshot, encode_snapshot, Scanned, Snapshot};
use super::segment_file::{Read, SegmentFile, Volume};
use crate::protocol::batch::{self, HEADER_BYTES};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Snapshots kept per partition: the last rolls' and the last close's.
pub const KEPT: usize = 4;
const SUFFIX: &str = ".snapshot";
/// The one snapshot file of builds before this layout, read while no newer file exists.
pub const LEGACY_FILE: &str = "producer.snapshot";

/// The file of the snapshot as of `offset`.
pub fn path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SUFFIX}"))
}

/// The offsets of `dir`'s snapshot files, ascending.
fn offsets(disk: &dyn Disk, dir: &Path) -> Vec<i64> {
    let Ok(names) = disk.list(dir) else {
        return Vec::new();
    };
    let mut out: Vec<i64> = names
        .iter()
        .filter_map(|name| name.strip_suffix(SUFFIX)?.parse().ok())
        .collect();
    out.sort_unstable();
    out
}

/// The newest readable snapshot as of an offset at or below `offset`; an unreadable file is
/// passed over (an older one, or the log itself, tells the same). A legacy file counts as of
/// the offset it holds.
pub fn newest_at_or_below(disk: &dyn Disk, dir: &Path, offset: i64) -> Option<Snapshot> {
    let read = |p: PathBuf| decode_snapshot(&disk.read(&p).ok()??);
    let newest = offsets(disk, dir)
        .into_iter()
        .rev()
        .filter(|&o| o <= offset)
        .find_map(|o| read(path(dir, o)).filter(|s| s.offset == o));
    newest.or_else(|| read(dir.join(LEGACY_FILE)).filter(|s| s.offset <= offset))
}

/// Writes `snapshot` durably (through a temporary file and a rename), then removes all but the
/// newest `KEPT` and any legacy file.
pub async fn write(volume: &Volume, dir: &Path, snapshot: &Snapshot) -> std::io::Result<()> {
    let target = path(dir, snapshot.offset);
    let tmp = target.with_extension("snapshot.tmp");
    volume.write_file(&tmp, encode_snapshot(snapshot)).await?;
    let disk = volume.disk();
    disk.rename(&tmp, &target)?;
    let all = offsets(&*disk, dir);
    for &o in &all[..all.len().saturating_sub(KEPT)] {
        disk.remove(&path(dir, o))?;
    }
    disk.remove(&dir.join(LEGACY_FILE))
}

/// Removes the snapshots as of offsets past `offset`: the log was truncated there, so they
/// describe records that are gone (and may be written again differently).
pub fn remove_above(disk: &dyn Disk, dir: &Path, offset: i64) -> std::io::Result<()> {
    for o in offsets(disk, dir).into_iter().filter(|&o| o > offset) {
        disk.remove(&path(dir, o))?;
    }
    let legacy = dir.join(LEGACY_FILE);
    let stale = disk
        .read(&legacy)
        .ok()
        .flatten()
        .and_then(|raw| decode_snapshot(&raw))
        .is_some_and(|s| s.offset > offset);
    if stale {
        disk.remove(&legacy)?;
    }
    Ok(())
}

/// A segment's bytes to read producer state back from: whole batches, in log order.
pub struct Span {
    pub file: Rc<SegmentFile>,
    pub from_position: u64,
    pub to_position: u64,
}

/// Bytes read at a time: a segment's headers are read in large sequential reads, not one read
/// per batch.
const CHUNK_BYTES: u64 = 256 * 1024;

/// The idempotent batches of `spans` at or past offset `from`, in log order, each with its
/// coordinator epoch when it is a marker (-1 otherwise): what `producer_state::rebuild` replays
/// over a snapshot as of `from`.
pub async fn scan(spans: &[Span], from: i64) -> std::io::Result<Vec<Scanned>> {
    let mut out = Vec::new();
    for span in spans {
        let mut position = span.from_position;
        while position < span.to_position {
            let len = CHUNK_BYTES.min(span.to_position - position);
            let chunk = read(&span.file, position, len).await?;
            let mut at = 0usize;
            while at + HEADER_BYTES <= chunk.len() {
                let h = batch::parse_header(&chunk[at..]).map_err(corrupt)?;
                if h.is_idempotent() && h.base_offset >= from {
                    let epoch = match h.is_control() {
                        true => coordinator_epoch(&span.file, position + at as u64, &h).await?,
                        false => -1,
                    };
                    out.push((h, epoch));
                }
                at += h.size_bytes;
            }
            if at == 0 {
                return Err(corrupt("a batch header cut short"));
            }
            position += at as u64;
        }
    }
    Ok(out)
}

async fn read(file: &SegmentFile, position: u64, len: u64) -> std::io::Result<Read> {
    file.read_at(position, len as usize).await
}

/// The coordinator epoch the marker at `position` carries (-1 when it names none).
async fn coordinator_epoch(
    file: &SegmentFile,
    position: u64,
    h: &batch::BatchHeader,
) -> std::io::Result<i32> {
    let bytes = read(file, position, h.size_bytes as u64).await?;
    Ok(crate::protocol::control::coordinator_epoch(&bytes).unwrap_or(-1))
}

fn corrupt(e: impl std::fmt::Debug) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("reading producer state back: {e:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::OsDisk;

    fn snapshot(offset: i64) -> Snapshot {
        Snapshot {
            offset,
            producers: Vec::new(),
        }
    }

    #[test]
    fn the_newest_at_or_below_an_offset_is_found_and_later_ones_go_with_a_cut() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for o in [10, 20, 30] {
            std::fs::write(path(d, o), encode_snapshot(&snapshot(o))).unwrap();
        }
        // A file whose content names another offset, and garbage, are passed over.
        std::fs::write(path(d, 25), encode_snapshot(&snapshot(7))).unwrap();
        std::fs::write(path(d, 27), b"garbage").unwrap();
        let disk = OsDisk::default();
        let at = |o| newest_at_or_below(&disk, d, o).map(|s| s.offset);
        assert_eq!(at(29), Some(20));
        assert_eq!(at(30), Some(30));
        assert_eq!(at(9), None);
        remove_above(&disk, d, 20).unwrap();
        assert_eq!(offsets(&disk, d), vec![10, 20]);
        // A legacy file serves until newer files exist, and goes with a cut below it.
        std::fs::write(d.join(LEGACY_FILE), encode_snapshot(&snapshot(15))).unwrap();
        remove_above(&disk, d, 10).unwrap();
        assert_eq!(at(100), Some(10));
        assert!(!d.join(LEGACY_FILE).exists());
        std::fs::write(d.join(LEGACY_FILE), encode_snapshot(&snapshot(5))).unwrap();
        assert_eq!(at(9), Some(5));
    }
}
