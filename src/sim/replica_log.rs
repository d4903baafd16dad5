//! A replica's log on a simulated disk: its batches' bytes in a segment file (one per log:
//! the simulated logs never roll), and what `PartitionLog` keeps beside them, the segment's
//! bookkeeping among it (the production `SegmentMeta`: size, next offset, offset and time
//! indexes, noted batch by batch and cut by `SegmentMeta::cut_at` on a truncation). The bytes
//! are the truth: a crash keeps what the disk kept (`SimDisk::crash_drawing`: the synced bytes
//! and a random prefix of the rest, none after a power cut), then the production recovery
//! (`storage::recovery::recover`: the batch scan, its CRC checks, the cut of a torn tail, the
//! rebuilt index) decides where the log ends, and the log is read back from the file. Reads
//! find their place through the offset index, as `PartitionLog::plan_read` does, and a leader
//! serves its followers from the file (`read_from`).
//!
//! The leader epoch cache and the aborted-transaction index are files on the same disk, saved
//! and loaded by the production code (`LeaderEpochs::save`/`load`, `txn_index::append_synced`
//! and `rewrite`, and `recovery::load_aborted`, which rebuilds a damaged index from the log).
//! What survives a crash besides: the high-watermark checkpoint (taken every
//! `HW_CHECKPOINT_MS`), whose offset a restart places in the log as it is then
//! (`committed_position`, as `PartitionLog::restart_high_watermark` does).

use super::batch::Batch;
use super::disk::{DiskFaults, SimDisk};
use crate::partition::replica_state::ReplicaLog;
use crate::protocol::batch::{self, BatchHeader};
use crate::storage::disk::Disk;
use crate::storage::epochs::LeaderEpochs;
use crate::storage::positions::{LogPosition, LogPositions};
use crate::storage::producer_state::{self, ProducerTable};
use crate::storage::recovery;
use crate::storage::segment::SegmentMeta;
use crate::storage::txn_index::{self, AbortedTxn};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The log's directory on its disk.
const DIR: &str = "partition";
/// `index.interval.bytes`: small (Kafka's default is 4096), so that the offset index holds an
/// entry every few of the simulator's batches and truncations cut through it.
const INDEX_INTERVAL_BYTES: u32 = 512;

/// The most bytes a follower's fetch reads (a fetch's `partition_max_bytes`): a batch cut
/// at this bound is left for the next fetch, as a Kafka client leaves a partial last batch.
const FETCH_MAX_BYTES: u64 = 16 << 10;

/// The one segment file (named once: looking it up is most of what a read does).
fn segment() -> &'static Path {
    static PATH: LazyLock<PathBuf> = LazyLock::new(|| SegmentMeta::log_path(Path::new(DIR), 0));
    &PATH
}

/// A replica's log on its own simulated disk, and what `PartitionLog` keeps beside its
/// batches: the segment's bookkeeping, its positions, the high-watermark checkpoint, the epoch
/// cache, producer state and the aborted-transaction index.
#[derive(Debug)]
pub struct SimLog {
    /// The batches the file holds, decoded (the checks read them).
    pub batches: Vec<Batch>,
    /// The segment's bookkeeping, as `PartitionLog` keeps it for each of its segments.
    meta: SegmentMeta,
    /// The disk the segment file is on: no faults but what a crash does.
    disk: SimDisk,
    /// Production's bookkeeping of what is written, synced and committed.
    positions: LogPositions,
    /// The target of the fdatasync in flight (`start_sync`), if any.
    syncing: Option<LogPosition>,
    pub epochs: LeaderEpochs,
    /// Idempotent producers' sequences and ongoing transactions (`PartitionLog::producers`),
    /// rebuilt from the log on restart and after a truncation.
    pub producers: ProducerTable,
    /// The aborted-transaction index (`PartitionLog::aborted`): an entry per abort marker of a
    /// transaction that wrote here. Its file keeps what was written; entries past the log end
    /// are dropped on load.
    pub aborted: Vec<AbortedTxn>,
    pub hw_checkpoint: i64,
}

