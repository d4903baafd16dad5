//! A partition on the shard that owns it: its log, its idempotent producers' state, the lock
//! that orders its appends, its log end offset and its high watermark.
//!
//! The three operations everything else is built on:
//! - `append`: validates batches, checks idempotent sequences, rolls, writes, and queues the
//!   partition for the shard's flusher (group commit);
//! - `read`: whole batches from an offset, bounded by the high watermark, as a file range to
//!   send with sendfile or as bytes;
//! - `wait_for`: parks until the high watermark (or another of its positions) reaches an
//!   offset, on the partition's own monitors (`watchers.rs`: no other partition's appends
//!   wake it).
//!
//! What makes an offset committed is the partition's commit rule alone (`commit.rs`): the
//! flusher reports completed syncs (`complete_sync`), followers report what they synced (their
//! fetch offsets, `read`), a follower learns its leader's high watermark; the rule says how far
//! that commits, and the high watermark moves there (never back, never past what is synced
//! locally).
//!
//! Replication (a cluster): the controller's assignment makes the partition a leader or a
//! follower (`Replication::assign`). A follower's log takes the leader's batches as they are
//! (`append_replica`, the second append path, beside `append_from`) and cuts a divergent
//! tail when it starts following a new leader (`Replication::truncate_diverged`).
//!
//! `Partition` composes its parts and lends them out: the replication rules' view
//! (`replication`, `replica.rs`), retention's (`retention`) and the cleaner's (`compaction`)
//! each hold references to just the parts they work on; no other file has an `impl Partition`.
//!
//! Single-threaded: a partition lives in `Rc`s on its shard; other shards reach it by message.
//! No `RefCell` borrow is held across an await.

pub mod commit;
pub mod compaction;
pub mod env;
pub mod fifo_lock;
pub mod ingest;
pub mod journal;
pub mod monitor;
pub mod replica;
pub mod replica_state;
pub mod retention;
pub mod txn;
pub mod watchers;

use crate::protocol::batch::{self, BatchError, BatchHeader};
use crate::protocol::chunk::{Chunk, FileSlice};
use crate::storage::catalog::{TopicId, TopicMeta};
use crate::storage::hw_checkpoint;
use crate::storage::log::{
    LogSettings, PartitionLog, ReadError, ReadPlan, SyncWork, TOPIC_ID_FILE,
};
use crate::storage::positions::LogPosition;
use crate::storage::producer_state::Verdict;
use crate::storage::read;
use crate::storage::segment_file::Volume;
use crate::storage::topic_config::TopicConfig;
use bytes::Bytes;
use env::Environment;
use fifo_lock::{FifoLock, Ticket};
use ingest::Rejected;
use kafka_protocol::ResponseError;
use monitor::{Registration, Waiter};
use replica_state::ReplicaState;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::path::Path;
use std::rc::Rc;
pub use txn::Source;
pub use watchers::Watch;
use watchers::Watchers;

/// A partition's identity on the data path: its topic's id (no name, so no allocation per
/// lookup) and its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic_id: TopicId,
    pub partition: i32,
}

/// An append that reached the log (or was a retried duplicate of one that did).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    /// One past the last offset: the high watermark that commits the append.
    pub end_offset: i64,
    /// The broker's timestamp under LogAppendTime; -1 otherwise (and for duplicates).
    pub log_append_time_ms: i64,
}

/// What a fetch asks of a partition.
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest {
    pub offset: i64,
    pub max_bytes: usize,
    /// The leader epoch the client believes current; -1: unchecked.
    pub leader_epoch: i32,
    /// Answer with a file range to sendfile, not bytes read into memory.
    pub zero_copy: bool,
    /// Return the first batch even when it is larger than `max_bytes` (KIP-74): true for the
    /// first partition of a fetch that returns records, false for those after it.
    pub whole_first_batch: bool,
    /// The node id of a follower fetching to replicate (-1: a consumer). A follower reads up
    /// to the written end, and its fetch offset reports what it has synced.
    pub replica: i32,
    /// `isolation.level=read_committed`: only below the last stable offset (KIP-98), with the
    /// aborted transactions of the range named.
    pub read_committed: bool,
    /// A consumer's read that a follower may serve, below its own high watermark (Fetch v11+,
    /// KIP-392); else only the leader serves consumers.
    pub any_replica: bool,
}

