//! A shard: the state one executor (one core) owns, and the operations run on it.
//!
//! Each shard owns a set of partitions (chosen by `Router`), their logs and files, a flusher
//! task that group-commits their writes, and its connections. Operations on a partition always
//! run on its owning shard; a request that arrives elsewhere is forwarded over the channel mesh
//! (`call`). Nothing here is shared across threads except immutable `Arc` snapshots.

pub mod compaction;
pub mod flusher;
pub mod messages;
pub mod retention;
pub mod router;

use crate::config::Config;
use crate::protocol::chunk::{Chunk, FileSlice};
use crate::storage::catalog::Catalog;
use crate::storage::log::{LogSettings, PartitionLog, ReadError};
use crate::storage::producer_state::Verdict;
use crate::storage::read;
use crate::timer::Timers;
use event_listener::Event;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;
use kafka_protocol::ResponseError;
use messages::*;
use router::Router;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

/// The shard that owns the catalog and executes topic changes.
pub const CONTROLLER_SHARD: usize = 0;
const TOPIC_ID_FILE: &str = ".topic_id";

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What a partition's log takes from its topic's configuration.
fn log_settings(c: &crate::storage::catalog::TopicConfig) -> LogSettings {
    LogSettings {
        segment_bytes: c.segment_bytes,
        segment_ms: c.segment_ms,
        index_interval_bytes: c.index_interval_bytes,
        log_append_time: c.log_append_time,
    }
}

pub struct Partition {
    pub log: RefCell<PartitionLog>,
    /// Serializes appends so that offsets, positions and writes stay in order.
    pub append_lock: Semaphore,
    pub topic_id: [u8; 16],
    /// Whether the partition sits in the flusher's queue.
    pub queued_for_sync: Cell<bool>,
}

pub struct Shard {
    pub id: usize,
    pub config: Arc<Config>,
    pub router: Arc<Router>,
    pub catalog: RefCell<Arc<Catalog>>,
    pub partitions: RefCell<HashMap<(String, i32), Rc<Partition>>>,
    /// Partitions with written but unsynced data, in the order they became dirty.
    pub sync_queue: RefCell<Vec<Rc<Partition>>>,
    /// Wakes the flusher when `sync_queue` gains work.
    pub sync_needed: Event,
    /// Fires whenever a high watermark advances (or a partition fails): wakes acks=all waiters
    /// and parked fetches.
    pub hw_advanced: Event,
    pub shutting_down: Cell<bool>,
    /// Bytes of request frames the shard's connections may hold: `max_request_memory_bytes_per_shard`.
    pub request_memory: Rc<Semaphore>,
    senders: Option<Senders<MeshMsg>>,
    pending: RefCell<HashMap<u64, oneshot::Sender<ShardReply>>>,
    next_call_id: Cell<u64>,
    /// Counters the metrics endpoint reads.
    pub metrics: Arc<crate::metrics::ShardMetrics>,
    /// The next producer id to hand out (controller shard only).
    pub next_producer_id: Cell<i64>,
    /// The consumer groups this shard coordinates.
    pub groups: crate::group::GroupManager,
    /// Fetch sessions of the clients connected to this shard.
    pub fetch_sessions: RefCell<crate::kafka::fetch_session::FetchSessions>,
    /// The timing wheel every delayed operation on this shard parks on.
    pub timers: Rc<Timers>,
    /// Serializes controller operations (only used on the controller shard).
    controller_lock: Semaphore,
    /// When a storage error was last logged, and how many were counted but not logged since.
    storage_error_logged_ms: Cell<u64>,
    storage_errors_unlogged: Cell<u64>,
}

/// Storage errors are logged at most this often per shard (all are counted in the metrics).
const STORAGE_ERROR_LOG_INTERVAL_MS: u64 = 1000;

/// How a parked wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Done,
    Deadline,
    /// The shard's bound on parked operations was reached.
    Refused,
}

/// A peer shard has stopped and will not answer (only during shutdown).
#[derive(Debug, Clone, Copy)]
pub struct ShardGone;

fn code(e: ResponseError) -> i16 {
    e.code()
}

