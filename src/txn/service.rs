//! The transaction coordinator's shell on one shard: the transactional ids whose
//! `__transaction_state` partition the shard owns and leads (a hash of the id, as groups),
//! their persistence (each move appended with acks=all before it is applied: in a cluster, on
//! every in-sync replica), the timeouts, and loading: a partition's ids are loaded when its
//! leadership comes here (once its epoch start is committed) and forgotten when it goes. The
//! markers a prepared transaction writes are `markers.rs`; calls to other nodes `remote.rs`.

use super::records;
use super::state::{Coordinator, ListFilter, Markers, State, Step, TxnRecord};
use crate::controller::Controllers;
use crate::group::Groups;
use crate::partition::{Partition, Source, TopicPartition};
use crate::shard::coordinator_load::{self, read_from_start, Coordinated};
use crate::shard::mesh::{Peer, Request, Sharded};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

pub use crate::storage::catalog::TXN_STATE_TOPIC;
/// How long a coordinator's append waits for its commit.
const APPEND_TIMEOUT_MS: i32 = 30_000;
/// How often a shard looks for `__transaction_state` partitions whose leadership changed.
const LOAD_CHECK_MS: u64 = 100;

/// The `__transaction_state` partition that holds a transactional id.
pub fn state_partition(transactional_id: &str, partitions: u32) -> i32 {
    (crate::shard::router::fnv1a(transactional_id.as_bytes()) % partitions.max(1) as u64) as i32
}

/// The transaction coordinators, one per shard, each reaching the others over its own mesh.
pub type Txns = Sharded<TxnService>;

/// One shard's transaction coordinator.
pub struct TxnService {
    pub(super) coordinator: RefCell<Coordinator>,
    /// The `__transaction_state` partitions whose ids are loaded, with the leadership
    /// generation they were loaded under.
    loaded: RefCell<HashMap<i32, u64>>,
    /// Notified whenever a persisted move was applied or abandoned: requests that found their
    /// id busy (CONCURRENT_TRANSACTIONS) look again.
    pub(super) settled: event_listener::Event,
    /// Connections to other nodes (markers, verification).
    pub(super) remote: super::remote::Remote,
    /// This shard's group coordinator: a committed marker on `__consumer_offsets` settles
    /// the transaction's offset commits there.
    pub(super) groups: Rc<Groups>,
    /// Where producer ids come from.
    pub(super) controllers: Rc<Controllers>,
}

impl TxnService {
    pub fn new(
        config: &crate::config::Config,
        groups: Rc<Groups>,
        controllers: Rc<Controllers>,
    ) -> TxnService {
        TxnService {
            groups,
            controllers,
            coordinator: RefCell::new(Coordinator::new(config.transactions.max_timeout_ms)),
            loaded: RefCell::new(HashMap::new()),
            settled: event_listener::Event::new(),
            remote: super::remote::Remote::default(),
        }
    }
}

/// A transaction operation: it names its transactional id and runs on that id's coordinator.
pub trait TxnRequest: Send + 'static {
    type Reply: Send + 'static;
    fn transactional_id(&self) -> &str;
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply>;
}

struct OnLoadedCoordinator<R> {
    request: R,
    partition: i32,
}

impl<R: TxnRequest> Request<Txns> for OnLoadedCoordinator<R> {
    type Reply = Result<R::Reply, ResponseError>;
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        if !txns.loaded.borrow().contains_key(&self.partition) {
            return Box::pin(async { Err(ResponseError::CoordinatorLoadInProgress) });
        }
        let run = self.request.run(txns);
        Box::pin(async move { Ok(run.await) })
    }
}

/// Sends a request to its id's coordinator shard. Err: no coordinator can serve it yet
/// (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS) or here: another node leads the
/// id's partition (NOT_COORDINATOR: the client asks FindCoordinator again).
pub async fn route<R: TxnRequest>(txns: &Rc<Txns>, request: R) -> Result<R::Reply, ResponseError> {
    let shard = &txns.shard;
    let catalog = shard.catalog();
    let topic = catalog
        .topics
        .get(TXN_STATE_TOPIC)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let partition = state_partition(request.transactional_id(), topic.record.partitions);
    if !catalog.leads(topic, partition) {
        return Err(ResponseError::NotCoordinator);
    }
    let owner = shard.owner(TXN_STATE_TOPIC, partition);
    txns.call(owner, OnLoadedCoordinator { request, partition })
        .await
        .map_err(|_| ResponseError::CoordinatorNotAvailable)?
}

