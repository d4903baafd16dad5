//! Consumer groups: the coordinator service for the groups a shard owns, and their persistence
//! in `__consumer_offsets`.
//!
//! A group belongs to the shard that owns its `__consumer_offsets` partition (a hash of the
//! group id), as in Kafka. The decisions are made by the I/O-free `state::Coordinator`; this
//! service parks the JoinGroup and SyncGroup requests it answers later, drives its timers from
//! the shard's timing wheel, and writes and replays its records. Other shards reach it with
//! `route` (a typed request over the mesh).
//!
//! ## How groups work
//!
//! - A group lives on the shard that owns its `__consumer_offsets` partition (FNV hash of the group
//!   id modulo `offsets_topic_partitions`, then `Router::shard_of`). Shard 0 creates the topic on
//!   first start. Every group API is a typed request (`group/ops.rs`) sent to the owning shard's
//!   `GroupService` (`group::route`); ListGroups asks every shard.
//! - `group/state.rs` decides; it never reads a clock, draws an id or touches I/O: the monotonic
//!   time comes in with each call and member ids from an injected `Ids`. It returns responses now
//!   or `Reply::Later(member)`, plus `Output`s: parked JoinGroup/SyncGroup answers and "persist
//!   this group". Session, rebalance and pending-member timeouts sit on its own `TimingWheel`; one
//!   task per shard (`group::drive`) parks on the shard's wheel until the coordinator's next
//!   deadline. A member parked in JoinGroup or SyncGroup is kept alive (Kafka's `shouldKeepAlive`),
//!   and a completed join or sync counts as a heartbeat.
//! - Bounds: `max_groups_per_shard` groups, and one million members (joined or pending) per shard.
//!   The coordinator's wheel has room for a timer per member plus a rebalance timer per group, so
//!   only admitting a new group or member can run out of room: that JoinGroup (or the OffsetCommit
//!   that would create a group) is answered COORDINATOR_NOT_AVAILABLE, counted in
//!   `sluice_groups_refused_total` and logged at most every 10 s. A replay that meets an
//!   undecodable record skips it, counts it (`sluice_group_records_undecodable_total`) and logs
//!   it.
//! - Offset commits are appended to the group's `__consumer_offsets` partition with acks=all
//!   semantics, so a commit is answered only after its fsync. The append is OffsetCommit's ordered
//!   part (`ops::StageCommit`, in its connection's request order); the wait for the commit is its
//!   later part (`ops::SettleCommit`, `Reply::Later`), so a client committing after every message
//!   shares fsyncs across its commits and its heartbeats are not queued behind them (they were, one
//!   fsync each, until a member's session expired). Appended offsets wait in
//!   `GroupService::pending_commits`, keyed by partition, leader generation and end offset, and are
//!   applied to their groups in log order once the high watermark covers them, by whichever answer
//!   wakes first (those of an earlier leadership never are: their answers fail, and the partition's
//!   unload clears them); OffsetFetch first waits for its group's pending commits. Invariant: a
//!   group's in-memory offsets only move in its partition's log order. Group metadata (members,
//!   generation, assignments) is appended on every change. On start each shard replays its
//!   partitions: latest value per key wins, null values delete.
//! - `__consumer_offsets` is compacted (`storage/compaction.rs`): a group's old commits go once a
//!   later commit of the same partition is in a closed segment.
//! - Transactional offset commits (TxnOffsetCommit, after AddOffsetsToTxn put the group's
//!   offsets partition in the transaction) are checked with the transaction coordinator first
//!   (`txn::remote::verify`: over the mesh, or AddPartitionsToTxn v4 when the coordinator is
//!   on another node), then appended as a transactional batch of the producer
//!   (`Source::Coordinator`, refused with PRODUCER_FENCED when the partition saw a newer epoch's
//!   marker) and held per producer in `Group::pending_offsets`. The transaction's marker on that
//!   partition settles them (`group::settle_txn`, called by the coordinator's marker write once
//!   the marker is committed): commit makes them the committed offsets, abort drops them. A marker
//!   committed while the partition loads is held (`GroupService::unsettled`) and settled after
//!   the restore. Replay holds a transactional batch's offsets until its producer's marker, and
//!   restores those with no marker yet as pending. OffsetFetch with `require_stable` (v7+,
//!   read_committed consumers) answers UNSTABLE_OFFSET_COMMIT for a partition with pending
//!   offsets, which clients retry.

pub mod consumer;
pub mod offsets;
pub mod ops;
pub mod records;
pub mod replay;
pub mod state;

