//! The aborted-transaction index of a segment (Kafka's `.txnindex`, KIP-98): one entry per
//! transaction whose abort marker lies in the segment, so that a read_committed fetch can name
//! the aborted transactions with records in the range it returns (the client drops those
//! records) without reading the log. Kafka's layout, big-endian, 34 bytes an entry: version
//! (i16, 0), producer id, the transaction's first offset, its last offset (the marker's), and
//! the last stable offset once it was aborted.
//!
//! One file per partition (`aborted-transactions`, Kafka keeps one per segment), in marker
//! order. An entry is appended and synced *before* its abort marker is written, so a marker
//! that survived a crash always has its entry; an entry whose marker did not survive lies at or
//! past the recovered log end and is dropped on load (`load`). A damaged file is rebuilt from
//! the log's batches (`Rebuilder`, via `storage::recovery::rebuild_aborted`).

use super::disk::Disk;
use super::producer_state::ProducerTable;
use crate::protocol::batch::BatchHeader;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const ENTRY_BYTES: usize = 34;
const VERSION: i16 = 0;

/// One aborted transaction of one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The abort marker's offset.
    pub last_offset: i64,
    /// The partition's last stable offset once the abort was written.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[0..2].copy_from_slice(&VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    /// An entry, if `raw` holds one that could have been written: version 0, a producer id,
    /// offsets in order.
    fn decode(raw: &[u8; ENTRY_BYTES]) -> Option<AbortedTxn> {
        let i64_at = |at: usize| i64::from_be_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
        let e = AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        };
        let valid = i16::from_be_bytes([raw[0], raw[1]]) == VERSION
            && e.producer_id >= 0
            && 0 <= e.first_offset
            && e.first_offset < e.last_offset
            && (0..=e.last_offset.saturating_add(1)).contains(&e.last_stable_offset);
        valid.then_some(e)
    }
}

/// A file's entries, and whether the whole file was intact. Reading stops at the first entry
/// that is torn, could not have been written, or does not follow its predecessor (markers are
/// appended in offset order); a damaged file must be rebuilt from the segment.
pub fn decode(raw: &[u8]) -> (Vec<AbortedTxn>, bool) {
    let mut out: Vec<AbortedTxn> = Vec::with_capacity(raw.len() / ENTRY_BYTES);
    let mut chunks = raw.chunks_exact(ENTRY_BYTES);
    for chunk in chunks.by_ref() {
        let entry = AbortedTxn::decode(chunk.try_into().expect("exact chunks"));
        let follows = |e: &AbortedTxn| out.last().is_none_or(|p| p.last_offset < e.last_offset);
        match entry.filter(follows) {
            Some(e) => out.push(e),
            None => return (out, false),
        }
    }
    let intact = chunks.remainder().is_empty();
    (out, intact)
}

/// What a control batch says, as far as producer state and this index care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// The transaction coordinator's epoch it carries (-1: none).
    pub coordinator_epoch: i32,
    /// Commit or abort; None when its record is not a marker this broker knows.
    pub commits: Option<bool>,
}

impl Marker {
    /// What the control batch `bytes` says.
    pub fn of(bytes: &[u8]) -> Marker {
        Marker {
            coordinator_epoch: crate::protocol::control::coordinator_epoch(bytes).unwrap_or(-1),
            commits: crate::protocol::control::commits(bytes),
        }
    }
}

/// Records batch `h`, just given its offsets, in `producers` (`marker`: what it says, when it
/// is a control batch). For the abort marker of a transaction that wrote here, returns its
/// entry, which must be in the index before the marker is written.
pub fn record(
    producers: &mut ProducerTable,
    h: &BatchHeader,
    marker: Option<Marker>,
    now_ms: i64,
) -> Option<AbortedTxn> {
    let first = (h.is_transactional() && h.is_control())
        .then(|| producers.txn_first_offset(h.producer_id))
        .flatten();
    producers.record(h, now_ms);
    let marker = marker.filter(|_| h.is_control())?;
    producers.note_coordinator_epoch(h.producer_id, marker.coordinator_epoch);
    let first_offset = first?;
    (marker.commits == Some(false)).then(|| AbortedTxn {
        producer_id: h.producer_id,
        first_offset,
        last_offset: h.base_offset,
        last_stable_offset: producers.first_unstable_offset().unwrap_or(h.next_offset()),
    })
}

/// What a read_committed fetch returning offsets `from..upper` carries: the aborted
/// transactions with records there, as (producer id, first offset), in first-offset order.
/// `entries` are in marker order (as `decode` keeps them), so those whose marker lies before
/// `from` are skipped without a look.
pub fn aborted_between(entries: &[AbortedTxn], from: i64, upper: i64) -> Vec<(i64, i64)> {
    let skip = entries.partition_point(|e| e.last_offset < from);
    let mut out: Vec<(i64, i64)> = entries[skip..]
        .iter()
        .filter(|e| e.first_offset < upper)
        .map(|e| (e.producer_id, e.first_offset))
        .collect();
    out.sort_by_key(|&(_, first)| first);
    out
}

/// Rebuilds the index from batches in log order, as recovery reads them: transactional data
/// batches open their producer's transaction, a commit marker closes it, an abort marker
/// closes it with an entry.
#[derive(Debug, Default)]
pub struct Rebuilder {
    /// Open transactions: producer id → first offset.
    open: BTreeMap<i64, i64>,
    entries: Vec<AbortedTxn>,
}

