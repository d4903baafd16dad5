//! A replica's partition: production's `Partition` over its own simulated disk
//! (`Volume::Simulated`), driven to completion call by call (`block_on`: the simulated disk's
//! futures never wait, and one call at a time never finds the append lock held). Opening
//! (`Partition::open`: the topic-id file, the recovery scan with its CRC checks and the cut of
//! a torn tail, the epoch cache, producer state, the transaction index, the high watermark
//! back to its checkpoint), appends (`append_from`: validation, idempotent sequences, markers,
//! rolls, the write and its undo), a follower's appends and truncations (`append_replica`,
//! `truncate_diverged`), the flusher's work (`SyncQueue::take_work`, `sync_files`,
//! `complete_sync`) and the high-watermark checkpoint are the broker's own code. On seeds
//! whose disks fill up, appends fail with ENOSPC now and then: the partition undoes them and
//! answers KAFKA_STORAGE_ERROR.
//!
//! The bytes are the truth: a crash keeps what the disk kept (`SimDisk::crash_drawing`: the
//! synced bytes and a random prefix of the rest, none after a power cut), then the partition
//! opens again over it. What this module adds is the simulator's view: the batches the files
//! hold, decoded (the checks compare them across replicas and with the history), checked
//! against the files after every restart, and each appended batch against what the partition
//! says it wrote.

use super::batch::Batch;
use super::disk::{DiskFaults, SimDisk};
use crate::clock::{Clock, ManualClock};
use crate::config::{LogConfig, TopicDefaults};
use crate::metrics::ShardMetrics;
use crate::partition::env::{Environment, SyncPass};
use crate::partition::fifo_lock::Guard;
use crate::partition::replica_state::FollowerView;
use crate::partition::{Partition, Source};
use crate::protocol::batch;
use crate::replication::fetcher::{take_fetched, Taken};
use crate::replication::follower_rules::Fetched;
use crate::storage::catalog::{PartitionAssignment, TopicMeta, TopicRecord};
use crate::storage::disk::Disk;
use crate::storage::log::{sync_files, PartitionLog};
use crate::storage::segment_file::Volume;
use crate::storage::topic_config::TopicConfig;
use bytes::Bytes;
use futures::FutureExt;
use kafka_protocol::ResponseError;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cell::Ref;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The directory the partition's directory is in, on its disk.
const DATA_DIR: &str = "data";
/// `index.interval.bytes`: small (Kafka's default is 4096), so that the offset index holds an
/// entry every few of the simulator's batches and truncations cut through it.
const INDEX_INTERVAL_BYTES: u32 = 512;
/// `segment.bytes`: small (Kafka's default is 1 GiB), so that a log rolls every dozen or so of
/// the simulator's batches: truncations and recoveries span several segments, and restarts
/// read producer state back from the snapshots rolls write.
const SEGMENT_BYTES: u64 = 4 << 10;
/// Opening a partition writes its topic-id file, which may find the disk full: a node tries
/// again, as an operator restarts a broker, at most this often.
const OPEN_TRIES: u32 = 100;

/// What the broker's catalog says of the topic of partition `index`: replicated (so that a
/// restart takes the high watermark back to its checkpoint), with small segments and index
/// intervals (above), rolled by size only, and producer timestamps not checked (a simulated
/// batch's timestamp carries its payload, `batch.rs`).
pub fn topic_meta(topic_id: [u8; 16], index: i32, min_insync: usize) -> TopicMeta {
    let name = format!("t{:02x}{:02x}", topic_id[0], topic_id[1]);
    let mut config = TopicConfig::defaults(&TopicDefaults::default(), &LogConfig::default());
    config.segment_bytes = SEGMENT_BYTES;
    config.segment_ms = u64::MAX;
    config.index_interval_bytes = INDEX_INTERVAL_BYTES;
    config.timestamp_after_max_ms = i64::MAX;
    config.min_insync_replicas = min_insync as i32;
    let partitions = index as u32 + 1;
    TopicMeta {
        name: name.as_str().into(),
        record: TopicRecord {
            name,
            id: topic_id,
            partitions,
            configs: Vec::new(),
            assignment: vec![PartitionAssignment::default(); partitions as usize],
        },
        config,
        partition_epochs: Vec::new(),
    }
}