use crate::clock::Ids;
use crate::metrics::{add, LogLimiter};
use crate::partition::{Partition, Source, TopicPartition};
use crate::shard::mesh::{Peer, Request, Sharded};
use bytes::Bytes;
use event_listener::Event;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use records::Key;
use state::{Coordinator, CoordinatorConfig, JoinResponse, Output, Reply, SyncResponse};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

pub use crate::storage::catalog::OFFSETS_TOPIC;
/// Kafka's offset.metadata.max.bytes.
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;
/// How long a group record append waits for its commit (acks=all).
const APPEND_TIMEOUT_MS: i32 = 30_000;
/// Refused admissions are logged at most this often per shard (all are counted).
const REFUSAL_LOG_INTERVAL_MS: u64 = 10_000;
/// A failed group metadata write is made again after this, doubling up to the most.
const PERSIST_RETRY_MS: u64 = 100;
const PERSIST_RETRY_MAX_MS: u64 = 5_000;

/// The `__consumer_offsets` partition that holds a group.
pub fn offsets_partition(group_id: &str, partitions: u32) -> i32 {
    (crate::shard::router::fnv1a(group_id.as_bytes()) % partitions.max(1) as u64) as i32
}

type Waiters<T> = RefCell<HashMap<(String, String), VecDeque<oneshot::Sender<T>>>>;

/// The group coordinators, one per shard, each reaching the others over its own mesh.
pub type Groups = Sharded<GroupService>;

/// The coordinator of the groups one shard owns.
pub struct GroupService {
    coordinator: RefCell<Coordinator>,
    /// Parked JoinGroup and SyncGroup requests, by (group, member).
    joins: Waiters<JoinResponse>,
    syncs: Waiters<SyncResponse>,
    /// Wakes the timer driver when the coordinator's next deadline may have moved.
    changed: Event,
    refusals_logged: LogLimiter,
    /// Led `__consumer_offsets` partitions waiting to load (`replay::load_led`).
    load_waits_logged: LogLimiter,
    /// The `__consumer_offsets` partitions whose groups are loaded (`replay.rs`), with the
    /// leader generation they were loaded in. A group of another partition this node leads is
    /// answered COORDINATOR_LOAD_IN_PROGRESS.
    loaded: RefCell<HashMap<i32, u64>>,
    /// Transaction markers committed on a `__consumer_offsets` partition while its groups were
    /// loading: (partition, producer id, commit), settled once the load restored them
    /// (`replay::load_led`). A marker written after the replay's last read would be lost
    /// otherwise.
    unsettled: RefCell<Vec<(i32, i64, bool)>>,
    /// Groups whose metadata is being written again after a failed write (`persist_again`).
    rewriting: RefCell<std::collections::HashSet<String>>,
    /// Offset commits appended and not yet applied to their groups, by (`__consumer_offsets`
    /// partition, the leader generation they were appended under, the batch's end offset):
    /// applied in log order once the partition commits them (`ops::SettleCommit`), whoever's
    /// answer wakes first. Those of an earlier leadership are never applied: their answers
    /// fail, or the partition's unload clears them.
    pending_commits: RefCell<BTreeMap<PendingKey, PendingCommit>>,
}

/// (partition, leader generation, end offset) of an appended offset commit.
type PendingKey = (i32, u64, i64);

/// An offset commit appended and not yet applied.
struct PendingCommit {
    group: String,
    accepted: Vec<((String, i32), state::CommittedOffset)>,
}

/// Commits appended and waiting for their partition's commit, per shard: beyond this a commit
/// is answered only once applied (`ops::StageCommit`), which holds its connection back. Each
/// entry is an in-flight OffsetCommit, so connections and their in-flight bound keep it lower.
const MAX_PENDING_COMMITS: usize = 100_000;

/// Markers held while a partition loads; each marker write waits for its commit, so a load
/// sees at most a few per transactional id.
const MAX_UNSETTLED: usize = 100_000;

/// A shard's coordinator, bounded by the broker's config.
pub fn coordinator(now_ms: u64, config: &crate::config::Config, ids: Box<dyn Ids>) -> Coordinator {
    let bounds = CoordinatorConfig {
        initial_rebalance_delay_ms: config.group_initial_rebalance_delay_ms,
        min_session_timeout_ms: config.group_min_session_timeout_ms,
        max_groups: config.max_groups_per_shard,
        max_member_timers: state::MAX_MEMBER_TIMERS,
    };
    Coordinator::new(now_ms, bounds, ids)
}

