//! The transaction coordinator's shell on one shard: the transactional ids whose
//! `__transaction_state` partition the shard owns (a hash of the id, as groups), their
//! persistence (each move appended with acks=all before it is applied), the markers a
//! prepared transaction writes to its partitions, and the timeouts.
//!
//! Served on a single node. In a cluster, FindCoordinator still refuses transactional ids:
//! markers for partitions led by other nodes (WriteTxnMarkers) are not sent yet.

use super::records;
use super::state::{Coordinator, ListFilter, Markers, State, Step, TxnRecord};
use crate::partition::{Partition, Source, TopicPartition};
use crate::shard::mesh::Request;
use crate::shard::Shard;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

pub const TXN_STATE_TOPIC: &str = "__transaction_state";
/// How long a coordinator's append waits for its commit.
const APPEND_TIMEOUT_MS: i32 = 30_000;
/// How long a failed marker write waits before it is tried again.
const MARKER_RETRY_MS: u64 = 100;
/// How often a shard looks for `__transaction_state` partitions to load.
const LOAD_CHECK_MS: u64 = 100;

/// The `__transaction_state` partition that holds a transactional id.
pub fn state_partition(transactional_id: &str, partitions: u32) -> i32 {
    (crate::shard::router::fnv1a(transactional_id.as_bytes()) % partitions.max(1) as u64) as i32
}

/// One shard's transaction coordinator.
pub struct TxnService {
    pub(super) coordinator: RefCell<Coordinator>,
    /// The `__transaction_state` partitions whose ids are loaded.
    loaded: RefCell<HashSet<i32>>,
    /// Notified whenever a persisted move was applied or abandoned: requests that found their
    /// id busy (CONCURRENT_TRANSACTIONS) look again.
    pub(super) settled: event_listener::Event,
}

impl TxnService {
    pub fn new(config: &crate::config::Config) -> TxnService {
        TxnService {
            coordinator: RefCell::new(Coordinator::new(config.transactions.max_timeout_ms)),
            loaded: RefCell::new(HashSet::new()),
            settled: event_listener::Event::new(),
        }
    }
}

/// A transaction operation: it names its transactional id and runs on that id's coordinator.
pub trait TxnRequest: Send + 'static {
    type Reply: Send + 'static;
    fn transactional_id(&self) -> &str;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Self::Reply>;
}

struct OnLoadedCoordinator<R> {
    request: R,
    partition: i32,
}

impl<R: TxnRequest> Request for OnLoadedCoordinator<R> {
    type Reply = Result<R::Reply, ResponseError>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Self::Reply> {
        let service = shard.service::<TxnService>();
        if !service.loaded.borrow().contains(&self.partition) {
            return Box::pin(async { Err(ResponseError::CoordinatorLoadInProgress) });
        }
        let run = self.request.run(shard);
        Box::pin(async move { Ok(run.await) })
    }
}

/// Sends a request to its id's coordinator shard. Err: no coordinator can serve it yet
/// (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS) or here (NOT_COORDINATOR).
pub async fn route<R: TxnRequest>(
    shard: &Rc<Shard>,
    request: R,
) -> Result<R::Reply, ResponseError> {
    let catalog = shard.catalog();
    let topic = catalog
        .topics
        .get(TXN_STATE_TOPIC)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let partition = state_partition(request.transactional_id(), topic.record.partitions);
    if catalog.is_clustered() || !catalog.leads(topic, partition) {
        return Err(ResponseError::NotCoordinator);
    }
    let owner = shard.owner(TXN_STATE_TOPIC, partition);
    shard
        .call(owner, OnLoadedCoordinator { request, partition })
        .await
        .map_err(|_| ResponseError::CoordinatorNotAvailable)?
}

/// The id's `__transaction_state` partition, owned by this shard.
fn state_partition_of(shard: &Shard, id: &str) -> Result<Rc<Partition>, ResponseError> {
    let catalog = shard.catalog();
    let topic = catalog
        .topics
        .get(TXN_STATE_TOPIC)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let tp = TopicPartition {
        topic_id: topic.record.id,
        partition: state_partition(id, topic.record.partitions),
    };
    shard
        .partition(tp)
        .ok_or(ResponseError::CoordinatorNotAvailable)
}

