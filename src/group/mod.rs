//! Consumer groups: the coordinator service for the groups a shard owns, and their persistence
//! in `__consumer_offsets`.
//!
//! A group belongs to the shard that owns its `__consumer_offsets` partition (a hash of the
//! group id), as in Kafka. The decisions are made by the I/O-free `state::Coordinator`; this
//! service parks the JoinGroup and SyncGroup requests it answers later, drives its timers from
//! the shard's timing wheel, and writes and replays its records. Other shards reach it with
//! `route` (a typed request over the mesh).

pub mod records;
pub mod replay;
pub mod state;

use crate::clock::Ids;
use crate::metrics::{add, LogLimiter};
use crate::partition::{Partition, TopicPartition};
use crate::shard::mesh::Request;
use crate::shard::Shard;
use bytes::Bytes;
use event_listener::Event;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use records::Key;
use state::{
    CommittedOffset, Coordinator, CoordinatorConfig, JoinRequest, JoinResponse, Output, Reply,
    SyncResponse,
};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Kafka's offset.metadata.max.bytes.
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;
/// How long a group record append waits for its commit (acks=all).
const APPEND_TIMEOUT_MS: i32 = 30_000;
/// Refused admissions are logged at most this often per shard (all are counted).
const REFUSAL_LOG_INTERVAL_MS: u64 = 10_000;

/// The `__consumer_offsets` partition that holds a group.
pub fn offsets_partition(group_id: &str, partitions: u32) -> i32 {
    (crate::shard::router::fnv1a(group_id.as_bytes()) % partitions.max(1) as u64) as i32
}

type Waiters<T> = RefCell<HashMap<(String, String), VecDeque<oneshot::Sender<T>>>>;

/// The coordinator of the groups one shard owns.
pub struct GroupService {
    coordinator: RefCell<Coordinator>,
    joins: Waiters<JoinResponse>,
    syncs: Waiters<SyncResponse>,
    /// Wakes the timer driver when the coordinator's next deadline may have moved.
    changed: Event,
    refusals_logged: LogLimiter,
}

/// A committed offset as requests carry it: (topic, partition, offset, leader epoch, metadata).
pub type OffsetEntry = (String, i32, i64, i32, String);

/// A group operation, executed on the group's shard.
pub enum GroupOp {
    Join(JoinRequest),
    Sync {
        group: String,
        member: String,
        generation: i32,
        instance: Option<String>,
        assignments: Vec<(String, Bytes)>,
    },
    Heartbeat {
        group: String,
        member: String,
        generation: i32,
        instance: Option<String>,
    },
    Leave {
        group: String,
        members: Vec<(String, Option<String>)>,
    },
    Commit {
        group: String,
        member: String,
        generation: i32,
        instance: Option<String>,
        offsets: Vec<OffsetEntry>,
    },
    FetchOffsets {
        group: String,
        partitions: Option<Vec<(String, i32)>>,
    },
    Describe {
        group: String,
    },
    List,
    Delete {
        group: String,
    },
    DeleteOffsets {
        group: String,
        partitions: Vec<(String, i32)>,
    },
}

pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

