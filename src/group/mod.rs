//! Consumer groups: the coordinator for the groups this shard owns, and their persistence in
//! `__consumer_offsets`.
//!
//! A group belongs to the shard that owns its `__consumer_offsets` partition (a hash of the
//! group id), as in Kafka. The decisions are made by the I/O-free `state::Coordinator`; this
//! module parks the JoinGroup and SyncGroup requests it answers later, drives its timers from the
//! shard's timing wheel, and writes and replays its records.

pub mod records;
pub mod state;

use crate::protocol::chunk::Chunk;
use crate::shard::messages::{FetchItem, ProduceItem};
use crate::shard::{now_ms, Shard};
use bytes::Bytes;
use event_listener::Event;
use futures::channel::oneshot;
use kafka_protocol::ResponseError;
use records::Key;
use state::{CommittedOffset, Coordinator, JoinRequest, JoinResponse, Output, Reply, SyncResponse};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Kafka's offset.metadata.max.bytes.
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;

/// The `__consumer_offsets` partition that holds a group.
pub fn offsets_partition(group_id: &str, partitions: u32) -> i32 {
    (crate::shard::router::fnv1a(group_id.as_bytes()) % partitions.max(1) as u64) as i32
}

type Waiters<T> = RefCell<HashMap<(String, String), VecDeque<oneshot::Sender<T>>>>;