/// Makes a move durable and applies it: the record is appended with acks=all, then
/// `complete`d (or `abandon`ed when the append failed: the id stays as it was).
pub async fn persist(shard: &Rc<Shard>, id: &str, step: Step) -> Result<(), ResponseError> {
    let Step::Persist(record) = step else {
        return Ok(());
    };
    let service = shard.service::<TxnService>();
    let appended = append(shard, id, &record).await;
    let settled = {
        let mut c = service.coordinator.borrow_mut();
        match appended {
            Ok(()) => {
                c.complete(id, &record);
                Ok(())
            }
            Err(e) => {
                log::warn!("transactional id {id}: state not persisted ({e:?})");
                c.abandon(id, &record);
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    };
    service.settled.notify(usize::MAX);
    settled
}

/// Runs `attempt` until it is not CONCURRENT_TRANSACTIONS or `wait_ms` passed, trying again
/// each time a move settles. A client told CONCURRENT_TRANSACTIONS backs off for its retry
/// backoff (librdkafka: 100 ms), while the move it waits for (the markers and the completion
/// of the transaction before, one fsync or two) takes a millisecond: a producer that begins
/// its next transaction right after a commit would wait out the backoff every time.
pub async fn when_settled<T>(
    shard: &Rc<Shard>,
    wait_ms: u64,
    mut attempt: impl FnMut() -> Result<T, ResponseError>,
) -> Result<T, ResponseError> {
    let service = shard.service::<TxnService>();
    let deadline_ms = shard.clock().monotonic_ms() + wait_ms;
    loop {
        let settled = service.settled.listen();
        match attempt() {
            Err(ResponseError::ConcurrentTransactions)
                if shard.clock().monotonic_ms() < deadline_ms =>
            {
                let timeout = shard.housekeeping_sleep_until(deadline_ms);
                futures::pin_mut!(timeout);
                futures::future::select(timeout, settled).await;
            }
            outcome => return outcome,
        }
    }
}

async fn append(shard: &Rc<Shard>, id: &str, record: &TxnRecord) -> Result<(), ResponseError> {
    let partition = state_partition_of(shard, id)?;
    let key = records::encode_key(id);
    // An expired id is a tombstone, so compaction removes it.
    let value = (record.state != super::state::State::Dead).then(|| records::encode_value(record));
    let wall_ms = shard.clock().wall_ms() as i64;
    let batch = crate::protocol::batch::build(&[(Some(&key[..]), value.as_deref())], wall_ms);
    shard
        .produce(
            &partition,
            Bytes::from(batch),
            Source::Client,
            -1,
            APPEND_TIMEOUT_MS,
        )
        .await
        .map(|_| ())
}

/// Writes `markers` to every partition of the transaction (retrying until each is committed or
/// the transaction moved on), then persists its completion. Runs in the background: the
/// client's EndTxn was answered once the Prepare state was durable.
pub fn spawn_markers(shard: &Rc<Shard>, markers: Markers) {
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let coordinator_epoch =
            state_partition_of(&shard, &markers.transactional_id).map_or(0, |p| p.leader_epoch());
        // Every partition's marker at once: their fsyncs group, so a transaction over many
        // partitions completes in about one.
        let writes = markers.partitions.iter().map(|(topic, index)| {
            marker_until_written(&shard, &markers, topic, *index, coordinator_epoch)
        });
        let written = futures::future::join_all(writes).await;
        if written.iter().any(|w| !w) {
            return; // the transaction moved on, or the shard stops: nothing to complete
        }
        let now_ms = shard.clock().wall_ms() as i64;
        let step = shard
            .service::<TxnService>()
            .coordinator
            .borrow_mut()
            .markers_written(&markers, now_ms);
        if let Some(step) = step {
            // A failure leaves the Prepare state: the markers are written again after a load.
            let _ = persist(&shard, &markers.transactional_id, step).await;
        }
    })
    .detach();
}