impl Default for SimLog {
    fn default() -> SimLog {
        let faults = DiskFaults {
            fsync_error_ppm: 0,
            no_space_ppm: 0,
        };
        // The disk draws nothing of its own: a crash draws from the world's generator.
        let disk = SimDisk::new(ChaCha8Rng::seed_from_u64(0), faults);
        SimLog {
            batches: Vec::new(),
            meta: SegmentMeta::new(0, 0),
            disk,
            positions: LogPositions::at(LogPosition {
                offset: 0,
                segment_base: 0,
                file_position: 0,
            }),
            syncing: None,
            epochs: LeaderEpochs::default(),
            producers: ProducerTable::default(),
            aborted: Vec::new(),
            hw_checkpoint: 0,
        }
    }
}

impl ReplicaLog for SimLog {
    fn log_end(&self) -> i64 {
        self.batches.last().map_or(0, Batch::end)
    }

    fn synced_end(&self) -> i64 {
        self.positions.synced().offset
    }

    fn high_watermark(&self) -> i64 {
        self.positions.high_watermark().offset
    }

    /// As `PartitionLog`'s: to the furthest batch end the positions know at or below `offset`.
    fn commit_up_to(&mut self, offset: i64) -> Option<i64> {
        self.positions.commit_up_to(offset)
    }

    fn epochs(&self) -> &LeaderEpochs {
        &self.epochs
    }

    fn change_epochs(
        &mut self,
        change: impl FnOnce(&mut LeaderEpochs) -> bool,
    ) -> std::io::Result<()> {
        if change(&mut self.epochs) {
            self.epochs.save(&self.disk, Path::new(DIR))?;
        }
        Ok(())
    }
}

impl SimLog {
    /// The batch header at byte `at` of the file.
    fn header_at(&self, at: u64) -> BatchHeader {
        let head = self.disk.read_at(segment(), at, batch::HEADER_BYTES);
        let head = head.expect("the simulated disk reads");
        batch::parse_header(&head).unwrap_or_else(|e| panic!("no batch header at {at}: {e:?}"))
    }

    /// Where the first batch holding an offset at or past `offset` begins (the segment's size
    /// when none does): from the offset index's entry at or before it, header by header, as
    /// `PartitionLog::plan_read` and `truncate_to` find it.
    fn batch_start(&self, offset: i64) -> u64 {
        let relative = (offset - self.meta.base_offset).clamp(0, u32::MAX as i64) as u32;
        let (_, indexed) = self.meta.offset_index.lookup(relative);
        let mut at = indexed as u64;
        while at < self.meta.size_bytes {
            let h = self.header_at(at);
            if h.last_offset() >= offset {
                break;
            }
            at += h.size_bytes as u64;
        }
        at
    }

    /// The place of a high watermark at most `offset`, as `PartitionLog::committed_position`
    /// finds it: the start of the batch holding `offset`, with that batch's base as the offset.
    fn committed_position(&self, offset: i64) -> LogPosition {
        let file_position = self.batch_start(offset);
        let base = match file_position < self.meta.size_bytes {
            true => self.header_at(file_position).base_offset.min(offset),
            false => offset,
        };
        LogPosition {
            offset: base,
            segment_base: 0,
            file_position,
        }
    }

    /// The place of `offset`, a batch boundary, in the file.
    fn position(&self, offset: i64) -> LogPosition {
        let file_position = self.batch_start(offset);
        if file_position < self.meta.size_bytes {
            let found = self.header_at(file_position).base_offset;
            assert_eq!(found, offset, "a position at a batch boundary");
        }
        LogPosition {
            offset,
            segment_base: 0,
            file_position,
        }
    }