pub struct GroupManager {
    pub coordinator: RefCell<Coordinator>,
    joins: Waiters<JoinResponse>,
    syncs: Waiters<SyncResponse>,
    /// Wakes the timer driver when the coordinator's next deadline may have moved.
    changed: Event,
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

impl GroupManager {
    pub fn new(now_ms: u64, config: &crate::config::Config) -> GroupManager {
        GroupManager {
            coordinator: RefCell::new(Coordinator::new(
                now_ms,
                config.group_initial_rebalance_delay_ms,
                config.group_min_session_timeout_ms,
            )),
            joins: RefCell::new(HashMap::new()),
            syncs: RefCell::new(HashMap::new()),
            changed: Event::new(),
        }
    }
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

/// Delivers what the coordinator decided: parked responses, and group records to write.
fn process_outputs(shard: &Rc<Shard>) {
    let outputs = shard.groups.coordinator.borrow_mut().take_outputs();
    for o in outputs {
        match o {
            Output::Join {
                group_id,
                member_id,
                response,
            } => answer(&shard.groups.joins, group_id, member_id, response),
            Output::Sync {
                group_id,
                member_id,
                response,
            } => answer(&shard.groups.syncs, group_id, member_id, response),
            Output::PersistGroup { group_id } => {
                let snapshot = shard
                    .groups
                    .coordinator
                    .borrow()
                    .snapshot(&group_id, now_ms());
                if let Some(g) = snapshot {
                    let shard = shard.clone();
                    glommio::spawn_local(async move {
                        let records = [(
                            Key::Group {
                                group: group_id.clone(),
                            }
                            .encode(),
                            Some(records::encode_group(&g)),
                        )];
                        if let Err(code) = append(&shard, &group_id, &records, 1).await {
                            log::warn!("group {group_id}: metadata not persisted (error {code})");
                        }
                    })
                    .detach();
                }
            }
        }
    }
    shard.groups.changed.notify(1);
}

/// Appends internal records to the group's `__consumer_offsets` partition (owned by this shard).
async fn append(
    shard: &Rc<Shard>,
    group: &str,
    records: &[(Bytes, Option<Bytes>)],
    acks: i16,
) -> Result<(), i16> {
    let partitions = shard
        .catalog()
        .topics
        .get(OFFSETS_TOPIC)
        .map(|t| t.record.partitions)
        .ok_or(ResponseError::CoordinatorNotAvailable.code())?;
    let refs: Vec<crate::protocol::batch::KeyValue<'_>> = records
        .iter()
        .map(|(k, v)| (Some(&k[..]), v.as_deref()))
        .collect();
    let batch = Bytes::from(crate::protocol::batch::build(&refs, now_ms() as i64));
    let item = ProduceItem {
        topic: OFFSETS_TOPIC.to_string(),
        partition: offsets_partition(group, partitions),
        records: Some(batch),
    };
    let outcome = shard.produce_local(item, acks, 30_000).await;
    if outcome.error_code == 0 {
        Ok(())
    } else {
        Err(outcome.error_code)
    }
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
pub async fn handle(shard: &Rc<Shard>, op: GroupOp) -> GroupReply {
    let now = now_ms();
    let mgr = &shard.groups;
    match op {
        GroupOp::Join(req) => {
            let group = req.group_id.clone();
            let reply = mgr.coordinator.borrow_mut().join(now, req);
            GroupReply::Join(
                settle(shard, &mgr.joins, &group, reply, |member| {
                    JoinResponse::error(ResponseError::CoordinatorNotAvailable, member)
                })
                .await,
            )
        }
        GroupOp::Sync {
            group,
            member,
            generation,
            instance,
            assignments,
        } => {
            let reply = mgr.coordinator.borrow_mut().sync(
                now,
                &group,
                &member,
                generation,
                instance.as_deref(),
                assignments,
            );
            GroupReply::Sync(
                settle(shard, &mgr.syncs, &group, reply, |_| SyncResponse {
                    error_code: ResponseError::CoordinatorNotAvailable.code(),
                    ..Default::default()
                })
                .await,
            )
        }
        GroupOp::Heartbeat {
            group,
            member,
            generation,
            instance,
        } => {
            let code = mgr.coordinator.borrow_mut().heartbeat(
                now,
                &group,
                &member,
                generation,
                instance.as_deref(),
            );
            process_outputs(shard);
            GroupReply::Code(code)
        }
        GroupOp::Leave { group, members } => {
            let (code, each) = mgr.coordinator.borrow_mut().leave(now, &group, &members);
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
        GroupOp::FetchOffsets { group, partitions } => {
            let c = mgr.coordinator.borrow();
            let stored = c.groups.get(&group).map(|g| &g.offsets);
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
        GroupOp::Describe { group } => {
            let c = mgr.coordinator.borrow();
            GroupReply::Describe(match c.groups.get(&group) {
                None => GroupDescription {
                    state: "Dead",
                    protocol_type: String::new(),
                    protocol: String::new(),
                    members: Vec::new(),
                },
                Some(g) => {
                    let protocol = g.protocol.clone().unwrap_or_default();
                    GroupDescription {
                        state: g.state.name(),
                        protocol_type: g.protocol_type.clone().unwrap_or_default(),
                        protocol: protocol.clone(),
                        members: g
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
                            .collect(),
                    }
                }
            })
        }
        GroupOp::List => {
            let c = mgr.coordinator.borrow();
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
        GroupOp::Delete { group } => {
            let offsets: Vec<(String, i32)> = match mgr.coordinator.borrow().groups.get(&group) {
                Some(g) => g.offsets.keys().cloned().collect(),
                None => Vec::new(),
            };
            if let Err(e) = mgr.coordinator.borrow_mut().delete(&group) {
                return GroupReply::Code(e.code());
            }
            let mut tombstones: Vec<(Bytes, Option<Bytes>)> = offsets
                .into_iter()
                .map(|(topic, partition)| {
                    (
                        Key::Offset {
                            group: group.clone(),
                            topic,
                            partition,
                        }
                        .encode(),
                        None,
                    )
                })
                .collect();
            tombstones.push((
                Key::Group {
                    group: group.clone(),
                }
                .encode(),
                None,
            ));
            GroupReply::Code(match append(shard, &group, &tombstones, -1).await {
                Ok(()) => 0,
                Err(code) => code,
            })
        }
        GroupOp::DeleteOffsets { group, partitions } => {
            delete_offsets(shard, group, partitions).await
        }
    }
}

async fn commit(
    shard: &Rc<Shard>,
    group: String,
    member: String,
    generation: i32,
    instance: Option<String>,
    offsets: Vec<OffsetEntry>,
) -> GroupReply {
    if let Err(e) = shard.groups.coordinator.borrow_mut().check_commit(
        &group,
        &member,
        generation,
        instance.as_deref(),
    ) {
        return GroupReply::Commit(offsets.iter().map(|_| e.code()).collect());
    }
    let now = now_ms() as i64;
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
            commit_timestamp_ms: now,
        };
        records.push((
            Key::Offset {
                group: group.clone(),
                topic: topic.clone(),
                partition,
            }
            .encode(),
            Some(records::encode_offset(&value)),
        ));
        accepted.push(((topic, partition), value));
    }
    if !records.is_empty() {
        // Like produce with acks=all: answered once the commit is durable.
        if let Err(code) = append(shard, &group, &records, -1).await {
            for c in codes.iter_mut().filter(|c| **c == 0) {
                *c = code;
            }
            return GroupReply::Commit(codes);
        }
        let mut c = shard.groups.coordinator.borrow_mut();
        let g = c.group_mut(&group);
        for (key, value) in accepted {
            g.offsets.insert(key, value);
        }
    }
    GroupReply::Commit(codes)
}

async fn delete_offsets(
    shard: &Rc<Shard>,
    group: String,
    partitions: Vec<(String, i32)>,
) -> GroupReply {
    let codes: Vec<i16> = {
        let c = shard.groups.coordinator.borrow();
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
    if !doomed.is_empty() {
        let tombstones: Vec<(Bytes, Option<Bytes>)> = doomed
            .iter()
            .map(|(topic, partition)| {
                (
                    Key::Offset {
                        group: group.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                    }
                    .encode(),
                    None,
                )
            })
            .collect();
        if let Err(code) = append(shard, &group, &tombstones, -1).await {
            return GroupReply::DeleteOffsets(code, Vec::new());
        }
        let mut c = shard.groups.coordinator.borrow_mut();
        let g = c.group_mut(&group);
        for key in &doomed {
            g.offsets.remove(key);
        }
    }
    GroupReply::DeleteOffsets(0, codes)
}

/// Fires the coordinator's timers (session, rebalance and pending-member timeouts): one task per
/// shard, parked on the shard's timing wheel until the coordinator's next deadline.
pub async fn drive(shard: Rc<Shard>) {
    loop {
        let changed = shard.groups.changed.listen();
        let next = shard.groups.coordinator.borrow_mut().next_deadline();
        match next {
            None => changed.await,
            Some(at) => match shard.timers.sleep_until_internal(at) {
                Ok(sleep) => {
                    futures::pin_mut!(sleep);
                    futures::future::select(sleep, changed).await;
                }
                // No room on the wheel: fall back to a plain timer so deadlines still hold.
                Err(_) => {
                    glommio::timer::sleep(std::time::Duration::from_millis(
                        at.saturating_sub(now_ms()).max(1),
                    ))
                    .await
                }
            },
        }
        shard.groups.coordinator.borrow_mut().tick(now_ms());
        process_outputs(&shard);
    }
}

/// Rebuilds this shard's groups and committed offsets from its `__consumer_offsets` partitions.
pub async fn replay(shard: &Rc<Shard>) {
    let Some(topic) = shard.catalog().topics.get(OFFSETS_TOPIC).cloned() else {
        return;
    };
    let mut groups: HashMap<String, Option<state::StoredGroup>> = HashMap::new();
    let mut offsets: HashMap<(String, String, i32), Option<CommittedOffset>> = HashMap::new();
    let mut records_read = 0u64;
    for p in 0..topic.record.partitions as i32 {
        if shard.router.shard_of(OFFSETS_TOPIC, p) != shard.id {
            continue;
        }
        let mut offset = 0i64;
        loop {
            let item = FetchItem {
                topic: OFFSETS_TOPIC.to_string(),
                partition: p,
                offset,
                max_bytes: 1 << 20,
                leader_epoch: -1,
                zero_copy: false,
            };
            let out = shard.fetch_local(item).await;
            let data = match out.records {
                Some(Chunk::Bytes(b)) if out.error_code == 0 && !b.is_empty() => b,
                _ => break,
            };
            let mut at = 0;
            while at < data.len() {
                let Some(size) = crate::protocol::batch::peek_size(&data[at..]) else {
                    break;
                };
                let batch = &data[at..(at + size).min(data.len())];
                let Ok(h) = crate::protocol::batch::parse_header(batch) else {
                    break;
                };
                for r in crate::protocol::batch::records(batch).unwrap_or_default() {
                    records_read += 1;
                    let Some(key) = r.key.and_then(|k| Key::decode(k).ok()) else {
                        continue;
                    };
                    match key {
                        Key::Group { group } => {
                            groups
                                .insert(group, r.value.and_then(|v| records::decode_group(v).ok()));
                        }
                        Key::Offset {
                            group,
                            topic,
                            partition,
                        } => {
                            offsets.insert(
                                (group, topic, partition),
                                r.value.and_then(|v| records::decode_offset(v).ok()),
                            );
                        }
                    }
                }
                offset = h.next_offset();
                at += size;
            }
        }
    }
    let now = now_ms();
    let mut c = shard.groups.coordinator.borrow_mut();
    for (group, stored) in groups {
        if let Some(g) = stored {
            c.restore(now, &group, g);
        }
    }
    for ((group, topic, partition), value) in offsets {
        if let Some(v) = value {
            c.group_mut(&group).offsets.insert((topic, partition), v);
        }
    }
    if records_read > 0 {
        log::info!(
            "shard {}: replayed {records_read} group records, {} groups",
            shard.id,
            c.groups.len()
        );
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
    let owner = shard
        .router
        .shard_of(OFFSETS_TOPIC, offsets_partition(group, partitions));
    match shard
        .call(owner, crate::shard::messages::ShardRequest::Group(op))
        .await
    {
        Ok(crate::shard::messages::ShardReply::Group(r)) => Ok(r),
        _ => Err(not_available),
    }
}