/// A partition's answer to a read: an error code (0: none), its offsets, and records (None:
/// nothing to return).
pub struct ReadResult {
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// For a read_committed read: the aborted transactions with records in the range, as
    /// (producer id, first offset).
    pub aborted: Option<Vec<(i64, i64)>>,
    pub records: Option<Chunk>,
    /// The replica the leader sends the consumer to, with no records (KIP-392); -1: none.
    pub preferred_read_replica: i32,
}

impl ReadResult {
    pub fn failed(e: ResponseError, high_watermark: i64, log_start_offset: i64) -> ReadResult {
        ReadResult {
            error_code: e.code(),
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset,
            aborted: None,
            records: None,
            preferred_read_replica: -1,
        }
    }

    /// A partition this node does not have (unknown topic, topic id or partition): as Kafka
    /// answers it, offsets -1 and an empty list of aborted transactions.
    pub fn unknown(e: ResponseError) -> ReadResult {
        ReadResult {
            aborted: Some(Vec::new()),
            ..ReadResult::failed(e, -1, -1)
        }
    }

    /// A read refused by the partition: a follower learns the leader's offsets from it (its
    /// out-of-range recovery needs them); a consumer gets -1 for each, as from Kafka.
    fn refused(
        req: &ReadRequest,
        e: ResponseError,
        high_watermark: i64,
        log_start: i64,
    ) -> ReadResult {
        if req.replica >= 0 {
            ReadResult::failed(e, high_watermark, log_start)
        } else {
            ReadResult::failed(e, -1, -1)
        }
    }
}

pub struct Partition {
    /// "topic-index", for log lines.
    name: String,
    id: TopicPartition,
    log: RefCell<PartitionLog>,
    /// Serializes appends (and anything that changes segments) so that offsets, positions and
    /// writes stay in order: in the order `append` was called (see `fifo_lock.rs`).
    append_lock: FifoLock,
    /// Who waits for which of the partition's positions.
    watchers: Watchers,
    /// The last stable offset's place in the log, once looked up (`txn.rs`).
    stable: txn::StableBound,
    /// The replicas, this node's role and leadership (`replica_state.rs`).
    replica: ReplicaState,
    /// The topic's record rules, codec and batch bound (see `ingest.rs`).
    rules: Cell<ingest::Rules>,
    /// Whether the partition sits in the flusher's queue.
    queued_for_sync: Cell<bool>,
    env: Rc<Environment>,
}

/// Wakes read_committed waiters up to the current last stable offset (after the high
/// watermark moved or a marker ended a transaction).
fn wake_stable(log: &RefCell<PartitionLog>, watchers: &Watchers) {
    watchers.advance(Watch::Stable, txn::last_stable_offset(&log.borrow()));
}

/// Wakes what waits on the high watermark when it `moved` (to that offset), and on the last
/// stable offset, which moves with it.
fn wake_committed(log: &RefCell<PartitionLog>, watchers: &Watchers, moved: Option<i64>) {
    if let Some(high_watermark) = moved {
        watchers.advance(Watch::Committed, high_watermark);
        wake_stable(log, watchers);
    }
}

/// Takes a partition out of service: appends are refused and every waiter wakes to find it
/// failed.
fn take_offline(log: &RefCell<PartitionLog>, watchers: &Watchers) {
    log.borrow_mut().failed = true;
    watchers.wake_all();
}

/// What a partition's log takes from its topic's configuration.
fn log_settings(c: &TopicConfig) -> LogSettings {
    LogSettings {
        segment_bytes: c.segment_bytes,
        segment_ms: c.segment_ms,
        index_interval_bytes: c.index_interval_bytes,
        log_append_time: c.log_append_time,
    }
}