    /// A crash: what the disk kept, cut where the production recovery finds the log's valid
    /// end, and read back from the file (see the module doc). Returns the bytes recovery cut.
    pub fn crash(&mut self, rng: &mut ChaCha8Rng, power_cut: bool) -> u64 {
        self.disk.crash_drawing(rng, power_cut);
        let dir = Path::new(DIR);
        let recovered = recovery::recover(&self.disk, dir, INDEX_INTERVAL_BYTES, 0)
            .expect("the simulated disk recovers");
        assert!(
            recovered.segments.len() <= 1,
            "the simulated logs never roll"
        );
        let meta = recovered.segments.first().cloned();
        self.meta = meta.unwrap_or(SegmentMeta::new(0, 0));
        self.batches = self.read_back();
        let end = self.log_end();
        self.epochs = LeaderEpochs::load(&self.disk, dir, end).expect("no faults");
        self.producers = self.rebuilt_producers(); // as `PartitionLog::open` (no snapshot here)
        self.aborted = recovery::load_aborted(&self.disk, dir, &[0], (0, end))
            .expect("the simulated disk reads");
        // As `PartitionLog::open`: what recovery kept is synced, then the high watermark goes
        // back to its checkpoint.
        self.disk.sync(segment()).expect("no faults");
        self.syncing = None;
        self.positions = LogPositions::at(self.position(end));
        let checkpoint = self.hw_checkpoint;
        let restarted = match checkpoint <= end {
            true => self.committed_position(checkpoint),
            false => self.position(0), // as production: the log start
        };
        self.positions.restart_high_watermark(restarted);
        self.hw_checkpoint = restarted.offset;
        recovered.truncated_bytes
    }

    /// The batches of the recovered file. Recovery must have left whole, valid batches,
    /// ending where its segment says.
    fn read_back(&self) -> Vec<Batch> {
        let bytes = self.disk.read(segment()).expect("reads");
        let bytes = bytes.unwrap_or_default();
        let cut_right = bytes.len() as u64 == self.meta.size_bytes;
        assert!(cut_right, "recovery cut the file where the log ends");
        let batches = decode(&bytes, usize::MAX);
        let end = batches.last().map_or(0, Batch::end);
        assert_eq!(
            end, self.meta.next_offset,
            "recovery's log end is its last batch's"
        );
        batches
    }

    /// Producer state as `PartitionLog` rebuilds it from its batches (no snapshot here), after a
    /// restart or a truncation.
    fn rebuilt_producers(&self) -> ProducerTable {
        let scanned: Vec<_> = self.batches.iter().map(Batch::scanned).collect();
        producer_state::rebuild(None, self.log_end(), &scanned, 0)
    }

    /// Appends a batch at the log end and notes it as `PartitionLog::plan_batches` does: in
    /// the segment's bookkeeping, its producer's sequence or transaction, and an abort
    /// marker's index entry (synced before the marker, as `PartitionLog::write` does).
    pub fn push(&mut self, b: Batch) {
        assert_eq!(b.base, self.log_end(), "batches are dense");
        let entry = txn_index::record(&mut self.producers, &b.header(), b.marker(), 0);
        if let Some(entry) = &entry {
            txn_index::append_synced(&self.disk, Path::new(DIR), entry).expect("no faults");
        }
        self.aborted.extend(entry);
        let bytes = b.encode();
        assert_eq!(
            Batch::decode(&bytes),
            Ok(b),
            "a batch reads back as written"
        );
        let header = batch::parse_header(&bytes).expect("a whole batch");
        // `PartitionLog` writes at its segment's size: that must be where the file ends.
        let file_end = self.disk.len(segment()).expect("reads").unwrap_or(0);
        assert_eq!(
            file_end, self.meta.size_bytes,
            "the segment's bookkeeping ends with its file"
        );
        self.meta
            .note_batch(&header, self.meta.size_bytes, INDEX_INTERVAL_BYTES);
        self.disk.append(segment(), &bytes).expect("no faults");
        self.batches.push(b);
        let end = LogPosition {
            offset: b.end(),
            segment_base: 0,
            file_position: self.meta.size_bytes,
        };
        self.positions.note_batch_end(end);
        self.positions.wrote(b.base, end);
    }