impl Rebuilder {
    /// Starts with the transactions still open where the batches begin (from the producer
    /// state of the log before them).
    pub fn new(open: impl IntoIterator<Item = (i64, i64)>) -> Rebuilder {
        Rebuilder {
            open: open.into_iter().collect(),
            entries: Vec::new(),
        }
    }

    /// Takes the next batch; `commits` is what its marker says, for a control batch.
    pub fn note(&mut self, h: &BatchHeader, commits: Option<bool>) {
        if !h.is_transactional() {
            return;
        }
        if !h.is_control() {
            self.open.entry(h.producer_id).or_insert(h.base_offset);
            return;
        }
        let first = self.open.remove(&h.producer_id);
        if let (Some(first_offset), Some(false)) = (first, commits) {
            // Once this one is closed, the first unstable offset is the earliest still open.
            let first_open = self.open.values().min().copied();
            self.entries.push(AbortedTxn {
                producer_id: h.producer_id,
                first_offset,
                last_offset: h.base_offset,
                last_stable_offset: first_open.unwrap_or(h.next_offset()),
            });
        }
    }

    /// The entries, and the transactions still open after the last batch.
    pub fn finish(self) -> (Vec<AbortedTxn>, BTreeMap<i64, i64>) {
        (self.entries, self.open)
    }
}

/// The partition directory's index file.
pub const FILE: &str = "aborted-transactions";

/// What `load` found in a partition's index file.
#[derive(Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The entries whose markers lie in `log_start..log_end` (what recovery kept).
    pub entries: Vec<AbortedTxn>,
    /// Whether the file was whole (a damaged one must be rebuilt: `Rebuilder`).
    pub intact: bool,
    /// Whether it named markers at or past `log_end`: entries synced before markers that a
    /// crash then lost. The file must lose them before the log grows past their offsets
    /// again, or a later restart would take them for markers of the new batches there.
    pub stale: bool,
}

/// The entries of `dir`'s index whose markers lie in `log_start..log_end`: see `Loaded`.
pub fn load(disk: &dyn Disk, dir: &Path, log_start: i64, log_end: i64) -> Loaded {
    let raw = match disk.read(&dir.join(FILE)) {
        Ok(raw) => raw.unwrap_or_default(),
        Err(e) => {
            log::warn!("{}: cannot read {FILE}: {e}; rebuilding it", dir.display());
            return Loaded {
                entries: Vec::new(),
                intact: false,
                stale: false,
            };
        }
    };
    let (mut entries, intact) = decode(&raw);
    let stale = entries.iter().any(|e| e.last_offset >= log_end);
    entries.retain(|e| e.last_offset < log_end && e.last_offset >= log_start);
    Loaded {
        entries,
        intact,
        stale,
    }
}

/// Appends one entry to `dir`'s index and syncs it (blocking: the caller runs it off the
/// shard's thread). Aborts are rare next to appends, so one sync each is cheap.
pub fn append_synced(disk: &dyn Disk, dir: &Path, entry: &AbortedTxn) -> std::io::Result<()> {
    // The first entry makes the file: `Disk::append` makes its name last too.
    let path = dir.join(FILE);
    disk.append(&path, &entry.encode())?;
    disk.sync(&path)
}

/// Replaces `dir`'s index with `entries` (after a truncation or a rebuild), atomically and
/// durably (`Disk::replace`).
pub fn rewrite(disk: &dyn Disk, dir: &Path, entries: &[AbortedTxn]) -> std::io::Result<()> {
    disk.replace(&dir.join(FILE), &encode_all(entries))
}

fn encode_all(entries: &[AbortedTxn]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.encode()).collect()
}

/// The index a compaction's swap of segment `base` leaves (without the entries of the abort
/// markers it removed), while the swap is under way.
fn next_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{FILE}.{base:020}.{NEXT_SUFFIX}"))
}

const NEXT_SUFFIX: &str = "next";

/// Before a segment swap that removes abort markers: the index without their entries, written
/// aside and durable. The swap itself (the compacted segment renamed over the old one) decides
/// which index holds: `adopt_next` after it, `settle_swaps` after a crash.
pub fn write_next(
    disk: &dyn Disk,
    dir: &Path,
    base: i64,
    entries: &[AbortedTxn],
) -> std::io::Result<()> {
    disk.replace(&next_path(dir, base), &encode_all(entries))
}

/// After the swap of segment `base`: its index replaces the old one.
pub fn adopt_next(disk: &dyn Disk, dir: &Path, base: i64) -> std::io::Result<()> {
    disk.rename(&next_path(dir, base), &dir.join(FILE))
}

/// Recovery, before unfinished compactions are removed: an index left aside for a swap is
/// adopted if the swap happened (its compacted copy `unswapped(base)` is gone: renamed over the
/// segment), and removed if not (the old segment, markers and all, still stands).
pub fn settle_swaps(
    disk: &dyn Disk,
    dir: &Path,
    unswapped: impl Fn(i64) -> bool,
) -> std::io::Result<()> {
    for name in disk.list(dir)? {
        let Some(base) = Some(name.as_str()).and_then(|n| {
            let middle = n.strip_prefix(FILE)?.strip_prefix('.')?;
            middle
                .strip_suffix(NEXT_SUFFIX)?
                .strip_suffix('.')?
                .parse::<i64>()
                .ok()
        }) else {
            continue;
        };
        if unswapped(base) {
            log::warn!(
                "{}: removing the index of an unfinished compaction",
                dir.display()
            );
            disk.remove(&next_path(dir, base))?;
            disk.sync_dir(dir)?;
        } else {
            log::warn!(
                "{}: adopting the index of a finished compaction",
                dir.display()
            );
            disk.rename(&next_path(dir, base), &dir.join(FILE))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
