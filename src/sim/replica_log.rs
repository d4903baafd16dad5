//! A replica's log: production's `PartitionLog` over its own simulated disk
//! (`Volume::Simulated`). Appends, the flusher's sync work, reads, truncations and the restart
//! after a crash are the broker's own code: `prepare_append`/`prepare_replica_append` and
//! `write` (offsets, the segment's indexes, producer state, the aborted-transaction index
//! synced before its marker), `take_sync_work`/`sync_files`/`complete_sync`, `plan_read_below`
//! and `read::read_batches` (a follower's fetch, KIP-74), `truncate_to`, and `open` (the
//! recovery scan with its CRC checks and the cut of a torn tail, the epoch cache, producer
//! state, the transaction index) with `restart_high_watermark`; rolls (`needs_roll`, `roll`:
//! the closed segment's indexes and a producer-state snapshot) as `Partition` rolls. On seeds
//! whose disks fill up, appends fail with ENOSPC now and then: `PartitionLog::write` undoes
//! them, and the replica answers KAFKA_STORAGE_ERROR as `Partition` does.
//!
//! The bytes are the truth: a crash keeps what the disk kept (`SimDisk::crash_drawing`: the
//! synced bytes and a random prefix of the rest, none after a power cut), then the log opens
//! again over it. What this module adds is the simulator's view: the batches the file holds,
//! decoded (the checks compare them across replicas and with the history), checked against
//! the file after every restart; and the high-watermark checkpoint, taken every
//! `HW_CHECKPOINT_MS` (`replication.rs`), as the broker's checkpoint file would hold it.

use super::batch::Batch;
use super::disk::{DiskFaults, SimDisk};
use crate::protocol::batch::{self, BatchHeader};
use crate::storage::disk::Disk;
use crate::storage::log::{sync_files, AppendPlan, LogSettings, PartitionLog, SyncWork};
use crate::storage::read::{self, Limit};
use crate::storage::segment_file::Volume;
use bytes::Bytes;
use futures::executor::block_on;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cell::{Ref, RefCell, RefMut};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The log's directory on its disk.
const DIR: &str = "partition";
/// `index.interval.bytes`: small (Kafka's default is 4096), so that the offset index holds an
/// entry every few of the simulator's batches and truncations cut through it.
const INDEX_INTERVAL_BYTES: u32 = 512;
/// The most bytes a follower's fetch reads (a fetch's `partition_max_bytes`): a batch cut
/// at this bound is left for the next fetch, as a Kafka client leaves a partial last batch.
const FETCH_MAX_BYTES: usize = 16 << 10;
/// `segment.bytes`: small (Kafka's default is 1 GiB), so that a log rolls every dozen or so of
/// the simulator's batches: truncations and recoveries span several segments, and restarts
/// read producer state back from the snapshots rolls write.
const SEGMENT_BYTES: u64 = 4 << 10;
/// The simulator's clock plays no part in a log: its segments roll by size only, and producer
/// state's update times are not compared.
const NOW_MS: u64 = 0;

fn settings() -> LogSettings {
    LogSettings {
        segment_bytes: SEGMENT_BYTES,
        segment_ms: u64::MAX,
        index_interval_bytes: INDEX_INTERVAL_BYTES,
        log_append_time: false,
    }
}

/// The segment files in the log's directory, by name (the order of their base offsets).
fn segment_files(disk: &SimDisk) -> Vec<PathBuf> {
    let mut names = disk.list(Path::new(DIR)).expect("lists");
    names.retain(|n| n.ends_with(".log"));
    names.sort();
    names.iter().map(|n| Path::new(DIR).join(n)).collect()
}

/// A replica's log on its own simulated disk (see the module doc).
pub struct SimLog {
    log: RefCell<PartitionLog>,
    /// The disk the log's files are on: a crash's losses, and ENOSPC on seeds whose disks
    /// fill up (`SimLog::new`).
    disk: Rc<SimDisk>,
    /// The batches the file holds, decoded (the checks read them).
    pub batches: Vec<Batch>,
    /// The flusher's sync in flight (`start_sync`), if any.
    syncing: Option<SyncWork>,
    pub hw_checkpoint: i64,
    /// Segments rolled, over the log's whole life (the summary's count).
    pub rolls: u64,
}

impl std::fmt::Debug for SimLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = self.log.borrow();
        f.debug_struct("SimLog")
            .field("log_end", &l.log_end_offset())
            .field("high_watermark", &l.high_watermark())
            .field("batches", &self.batches.len())
            .finish()
    }
}