pub struct GroupDescription {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

pub enum GroupReply {
    Join(JoinResponse),
    Sync(SyncResponse),
    Code(i16),
    Leave(i16, Vec<i16>),
    /// One error code per offset.
    Commit(Vec<i16>),
    Offsets(Result<Vec<OffsetEntry>, i16>),
    Describe(GroupDescription),
    /// (group, protocol type, state)
    List(Vec<(String, String, &'static str)>),
    /// Top-level error, and one code per partition.
    DeleteOffsets(i16, Vec<i16>),
}

impl GroupService {
    pub fn new(now_ms: u64, config: &crate::config::Config, ids: Box<dyn Ids>) -> GroupService {
        let coordinator = CoordinatorConfig {
            initial_rebalance_delay_ms: config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms: config.group_min_session_timeout_ms,
            max_groups: config.max_groups_per_shard,
            max_member_timers: state::MAX_MEMBER_TIMERS,
        };
        GroupService {
            coordinator: RefCell::new(Coordinator::new(now_ms, coordinator, ids)),
            joins: RefCell::new(HashMap::new()),
            syncs: RefCell::new(HashMap::new()),
            changed: Event::new(),
            refusals_logged: LogLimiter::new(REFUSAL_LOG_INTERVAL_MS),
        }
    }
}

/// Runs a group operation on the shard that owns the group.
struct GroupCall(GroupOp);

impl Request for GroupCall {
    type Reply = GroupReply;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, GroupReply> {
        Box::pin(async move { handle(&shard, self.0).await })
    }
}

/// Sends a group operation to the shard that owns the group; Err(code) when groups cannot be
/// served yet (no `__consumer_offsets`) or the shard is stopping.
pub async fn route(shard: &Rc<Shard>, group: &str, op: GroupOp) -> Result<GroupReply, i16> {
    let not_available = ResponseError::CoordinatorNotAvailable.code();
    let partitions = shard
        .catalog()
        .topics
        .get(OFFSETS_TOPIC)
        .map(|t| t.record.partitions)
        .ok_or(not_available)?;
    let owner = shard.owner(OFFSETS_TOPIC, offsets_partition(group, partitions));
    shard
        .call(owner, GroupCall(op))
        .await
        .map_err(|_| not_available)
}

/// Every shard's groups: (group, protocol type, state). Shards that are stopping are skipped.
pub async fn list_all(shard: &Rc<Shard>) -> Vec<(String, String, &'static str)> {
    let calls = (0..shard.router.shards()).map(|s| shard.call(s, GroupCall(GroupOp::List)));
    let mut all = Vec::new();
    for reply in futures::future::join_all(calls).await {
        if let Ok(GroupReply::List(list)) = reply {
            all.extend(list);
        }
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
fn process_outputs(shard: &Rc<Shard>) {
    let groups = shard.service::<GroupService>();
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
            Output::PersistGroup { group_id } => persist_group(shard, &groups, group_id),
        }
    }
    groups.changed.notify(1);
}

/// Writes a group's metadata record (members, generation, assignments), in the background.
fn persist_group(shard: &Rc<Shard>, groups: &GroupService, group_id: String) {
    let wall_ms = shard.clock().wall_ms();
    let Some(g) = groups.coordinator.borrow().snapshot(&group_id, wall_ms) else {
        return;
    };
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let key = Key::Group {
            group: group_id.clone(),
        };
        let records = [(key.encode(), Some(records::encode_group(&g)))];
        if let Err(code) = append(&shard, &group_id, &records, 1).await {
            log::warn!("group {group_id}: metadata not persisted (error {code})");
        }
    })
    .detach();
}

/// The group's `__consumer_offsets` partition, owned by this shard.
fn offsets_partition_of(shard: &Shard, group: &str) -> Result<Rc<Partition>, i16> {
    let not_available = ResponseError::CoordinatorNotAvailable.code();
    let catalog = shard.catalog();
    let topic = catalog.topics.get(OFFSETS_TOPIC).ok_or(not_available)?;
    let tp = TopicPartition {
        topic_id: topic.record.id,
        partition: offsets_partition(group, topic.record.partitions),
    };
    shard.partition(tp).ok_or(not_available)
}

/// Appends internal records to the group's `__consumer_offsets` partition (owned by this shard).
async fn append(
    shard: &Rc<Shard>,
    group: &str,
    records: &[(Bytes, Option<Bytes>)],
    acks: i16,
) -> Result<(), i16> {
    let partition = offsets_partition_of(shard, group)?;
    let refs: Vec<crate::protocol::batch::KeyValue<'_>> = records
        .iter()
        .map(|(k, v)| (Some(&k[..]), v.as_deref()))
        .collect();
    let wall_ms = shard.clock().wall_ms() as i64;
    let batch = Bytes::from(crate::protocol::batch::build(&refs, wall_ms));
    shard
        .produce(&partition, batch, acks, APPEND_TIMEOUT_MS)
        .await
        .map(|_| ())
        .map_err(|e| e.code())
}

/// Delivers a join or sync reply: at once, or once the coordinator answers the parked member
/// (`gone` when the shard stops first).
async fn settle<T>(
    shard: &Rc<Shard>,
    waiters: &Waiters<T>,
    group: &str,
    reply: Reply<T>,
    gone: impl FnOnce(String) -> T,
) -> T {
    match reply {
        Reply::Now(r) => {
            process_outputs(shard);
            r
        }
        Reply::Later(member) => {
            // Registered before the outputs go out: they may already hold this member's answer.
            let rx = wait_for(waiters, group, &member);
            process_outputs(shard);
            rx.await.unwrap_or_else(|_| gone(member))
        }
    }
}

/// Runs a group operation on this (the group's) shard.
async fn handle(shard: &Rc<Shard>, op: GroupOp) -> GroupReply {
    let groups = shard.service::<GroupService>();
    let now_ms = shard.clock().monotonic_ms();
    match op {
        GroupOp::Join(req) => {
            let group = req.group_id.clone();
            let reply = groups.coordinator.borrow_mut().join(now_ms, req);
            let gone = |member| JoinResponse::error(ResponseError::CoordinatorNotAvailable, member);
            GroupReply::Join(settle(shard, &groups.joins, &group, reply, gone).await)
        }
        GroupOp::Sync {
            group,
            member,
            generation,
            instance,
            assignments,
        } => {
            let reply = groups.coordinator.borrow_mut().sync(
                now_ms,
                &group,
                &member,
                generation,
                instance.as_deref(),
                assignments,
            );
            let gone = |_| SyncResponse {
                error_code: ResponseError::CoordinatorNotAvailable.code(),
                ..Default::default()
            };
            GroupReply::Sync(settle(shard, &groups.syncs, &group, reply, gone).await)
        }
        GroupOp::Heartbeat {
            group,
            member,
            generation,
            instance,
        } => {
            let code = groups.coordinator.borrow_mut().heartbeat(
                now_ms,
                &group,
                &member,
                generation,
                instance.as_deref(),
            );
            process_outputs(shard);
            GroupReply::Code(code)
        }
        GroupOp::Leave { group, members } => {
            let (code, each) = groups
                .coordinator
                .borrow_mut()
                .leave(now_ms, &group, &members);
            process_outputs(shard);
            GroupReply::Leave(code, each)
        }
        GroupOp::Commit {
            group,
            member,
            generation,
            instance,
            offsets,
        } => commit(shard, group, member, generation, instance, offsets).await,
        GroupOp::FetchOffsets { group, partitions } => fetch_offsets(&groups, &group, partitions),
        GroupOp::Describe { group } => GroupReply::Describe(describe(&groups, &group)),
        GroupOp::List => list(&groups),
        GroupOp::Delete { group } => delete(shard, &groups, group).await,
        GroupOp::DeleteOffsets { group, partitions } => {
            delete_offsets(shard, group, partitions).await
        }
    }
}

fn fetch_offsets(
    groups: &GroupService,
    group: &str,
    partitions: Option<Vec<(String, i32)>>,
) -> GroupReply {
    let c = groups.coordinator.borrow();
    let stored = c.groups.get(group).map(|g| &g.offsets);
    let entry = |t: &str, p: i32| -> OffsetEntry {
        match stored.and_then(|o| o.get(&(t.to_string(), p))) {
            Some(o) => (
                t.to_string(),
                p,
                o.offset,
                o.leader_epoch,
                o.metadata.clone(),
            ),
            None => (t.to_string(), p, -1, -1, String::new()),
        }
    };
    let list = match partitions {
        Some(ps) => ps.iter().map(|(t, p)| entry(t, *p)).collect(),
        None => stored
            .map(|o| o.keys().map(|(t, p)| entry(t, *p)).collect())
            .unwrap_or_default(),
    };
    GroupReply::Offsets(Ok(list))
}

fn describe(groups: &GroupService, group: &str) -> GroupDescription {
    let c = groups.coordinator.borrow();
    let Some(g) = c.groups.get(group) else {
        return GroupDescription {
            state: "Dead",
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        };
    };
    let protocol = g.protocol.clone().unwrap_or_default();
    let members = g
        .members
        .values()
        .map(|m| MemberDescription {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            metadata: m.metadata_for(&protocol),
            assignment: m.assignment.clone(),
        })
        .collect();
    GroupDescription {
        state: g.state.name(),
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        protocol,
        members,
    }
}

fn list(groups: &GroupService) -> GroupReply {
    let c = groups.coordinator.borrow();
    GroupReply::List(
        c.groups
            .values()
            .map(|g| {
                (
                    g.id.clone(),
                    g.protocol_type.clone().unwrap_or_default(),
                    g.state.name(),
                )
            })
            .collect(),
    )
}

/// The tombstone of a committed offset.
fn offset_tombstone(group: &str, topic: String, partition: i32) -> (Bytes, Option<Bytes>) {
    let key = Key::Offset {
        group: group.to_string(),
        topic,
        partition,
    };
    (key.encode(), None)
}

async fn delete(shard: &Rc<Shard>, groups: &GroupService, group: String) -> GroupReply {
    let offsets: Vec<(String, i32)> = match groups.coordinator.borrow().groups.get(&group) {
        Some(g) => g.offsets.keys().cloned().collect(),
        None => Vec::new(),
    };
    if let Err(e) = groups.coordinator.borrow_mut().delete(&group) {
        return GroupReply::Code(e.code());
    }
    let mut tombstones: Vec<(Bytes, Option<Bytes>)> = offsets
        .into_iter()
        .map(|(topic, partition)| offset_tombstone(&group, topic, partition))
        .collect();
    let key = Key::Group {
        group: group.clone(),
    };
    tombstones.push((key.encode(), None));
    GroupReply::Code(match append(shard, &group, &tombstones, -1).await {
        Ok(()) => 0,
        Err(code) => code,
    })
}

async fn commit(
    shard: &Rc<Shard>,
    group: String,
    member: String,
    generation: i32,
    instance: Option<String>,
    offsets: Vec<OffsetEntry>,
) -> GroupReply {
    let groups = shard.service::<GroupService>();
    let checked = groups.coordinator.borrow_mut().check_commit(
        &group,
        &member,
        generation,
        instance.as_deref(),
    );
    process_outputs(shard); // a refused admission is counted there
    if let Err(e) = checked {
        return GroupReply::Commit(offsets.iter().map(|_| e.code()).collect());
    }
    let now_ms = shard.clock().wall_ms() as i64;
    let mut codes = vec![0i16; offsets.len()];
    let mut records = Vec::new();
    let mut accepted = Vec::new();
    for (i, (topic, partition, offset, epoch, metadata)) in offsets.into_iter().enumerate() {
        if metadata.len() > MAX_OFFSET_METADATA_BYTES {
            codes[i] = ResponseError::OffsetMetadataTooLarge.code();
            continue;
        }
        let value = CommittedOffset {
            offset,
            leader_epoch: epoch,
            metadata,
            commit_timestamp_ms: now_ms,
        };
        let key = Key::Offset {
            group: group.clone(),
            topic: topic.clone(),
            partition,
        };
        records.push((key.encode(), Some(records::encode_offset(&value))));
        accepted.push(((topic, partition), value));
    }
    if records.is_empty() {
        return GroupReply::Commit(codes);
    }
    // Like produce with acks=all: answered once the commit is durable.
    if let Err(code) = append(shard, &group, &records, -1).await {
        for c in codes.iter_mut().filter(|c| **c == 0) {
            *c = code;
        }
        return GroupReply::Commit(codes);
    }
    let mut c = groups.coordinator.borrow_mut();
    let g = c.group_mut(&group);
    for (key, value) in accepted {
        g.offsets.insert(key, value);
    }
    GroupReply::Commit(codes)
}

async fn delete_offsets(
    shard: &Rc<Shard>,
    group: String,
    partitions: Vec<(String, i32)>,
) -> GroupReply {
    let groups = shard.service::<GroupService>();
    let codes: Vec<i16> = {
        let c = groups.coordinator.borrow();
        let Some(g) = c.groups.get(&group) else {
            return GroupReply::DeleteOffsets(ResponseError::GroupIdNotFound.code(), Vec::new());
        };
        partitions
            .iter()
            .map(|(t, _)| {
                if g.is_subscribed_to(t) {
                    ResponseError::GroupSubscribedToTopic.code()
                } else {
                    0
                }
            })
            .collect()
    };
    let doomed: Vec<(String, i32)> = partitions
        .iter()
        .zip(&codes)
        .filter(|(_, c)| **c == 0)
        .map(|(p, _)| p.clone())
        .collect();
    if doomed.is_empty() {
        return GroupReply::DeleteOffsets(0, codes);
    }
    let tombstones: Vec<(Bytes, Option<Bytes>)> = doomed
        .iter()
        .map(|(topic, partition)| offset_tombstone(&group, topic.clone(), *partition))
        .collect();
    if let Err(code) = append(shard, &group, &tombstones, -1).await {
        return GroupReply::DeleteOffsets(code, Vec::new());
    }
    let mut c = groups.coordinator.borrow_mut();
    let g = c.group_mut(&group);
    for key in &doomed {
        g.offsets.remove(key);
    }
    GroupReply::DeleteOffsets(0, codes)
}

/// Fires the coordinator's timers (session, rebalance and pending-member timeouts): one task per
/// shard, parked on the shard's timing wheel until the coordinator's next deadline.
pub async fn drive(shard: Rc<Shard>) {
    let groups = shard.service::<GroupService>();
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
        process_outputs(&shard);
    }
}