impl Partition {
    /// Opens (recovering if needed) or creates partition `index` of `topic` under `data_dir`
    /// on `volume`. A directory left by a deleted topic of the same name is removed first, so
    /// its records never leak into the new topic.
    pub async fn open(
        (volume, data_dir): (Volume, &Path),
        topic: &TopicMeta,
        index: i32,
        env: Rc<Environment>,
    ) -> std::io::Result<Partition> {
        let name = format!("{}-{index}", topic.record.name);
        let dir = data_dir.join(&name);
        let id_file = dir.join(TOPIC_ID_FILE);
        let disk = volume.disk();
        // Fresh: no id file, or a deleted topic's, whose directory goes.
        let fresh = match disk.read(&id_file)? {
            Some(id) if id == topic.record.id => false,
            Some(_) => {
                log::warn!("removing {}: it belongs to a deleted topic", dir.display());
                disk.remove_dir_all(&dir)?;
                true
            }
            None => true,
        };
        let settings = log_settings(&topic.config);
        let epoch = topic
            .assignment(index)
            .map_or(crate::storage::catalog::SINGLE_NODE_LEADER_EPOCH, |a| {
                a.leader_epoch
            });
        let at = (volume.clone(), dir.clone());
        let log = PartitionLog::open(at, settings, epoch, env.clock.wall_ms()).await?;
        let log = RefCell::new(log);
        let replicated = topic.assignment(index).is_some();
        if replicated {
            let checkpoint = hw_checkpoint::read(&*disk, &dir).map(|p| p.offset);
            PartitionLog::restart_high_watermark(&log, checkpoint).await?;
        }
        if fresh {
            volume
                .write_file(&id_file, topic.record.id.to_vec())
                .await?;
            volume.sync_dir(&dir).await?;
        }
        Ok(Partition {
            name,
            id: TopicPartition {
                topic_id: topic.record.id,
                partition: index,
            },
            log,
            append_lock: FifoLock::default(),
            watchers: Watchers::default(),
            stable: txn::StableBound::default(),
            replica: ReplicaState::new(topic.config.min_insync_replicas, replicated),
            rules: Cell::new(ingest::Rules::of(&topic.config)),
            queued_for_sync: Cell::new(false),
            env,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> TopicPartition {
        self.id
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.borrow().high_watermark()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.borrow().log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log.borrow().log_end_offset()
    }

    /// The bytes of the log's segments on disk (DescribeLogDirs' partition size).
    pub fn size_bytes(&self) -> u64 {
        self.log.borrow().size_bytes()
    }

    /// The idempotent producers this partition has state for (DescribeProducers).
    pub fn producers(&self) -> Vec<crate::storage::producer_state::ProducerEntry> {
        self.log.borrow().producers.to_entries()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.log.borrow().leader_epoch
    }

    /// Offline after a failed sync (or a failed write that could not be undone), or deleted.
    pub fn is_failed(&self) -> bool {
        self.log.borrow().failed
    }

    /// Below this offset every transaction has ended: what read_committed readers may see.
    pub fn last_stable_offset(&self) -> i64 {
        txn::last_stable_offset(&self.log.borrow())
    }

    /// A read's answer (`txn::read_result`).
    fn read_result(
        &self,
        req: &ReadRequest,
        offsets: (i64, i64, i64),
        records: Option<Chunk>,
    ) -> ReadResult {
        txn::read_result(&self.log.borrow(), req, offsets, records)
    }

    /// Writes the marker that ends (`producer_id`, `epoch`)'s transaction here: commit or
    /// abort, written by the coordinator of leader epoch `coordinator_epoch`. The caller waits
    /// for the commit it needs.
    pub async fn append_marker(
        self: &Rc<Self>,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<Appended, ResponseError> {
        let now_ms = self.env.clock.wall_ms() as i64;
        let marker =
            crate::protocol::control::marker(producer_id, epoch, commit, coordinator_epoch, now_ms);
        self.append_from(Bytes::from(marker), Source::Coordinator)
            .await
            .map_err(|r| r.error)
    }

    /// The producer's epoch as this partition knows it (None: unknown here).
    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.log.borrow().producers.epoch_of(producer_id)
    }

    /// Cleaning a compacted topic's closed segments (`compaction.rs`).
    pub fn compaction(&self) -> compaction::Compaction<'_> {
        let (log, lock) = (&self.log, &self.append_lock);
        compaction::Compaction::new(&self.name, log, lock, &self.stable, &self.env)
    }

    /// Dropping old records: the retention pass and DeleteRecords (`retention.rs`).
    pub fn retention(&self) -> retention::Retention<'_> {
        retention::Retention::new(&self.name, &self.log, &self.append_lock, &self.env)
    }

    /// This partition's part in replication: its role, its followers, a follower's
    /// truncation (`replica.rs`).
    pub fn replication(&self) -> replica::Replication<'_> {
        let at = (self.name.as_str(), &self.log);
        let (lock, watchers) = (&self.append_lock, &self.watchers);
        replica::Replication::new(at, lock, watchers, &self.replica, &self.env)
    }

    pub fn is_leader(&self) -> bool {
        self.replica.is_leader()
    }

    /// Whether this node is a follower of the partition (a replica that does not lead).
    pub fn is_follower(&self) -> bool {
        self.replica.is_follower()
    }