    /// Up to `most` batches from the first holding an offset at or past `offset`, read from
    /// the file.
    pub fn read_from(&self, offset: i64, most: usize) -> Vec<Batch> {
        let from = self.batch_start(offset);
        let rest = self.meta.size_bytes - from;
        if rest == 0 {
            return Vec::new(); // nothing there (and perhaps no file yet)
        }
        // The first batch whole, however large (KIP-74), and whole batches after it up to
        // the bound.
        let first = self.header_at(from).size_bytes as u64;
        let len = rest.min(FETCH_MAX_BYTES.max(first)) as usize;
        let bytes = self.disk.read_at(segment(), from, len);
        decode(&bytes.expect("the simulated disk reads"), most)
    }

    /// The flusher plans an fdatasync of everything written (`PartitionLog::take_sync_work`);
    /// false when there is nothing to sync or one is in flight (a shard's flusher runs one
    /// pass at a time).
    pub fn start_sync(&mut self) -> bool {
        if self.syncing.is_some() {
            return false;
        }
        self.syncing = self.positions.take_sync().map(|(_, target)| target);
        self.syncing.is_some()
    }

    /// The fdatasync in flight returns: the disk holds what it covered (the bytes written
    /// when it was issued), and the positions learn it (`PartitionLog::complete_sync`). False
    /// when none was in flight.
    pub fn finish_sync(&mut self) -> bool {
        let Some(target) = self.syncing.take() else {
            return false;
        };
        self.disk.sync_prefix(segment(), target.file_position);
        self.positions.complete_sync(target);
        true
    }

    /// `PartitionLog::truncate_to`: the batches from `offset` go (a cut inside a batch keeps
    /// none of it: the log cuts at batch bounds), the file and the segment's bookkeeping are
    /// cut with them, producer state is rebuilt as of the cut, index entries of cut markers
    /// are dropped, positions past the end come back to it.
    pub fn truncate_to(&mut self, offset: i64) {
        // Production truncates under the journal's lock, which the flusher holds for its whole
        // pass: a sync in flight completes first.
        self.finish_sync();
        let kept = self.batches.partition_point(|b| b.end() <= offset);
        let Some(first_cut) = self.batches.get(kept).map(|b| b.base) else {
            return; // nothing at or past `offset`
        };
        let cut = self.batch_start(first_cut);
        self.batches.truncate(kept);
        self.disk.truncate(segment(), cut).expect("no faults");
        self.cut_meta(cut);
        let end = self.log_end();
        if producer_state::truncation_rebuilds() {
            self.producers = self.rebuilt_producers();
        } else {
            self.producers.truncate(end);
        }
        // As `PartitionLog::truncate_to`: the index loses the entries of cut markers.
        let kept = self.aborted.partition_point(|e| e.last_offset < end);
        if kept < self.aborted.len() {
            self.aborted.truncate(kept);
            txn_index::rewrite(&self.disk, Path::new(DIR), &self.aborted).expect("no faults");
        }
        self.positions.truncated(self.position(end));
    }

    /// The segment's bookkeeping once the file is cut at byte `cut`, as
    /// `PartitionLog::meta_up_to` has it: the indexes before the cut (`SegmentMeta::cut_at`),
    /// and the batches after their last entry noted again.
    fn cut_meta(&mut self, cut: u64) {
        self.meta = self.meta.cut_at(cut);
        while self.meta.size_bytes < cut {
            let at = self.meta.size_bytes;
            let h = self.header_at(at);
            self.meta.note_batch(&h, at, INDEX_INTERVAL_BYTES);
        }
    }
}

/// The first `most` of the whole batches `bytes` hold (a partial one at the end is left out).
/// Every one must decode: the file holds only what the log wrote.
fn decode(bytes: &[u8], most: usize) -> Vec<Batch> {
    let (mut batches, mut pos) = (Vec::new(), 0);
    while pos < bytes.len() && batches.len() < most {
        let Some(size) = batch::peek_size(&bytes[pos..]) else {
            break; // a partial header
        };
        let Some(one) = bytes.get(pos..pos + size) else {
            break; // a partial batch
        };
        let b = Batch::decode(one).unwrap_or_else(|e| panic!("the log holds a bad batch: {e}"));
        batches.push(b);
        pos += size;
    }
    batches
}