/// The id's `__transaction_state` partition, owned by this shard.
fn state_partition_of(txns: &Txns, id: &str) -> Result<Rc<Partition>, ResponseError> {
    let shard = &txns.shard;
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
pub async fn persist(txns: &Rc<Txns>, id: &str, step: Step) -> Result<(), ResponseError> {
    let Step::Persist(record) = step else {
        return Ok(());
    };
    let appended = append(txns, id, &record).await;
    let settled = {
        let mut c = txns.coordinator.borrow_mut();
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
    txns.settled.notify(usize::MAX);
    settled
}

/// Runs `attempt` until it is not CONCURRENT_TRANSACTIONS or `wait_ms` passed, trying again
/// each time a move settles. A client told CONCURRENT_TRANSACTIONS backs off for its retry
/// backoff (librdkafka: 100 ms), while the move it waits for (the markers and the completion
/// of the transaction before, one fsync or two) takes a millisecond: a producer that begins
/// its next transaction right after a commit would wait out the backoff every time.
pub async fn when_settled<T>(
    txns: &Rc<Txns>,
    wait_ms: u64,
    mut attempt: impl FnMut() -> Result<T, ResponseError>,
) -> Result<T, ResponseError> {
    let shard = &txns.shard;
    let deadline_ms = shard.clock().monotonic_ms() + wait_ms;
    loop {
        let settled = txns.settled.listen();
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

async fn append(txns: &Rc<Txns>, id: &str, record: &TxnRecord) -> Result<(), ResponseError> {
    let shard = &txns.shard;
    let partition = state_partition_of(txns, id)?;
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

/// The epoch markers of `markers`' transaction carry: the leader epoch of its
/// `__transaction_state` partition here, as Kafka's coordinator epoch.
pub(super) fn coordinator_epoch(txns: &Txns, markers: &Markers) -> i32 {
    state_partition_of(txns, &markers.transactional_id).map_or(0, |p| p.leader_epoch())
}

/// Aborts transactions past their timeout and forgets idle ids, every
/// `transactions.check_interval_ms`, for as long as the shard runs.
pub async fn expire(txns: Rc<Txns>) {
    let shard = &txns.shard;
    let t = shard.config.transactions.clone();
    while !shard.is_shutting_down() {
        shard.housekeeping_sleep(t.check_interval_ms).await;
        let now_ms = shard.clock().wall_ms() as i64;
        let (timed_out, idle) = {
            let mut c = txns.coordinator.borrow_mut();
            let timed_out = c.expire_timed_out(now_ms);
            (timed_out, c.expire_idle(now_ms, t.id_expiration_ms as i64))
        };
        for (id, step) in timed_out {
            log::info!("transactional id {id}: transaction timed out; aborting it");
            if persist(&txns, &id, step).await.is_ok() {
                start_markers(&txns, &id);
            }
        }
        for (id, step) in idle {
            let _ = persist(&txns, &id, step).await;
        }
    }
}

/// Starts writing the markers `id`'s persisted Prepare state calls for, if it has one.
pub fn start_markers(txns: &Rc<Txns>, id: &str) {
    let markers = txns.coordinator.borrow().markers(id);
    if let Some(m) = markers {
        super::markers::spawn(txns, m);
    }
}

/// Whether a `__transaction_state` partition this shard owns and leads is not loaded yet
/// (under its present leadership).
pub fn loading(txns: &Txns) -> bool {
    coordinator_load::loading(txns)
}

/// Every shard's ids that pass `filter` (ListTransactions). Shards that are stopping are
/// skipped; one still loading its ids makes the answer COORDINATOR_LOAD_IN_PROGRESS.
pub async fn list_all(
    txns: &Rc<Txns>,
    filter: ListFilter,
) -> Result<Vec<(String, i64, State)>, ResponseError> {
    let calls = (0..txns.shard.router.shards()).map(|s| {
        let filter = filter.clone();
        txns.call(s, super::ops::List { filter })
    });
    let mut all = Vec::new();
    for listed in futures::future::join_all(calls).await.into_iter().flatten() {
        all.extend(listed?);
    }
    Ok(all)
}

/// Keeps the shard's coordinator in step with leadership of its `__transaction_state`
/// partitions: loads each one this node starts leading (replays its records, the latest per
/// id wins, and finishes the transactions that were preparing), forgets the ids of each it
/// stops leading. Runs for as long as the shard does.
pub async fn follow_leadership(txns: Rc<Txns>) {
    let shard = &txns.shard;
    while !shard.is_shutting_down() {
        load_led(&txns).await;
        shard.housekeeping_sleep(LOAD_CHECK_MS).await;
    }
}

/// One pass of `follow_leadership`. A partition whose epoch start is not committed yet waits
/// for a later pass (as groups do, `coordinator_load::may_load`): below it may lie moves an
/// earlier leader acknowledged. Its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
async fn load_led(txns: &Rc<Txns>) {
    coordinator_load::load_led(txns).await;
}

impl Coordinated for Txns {
    /// The ids that were preparing: their markers are written again.
    type Loaded = Vec<String>;

    fn topic(&self) -> &'static str {
        TXN_STATE_TOPIC
    }

    fn loaded(&self) -> &RefCell<HashMap<i32, u64>> {
        &self.loaded
    }

    fn unload(&self, index: i32, partitions: u32) {
        unload(self, index, partitions);
    }

    fn waits(&self, _p: &Partition, _epoch_start: i64) {}

    async fn load(self: &Rc<Self>, p: &Partition, partitions: u32) -> Vec<String> {
        load(self, p, partitions).await
    }

    fn on_loaded(self: &Rc<Self>, preparing: Vec<String>) {
        for id in preparing {
            start_markers(self, &id);
        }
    }
}

/// Restores the ids of `__transaction_state` partition `p`; returns them.
async fn load(txns: &Rc<Txns>, p: &Partition, count: u32) -> Vec<String> {
    let index = p.id().partition;
    let mut ids = Vec::new();
    read_from_start(p, |data| learn(data, &mut ids)).await;
    let mut c = txns.coordinator.borrow_mut();
    for (id, record) in ids {
        match record {
            Some(r) => c.restore(&id, r),
            None => c.unload(|i| i == id),
        }
    }
    c.iter()
        .filter(|(id, _)| state_partition(id, count) == index)
        .map(|(id, _)| id.clone())
        .collect()
}

/// Forgets the ids of `__transaction_state` partition `index`: this node no longer leads it.
/// Their marker writes stop at their next try (`markers::still_preparing`).
fn unload(txns: &Txns, index: i32, count: u32) {
    let shard = &txns.shard;
    txns.coordinator
        .borrow_mut()
        .unload(|id| state_partition(id, count) == index);
    txns.settled.notify(usize::MAX);
    log::info!(
        "shard {}: {TXN_STATE_TOPIC}-{index} no longer led here; its transactional ids unloaded",
        shard.id
    );
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