    /// While this node leads: which time it became leader (see `leader_generation`), and the
    /// offset its epoch began at (everything below was written by earlier leaders and is
    /// committed once the high watermark reaches it).
    pub fn leadership(&self) -> Option<(u64, i64)> {
        self.replica.leadership().filter(|_| !self.is_failed())
    }

    /// Applies the topic's current configuration (AlterConfigs): effective from the next
    /// append or roll.
    pub fn configure(&self, config: &TopicConfig) {
        self.log.borrow_mut().settings = log_settings(config);
        self.rules.set(ingest::Rules::of(config));
        self.replica
            .set_min_insync_replicas(config.min_insync_replicas);
    }

    /// Takes the partition out of service (its topic was deleted): every waiter wakes and finds
    /// it failed, and appends are refused.
    pub fn retire(&self) {
        take_offline(&self.log, &self.watchers);
    }

    // ---- append ----------------------------------------------------------------------------

    /// The append of a produce of `acks` from `source`: an acks=all one first needs
    /// `min.insync.replicas` in sync (`check_insync`). Its place in the partition's order is
    /// taken now. The one append path of clients' produces, groups' commits and transactions'
    /// records; the wait for the commit acks=all asks is `Shard::wait_committed`.
    pub fn append_acked(
        self: &Rc<Self>,
        records: Bytes,
        source: Source,
        acks: i16,
    ) -> impl Future<Output = Result<Appended, Rejected>> + 'static {
        match self.replication().check_insync(acks) {
            Err(e) => futures::future::Either::Left(futures::future::ready(Err(e.into()))),
            Ok(()) => futures::future::Either::Right(self.append_from(records, source)),
        }
    }

    /// Appends batches from `source` (see `txn::Source`: what each may write). Validation
    /// errors and the topic's record rules (`ingest.rs`) leave the log untouched; a retried
    /// duplicate of an idempotent batch is answered with its original offsets and nothing is
    /// written. The caller waits for the commit it needs (`wait_for`).
    ///
    /// The append's place in the partition's order is taken by this call, before the returned
    /// future first runs: appends called one after another land in that order, whichever of
    /// their futures the executor polls first.
    pub fn append_from(
        self: &Rc<Self>,
        records: Bytes,
        source: Source,
    ) -> impl Future<Output = Result<Appended, Rejected>> + 'static {
        let turn = self.append_lock.lock();
        let this = self.clone();
        async move { this.append_in_turn(records, source, turn).await }
    }

    async fn append_in_turn(
        self: &Rc<Self>,
        records: Bytes,
        source: Source,
        turn: Ticket,
    ) -> Result<Appended, Rejected> {
        let headers = self.validate(&records, source)?;
        let _turn = turn.await;
        if self.is_failed() {
            return Err(ResponseError::KafkaStorageError.into());
        }
        if !self.is_leader() {
            return Err(ResponseError::NotLeaderOrFollower.into());
        }
        if source != Source::Coordinator {
            if let Some(duplicate) = self.check_sequence(&headers)? {
                return Ok(duplicate);
            }
        } else {
            txn::check_markers(&self.log.borrow(), &records, &headers)?;
        }
        let now_ms = self.env.clock.wall_ms();
        // Under the turn: one conversion per partition at a time bounds the memory it takes.
        let (records, headers) = self.ingest(records, headers, now_ms as i64).await?;
        self.check_size(&headers)?;
        // A failed roll or write changes nothing the partition serves (see
        // PartitionLog::write), so the producer may retry once the disk has room again.
        let offsets: i64 = headers.iter().map(|h| h.last_offset_delta as i64 + 1).sum();
        self.roll_if_needed(records.len() as u64, offsets, now_ms)
            .await?;
        let plan = self
            .log
            .borrow_mut()
            .prepare_append(&records, &headers, now_ms);
        let appended = Appended {
            base_offset: plan.base_offset,
            end_offset: plan.end_offset,
            log_append_time_ms: plan.log_append_time_ms,
        };
        if let Err(e) = PartitionLog::write(&self.log, plan).await {
            self.env.storage_error(&self.name, "write", &e);
            if self.is_failed() {
                self.watchers.wake_all();
            }
            return Err(ResponseError::KafkaStorageError.into());
        }
        self.queue_for_sync();
        self.watchers.advance(Watch::Written, appended.end_offset);
        if source == Source::Coordinator {
            wake_stable(&self.log, &self.watchers); // a marker may have ended a transaction below the HW
        }
        Ok(appended)
    }

    /// `ingest::apply` with this topic's rules: in place where no batch is decompressed or
    /// compressed (the common append: no hop), else on the executor's blocking thread, so that
    /// the shard's other partitions are served meanwhile (a 1 MiB batch converted to gzip held
    /// the shard's thread for about 12 ms).
    async fn ingest(
        &self,
        records: Bytes,
        headers: Vec<BatchHeader>,
        now_ms: i64,
    ) -> Result<(Bytes, Vec<BatchHeader>), Rejected> {
        let rules = self.rules.get();
        if !rules.inflates(&headers) {
            return ingest::apply(&self.name, records, headers, &rules, now_ms);
        }
        let name = self.name.clone();
        let work = move || ingest::apply(&name, records, headers, &rules, now_ms);
        glommio::executor().spawn_blocking(work).await
    }

    /// Rolls to a new segment first if appending `len` bytes holding `offsets` offsets at
    /// `now_ms` must (see `PartitionLog::needs_roll`). The caller holds the append turn.
    async fn roll_if_needed(
        &self,
        len: u64,
        offsets: i64,
        now_ms: u64,
    ) -> Result<(), ResponseError> {
        if !self.log.borrow().needs_roll(len, offsets, now_ms) {
            return Ok(());
        }
        PartitionLog::roll(&self.log, now_ms).await.map_err(|e| {
            self.env.storage_error(&self.name, "roll", &e);
            ResponseError::KafkaStorageError
        })
    }

    /// Checks every batch (magic 2, lengths, CRC32C) and the topic's size bound.
    fn validate(&self, records: &Bytes, source: Source) -> Result<Vec<BatchHeader>, ResponseError> {
        let headers = batch::validate_all(records).map_err(|e| {
            log::warn!("produce to {}: rejected batch: {e:?}", self.name);
            match e {
                BatchError::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat,
                _ => ResponseError::CorruptMessage,
            }
        })?;
        self.check_size(&headers)?;
        txn::check_source(&self.name, &headers, source)?;
        Ok(headers)
    }

    /// The topic's `max.message.bytes`, checked as sent and again after a conversion.
    fn check_size(&self, headers: &[BatchHeader]) -> Result<(), ResponseError> {
        let max = self.rules.get().max_message_bytes as usize;
        if headers.iter().any(|h| h.size_bytes > max) {
            return Err(ResponseError::MessageTooLarge);
        }
        Ok(())
    }

    /// Idempotent batches are checked against the producer's sequence state under the append
    /// lock, so no other append interleaves. Some(..): a duplicate, already in the log there.
    fn check_sequence(&self, headers: &[BatchHeader]) -> Result<Option<Appended>, ResponseError> {
        if !headers.iter().any(|h| h.is_idempotent()) {
            return Ok(None);
        }
        if headers.len() != 1 {
            // Kafka requires exactly one batch per partition from such producers.
            return Err(ResponseError::InvalidRecord);
        }
        let h = &headers[0];
        let verdict = self.log.borrow().producers.check(h)?;
        match verdict {
            Verdict::Append => Ok(None),
            Verdict::Duplicate { base_offset } => {
                log::debug!(
                    "{}: duplicate batch from producer {} at {base_offset}",
                    self.name,
                    h.producer_id
                );
                Ok(Some(Appended {
                    base_offset,
                    end_offset: base_offset + h.last_offset_delta as i64 + 1,
                    log_append_time_ms: -1,
                }))
            }
        }
    }

    /// Appends batches fetched from the leader as they are (offsets, epochs, CRCs kept), and
    /// queues them for the flusher. Returns the new log end. The batches must be whole, valid,
    /// dense and begin at the log end.
    pub fn append_replica(
        self: &Rc<Self>,
        records: Bytes,
    ) -> impl Future<Output = Result<i64, ResponseError>> + 'static {
        let turn = self.append_lock.lock();
        let this = self.clone();
        async move {
            let headers = batch::validate_all(&records).map_err(|e| {
                log::warn!("replica of {}: bad batch from the leader: {e:?}", this.name);
                ResponseError::CorruptMessage
            })?;
            let _turn = turn.await;
            if this.is_failed() {
                return Err(ResponseError::KafkaStorageError);
            }
            this.replication().take_replica_batches(&headers)?;
            this.write_replica(records, &headers).await
        }
    }

    async fn write_replica(
        self: &Rc<Self>,
        records: Bytes,
        headers: &[batch::BatchHeader],
    ) -> Result<i64, ResponseError> {
        let now_ms = self.env.clock.wall_ms();
        let offsets = headers.last().expect("validated").next_offset() - self.log_end_offset();
        self.roll_if_needed(records.len() as u64, offsets, now_ms)
            .await?;
        let plan = self
            .log
            .borrow_mut()
            .prepare_replica_append(&records, headers, now_ms);
        let end = plan.end_offset;
        if let Err(e) = PartitionLog::write(&self.log, plan).await {
            self.env.storage_error(&self.name, "write", &e);
            return Err(ResponseError::KafkaStorageError);
        }
        self.queue_for_sync();
        self.watchers.advance(Watch::Written, end);
        crate::metrics::add(&self.env.metrics.replicated_bytes, records.len() as u64);
        Ok(end)
    }

    fn queue_for_sync(self: &Rc<Self>) {
        if !self.queued_for_sync.replace(true) {
            self.env.sync_queue.push(self.clone());
        }
    }

    // ---- commit ----------------------------------------------------------------------------

    /// The flusher's share: what to sync to cover every completed write. Takes the partition
    /// off the flusher's queue.
    pub fn take_sync_work(&self) -> Option<SyncWork> {
        self.queued_for_sync.set(false);
        self.log.borrow_mut().take_sync_work()
    }

    /// The sync planned by `take_sync_work` ended. On success the commit rule decides how far
    /// the partition is now committed, and the waiters up to there wake. A failed fdatasync
    /// takes the partition offline until restart: the kernel may have dropped the dirty pages,
    /// so no later sync could prove them durable.
    pub fn complete_sync(&self, target: LogPosition, result: std::io::Result<()>) {
        if let Err(e) = result {
            log::error!(
                "fdatasync of partition {} failed: {e}; offline until restart",
                self.name
            );
            self.retire();
            return;
        }
        let synced = {
            let mut log = self.log.borrow_mut();
            log.complete_sync(target);
            log.synced().offset
        };
        self.watchers.advance(Watch::Synced, synced);
        self.replication().advance_commit();
    }

    /// Where position `what` stands now.
    fn position(&self, what: Watch) -> i64 {
        match what {
            Watch::Committed => self.high_watermark(),
            Watch::Stable => self.last_stable_offset(),
            Watch::Written => self.log.borrow().written().offset,
            Watch::Synced => self.log.borrow().synced().offset,
        }
    }

    /// Registers `waiter` to wake once position `what` reaches `offset`; None when it has
    /// already, or the partition failed, or it waits for a leader's written end on a node that
    /// no longer leads: there is nothing to wait for.
    pub fn watch(&self, offset: i64, waiter: &Rc<Waiter>, what: Watch) -> Option<Registration> {
        let demoted = what == Watch::Written && !self.is_leader();
        if self.is_failed() || demoted || self.position(what) >= offset {
            return None;
        }
        Some(self.watchers.register(what, offset, waiter))
    }

    /// Waits until position `what` reaches `offset` (true) or `deadline` completes first
    /// (false). A failed partition ends the wait too (true): the caller checks `is_failed`.
    pub async fn wait_for(
        &self,
        what: Watch,
        offset: i64,
        deadline: impl Future<Output = ()>,
    ) -> bool {
        let waiter = Waiter::new();
        let Some(_registration) = self.watch(offset, &waiter, what) else {
            return true;
        };
        let woken = waiter.woken();
        futures::pin_mut!(woken, deadline);
        matches!(
            futures::future::select(woken, deadline).await,
            futures::future::Either::Left(_)
        ) || self.position(what) >= offset
    }

    // ---- read ------------------------------------------------------------------------------

    /// Whole batches from `req.offset`, below the high watermark (a follower's fetch: below
    /// the written end, and it reports the follower's position first): the first batch whole
    /// even past `max_bytes` (KIP-74).
    pub async fn read(&self, req: ReadRequest) -> ReadResult {
        let stable = match self.admit(&req).await {
            Ok(stable) => stable,
            Err(refused) => return refused,
        };
        let (plan, hw, lso) = {
            let log = self.log.borrow();
            let (hw, lso) = (log.high_watermark(), log.log_start_offset);
            let bound = if req.replica >= 0 {
                log.written()
            } else if req.read_committed {
                stable
            } else {
                log.hw_position()
            };
            // Past what a consumer may read but within the log (between the last stable
            // offset and the high watermark, or the high watermark and the log end, as on a
            // follower that has yet to learn its leader's) there is nothing yet, and no error
            // either, as in Kafka.
            if req.replica < 0 && req.offset > bound.offset && req.offset <= log.log_end_offset() {
                return self.read_result(&req, (hw, stable.offset, lso), None);
            }
            match log.plan_read_below(req.offset, bound) {
                Err(ReadError::OffsetOutOfRange) => {
                    return ReadResult::refused(&req, ResponseError::OffsetOutOfRange, hw, lso)
                }
                Ok(plan) => (plan, hw, lso),
            }
        };
        match plan.map(|plan| self.read_planned(plan, req)) {
            None => self.read_result(&req, (hw, stable.offset, lso), None),
            Some(read) => match read.await {
                Ok(records) => self.read_result(&req, (hw, stable.offset, lso), records),
                Err(e) => self.read_failed(&req, e),
            },
        }
    }

    /// The answer of a leader that sends a consumer to `replica` (KIP-392): the partition's
    /// offsets and no records, as Kafka skips the read.
    pub async fn redirect(&self, req: ReadRequest, replica: i32) -> ReadResult {
        let stable = match self.admit(&req).await {
            Ok(stable) => stable,
            Err(refused) => return refused,
        };
        let (hw, lso) = {
            let log = self.log.borrow();
            (log.high_watermark(), log.log_start_offset)
        };
        ReadResult {
            preferred_read_replica: replica,
            ..self.read_result(&req, (hw, stable.offset, lso), None)
        }
    }

    /// A read's admission (`check_read`), then the last stable offset's place: the answer
    /// to give instead when either fails.
    async fn admit(&self, req: &ReadRequest) -> Result<LogPosition, ReadResult> {
        if let Err(e) = self.check_read(req) {
            let log = self.log.borrow();
            return Err(ReadResult::refused(
                req,
                e,
                log.high_watermark(),
                log.log_start_offset,
            ));
        }
        self.stable
            .find(&self.log)
            .await
            .map_err(|e| self.read_failed(req, e))
    }

    fn read_failed(&self, req: &ReadRequest, e: std::io::Error) -> ReadResult {
        log::error!("fetch {} at {}: {e}", self.name, req.offset);
        let log = self.log.borrow();
        ReadResult::refused(
            req,
            ResponseError::KafkaStorageError,
            log.high_watermark(),
            log.log_start_offset,
        )
    }

    /// Whether a read may be served: the partition works, this node leads it, the epoch the
    /// reader names is current; a follower's position is noted.
    fn check_read(&self, req: &ReadRequest) -> Result<(), ResponseError> {
        if self.is_failed() {
            return Err(ResponseError::KafkaStorageError);
        }
        let epoch = self.leader_epoch();
        if req.leader_epoch >= 0 && req.leader_epoch != epoch {
            return Err(if req.leader_epoch > epoch {
                ResponseError::UnknownLeaderEpoch
            } else {
                ResponseError::FencedLeaderEpoch
            });
        }
        let serves_consumers_as_follower = req.any_replica && req.replica < 0 && self.is_follower();
        if !(self.is_leader() || serves_consumers_as_follower) {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        if req.replica >= 0 {
            self.replication()
                .note_replica_fetch(req.replica, req.offset)?;
        }
        Ok(())
    }

    /// Reads what `plan` covers: a file range to send when it is all in the page cache
    /// (sendfile would otherwise read the disk on the shard's thread), else bytes read
    /// asynchronously.
    async fn read_planned(
        &self,
        plan: ReadPlan,
        req: ReadRequest,
    ) -> std::io::Result<Option<Chunk>> {
        let plan = &plan;
        let boundary = |limit| {
            self.log
                .borrow()
                .batch_start_at_or_before(plan.segment_base, limit)
        };
        let limit = read::Limit {
            max_bytes: req.max_bytes,
            whole_first_batch: req.whole_first_batch,
        };
        if !req.zero_copy {
            let bytes = read::read_batches(plan, req.offset, limit, boundary).await?;
            return Ok((!bytes.is_empty()).then_some(Chunk::Bytes(bytes)));
        }
        let located = read::locate_batches(plan, req.offset, limit, boundary).await?;
        match (located, plan.file.send_fd()) {
            (None, _) => Ok(None),
            (Some(span), Some(fd)) if read::in_page_cache(fd, span) => {
                Ok(Some(Chunk::File(FileSlice {
                    fd: fd.clone(),
                    position: span.position,
                    len: span.len as usize,
                })))
            }
            (Some(span), _) => {
                crate::metrics::bump(&self.env.metrics.cold_fetches);
                Ok(Some(Chunk::Bytes(read::read_span(plan, span).await?)))
            }
        }
    }

    /// ListOffsets for one partition: (offset, timestamp) for earliest (-2, and -4, the local
    /// log's start), latest (-1: the high watermark), the first record with the largest
    /// timestamp (-3) or the first record at or after a timestamp; (-1, -1) when none is.
    pub async fn offset_for(
        &self,
        timestamp: i64,
        read_committed: bool,
    ) -> Result<(i64, i64), ResponseError> {
        const LATEST: i64 = -1;
        const EARLIEST: i64 = -2;
        // KIP-734: the first record with the largest timestamp.
        const MAX_TIMESTAMP: i64 = -3;
        // KIP-405: the log start of the local log, which is the whole log here.
        const EARLIEST_LOCAL: i64 = -4;
        // KIP-1005: the last offset in tiered storage, of which there is none here.
        const LATEST_TIERED: i64 = -5;
        let (plan, log_start_offset, wanted) = {
            let log = self.log.borrow();
            if log.failed {
                return Err(ResponseError::KafkaStorageError);
            }
            let wanted = match timestamp {
                LATEST if read_committed => return Ok((self.last_stable_offset(), -1)),
                LATEST => return Ok((log.high_watermark(), -1)),
                EARLIEST | EARLIEST_LOCAL => return Ok((log.log_start_offset, -1)),
                LATEST_TIERED => return Ok((-1, -1)),
                MAX_TIMESTAMP => match log.max_timestamp() {
                    Some(t) => t,
                    None => return Ok((-1, -1)),
                },
                t if t < 0 => return Err(ResponseError::InvalidRequest),
                t => t,
            };
            (
                log.plan_timestamp_lookup(wanted),
                log.log_start_offset,
                wanted,
            )
        };
        let Some((plan, _)) = plan else {
            return Ok((-1, -1));
        };
        match read::find_offset_for_timestamp(&plan, wanted).await {
            // A batch may straddle a log start moved by DeleteRecords.
            Ok(Some((offset, ts))) => Ok((offset.max(log_start_offset), ts)),
            Ok(None) => Ok((-1, -1)),
            Err(e) => {
                log::error!("list offsets {}: {e}", self.name);
                Err(ResponseError::KafkaStorageError)
            }
        }
    }

    // ---- housekeeping ----------------------------------------------------------------------

    /// Forgets idempotent producers idle for `expiration_ms` (wall time, as Kafka measures
    /// it: producer state is persisted with wall-clock timestamps). Returns how many.
    pub fn expire_producers(&self, expiration_ms: u64) -> usize {
        let now_ms = self.env.clock.wall_ms() as i64;
        let n = self
            .log
            .borrow_mut()
            .producers
            .expire(now_ms, expiration_ms as i64);
        if n > 0 {
            log::info!("partition {}: expired {n} idle producers", self.name);
        }
        n
    }

    /// Syncs and closes the log, writing indexes and the clean-shutdown marker. Waits for the
    /// append in progress, if any.
    pub async fn close(&self) {
        let _turn = self.append_lock.lock().await;
        if let Err(e) = PartitionLog::close(&self.log).await {
            log::error!("closing {}: {e}", self.name);
        }
        self.checkpoint_high_watermark();
    }

    /// Writes a replicated partition's high watermark next to its log if it moved since the
    /// last time (see `hw_checkpoint.rs`).
    pub fn checkpoint_high_watermark(&self) {
        let (disk, dir, hw) = {
            let log = self.log.borrow();
            (log.volume().disk(), log.dir.clone(), log.hw_position())
        };
        if !self.replica.checkpoint_due(hw.offset) || self.is_failed() {
            return;
        }
        match hw_checkpoint::write(&*disk, &dir, hw) {
            Ok(()) => self.replica.checkpointed(hw.offset),
            Err(e) => self
                .env
                .storage_error(&self.name, "checkpointing the high watermark", &e),
        }
    }
}

/// What the simulator reads of a partition it drives (`sim/replica_log.rs`): its log and its
/// replication state, to hold them to the history. Read only.
#[cfg(feature = "simulation")]
impl Partition {
    pub fn log(&self) -> std::cell::Ref<'_, PartitionLog> {
        self.log.borrow()
    }

    pub fn replica_state(&self) -> &ReplicaState {
        &self.replica
    }
}