/// A replica's partition on its own simulated disk (see the module doc).
pub struct SimLog {
    partition: Rc<Partition>,
    /// What the partition shares with its shard: the flusher's queue, the node's clock.
    env: Rc<Environment>,
    /// The node's clock as this replica last read it (`tick`).
    clock: Arc<ManualClock>,
    topic: TopicMeta,
    /// The disk the partition's files are on: a crash's losses, and ENOSPC on seeds whose
    /// disks fill up (`SimLog::new`).
    disk: Rc<SimDisk>,
    /// The batches the files hold, decoded (the checks read them).
    pub batches: Vec<Batch>,
    /// The flusher's pass in flight (`start_sync`), holding the journal's lock as the
    /// broker's does throughout (a rewrite of the log waits for it: `drive`).
    syncing: Option<(Guard, SyncPass)>,
    /// Segments rolled, over the log's whole life (the summary's count).
    pub rolls: u64,
}

impl std::fmt::Debug for SimLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimLog")
            .field("log_end", &self.partition.log_end_offset())
            .field("high_watermark", &self.partition.high_watermark())
            .field("batches", &self.batches.len())
            .finish()
    }
}

impl SimLog {
    /// A new, empty partition of `topic` on its own disk, which draws `faults` (from `seed`)
    /// but never fails an fsync.
    pub fn new(seed: u64, faults: DiskFaults, topic: TopicMeta) -> SimLog {
        let faults = DiskFaults {
            fsync_error_ppm: 0,
            ..faults
        };
        let disk = Rc::new(SimDisk::new(ChaCha8Rng::seed_from_u64(seed), faults));
        let clock = Arc::new(ManualClock::new(0, 0));
        let env = environment(&clock);
        SimLog {
            partition: open(&disk, &topic, &env),
            env,
            clock,
            topic,
            disk,
            batches: Vec::new(),
            syncing: None,
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

/// The replica's shard environment (one per replica, as if each had a shard of its own), on
/// its node's clock; no journal (`Journal::disabled`).
fn environment(clock: &Arc<ManualClock>) -> Rc<Environment> {
    let clock: Arc<dyn Clock> = clock.clone();
    Environment::new(clock, Arc::new(ShardMetrics::default()))
}

/// The partition in `disk`'s files, opened as the broker opens it at start-up.
fn open(disk: &Rc<SimDisk>, topic: &TopicMeta, env: &Rc<Environment>) -> Rc<Partition> {
    let index = topic.record.partitions as i32 - 1;
    for _ in 0..OPEN_TRIES {
        let at = (Volume::Simulated(disk.clone()), Path::new(DATA_DIR));
        match done(Partition::open(at, topic, index, env.clone())) {
            Ok(p) => return Rc::new(p),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => continue,
            Err(e) => panic!("the simulated disk opens: {e}"),
        }
    }
    panic!("the disk was full at {OPEN_TRIES} starts in a row")
}

impl SimLog {
    /// The production partition.
    pub fn partition(&self) -> &Rc<Partition> {
        &self.partition
    }

    /// The production log, to read.
    pub fn view(&self) -> Ref<'_, PartitionLog> {
        self.partition.log()
    }

    pub fn log_end(&self) -> i64 {
        self.partition.log_end_offset()
    }

    /// The node's clock reads `now_ms` (monotonic and wall: the simulator has one time).
    pub fn tick(&self, now_ms: u64) {
        let behind = now_ms.saturating_sub(self.clock.monotonic_ms());
        self.clock.advance(behind);
    }

    /// The topic's `min.insync.replicas`, as `Partition::configure` hands it on.
    pub fn set_min_insync(&mut self, min_insync: usize) {
        if self.topic.config.min_insync_replicas != min_insync as i32 {
            self.topic.config.min_insync_replicas = min_insync as i32;
            self.partition.configure(&self.topic.config);
        }
    }

    /// A crash: what the disk kept, opened again as the broker does after one (recovery, then
    /// the high watermark back to the checkpoint), and read back. Returns the bytes recovery
    /// cut.
    pub fn crash(&mut self, rng: &mut ChaCha8Rng, power_cut: bool) -> u64 {
        // What the process held in memory is gone: the flusher's queue and pass with it.
        self.syncing = None;
        drop(self.env.sync_queue.take_work());
        self.disk.crash_drawing(rng, power_cut);
        let kept = self.file_len();
        self.env = environment(&self.clock);
        self.partition = open(&self.disk, &self.topic, &self.env);
        self.batches = self.read_back();
        kept - self.file_len()
    }

    /// The partition's high-watermark checkpoint (`Shard::checkpoint_high_watermarks`).
    pub fn checkpoint(&self) {
        self.partition.checkpoint_high_watermark();
    }

    /// The segment files in the log's directory, by name (the order of their base offsets).
    fn segment_files(&self) -> Vec<PathBuf> {
        let dir = self.view().dir.clone();
        let mut names = self.disk.list(&dir).expect("lists");
        names.retain(|n| n.ends_with(".log"));
        names.sort();
        names.iter().map(|n| dir.join(n)).collect()
    }

    /// The bytes of the log's segment files.
    fn file_len(&self) -> u64 {
        let len = |p: &PathBuf| self.disk.len(p).expect("reads").unwrap_or(0);
        self.segment_files().iter().map(len).sum()
    }

    /// The batches of the recovered files. Recovery must have left whole, valid batches in
    /// each segment, continuing one another and ending where the log says.
    fn read_back(&self) -> Vec<Batch> {
        let mut batches: Vec<Batch> = Vec::new();
        for path in self.segment_files() {
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

    /// A producer's (or coordinator's) batch `b` on the leader, sent as `source` with `acks`
    /// (`Partition::append_acked`): Ok(the base offset it is at, and whether it was there
    /// already: an idempotent retry). The partition stamps offsets and epoch: `b` must hold
    /// the log end and the leader's epoch, as the batch the simulator records.
    pub fn append(
        &mut self,
        b: Batch,
        (source, acks): (Source, i16),
    ) -> Result<(i64, bool), ResponseError> {
        let bytes = encode(&[b]);
        let end = self.log_end();
        let appended = self.checked_call(
            |log| done(log.partition.append_acked(bytes, source, acks)),
            Result::is_err,
        );
        let appended = appended.map_err(|r| r.error)?;
        if appended.base_offset < end {
            return Ok((appended.base_offset, true));
        }
        assert_eq!(
            (appended.base_offset, appended.end_offset),
            (b.base, b.end()),
            "a batch is written at the log end"
        );
        assert_eq!(
            b.epoch,
            self.view().leader_epoch,
            "stamped with the leader's epoch"
        );
        self.batches.push(b);
        Ok((b.base, false))
    }

    /// A follower's taking of its leader's fetch answer (`fetcher::take_fetched`): appended,
    /// or the log cut or restarted, or nothing done (a stale answer, a failed append: then
    /// the log is as it was, and still serves).
    pub fn take_fetched(
        &mut self,
        view: &FollowerView,
        fetched: &Fetched,
        records: Option<Bytes>,
    ) -> Taken {
        let p = self.partition.clone();
        let end = p.log_end_offset();
        let taken = self.checked_call(
            |log| log.drive(take_fetched(&p, view, fetched, records.clone())),
            |taken| *taken == Taken::BackOff,
        );
        let grew = p.log_end_offset() > end;
        let fetched_batches = records
            .filter(|_| grew)
            .map(|r| decode(&r))
            .unwrap_or_default();
        self.follow_log(fetched_batches);
        taken
    }

    /// The batches after the log changed under a follower: cut where it was cut, then
    /// `appended` (the leader's, which must continue it to its end).
    fn follow_log(&mut self, appended: Vec<Batch>) {
        let end = self.log_end();
        let kept = self.batches.partition_point(|b| b.end() <= end);
        self.batches.truncate(kept);
        let at = self.batches.last().map_or(0, Batch::end);
        if let Some(first) = appended.first() {
            assert_eq!(first.base, at, "the leader's batches continue the log");
        }
        self.batches.extend(appended);
        assert_eq!(
            self.batches.last().map_or(0, Batch::end),
            end,
            "the log cuts at batch bounds and ends at its last batch"
        );
    }

    /// Runs a partition's call to its end: at once, or, when it waits for the journal's lock
    /// (a rewrite of the log, fenced against the flusher), once the flusher's pass in flight
    /// completes, as in the broker. Any other wait would be for good: a simulator bug.
    fn drive<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if let Poll::Ready(out) = work.as_mut().poll(&mut cx) {
            return out;
        }
        assert!(
            self.finish_sync(),
            "a partition's call waits only for the flusher's pass"
        );
        match work.as_mut().poll(&mut cx) {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("a partition's call still waits after the flusher's pass"),
        }
    }

    /// Runs `call` (an append, or the taking of a fetch answer) and counts the segments it
    /// rolled. Where `refused` says it was refused (a failed append, a stale answer), checks
    /// what production promises (`PartitionLog::write`): the log's end and high watermark are
    /// as they were, and it still serves.
    fn checked_call<T>(
        &mut self,
        call: impl FnOnce(&mut SimLog) -> T,
        refused: impl FnOnce(&T) -> bool,
    ) -> T {
        let p = self.partition.clone();
        let before = (p.log_end_offset(), p.high_watermark(), self.segments());
        let result = call(self);
        self.rolls += self.segments().saturating_sub(before.2) as u64;
        if refused(&result) {
            assert_eq!(
                (p.log_end_offset(), p.high_watermark()),
                (before.0, before.1),
                "a failed append or a refused answer changes nothing the log serves"
            );
            assert!(!p.is_failed(), "a failed append is undone");
        }
        result
    }

    fn segments(&self) -> usize {
        self.view().segments.len()
    }

    /// The flusher's pass takes the journal's lock and plans an fdatasync of everything
    /// written (`shard::flusher::sync_once`, `SyncQueue::take_work`); false when there is
    /// nothing to sync or a pass is in flight (a shard's flusher runs one at a time).
    pub fn start_sync(&mut self) -> bool {
        if self.syncing.is_some() {
            return false;
        }
        let turn = done(self.env.journal.lock());
        let work = self.env.sync_queue.take_work();
        if !work.is_empty() {
            self.syncing = Some((turn, work));
        }
        self.syncing.is_some()
    }

    /// The fdatasync in flight returns: the flusher's `sync_files`, then `complete_sync`,
    /// then the journal's lock goes. False when none was in flight.
    pub fn finish_sync(&mut self) -> bool {
        let Some((turn, work)) = self.syncing.take() else {
            return false;
        };
        for (partition, job) in work {
            let result = done(sync_files(&job.files)).map(|_| ());
            partition.complete_sync(job.target, result);
        }
        drop(turn);
        true
    }

    /// `Replication::truncate_diverged`: the batches from `offset` go (a cut inside a batch
    /// keeps none of it); unless `complete`, the follower asks its leader again.
    pub fn truncate_diverged(&mut self, offset: i64, complete: bool) {
        let p = self.partition.clone();
        self.drive(p.replication().truncate_diverged(offset, complete))
            .expect("the simulated disk truncates");
        self.follow_log(Vec::new());
    }
}

/// The batches' bytes, each checked to read back as itself and to pass the broker's
/// validation of a produce request or a fetched response.
fn encode(batches: &[Batch]) -> Bytes {
    let mut bytes = Vec::new();
    for b in batches {
        let one = b.encode();
        assert_eq!(Batch::decode(&one), Ok(*b), "a batch reads back as written");
        batch::validate(&one).expect("a valid batch");
        bytes.extend_from_slice(&one);
    }
    Bytes::from(bytes)
}

/// The output of `work`, which must be ready at once: the simulated disk's futures never
/// wait, and the simulator makes one call at a time, so no lock is ever held by another (a
/// call that waited would wait for good).
pub fn done<F: std::future::Future>(work: F) -> F::Output {
    work.now_or_never()
        .expect("a partition's call on the simulated disk completes at once")
}

/// The whole batches `bytes` hold (a partial one at the end is left out). Every one must
/// decode: the file holds only what the log wrote.
pub fn decode(bytes: &[u8]) -> Vec<Batch> {
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