/// A committed offset as requests carry it: (topic, partition, offset, leader epoch, metadata).
pub type OffsetEntry = (String, i32, i64, i32, String);

impl GroupService {
    pub fn new(now_ms: u64, config: &crate::config::Config, ids: Box<dyn Ids>) -> GroupService {
        GroupService {
            coordinator: RefCell::new(coordinator(now_ms, config, ids)),
            joins: RefCell::new(HashMap::new()),
            syncs: RefCell::new(HashMap::new()),
            changed: Event::new(),
            refusals_logged: LogLimiter::new(REFUSAL_LOG_INTERVAL_MS),
            load_waits_logged: LogLimiter::new(REFUSAL_LOG_INTERVAL_MS),
            loaded: RefCell::new(HashMap::new()),
            unsettled: RefCell::new(Vec::new()),
            rewriting: RefCell::new(std::collections::HashSet::new()),
            pending_commits: RefCell::new(BTreeMap::new()),
        }
    }
}

/// A group operation: it names its group and its reply, and runs on the group's shard (the
/// coordinator of that group).
pub trait GroupRequest: Send + 'static {
    type Reply: Send + 'static;
    fn group(&self) -> &str;
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, Self::Reply>;
}

/// Runs a group request on the shard it was sent to.
struct OnCoordinator<R>(R);

impl<R: GroupRequest> Request<Groups> for OnCoordinator<R> {
    type Reply = R::Reply;
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, R::Reply> {
        self.0.run(groups)
    }
}

/// Runs a group request on its coordinator once the group's partition is loaded there.
struct OnLoadedCoordinator<R> {
    request: R,
    partition: i32,
}

impl<R: GroupRequest> Request<Groups> for OnLoadedCoordinator<R> {
    type Reply = Result<R::Reply, i16>;
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, Self::Reply> {
        let loaded = groups.loaded.borrow().contains_key(&self.partition);
        if !loaded {
            let code = ResponseError::CoordinatorLoadInProgress.code();
            return Box::pin(async move { Err(code) });
        }
        let run = self.request.run(groups);
        Box::pin(async move { Ok(run.await) })
    }
}

/// The `__consumer_offsets` partition of a group this node coordinates: COORDINATOR_NOT_AVAILABLE
/// before the topic exists, NOT_COORDINATOR when another node leads the partition (in a
/// cluster; the client asks FindCoordinator again).
pub fn coordinated_partition(groups: &Groups, group_id: &str) -> Result<i32, ResponseError> {
    let shard = &groups.shard;
    let catalog = shard.catalog();
    let topic = catalog
        .topics
        .get(OFFSETS_TOPIC)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let partition = offsets_partition(group_id, topic.record.partitions);
    if !catalog.leads(topic, partition) {
        return Err(ResponseError::NotCoordinator);
    }
    Ok(partition)
}

/// Sends a group request to the shard that owns its group; Err(code) when groups cannot be
/// served here (`coordinated_partition`) or the shard is stopping.
pub async fn route<R: GroupRequest>(groups: &Rc<Groups>, request: R) -> Result<R::Reply, i16> {
    let shard = &groups.shard;
    let not_available = ResponseError::CoordinatorNotAvailable.code();
    let partition = coordinated_partition(groups, request.group()).map_err(|e| e.code())?;
    let owner = shard.owner(OFFSETS_TOPIC, partition);
    groups
        .call(owner, OnLoadedCoordinator { request, partition })
        .await
        .map_err(|_| not_available)?
}

/// Every shard's groups: (group, protocol type, state). Shards that are stopping are skipped.
pub async fn list_all(groups: &Rc<Groups>) -> Vec<(String, String, &'static str)> {
    let shards = groups.shard.router.shards();
    let calls = (0..shards).map(|s| groups.call(s, OnCoordinator(ops::List)));
    let mut all = Vec::new();
    for list in futures::future::join_all(calls).await.into_iter().flatten() {
        all.extend(list);
    }
    all
}

fn wait_for<T>(waiters: &Waiters<T>, group: &str, member: &str) -> oneshot::Receiver<T> {
    let (tx, rx) = oneshot::channel();
    waiters
        .borrow_mut()
        .entry((group.to_string(), member.to_string()))
        .or_default()
        .push_back(tx);
    rx
}

fn answer<T>(waiters: &Waiters<T>, group: String, member: String, response: T) {
    let key = (group, member);
    let mut w = waiters.borrow_mut();
    if let Some(queue) = w.get_mut(&key) {
        if let Some(tx) = queue.pop_front() {
            let _ = tx.send(response); // the client may have gone; nothing to do then
        }
        if queue.is_empty() {
            w.remove(&key);
        }
    }
}