impl SimLog {
    /// A new, empty log on its own disk, which draws `faults` (from `seed`) but never fails
    /// an fsync.
    pub fn new(seed: u64, faults: DiskFaults) -> SimLog {
        let faults = DiskFaults {
            fsync_error_ppm: 0,
            ..faults
        };
        let disk = Rc::new(SimDisk::new(ChaCha8Rng::seed_from_u64(seed), faults));
        SimLog {
            log: RefCell::new(open(&disk)),
            disk,
            batches: Vec::new(),
            syncing: None,
            hw_checkpoint: 0,
            rolls: 0,
        }
    }

    /// Faults end: the disk has room again.
    pub fn heal(&self) {
        self.disk.heal();
    }

    /// Appends that found the disk full, over the log's whole life.
    pub fn faults(&self) -> u64 {
        self.disk.faults_hit.get()
    }
}

/// The log in `disk`'s files, opened as the broker opens a partition's.
fn open(disk: &Rc<SimDisk>) -> PartitionLog {
    let volume = Volume::Simulated(disk.clone());
    let opened = PartitionLog::open((volume, DIR.into()), settings(), 0, NOW_MS);
    block_on(opened).expect("the simulated disk opens")
}

impl SimLog {
    /// The production log, to read.
    pub fn view(&self) -> Ref<'_, PartitionLog> {
        self.log.borrow()
    }

    /// The production log, for the replication rules (`ReplicaState`) to change.
    pub fn view_mut(&self) -> RefMut<'_, PartitionLog> {
        self.log.borrow_mut()
    }

    pub fn log_end(&self) -> i64 {
        self.log.borrow().log_end_offset()
    }

    /// A crash: what the disk kept, opened again as the broker does after one (recovery, then
    /// the high watermark back to the checkpoint), and read back. Returns the bytes recovery
    /// cut.
    pub fn crash(&mut self, rng: &mut ChaCha8Rng, power_cut: bool) -> u64 {
        self.syncing = None;
        self.disk.crash_drawing(rng, power_cut);
        let kept = self.file_len();
        self.log = RefCell::new(open(&self.disk));
        let checkpoint = Some(self.hw_checkpoint);
        block_on(PartitionLog::restart_high_watermark(&self.log, checkpoint))
            .expect("the simulated disk reads");
        self.hw_checkpoint = self.log.borrow().high_watermark();
        self.batches = self.read_back();
        kept - self.file_len()
    }

    /// The bytes of the log's segment files.
    fn file_len(&self) -> u64 {
        let files = segment_files(&self.disk);
        let len = |p: &PathBuf| self.disk.len(p).expect("reads").unwrap_or(0);
        files.iter().map(len).sum()
    }

    /// The batches of the recovered files. Recovery must have left whole, valid batches in
    /// each segment, continuing one another and ending where the log says.
    fn read_back(&self) -> Vec<Batch> {
        let mut batches: Vec<Batch> = Vec::new();
        for path in segment_files(&self.disk) {
            let bytes = self.disk.read(&path).expect("reads").unwrap_or_default();
            let segment = decode(&bytes);
            if let (Some(last), Some(next)) = (batches.last(), segment.first()) {
                assert_eq!(last.end(), next.base, "segments continue one another");
            }
            batches.extend(segment);
        }
        let end = batches.last().map_or(0, Batch::end);
        assert_eq!(
            end,
            self.log_end(),
            "recovery's log end is its last batch's"
        );
        batches
    }

    /// Rolls to a new segment first when appending `bytes` holding `offsets` offsets must
    /// (`Partition::roll_if_needed`).
    fn roll_if_needed(&mut self, bytes: &Bytes, offsets: i64) -> io::Result<()> {
        let len = bytes.len() as u64;
        if self.log.borrow().needs_roll(len, offsets, NOW_MS) {
            block_on(PartitionLog::roll(&self.log, NOW_MS))?;
            self.rolls += 1;
        }
        Ok(())
    }

    /// A leader's append of `b`, a producer's batch at the log end in the leader's epoch
    /// (`Partition::append`'s roll and write: offsets and epoch stamped by the log). An error
    /// (the disk is full) changes nothing the log serves.
    pub fn append(&mut self, b: Batch) -> io::Result<()> {
        let epoch = self.log.borrow().leader_epoch;
        assert_eq!(b.epoch, epoch, "stamped with the leader's epoch");
        let (bytes, headers) = encode(&[b]);
        self.unchanged_on_error(|log| {
            log.roll_if_needed(&bytes, b.count)?;
            let plan = log
                .log
                .borrow_mut()
                .prepare_append(&bytes, &headers, NOW_MS);
            log.write(plan, &[b])
        })
    }

    /// A follower's append of its leader's batches (`Partition::append_replica`'s roll and
    /// write). An error (the disk is full) changes nothing the log serves.
    pub fn append_replica(&mut self, batches: &[Batch]) -> io::Result<()> {
        let (bytes, headers) = encode(batches);
        let first = batches.first().expect("batches to append");
        let last = batches.last().expect("batches to append");
        self.unchanged_on_error(|log| {
            log.roll_if_needed(&bytes, last.end() - first.base)?;
            let plan = log
                .log
                .borrow_mut()
                .prepare_replica_append(&bytes, &headers, NOW_MS);
            log.write(plan, batches)
        })
    }

    /// Runs `append`; when it fails, checks what production promises (`PartitionLog::write`):
    /// the log's end and high watermark are as they were, and it still serves.
    fn unchanged_on_error(
        &mut self,
        append: impl FnOnce(&mut SimLog) -> io::Result<()>,
    ) -> io::Result<()> {
        let before = (self.log_end(), self.log.borrow().high_watermark());
        let result = append(self);
        if result.is_err() {
            let l = self.log.borrow();
            let after = (l.log_end_offset(), l.high_watermark());
            assert_eq!(
                after, before,
                "a failed append changes nothing the log serves"
            );
            assert!(!l.failed, "a failed append is undone");
        }
        result
    }

    fn write(&mut self, plan: AppendPlan, batches: &[Batch]) -> io::Result<()> {
        assert_eq!(
            batches.first().map(|b| b.base),
            Some(plan.base_offset),
            "batches are dense"
        );
        block_on(PartitionLog::write(&self.log, plan))?;
        self.batches.extend_from_slice(batches);
        Ok(())
    }

    /// Up to `most` batches from the first holding an offset at or past `offset`, read as the
    /// leader reads for a follower's fetch: from the written end's bytes, the first batch
    /// whole however large (KIP-74), whole batches after it up to the fetch's bound.
    pub fn read_from(&self, offset: i64, most: usize) -> Vec<Batch> {
        let l = self.log.borrow();
        let Ok(Some(plan)) = l.plan_read_below(offset, l.written()) else {
            return Vec::new(); // nothing there yet
        };
        let boundary = |limit| l.batch_start_at_or_before(plan.segment_base, limit);
        let limit = Limit::bytes(FETCH_MAX_BYTES);
        let read = read::read_batches(&plan, offset, limit, boundary);
        let bytes = block_on(read).expect("the simulated disk reads");
        let mut batches = decode(&bytes);
        batches.truncate(most);
        batches
    }

    /// The flusher plans an fdatasync of everything written (`PartitionLog::take_sync_work`);
    /// false when there is nothing to sync or one is in flight (a shard's flusher runs one
    /// pass at a time).
    pub fn start_sync(&mut self) -> bool {
        if self.syncing.is_some() {
            return false;
        }
        self.syncing = self.log.borrow_mut().take_sync_work();
        self.syncing.is_some()
    }

    /// The fdatasync in flight returns: the flusher's `sync_files`, then `complete_sync`.
    /// False when none was in flight.
    pub fn finish_sync(&mut self) -> bool {
        let Some(work) = self.syncing.take() else {
            return false;
        };
        block_on(sync_files(&work.files)).expect("no faults");
        self.log.borrow_mut().complete_sync(work.target);
        true
    }

    /// `PartitionLog::truncate_to`: the batches from `offset` go (a cut inside a batch keeps
    /// none of it).
    pub fn truncate_to(&mut self, offset: i64) {
        // Production truncates under the journal's lock, which the flusher holds for its whole
        // pass: a sync in flight completes first.
        self.finish_sync();
        block_on(PartitionLog::truncate_to(&self.log, offset, NOW_MS))
            .expect("the simulated disk truncates");
        let end = self.log_end();
        let kept = self.batches.partition_point(|b| b.end() <= end);
        self.batches.truncate(kept);
        assert_eq!(
            self.batches.last().map_or(0, Batch::end),
            end,
            "the log cuts at batch bounds"
        );
    }
}

/// The batches' bytes, each checked to read back as itself, and their headers as the broker's
/// validation of a produce request or a fetched response finds them.
fn encode(batches: &[Batch]) -> (Bytes, Vec<BatchHeader>) {
    let (mut bytes, mut headers) = (Vec::new(), Vec::new());
    for b in batches {
        let one = b.encode();
        assert_eq!(Batch::decode(&one), Ok(*b), "a batch reads back as written");
        headers.push(batch::validate(&one).expect("a valid batch"));
        bytes.extend_from_slice(&one);
    }
    (Bytes::from(bytes), headers)
}

/// The whole batches `bytes` hold (a partial one at the end is left out). Every one must
/// decode: the file holds only what the log wrote.
fn decode(bytes: &[u8]) -> Vec<Batch> {
    let (mut batches, mut pos) = (Vec::new(), 0);
    while pos < bytes.len() {
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