impl Shard {
    pub fn new(
        id: usize,
        config: Arc<Config>,
        router: Arc<Router>,
        catalog: Arc<Catalog>,
        senders: Option<Senders<MeshMsg>>,
        metrics: Arc<crate::metrics::ShardMetrics>,
    ) -> Shard {
        let max_parked = config.max_parked_operations;
        let max_connections = config.max_connections;
        let groups = crate::group::GroupManager::new(now_ms(), &config);
        let request_memory = Rc::new(Semaphore::new(
            config.max_request_memory_bytes_per_shard as u64,
        ));
        let catalog_block_end = catalog.producer_id_block_end;
        let fetch_sessions = crate::kafka::fetch_session::FetchSessions::new(
            id,
            router.shards(),
            config.max_incremental_fetch_session_cache_slots,
        );
        Shard {
            id,
            config,
            router,
            catalog: RefCell::new(catalog),
            partitions: RefCell::new(HashMap::new()),
            sync_queue: RefCell::new(Vec::new()),
            sync_needed: Event::new(),
            hw_advanced: Event::new(),
            shutting_down: Cell::new(false),
            request_memory,
            senders,
            pending: RefCell::new(HashMap::new()),
            next_call_id: Cell::new(0),
            controller_lock: Semaphore::new(1),
            storage_error_logged_ms: Cell::new(0),
            storage_errors_unlogged: Cell::new(0),
            timers: Rc::new(Timers::new(
                now_ms(),
                max_parked,
                max_connections,
                metrics.clone(),
            )),
            groups,
            fetch_sessions: RefCell::new(fetch_sessions),
            next_producer_id: Cell::new(catalog_block_end),
            metrics,
        }
    }

    /// Publishes the number of fetch sessions held.
    pub fn count_fetch_sessions(&self) {
        let n = self.fetch_sessions.borrow().len() as u64;
        self.metrics
            .fetch_sessions
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.borrow().clone()
    }