/// Delivers what the coordinator decided: parked responses, and group records to write. Counts
/// and logs (rate limited) the admissions it refused for want of room.
fn process_outputs(groups: &Rc<Groups>) {
    let shard = &groups.shard;
    let (outputs, refused) = {
        let mut c = groups.coordinator.borrow_mut();
        (c.take_outputs(), c.take_refusals())
    };
    if refused > 0 {
        add(&shard.metrics().groups_refused, refused);
        if let Some(more) = groups.refusals_logged.admit(shard.clock().monotonic_ms()) {
            log::warn!(
                "shard {}: refused {refused} new group members or groups: the coordinator holds its limit (max_groups_per_shard groups, {} members); answered COORDINATOR_NOT_AVAILABLE ({more} such lines suppressed)",
                shard.id,
                state::MAX_MEMBER_TIMERS
            );
        }
    }
    for o in outputs {
        match o {
            Output::Join {
                group_id,
                member_id,
                response,
            } => answer(&groups.joins, group_id, member_id, response),
            Output::Sync {
                group_id,
                member_id,
                response,
            } => answer(&groups.syncs, group_id, member_id, response),
            Output::PersistGroup { group_id } => persist_group(groups, group_id),
        }
    }
    groups.changed.notify(1);
}

/// Writes a group's metadata record (members, generation, assignments), in the background; a
/// failed write is made again (`persist_again`).
fn persist_group(groups: &Rc<Groups>, group_id: String) {
    let shard = &groups.shard;
    let wall_ms = shard.clock().wall_ms();
    let Some(g) = groups.coordinator.borrow().snapshot(&group_id, wall_ms) else {
        return;
    };
    let groups = groups.clone();
    glommio::spawn_local(async move {
        if write_group(&groups, &group_id, &g).await.is_err() {
            persist_again(&groups, group_id).await;
        }
    })
    .detach();
}

async fn write_group(
    groups: &Rc<Groups>,
    group_id: &str,
    g: &state::StoredGroup,
) -> Result<(), i16> {
    let key = Key::Group {
        group: group_id.to_string(),
    };
    let records = [(key.encode(), Some(records::encode_group(g)))];
    let written = append(groups, group_id, &records, 1, None).await;
    written
        .inspect_err(|code| log::warn!("group {group_id}: metadata not persisted (error {code})"))
}

/// A group whose metadata write failed (a full disk: KAFKA_STORAGE_ERROR) is written again,
/// with its state then, backing off up to `PERSIST_RETRY_MAX_MS`, until a write succeeds or
/// this shard no longer coordinates the group (unloaded, deleted) or stops: a record never
/// written would have the group's next coordinator load an older generation and assignment.
/// One such loop per group at a time (`GroupService::rewriting`).
async fn persist_again(groups: &Rc<Groups>, group_id: String) {
    let shard = &groups.shard;
    if !groups.rewriting.borrow_mut().insert(group_id.clone()) {
        return; // the loop that runs writes the newest state anyway
    }
    let mut wait_ms = PERSIST_RETRY_MS;
    for tries in 2u32.. {
        shard.housekeeping_sleep(wait_ms).await;
        let wall_ms = shard.clock().wall_ms();
        let snapshot = groups.coordinator.borrow().snapshot(&group_id, wall_ms);
        let Some(g) = snapshot.filter(|_| !shard.is_shutting_down()) else {
            break;
        };
        if write_group(groups, &group_id, &g).await.is_ok() {
            log::info!("group {group_id}: metadata persisted after {tries} tries");
            break;
        }
        wait_ms = (wait_ms * 2).min(PERSIST_RETRY_MAX_MS);
    }
    groups.rewriting.borrow_mut().remove(&group_id);
}

/// The group's `__consumer_offsets` partition, owned by this shard.
fn offsets_partition_of(groups: &Groups, group: &str) -> Result<Rc<Partition>, i16> {
    let shard = &groups.shard;
    let not_available = ResponseError::CoordinatorNotAvailable.code();
    let catalog = shard.catalog();
    let topic = catalog.topics.get(OFFSETS_TOPIC).ok_or(not_available)?;
    let tp = TopicPartition {
        topic_id: topic.record.id,
        partition: offsets_partition(group, topic.record.partitions),
    };
    shard.partition(tp).ok_or(not_available)
}