/// Writes one partition's marker, retrying until it is committed (true) or the transaction
/// moved on or the shard stops (false).
async fn marker_until_written(
    shard: &Rc<Shard>,
    markers: &Markers,
    topic: &str,
    index: i32,
    coordinator_epoch: i32,
) -> bool {
    while let Err(e) = write_marker(shard, markers, topic, index, coordinator_epoch).await {
        if !still_preparing(shard, markers) || shard.is_shutting_down() {
            return false;
        }
        log::debug!("marker for {topic}-{index}: {e:?}; retrying");
        shard.housekeeping_sleep(MARKER_RETRY_MS).await;
    }
    true
}

fn still_preparing(shard: &Shard, m: &Markers) -> bool {
    let service = shard.service::<TxnService>();
    let c = service.coordinator.borrow();
    c.markers(&m.transactional_id).as_ref() == Some(m)
}

async fn write_marker(
    shard: &Rc<Shard>,
    m: &Markers,
    topic: &str,
    index: i32,
    coordinator_epoch: i32,
) -> Result<(), ResponseError> {
    let catalog = shard.catalog();
    let Some(t) = catalog.topics.get(topic).filter(|t| t.has_partition(index)) else {
        return Ok(()); // deleted since it joined the transaction: nothing left to mark
    };
    let tp = TopicPartition {
        topic_id: t.record.id,
        partition: index,
    };
    let marker = MarkerOnOwner {
        tp,
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        commit: m.commit,
        coordinator_epoch,
    };
    let owner = shard.owner(topic, index);
    shard
        .call(owner, marker)
        .await
        .map_err(|_| ResponseError::NotLeaderOrFollower)?
}

/// Writes one marker on the partition's shard and waits for its commit; an offsets partition
/// then settles the producer's pending transactional offset commits.
struct MarkerOnOwner {
    tp: TopicPartition,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
}

impl Request for MarkerOnOwner {
    type Reply = Result<(), ResponseError>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move {
            let p = shard
                .partition(self.tp)
                .ok_or(ResponseError::NotLeaderOrFollower)?;
            let appended = p
                .append_marker(
                    self.producer_id,
                    self.producer_epoch,
                    self.commit,
                    self.coordinator_epoch,
                )
                .await?;
            let deadline_ms = shard.clock().monotonic_ms() + APPEND_TIMEOUT_MS as u64;
            shard
                .wait_committed(&p, appended.end_offset, deadline_ms)
                .await?;
            let offsets = shard
                .catalog()
                .topics
                .get(crate::group::OFFSETS_TOPIC)
                .cloned();
            if offsets.is_some_and(|t| t.record.id == self.tp.topic_id) {
                let index = self.tp.partition;
                crate::group::settle_txn(&shard, index, self.producer_id, self.commit);
            }
            Ok(())
        })
    }
}

/// Aborts transactions past their timeout and forgets idle ids, every
/// `transactions.check_interval_ms`, for as long as the shard runs.
pub async fn expire(shard: Rc<Shard>) {
    let t = shard.config.transactions.clone();
    while !shard.is_shutting_down() {
        shard.housekeeping_sleep(t.check_interval_ms).await;
        let now_ms = shard.clock().wall_ms() as i64;
        let service = shard.service::<TxnService>();
        let (timed_out, idle) = {
            let mut c = service.coordinator.borrow_mut();
            let timed_out = c.expire_timed_out(now_ms);
            (timed_out, c.expire_idle(now_ms, t.id_expiration_ms as i64))
        };
        for (id, step) in timed_out {
            log::info!("transactional id {id}: transaction timed out; aborting it");
            if persist(&shard, &id, step).await.is_ok() {
                start_markers(&shard, &id);
            }
        }
        for (id, step) in idle {
            let _ = persist(&shard, &id, step).await;
        }
    }
}

/// Starts writing the markers `id`'s persisted Prepare state calls for, if it has one.
pub fn start_markers(shard: &Rc<Shard>, id: &str) {
    let markers = shard
        .service::<TxnService>()
        .coordinator
        .borrow()
        .markers(id);
    if let Some(m) = markers {
        spawn_markers(shard, m);
    }
}