    fn partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.config.data_dir.join(format!("{topic}-{partition}"))
    }

    // ---- cross-shard calls -------------------------------------------------------------

    /// Runs `request` on `shard`: directly when it is this one, else over the mesh.
    /// Err means the peer shard has stopped (shutdown) and cannot answer.
    pub async fn call(
        self: &Rc<Self>,
        shard: usize,
        request: ShardRequest,
    ) -> Result<ShardReply, ShardGone> {
        if shard == self.id {
            return Ok(self.clone().handle(request).await);
        }
        let senders = self.senders.as_ref().expect("several shards imply a mesh");
        let id = self.next_call_id.get();
        self.next_call_id.set(id + 1);
        let (tx, rx) = oneshot::channel();
        self.pending.borrow_mut().insert(id, tx);
        if senders
            .send_to(
                shard,
                MeshMsg::Request {
                    from: self.id,
                    id,
                    request,
                },
            )
            .await
            .is_err()
        {
            self.pending.borrow_mut().remove(&id);
            return Err(ShardGone);
        }
        rx.await.map_err(|_| ShardGone)
    }

    /// Handles one message from a peer shard.
    pub fn on_mesh_message(self: &Rc<Self>, msg: MeshMsg) {
        match msg {
            MeshMsg::Request { from, id, request } => {
                let shard = self.clone();
                glommio::spawn_local(async move {
                    let reply = shard.clone().handle(request).await;
                    let senders = shard.senders.as_ref().expect("mesh");
                    if senders
                        .send_to(from, MeshMsg::Reply { id, reply })
                        .await
                        .is_err()
                    {
                        log::error!(
                            "shard {}: reply to shard {from} lost: channel closed",
                            shard.id
                        );
                    }
                })
                .detach();
            }
            MeshMsg::Reply { id, reply } => match self.pending.borrow_mut().remove(&id) {
                Some(tx) => {
                    let _ = tx.send(reply);
                }
                None => log::error!("shard {}: reply {id} matches no request", self.id),
            },
        }
    }

    /// Executes a request on this shard.
    pub fn handle(self: Rc<Self>, request: ShardRequest) -> LocalBoxFuture<'static, ShardReply> {
        Box::pin(async move {
            match request {
                ShardRequest::Produce {
                    acks,
                    timeout_ms,
                    items,
                } => {
                    let futures = items
                        .into_iter()
                        .map(|item| self.produce_local(item, acks, timeout_ms));
                    ShardReply::Produce(futures::future::join_all(futures).await)
                }
                ShardRequest::Fetch { items } => {
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        out.push(self.fetch_local(item).await);
                    }
                    ShardReply::Fetch(out)
                }
                ShardRequest::WaitForData { items, deadline_ms } => {
                    ShardReply::Parked(self.wait_for_data(&items, deadline_ms).await)
                }
                ShardRequest::ListOffsets { items } => {
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        out.push(self.list_offsets_local(item).await);
                    }
                    ShardReply::ListOffsets(out)
                }
                ShardRequest::DeleteRecords { items } => {
                    ShardReply::DeleteRecords(self.delete_records_local(items).await)
                }
                ShardRequest::ApplyCatalog(catalog) => {
                    self.apply_catalog(catalog).await;
                    ShardReply::Done
                }
                ShardRequest::Group(op) => ShardReply::Group(crate::group::handle(&self, op).await),
                ShardRequest::AllocateProducerId => ShardReply::ProducerId(
                    crate::kafka::controller::allocate_producer_id(&self).await,
                ),
                ShardRequest::Controller(op) => {
                    assert_eq!(
                        self.id, CONTROLLER_SHARD,
                        "controller ops go to the controller shard"
                    );
                    ShardReply::Controller(crate::kafka::controller::execute(&self, op).await)
                }
            }
        })
    }

    /// Sends `items` to the shards that own them, in parallel, and returns the outcomes in the
    /// order of `items`.
    pub async fn scatter<T, R>(
        self: &Rc<Self>,
        items: Vec<T>,
        owner: impl Fn(&T) -> usize,
        request: impl Fn(Vec<T>) -> ShardRequest,
        unpack: impl Fn(ShardReply) -> Vec<R>,
        gone: impl Fn() -> R,
    ) -> Vec<R> {
        let n = items.len();
        let mut by_shard: Vec<(Vec<usize>, Vec<T>)> = (0..self.router.shards())
            .map(|_| (Vec::new(), Vec::new()))
            .collect();
        for (i, item) in items.into_iter().enumerate() {
            let s = owner(&item);
            by_shard[s].0.push(i);
            by_shard[s].1.push(item);
        }
        let mut calls = Vec::new();
        for (shard, (indexes, items)) in by_shard.into_iter().enumerate() {
            if !items.is_empty() {
                let req = request(items);
                calls.push(async move { (indexes, self.call(shard, req).await) });
            }
        }
        let mut slots: Vec<Option<R>> = (0..n).map(|_| None).collect();
        for (indexes, reply) in futures::future::join_all(calls).await {
            let results = match reply {
                Ok(reply) => unpack(reply),
                Err(ShardGone) => indexes.iter().map(|_| gone()).collect(),
            };
            assert_eq!(
                results.len(),
                indexes.len(),
                "a shard answers each item once"
            );
            for (i, r) in indexes.into_iter().zip(results) {
                slots[i] = Some(r);
            }
        }
        slots
            .into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    // ---- catalog -----------------------------------------------------------------------

    /// Installs a new catalog: opens the partitions this shard now owns, closes and deletes
    /// those of topics that are gone, and gives open ones their topic's current settings
    /// (AlterConfigs), which take effect from the next append or roll.
    pub async fn apply_catalog(&self, catalog: Arc<Catalog>) {
        let stale: Vec<(String, i32)> = self
            .partitions
            .borrow()
            .iter()
            .filter(|((topic, _), p)| {
                catalog
                    .topics
                    .get(topic)
                    .is_none_or(|t| t.record.id != p.topic_id)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            let removed = self.partitions.borrow_mut().remove(&key);
            if let Some(p) = removed {
                p.log.borrow_mut().failed = true; // wakes and fails anything still waiting on it
                self.hw_advanced.notify(usize::MAX);
                let dir = self.partition_dir(&key.0, key.1);
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    log::error!("deleting {}: {e}", dir.display());
                }
                log::info!("shard {}: deleted partition {}-{}", self.id, key.0, key.1);
            }
        }
        for (name, topic) in &catalog.topics {
            for p in 0..topic.record.partitions as i32 {
                if self.router.shard_of(name, p) != self.id || self.partition(name, p).is_some() {
                    continue;
                }
                match self.open_partition(name, p, topic).await {
                    Ok(partition) => {
                        let leo = partition.log.borrow().log_end_offset();
                        log::info!(
                            "shard {}: opened partition {name}-{p} at offset {leo}",
                            self.id
                        );
                        self.partitions
                            .borrow_mut()
                            .insert((name.clone(), p), Rc::new(partition));
                    }
                    Err(e) => {
                        log::error!("shard {}: cannot open partition {name}-{p}: {e}", self.id)
                    }
                }
            }
        }
        for ((name, _), p) in self.partitions.borrow().iter() {
            if let Some(topic) = catalog.topics.get(name) {
                p.log.borrow_mut().settings = log_settings(&topic.config);
            }
        }
        *self.catalog.borrow_mut() = catalog;
    }

    async fn open_partition(
        &self,
        name: &str,
        p: i32,
        topic: &crate::storage::catalog::TopicMeta,
    ) -> std::io::Result<Partition> {
        let dir = self.partition_dir(name, p);
        let id_file = dir.join(TOPIC_ID_FILE);
        // A directory left by an older topic of the same name (deleted before a crash) must not
        // leak its records into the new topic.
        match std::fs::read(&id_file) {
            Ok(id) if id != topic.record.id => {
                log::warn!("removing {}: it belongs to a deleted topic", dir.display());
                std::fs::remove_dir_all(&dir)?;
            }
            _ => {}
        }
        let fresh = !id_file.exists();
        let settings = log_settings(&topic.config);
        let log = PartitionLog::open(dir.clone(), settings, 0, now_ms()).await?;
        if fresh {
            crate::storage::log::write_file(&id_file, topic.record.id.to_vec()).await?;
            crate::storage::log::sync_dir(&dir).await?;
        }
        Ok(Partition {
            log: RefCell::new(log),
            append_lock: Semaphore::new(1),
            topic_id: topic.record.id,
            queued_for_sync: Cell::new(false),
        })
    }

    // ---- produce -----------------------------------------------------------------------

    pub(crate) async fn produce_local(
        &self,
        item: ProduceItem,
        acks: i16,
        timeout_ms: i32,
    ) -> ProduceOutcome {
        let fail = ProduceOutcome::failed;
        let Some(partition) = self.partition(&item.topic, item.partition) else {
            return fail(ResponseError::UnknownTopicOrPartition);
        };
        let Some(records) = item.records else {
            return fail(ResponseError::CorruptMessage);
        };
        let headers = match crate::protocol::batch::validate_all(&records) {
            Ok(h) => h,
            Err(e) => {
                log::warn!(
                    "produce to {}-{}: rejected batch: {e:?}",
                    item.topic,
                    item.partition
                );
                return fail(match e {
                    crate::protocol::batch::BatchError::UnsupportedMagic(_) => {
                        ResponseError::UnsupportedForMessageFormat
                    }
                    _ => ResponseError::CorruptMessage,
                });
            }
        };
        let max_message_bytes = self
            .catalog()
            .topics
            .get(&item.topic)
            .map(|t| t.config.max_message_bytes)
            .unwrap_or(u32::MAX);
        if headers
            .iter()
            .any(|h| h.size_bytes > max_message_bytes as usize)
        {
            return fail(ResponseError::MessageTooLarge);
        }
        let outcome = {
            let _permit = match partition.append_lock.acquire_permit(1).await {
                Ok(p) => p,
                Err(_) => return fail(ResponseError::KafkaStorageError),
            };
            if partition.log.borrow().failed {
                return fail(ResponseError::KafkaStorageError);
            }
            // Idempotent batches: checked against the producer's sequence state under the
            // append lock, so that no other append to this partition interleaves.
            if headers.iter().any(|h| h.is_idempotent()) {
                if headers.len() != 1 {
                    // Kafka requires exactly one batch per partition from such producers.
                    return fail(ResponseError::InvalidRecord);
                }
                let verdict = partition.log.borrow().producers.check(&headers[0]);
                match verdict {
                    Ok(Verdict::Append) => {}
                    Ok(Verdict::Duplicate { base_offset }) => {
                        log::debug!(
                            "{}-{}: duplicate batch from producer {} at {base_offset}",
                            item.topic,
                            item.partition,
                            headers[0].producer_id
                        );
                        let end_offset = base_offset + headers[0].last_offset_delta as i64 + 1;
                        return self
                            .finish_produce(
                                &partition,
                                base_offset,
                                end_offset,
                                -1,
                                acks,
                                timeout_ms,
                            )
                            .await;
                    }
                    Err(e) => return fail(e),
                }
            }
            let now = now_ms();
            // A failed roll or write changes nothing the partition serves (see
            // PartitionLog::write), so the producer may retry once the disk has room again.
            let offsets: i64 = headers.iter().map(|h| h.last_offset_delta as i64 + 1).sum();
            if partition
                .log
                .borrow()
                .needs_roll(records.len() as u64, offsets, now)
            {
                if let Err(e) = PartitionLog::roll(&partition.log, now).await {
                    self.storage_error(&item.topic, item.partition, "roll", &e);
                    return fail(ResponseError::KafkaStorageError);
                }
            }
            let plan = partition
                .log
                .borrow_mut()
                .prepare_append(&records, &headers, now);
            let done = (plan.base_offset, plan.end_offset, plan.log_append_time_ms);
            if let Err(e) = PartitionLog::write(&partition.log, plan).await {
                self.storage_error(&item.topic, item.partition, "write", &e);
                self.hw_advanced.notify(usize::MAX);
                return fail(ResponseError::KafkaStorageError);
            }
            done
        };
        let (base_offset, end_offset, log_append_time_ms) = outcome;
        self.queue_for_sync(&partition);
        self.finish_produce(
            &partition,
            base_offset,
            end_offset,
            log_append_time_ms,
            acks,
            timeout_ms,
        )
        .await
    }

    /// Counts a failed append and logs it, at most once a second per shard: producers retry a
    /// full disk as fast as they can, and the log must not fill it further.
    fn storage_error(&self, topic: &str, partition: i32, what: &str, e: &std::io::Error) {
        crate::metrics::bump(&self.metrics.storage_errors);
        let now = now_ms();
        if now < self.storage_error_logged_ms.get() + STORAGE_ERROR_LOG_INTERVAL_MS {
            self.storage_errors_unlogged
                .set(self.storage_errors_unlogged.get() + 1);
            return;
        }
        log::error!(
            "partition {topic}-{partition}: {what} failed: {e} ({} more storage errors since the last line)",
            self.storage_errors_unlogged.replace(0)
        );
        self.storage_error_logged_ms.set(now);
    }

    /// Answers a produce whose records are at `base_offset..end_offset`, once they are as durable
    /// as the producer asked: acks=all parks on the timing wheel until the high watermark covers
    /// them or `timeout_ms` passes. A retried duplicate comes here too, with its original offsets.
    async fn finish_produce(
        &self,
        partition: &Rc<Partition>,
        base_offset: i64,
        end_offset: i64,
        log_append_time_ms: i64,
        acks: i16,
        timeout_ms: i32,
    ) -> ProduceOutcome {
        let fail = ProduceOutcome::failed;
        if acks == -1 {
            let deadline = now_ms() + timeout_ms.max(0) as u64;
            let durable = || {
                let log = partition.log.borrow();
                log.high_watermark() >= end_offset || log.failed
            };
            let mut wait = self.wait_until(deadline, durable).await;
            if wait == Wait::Refused {
                // The sync is already under way: wait for it without a timeout timer rather
                // than fail a write that is about to become durable.
                self.warn_parking_refused(
                    "an acks=all produce waits for its sync without a timeout",
                );
                wait = self.wait_until_synced(durable).await;
            }
            if partition.log.borrow().failed {
                return fail(ResponseError::KafkaStorageError);
            }
            if wait == Wait::Deadline {
                return fail(ResponseError::RequestTimedOut);
            }
        }
        let log_start_offset = partition.log.borrow().log_start_offset;
        ProduceOutcome {
            error_code: 0,
            base_offset,
            log_append_time_ms,
            log_start_offset,
        }
    }

    fn queue_for_sync(&self, partition: &Rc<Partition>) {
        if !partition.queued_for_sync.replace(true) {
            self.sync_queue.borrow_mut().push(partition.clone());
            self.sync_needed.notify(1);
        }
    }

    /// Waits until `done()` holds or `deadline_ms` passes, parked on the shard's timing wheel
    /// and woken by every high-watermark event.
    async fn wait_until(&self, deadline_ms: u64, done: impl Fn() -> bool) -> Wait {
        if done() {
            return Wait::Done;
        }
        let Ok(deadline) = self.timers.sleep_until(deadline_ms) else {
            return Wait::Refused;
        };
        futures::pin_mut!(deadline);
        loop {
            let listener = self.hw_advanced.listen();
            if done() {
                return Wait::Done;
            }
            if let futures::future::Either::Right(_) =
                futures::future::select(listener, &mut deadline).await
            {
                return if done() { Wait::Done } else { Wait::Deadline };
            }
        }
    }

    /// Logs that the bound on parked operations was hit, at most once per 1000 refusals.
    fn warn_parking_refused(&self, what: &str) {
        let n = self.timers.parked_rejected.get();
        if n % 1000 == 1 {
            log::warn!(
                "shard {}: {} operations parked, the limit (max_parked_operations): {what} ({n} refused so far)",
                self.id,
                self.timers.parked()
            );
        }
    }

    // ---- fetch -------------------------------------------------------------------------

    pub(crate) async fn fetch_local(&self, item: FetchItem) -> FetchOutcome {
        let fail = |e: ResponseError, hw: i64, lso: i64| FetchOutcome {
            error_code: code(e),
            high_watermark: hw,
            log_start_offset: lso,
            records: None,
        };
        let Some(partition) = self.partition(&item.topic, item.partition) else {
            return fail(ResponseError::UnknownTopicOrPartition, -1, -1);
        };
        let (plan, hw, lso) = {
            let log = partition.log.borrow();
            let (hw, lso) = (log.high_watermark(), log.log_start_offset);
            if log.failed {
                return fail(ResponseError::KafkaStorageError, hw, lso);
            }
            if item.leader_epoch >= 0 && item.leader_epoch != log.leader_epoch {
                let e = if item.leader_epoch > log.leader_epoch {
                    ResponseError::UnknownLeaderEpoch
                } else {
                    ResponseError::FencedLeaderEpoch
                };
                return fail(e, hw, lso);
            }
            match log.plan_read(item.offset) {
                Err(ReadError::OffsetOutOfRange) => {
                    return fail(ResponseError::OffsetOutOfRange, hw, lso)
                }
                Ok(plan) => (plan, hw, lso),
            }
        };
        let records = match plan {
            None => Ok(None),
            Some(plan) => {
                let boundary = |limit| {
                    partition
                        .log
                        .borrow()
                        .batch_start_at_or_before(plan.segment_base, limit)
                };
                if item.zero_copy {
                    match read::locate_batches(&plan, item.offset, item.max_bytes, boundary).await {
                        Ok(Some(span)) if read::in_page_cache(&plan, span) => {
                            Ok(Some(Chunk::File(FileSlice {
                                fd: plan.send_fd.clone(),
                                position: span.position,
                                len: span.len as usize,
                            })))
                        }
                        Ok(Some(span)) => {
                            crate::metrics::bump(&self.metrics.cold_fetches);
                            read::read_span(&plan, span)
                                .await
                                .map(|b| Some(Chunk::Bytes(b)))
                        }
                        other => other.map(|_| None),
                    }
                } else {
                    read::read_batches(&plan, item.offset, item.max_bytes, boundary)
                        .await
                        .map(|bytes| Some(Chunk::Bytes(bytes)))
                }
            }
        };
        match records {
            Ok(records) => FetchOutcome {
                error_code: 0,
                high_watermark: hw,
                log_start_offset: lso,
                records,
            },
            Err(e) => {
                log::error!(
                    "fetch {}-{} at {}: {e}",
                    item.topic,
                    item.partition,
                    item.offset
                );
                fail(ResponseError::KafkaStorageError, hw, lso)
            }
        }
    }

    /// Parks until data arrives for any item or the deadline; false if parking was refused.
    async fn wait_for_data(&self, items: &[(String, i32, i64)], deadline_ms: u64) -> bool {
        let has_data = || {
            items
                .iter()
                .any(|(topic, p, offset)| match self.partition(topic, *p) {
                    Some(part) => {
                        let log = part.log.borrow();
                        log.high_watermark() > *offset || log.failed
                    }
                    None => true, // gone: the re-read reports the error
                })
        };
        let parked = self.wait_until(deadline_ms, has_data).await;
        if parked == Wait::Refused {
            self.warn_parking_refused("a fetch is answered without waiting");
        }
        parked != Wait::Refused
    }

    /// Waits for `done()` with no deadline; only for waits that the flusher bounds.
    async fn wait_until_synced(&self, done: impl Fn() -> bool) -> Wait {
        loop {
            let listener = self.hw_advanced.listen();
            if done() {
                return Wait::Done;
            }
            listener.await;
        }
    }

    // ---- list offsets ------------------------------------------------------------------

    async fn list_offsets_local(&self, item: OffsetsItem) -> OffsetsOutcome {
        let out = |error: i16, offset: i64, timestamp: i64| OffsetsOutcome {
            error_code: error,
            offset,
            timestamp,
            leader_epoch: 0,
        };
        let Some(partition) = self.partition(&item.topic, item.partition) else {
            return out(code(ResponseError::UnknownTopicOrPartition), -1, -1);
        };
        const LATEST: i64 = -1;
        const EARLIEST: i64 = -2;
        let (plan, log_start_offset) = {
            let log = partition.log.borrow();
            if log.failed {
                return out(code(ResponseError::KafkaStorageError), -1, -1);
            }
            match item.timestamp {
                LATEST => return out(0, log.high_watermark(), -1),
                EARLIEST => return out(0, log.log_start_offset, -1),
                t if t < 0 => return out(code(ResponseError::InvalidRequest), -1, -1),
                t => (log.plan_timestamp_lookup(t), log.log_start_offset),
            }
        };
        let Some((plan, _)) = plan else {
            return out(0, -1, -1);
        };
        match read::find_offset_for_timestamp(&plan, item.timestamp).await {
            // A batch may straddle a log start moved by DeleteRecords.
            Ok(Some((offset, timestamp))) => out(0, offset.max(log_start_offset), timestamp),
            Ok(None) => out(0, -1, -1),
            Err(e) => {
                log::error!("list offsets {}-{}: {e}", item.topic, item.partition);
                out(code(ResponseError::KafkaStorageError), -1, -1)
            }
        }
    }

    /// Forgets idle idempotent producers (producer_id_expiration_ms), checking every quarter of
    /// that period (at most every minute), parked on the timing wheel in between.
    pub async fn expire_producers(self: Rc<Self>) {
        let expiration_ms = self.config.producer_id_expiration_ms;
        let period_ms = (expiration_ms / 4).clamp(250, 60_000);
        loop {
            self.housekeeping_sleep(period_ms).await;
            let now = now_ms() as i64;
            let partitions: Vec<Rc<Partition>> =
                self.partitions.borrow().values().cloned().collect();
            for p in partitions {
                let n = p
                    .log
                    .borrow_mut()
                    .producers
                    .expire(now, expiration_ms as i64);
                if n > 0 {
                    log::info!(
                        "shard {}: {} expired {n} idle producers",
                        self.id,
                        p.log.borrow().dir.display()
                    );
                }
            }
        }
    }

    /// The partitions this shard owns, for a housekeeping pass over them.
    fn partition_list(&self) -> Vec<((String, i32), Rc<Partition>)> {
        self.partitions
            .borrow()
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect()
    }

    /// Sleeps `period_ms` on the timing wheel, outside the bound on parked client operations;
    /// on a plain timer if the wheel refuses (a deadline past its range).
    async fn housekeeping_sleep(&self, period_ms: u64) {
        match self.timers.sleep_until_internal(now_ms() + period_ms) {
            Ok(sleep) => sleep.await,
            Err(_) => glommio::timer::sleep(std::time::Duration::from_millis(period_ms)).await,
        }
    }

    // ---- shutdown ----------------------------------------------------------------------

    /// Syncs and closes every partition, writing indexes and clean-shutdown markers.
    pub async fn close_partitions(&self) {
        let all: Vec<_> = self
            .partitions
            .borrow()
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for ((topic, p), partition) in all {
            let _permit = partition.append_lock.acquire_permit(1).await;
            if let Err(e) = PartitionLog::close(&partition.log).await {
                log::error!("closing {topic}-{p}: {e}");
            }
        }
    }

    /// Serializes controller operations (topic changes, producer id blocks) on shard 0.
    pub async fn lock_controller(&self) -> glommio::sync::Permit<'_> {
        self.controller_lock
            .acquire_permit(1)
            .await
            .expect("controller lock never closes")
    }
}
