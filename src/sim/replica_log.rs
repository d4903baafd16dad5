//! A replica's log on a simulated disk: its batches' bytes in a segment file (one per log:
//! the simulated logs never roll), and what `PartitionLog` keeps beside them. The bytes are
//! the truth: a crash keeps what the disk kept (`SimDisk::crash_drawing`: the synced bytes
//! and a random prefix of the rest, none after a power cut), then the production recovery
//! (`storage::recovery::recover`: the batch scan, its CRC checks, the cut of a torn tail)
//! decides where the log ends, and the log is read back from the file. A leader serves its
//! followers from the file too (`read_from`).
//!
//! The leader epoch cache and the aborted-transaction index are files on the same disk, saved
//! and loaded by the production code (`LeaderEpochs::save`/`load`, `txn_index::append_synced`
//! and `rewrite`, and `recovery::load_aborted`, which rebuilds a damaged index from the log).
//! What survives a crash besides: the high-watermark checkpoint (taken every
//! `HW_CHECKPOINT_MS`).

use super::batch::Batch;
use super::disk::{DiskFaults, SimDisk};
use crate::partition::replica_state::ReplicaLog;
use crate::protocol::batch;
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

/// The log's directory on its disk.
const DIR: &str = "partition";
/// `index.interval.bytes` for recovery's rebuilt indexes (Kafka's default).
const INDEX_INTERVAL_BYTES: u32 = 4096;

/// The one segment file.
fn segment() -> PathBuf {
    SegmentMeta::log_path(Path::new(DIR), 0)
}

/// A replica's log on its own simulated disk, and what `PartitionLog` keeps beside its
/// batches: its positions, the high-watermark checkpoint, the epoch cache as held and as
/// saved, producer state and the aborted-transaction index.
#[derive(Debug)]
pub struct SimLog {
    /// The batches the file holds, decoded (the checks read them).
    pub batches: Vec<Batch>,
    /// Where each of `batches` begins in the file.
    starts: Vec<u64>,
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
            starts: Vec::new(),
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
    fn file_len(&self) -> u64 {
        let len = self.disk.len(&segment()).expect("the simulated disk reads");
        len.unwrap_or(0)
    }

    /// The place of `offset`, a batch boundary, in the file.
    fn position(&self, offset: i64) -> LogPosition {
        let file_position = match self.batches.binary_search_by_key(&offset, |b| b.base) {
            Ok(i) => self.starts[i],
            Err(_) => {
                assert_eq!(offset, self.log_end(), "a position at a batch boundary");
                self.file_len()
            }
        };
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
        let recovered = recovery::recover(&self.disk, Path::new(DIR), INDEX_INTERVAL_BYTES, 0)
            .expect("the simulated disk recovers");
        let (batches, starts) = self.read_back(&recovered.segments);
        (self.batches, self.starts) = (batches, starts);
        let end = self.log_end();
        let dir = Path::new(DIR);
        self.epochs = LeaderEpochs::load(&self.disk, dir, end);
        self.producers = self.rebuilt_producers(); // as `PartitionLog::open` (no snapshot here)
        self.aborted = recovery::load_aborted(&self.disk, dir, &[0], (0, end))
            .expect("the simulated disk reads");
        // As `PartitionLog::open`: what recovery kept is synced, then the high watermark goes
        // back to its checkpoint.
        self.disk.sync(&segment()).expect("no faults");
        self.syncing = None;
        self.positions = LogPositions::at(self.position(end));
        self.hw_checkpoint = self.hw_checkpoint.min(end);
        self.positions
            .restart_high_watermark(self.position(self.hw_checkpoint));
        recovered.truncated_bytes
    }

    /// The batches of the recovered file, each where it begins. Recovery must have left
    /// whole, valid batches, ending where its segment says.
    fn read_back(&self, segments: &[SegmentMeta]) -> (Vec<Batch>, Vec<u64>) {
        let Some(meta) = segments.first() else {
            return (Vec::new(), Vec::new()); // never written
        };
        assert_eq!(segments.len(), 1, "the simulated logs never roll");
        let bytes = self
            .disk
            .read(&segment())
            .expect("reads")
            .unwrap_or_default();
        assert_eq!(
            bytes.len() as u64,
            meta.size_bytes,
            "recovery cut the file where the log ends"
        );
        let (batches, starts) = decode_all(&bytes, 0);
        assert_eq!(
            batches.last().map_or(0, Batch::end),
            meta.next_offset,
            "recovery's log end is its last batch's"
        );
        (batches, starts)
    }