/// The `__transaction_state` partitions this shard owns and leads whose ids are not loaded
/// yet, with the topic's partition count.
fn unloaded(shard: &Shard) -> (Vec<Rc<Partition>>, u32) {
    let Some(topic) = shard.catalog().topics.get(TXN_STATE_TOPIC).cloned() else {
        return (Vec::new(), 0);
    };
    let service = shard.service::<TxnService>();
    let loaded = service.loaded.borrow();
    let partitions = shard
        .partition_list()
        .into_iter()
        .filter(|p| {
            p.id().topic_id == topic.record.id
                && p.leadership().is_some()
                && !loaded.contains(&p.id().partition)
        })
        .collect();
    (partitions, topic.record.partitions)
}

/// Whether a `__transaction_state` partition this shard owns and leads is not loaded yet.
pub fn loading(shard: &Shard) -> bool {
    !unloaded(shard).0.is_empty()
}

/// Every shard's ids that pass `filter` (ListTransactions). Shards that are stopping are
/// skipped; one still loading its ids makes the answer COORDINATOR_LOAD_IN_PROGRESS.
pub async fn list_all(
    shard: &Rc<Shard>,
    filter: ListFilter,
) -> Result<Vec<(String, i64, State)>, ResponseError> {
    let calls = (0..shard.router.shards()).map(|s| {
        let filter = filter.clone();
        shard.call(s, super::ops::List { filter })
    });
    let mut all = Vec::new();
    for listed in futures::future::join_all(calls).await.into_iter().flatten() {
        all.extend(listed?);
    }
    Ok(all)
}

/// Loads each `__transaction_state` partition this shard owns and leads, once: replays its
/// records (the latest per id wins) and finishes the transactions that were preparing.
pub async fn follow_leadership(shard: Rc<Shard>) {
    while !shard.is_shutting_down() {
        load_led(&shard).await;
        shard.housekeeping_sleep(LOAD_CHECK_MS).await;
    }
}

async fn load_led(shard: &Rc<Shard>) {
    let (partitions, state_partitions) = unloaded(shard);
    let service = shard.service::<TxnService>();
    for p in partitions {
        if p.leadership().is_none() {
            continue; // lost while an earlier partition loaded
        }
        let index = p.id().partition;
        let mut ids = Vec::new();
        crate::group::replay::read_from_start(&p, |data| learn(data, &mut ids)).await;
        let mut preparing = Vec::new();
        {
            let mut c = service.coordinator.borrow_mut();
            for (id, record) in ids {
                match record {
                    Some(r) => c.restore(&id, r),
                    None => c.unload(|i| i == id),
                }
            }
            preparing.extend(
                c.iter()
                    .filter(|(id, _)| state_partition(id, state_partitions) == index)
                    .map(|(id, _)| id.clone()),
            );
        }
        service.loaded.borrow_mut().insert(index);
        for id in preparing {
            start_markers(shard, &id);
        }
    }
}

/// The records of the whole batches in `data`, in order; returns the offset after the last.
/// An undecodable record is skipped with a log line.
fn learn(data: &Bytes, out: &mut Vec<(String, Option<TxnRecord>)>) -> Option<i64> {
    use crate::protocol::batch;
    let mut at = 0;
    let mut next = None;
    while at < data.len() {
        let size = batch::peek_size(&data[at..])?;
        let bytes = &data[at..(at + size).min(data.len())];
        let h = batch::parse_header(bytes).ok()?;
        for r in batch::records(bytes).unwrap_or_default() {
            let id = r.key.and_then(|k| records::decode_key(k).ok());
            let value = r.value.map(records::decode_value);
            match (id, value) {
                (Some(id), None) => out.push((id, None)),
                (Some(id), Some(Ok(v))) => out.push((id, Some(v))),
                _ => log::warn!(
                    "{TXN_STATE_TOPIC}: an undecodable record in the batch at {}; skipped",
                    h.base_offset
                ),
            }
        }
        next = Some(h.next_offset());
        at += size;
    }
    next
}