/// Appends internal records to the group's `__consumer_offsets` partition (owned by this
/// shard); in `txn`'s transaction (producer id, epoch) when given: a TxnOffsetCommit.
async fn append(
    groups: &Rc<Groups>,
    group: &str,
    records: &[(Bytes, Option<Bytes>)],
    acks: i16,
    txn: Option<(i64, i16)>,
) -> Result<(), i16> {
    let partition = offsets_partition_of(groups, group)?;
    append_to(groups, &partition, records, acks, txn)
        .await
        .map(|_| ())
}

/// Appends an offset commit's records for `group` to its partition, checked as acks=all is
/// (enough replicas in sync) but not waiting for their commit, and keeps the offsets to apply
/// once they commit. Returns the leader generation it was appended under and the batch's end
/// offset.
async fn append_pending(
    groups: &Rc<Groups>,
    group: &str,
    records: &[(Bytes, Option<Bytes>)],
    accepted: Vec<((String, i32), state::CommittedOffset)>,
) -> Result<(u64, i64), i16> {
    let partition = offsets_partition_of(groups, group)?;
    partition
        .replication()
        .check_insync(-1)
        .map_err(|e| e.code())?;
    let end_offset = append_to(groups, &partition, records, 1, None).await?;
    let Some((leadership, _)) = partition.leadership() else {
        return Err(ResponseError::NotLeaderOrFollower.code());
    };
    let pending = PendingCommit {
        group: group.to_string(),
        accepted,
    };
    let key = (partition.id().partition, leadership, end_offset);
    let previous = groups.pending_commits.borrow_mut().insert(key, pending);
    // Within one leadership each append has its own end offset.
    assert!(previous.is_none(), "two commits pending at {key:?}");
    Ok((leadership, end_offset))
}

/// Waits until the commit appended at `end_offset` under `leadership` on `group`'s partition
/// is committed, then applies every pending commit of that leadership up to the high
/// watermark, in log order. Err: the commit's code (REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER,
/// KAFKA_STORAGE_ERROR); its offsets are then not applied.
async fn settle_pending(
    groups: &Rc<Groups>,
    group: &str,
    (leadership, end_offset): (u64, i64),
) -> Result<(), i16> {
    let settled = apply_once_committed(groups, group, end_offset).await;
    if settled.is_err() {
        if let Ok(partition) = offsets_partition_of(groups, group) {
            let key = (partition.id().partition, leadership, end_offset);
            groups.pending_commits.borrow_mut().remove(&key);
        }
    }
    settled
}

/// Waits until `group`'s partition commits `end_offset`, then applies the pending commits its
/// high watermark covers. Err: the wait's code; nothing applied, nothing dropped.
async fn apply_once_committed(
    groups: &Rc<Groups>,
    group: &str,
    end_offset: i64,
) -> Result<(), i16> {
    let shard = &groups.shard;
    let partition = offsets_partition_of(groups, group)?;
    let deadline_ms = shard.clock().monotonic_ms() + APPEND_TIMEOUT_MS as u64;
    shard
        .wait_committed(&partition, end_offset, deadline_ms)
        .await
        .map_err(|e| e.code())?;
    apply_committed(groups, &partition);
    Ok(())
}

/// Applies the pending commits of `partition`'s present leadership that its high watermark
/// covers, in log order.
fn apply_committed(groups: &GroupService, partition: &Partition) {
    let Some((leadership, _)) = partition.leadership() else {
        return;
    };
    let index = partition.id().partition;
    let high_watermark = partition.high_watermark();
    let mut pending = groups.pending_commits.borrow_mut();
    let covered: Vec<PendingKey> = pending
        .range((index, leadership, i64::MIN)..=(index, leadership, high_watermark))
        .map(|(k, _)| *k)
        .collect();
    let mut coordinator = groups.coordinator.borrow_mut();
    for key in covered {
        let c = pending.remove(&key).expect("listed just now");
        coordinator.group_mut(&c.group).offsets.commit(c.accepted);
    }
}

/// Whether so many commits wait that the next one should be answered only once applied.
fn too_many_pending(groups: &GroupService) -> bool {
    groups.pending_commits.borrow().len() >= MAX_PENDING_COMMITS
}

/// The newest end offset of `group`'s commits pending under its partition's present
/// leadership (None: none is).
fn newest_pending(groups: &Groups, group: &str) -> Option<i64> {
    let partition = offsets_partition_of(groups, group).ok()?;
    let (leadership, _) = partition.leadership()?;
    let index = partition.id().partition;
    let pending = groups.pending_commits.borrow();
    pending
        .range((index, leadership, i64::MIN)..=(index, leadership, i64::MAX))
        .filter(|(_, c)| c.group == group)
        .map(|((_, _, end), _)| *end)
        .max()
}