    /// Producer state as `PartitionLog` rebuilds it from its batches (no snapshot here), after a
    /// restart or a truncation.
    fn rebuilt_producers(&self) -> ProducerTable {
        let scanned: Vec<_> = self.batches.iter().map(Batch::scanned).collect();
        producer_state::rebuild(None, self.log_end(), &scanned, 0)
    }

    /// Appends a batch at the log end and notes it as `PartitionLog::plan_batches` does: its
    /// producer's sequence or transaction, and an abort marker's index entry.
    pub fn push(&mut self, b: Batch) {
        assert_eq!(b.base, self.log_end(), "batches are dense");
        let entry = txn_index::record(&mut self.producers, &b.header(), b.marker(), 0);
        // As `PartitionLog::write`: an abort marker's entry is synced before the marker.
        if let Some(entry) = &entry {
            txn_index::append_synced(&self.disk, Path::new(DIR), entry).expect("no faults");
        }
        self.aborted.extend(entry);
        let start = self.file_len();
        let bytes = b.encode();
        assert_eq!(
            Batch::decode(&bytes),
            Ok(b),
            "a batch reads back as written"
        );
        self.disk.append(&segment(), &bytes).expect("no faults");
        self.batches.push(b);
        self.starts.push(start);
        let end = LogPosition {
            offset: b.end(),
            segment_base: 0,
            file_position: start + bytes.len() as u64,
        };
        self.positions.note_batch_end(end);
        self.positions.wrote(b.base, end);
    }

    /// Up to `most` batches from the first at or past `offset`, read from the file.
    pub fn read_from(&self, offset: i64, most: usize) -> Vec<Batch> {
        let first = self.batches.partition_point(|b| b.base < offset);
        let Some(&from) = self.starts.get(first) else {
            return Vec::new();
        };
        let to = self
            .starts
            .get(first + most)
            .copied()
            .unwrap_or(self.file_len());
        let bytes = self
            .disk
            .read_at(&segment(), from, (to - from) as usize)
            .expect("reads");
        decode_all(&bytes, from).0
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
        self.disk.sync_prefix(&segment(), target.file_position);
        self.positions.complete_sync(target);
        true
    }

    /// `PartitionLog::truncate_to`: the batches from `offset` go (a cut inside a batch keeps
    /// none of it: the log cuts at batch bounds), producer state is rebuilt as of the cut,
    /// index entries of cut markers are dropped, positions past the end come back to it.
    pub fn truncate_to(&mut self, offset: i64) {
        // Production truncates under the journal's lock, which the flusher holds for its whole
        // pass: a sync in flight completes first.
        self.finish_sync();
        let kept = self.batches.partition_point(|b| b.end() <= offset);
        let cut = self.starts.get(kept).copied().unwrap_or(self.file_len());
        self.batches.truncate(kept);
        self.starts.truncate(kept);
        // The kept file is truncated and fdatasynced.
        self.disk.truncate(&segment(), cut).expect("no faults");
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
}

/// The whole batches `bytes` hold, which begin at byte `at` of the file, each with where it
/// begins. Every one must decode: the file holds only what the log wrote.
fn decode_all(bytes: &[u8], at: u64) -> (Vec<Batch>, Vec<u64>) {
    let (mut batches, mut starts, mut pos) = (Vec::new(), Vec::new(), 0);
    while pos < bytes.len() {
        let size = batch::peek_size(&bytes[pos..]).expect("a whole batch header");
        let one = bytes.get(pos..pos + size).expect("a whole batch");
        let b = Batch::decode(one).unwrap_or_else(|e| panic!("the log holds a bad batch: {e}"));
        batches.push(b);
        starts.push(at + pos as u64);
        pos += size;
    }
    (batches, starts)
}