/// Appends `records` to `partition` (a `__consumer_offsets` partition owned by this shard); in
/// `txn`'s transaction (producer id, epoch) when given: a TxnOffsetCommit. Returns the batch's
/// end offset.
async fn append_to(
    groups: &Rc<Groups>,
    partition: &Rc<Partition>,
    records: &[(Bytes, Option<Bytes>)],
    acks: i16,
    txn: Option<(i64, i16)>,
) -> Result<i64, i16> {
    let shard = &groups.shard;
    let refs: Vec<crate::protocol::batch::KeyValue<'_>> = records
        .iter()
        .map(|(k, v)| (Some(&k[..]), v.as_deref()))
        .collect();
    let wall_ms = shard.clock().wall_ms() as i64;
    let (batch, source) = match txn {
        None => (
            crate::protocol::batch::build(&refs, wall_ms),
            Source::Client,
        ),
        Some((producer_id, epoch)) => {
            // A fenced producer's late commit must not open a transaction here that no
            // coordinator will end: the partition knows the epoch its markers carried.
            if partition
                .producer_epoch(producer_id)
                .is_some_and(|e| e > epoch)
            {
                return Err(ResponseError::ProducerFenced.code());
            }
            let b = crate::protocol::control::transactional(&refs, producer_id, epoch, wall_ms);
            (b, Source::Coordinator)
        }
    };
    shard
        .produce(
            partition,
            Bytes::from(batch),
            source,
            acks,
            APPEND_TIMEOUT_MS,
        )
        .await
        .map(|a| a.end_offset)
        .map_err(|e| e.code())
}

/// A transaction's marker is committed on `__consumer_offsets` partition `index` (owned by
/// this shard): the producer's pending offset commits there are settled.
pub fn settle_txn(groups: &Groups, index: i32, producer_id: i64, commit: bool) {
    let shard = &groups.shard;
    let Some(topic) = shard.catalog().topics.get(OFFSETS_TOPIC).cloned() else {
        return;
    };
    let partitions = topic.record.partitions;
    if !groups.loaded.borrow().contains_key(&index) {
        let mut held = groups.unsettled.borrow_mut();
        assert!(
            held.len() < MAX_UNSETTLED,
            "{OFFSETS_TOPIC}-{index}: {MAX_UNSETTLED} transaction markers wait for one load"
        );
        held.push((index, producer_id, commit));
        return;
    }
    groups.coordinator.borrow_mut().settle_txn(
        |g| offsets_partition(g, partitions) == index,
        producer_id,
        commit,
    );
}

/// Delivers a join or sync reply: at once, or once the coordinator answers the parked member
/// (`gone` when the shard stops first).
async fn settle<T>(
    groups: &Rc<Groups>,
    waiters: &Waiters<T>,
    group: &str,
    reply: Reply<T>,
    gone: impl FnOnce(String) -> T,
) -> T {
    match reply {
        Reply::Now(r) => {
            process_outputs(groups);
            r
        }
        Reply::Later(member) => {
            // Registered before the outputs go out: they may already hold this member's answer.
            let rx = wait_for(waiters, group, &member);
            process_outputs(groups);
            rx.await.unwrap_or_else(|_| gone(member))
        }
    }
}

/// Fires the coordinator's timers (session, rebalance and pending-member timeouts): one task per
/// shard, parked on the shard's timing wheel until the coordinator's next deadline.
pub async fn drive(groups: Rc<Groups>) {
    let shard = &groups.shard;
    loop {
        let changed = groups.changed.listen();
        let next = groups.coordinator.borrow_mut().next_deadline();
        match next {
            None => changed.await,
            Some(at) => match shard.timers.sleep_until_internal(at) {
                Ok(sleep) => {
                    futures::pin_mut!(sleep);
                    futures::future::select(sleep, changed).await;
                }
                // No room on the wheel: fall back to a plain timer so deadlines still hold.
                Err(_) => {
                    let wait_ms = at.saturating_sub(shard.clock().monotonic_ms()).max(1);
                    glommio::timer::sleep(std::time::Duration::from_millis(wait_ms)).await
                }
            },
        }
        let now_ms = shard.clock().monotonic_ms();
        groups.coordinator.borrow_mut().tick(now_ms);
        process_outputs(&groups);
    }
}
