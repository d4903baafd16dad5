//! The group operations, one request type each: what a Kafka group API asks of the group's
//! coordinator, and the reply it gets. Each runs on the shard that owns its group (`route`).

use super::records::{self, Key};
use super::state::{CommittedOffset, JoinRequest, JoinResponse, SyncResponse};
use super::MAX_OFFSET_METADATA_BYTES;
use super::{append, append_pending, apply_once_committed, newest_pending, process_outputs};
use super::{
    settle, settle_pending, too_many_pending, GroupRequest, GroupService, Groups, OffsetEntry,
};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// JoinGroup: answered once the rebalance completes (or at once with an error).
pub struct Join(pub JoinRequest);

impl GroupRequest for Join {
    type Reply = JoinResponse;
    fn group(&self) -> &str {
        &self.0.group_id
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, JoinResponse> {
        Box::pin(async move {
            let shard = &groups.shard;
            let group = self.0.group_id.clone();
            let now_ms = shard.clock().monotonic_ms();
            let reply = groups.coordinator.borrow_mut().join(now_ms, self.0);
            let gone = |member| JoinResponse::error(ResponseError::CoordinatorNotAvailable, member);
            settle(&groups, &groups.joins, &group, reply, gone).await
        })
    }
}

/// SyncGroup: the leader's carries the assignment; every member's is answered with its share.
pub struct Sync {
    pub group: String,
    pub member: String,
    pub generation: i32,
    pub instance: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

impl GroupRequest for Sync {
    type Reply = SyncResponse;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, SyncResponse> {
        Box::pin(async move {
            let shard = &groups.shard;
            let now_ms = shard.clock().monotonic_ms();
            let reply = groups.coordinator.borrow_mut().sync(
                now_ms,
                &self.group,
                &self.member,
                self.generation,
                self.instance.as_deref(),
                self.assignments,
            );
            let gone = |_| SyncResponse {
                error_code: ResponseError::CoordinatorNotAvailable.code(),
                ..Default::default()
            };
            settle(&groups, &groups.syncs, &self.group, reply, gone).await
        })
    }
}

/// Heartbeat: an error code.
pub struct Heartbeat {
    pub group: String,
    pub member: String,
    pub generation: i32,
    pub instance: Option<String>,
}

impl GroupRequest for Heartbeat {
    type Reply = i16;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, i16> {
        Box::pin(async move {
            let shard = &groups.shard;
            let now_ms = shard.clock().monotonic_ms();
            let code = groups.coordinator.borrow_mut().heartbeat(
                now_ms,
                &self.group,
                &self.member,
                self.generation,
                self.instance.as_deref(),
            );
            process_outputs(&groups);
            code
        })
    }
}

/// LeaveGroup by member id or (v3+) group instance id: a top-level code and one per member.
pub struct Leave {
    pub group: String,
    pub members: Vec<(String, Option<String>)>,
}

impl GroupRequest for Leave {
    type Reply = (i16, Vec<i16>);
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, (i16, Vec<i16>)> {
        Box::pin(async move {
            let shard = &groups.shard;
            let now_ms = shard.clock().monotonic_ms();
            let left = groups
                .coordinator
                .borrow_mut()
                .leave(now_ms, &self.group, &self.members);
            process_outputs(&groups);
            left
        })
    }
}

/// TxnOffsetCommit: one error code per offset, answered once the commit is durable.
///
/// A transactional commit (KIP-98, KIP-447) is written in the producer's transaction, which
/// the transaction coordinator verified holds the group's offsets partition; its offsets stay
/// pending (not served by OffsetFetch) until the transaction's marker settles them.
pub struct TxnCommit {
    pub group: String,
    pub member: String,
    pub generation: i32,
    pub instance: Option<String>,
    pub offsets: Vec<OffsetEntry>,
    /// The producer's (id, epoch).
    pub producer: (i64, i16),
}

impl GroupRequest for TxnCommit {
    type Reply = Vec<i16>;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, Vec<i16>> {
        Box::pin(async move { txn_commit(&groups, self).await })
    }
}

async fn txn_commit(groups: &Rc<Groups>, c: TxnCommit) -> Vec<i16> {
    let shard = &groups.shard;
    // Kafka's rule: a transactional commit without membership (v0–2, or generation -1 and no
    // member id) is not checked against the group's members.
    let unchecked = c.generation < 0 && c.member.is_empty();
    if !unchecked {
        let checked = check_member(groups, &c.group, &c.member, c.generation, c.instance);
        if let Err(code) = checked {
            return vec![code; c.offsets.len()];
        }
    }
    let now_ms = shard.clock().wall_ms() as i64;
    let mut batch = OffsetBatch::new(&c.group, c.offsets, now_ms);
    if batch.records.is_empty() {
        return batch.codes;
    }
    // Like produce with acks=all: answered once the commit is durable.
    let producer = Some(c.producer);
    if let Err(code) = append(groups, &c.group, &batch.records, -1, producer).await {
        batch.fail(code);
        return batch.codes;
    }
    let mut coordinator = groups.coordinator.borrow_mut();
    coordinator
        .group_mut(&c.group)
        .offsets
        .hold(c.producer.0, batch.accepted);
    batch.codes
}

/// Whether the member may commit the group's offsets (its generation, or its static
/// instance); Err: the code every offset of its commit answers.
fn check_member(
    groups: &Rc<Groups>,
    group: &str,
    member: &str,
    generation: i32,
    instance: Option<String>,
) -> Result<(), i16> {
    let checked = groups.coordinator.borrow_mut().check_commit(
        group,
        member,
        generation,
        instance.as_deref(),
    );
    process_outputs(groups); // a refused admission is counted there
    checked.map_err(|e| e.code())
}

/// OffsetCommit's ordered part, run in its connection's request order: checks the member and
/// appends the offsets. They are applied to the group once the append commits
/// (`SettleCommit`, the answer's later part), so a connection's commits share fsyncs instead of
/// each waiting for its own, and the requests behind them (heartbeats) are not held up.
pub struct StageCommit {
    pub group: String,
    pub member: String,
    pub generation: i32,
    pub instance: Option<String>,
    pub offsets: Vec<OffsetEntry>,
}

/// What staging a commit did: answered it already (refused, nothing to write, or applied
/// at once while too many commits wait), or appended it at `end_offset` under leader
/// generation `leadership`.
pub enum Staged {
    Answered(Vec<i16>),
    Appended {
        codes: Vec<i16>,
        appended: (u64, i64),
    },
}

impl GroupRequest for StageCommit {
    type Reply = Staged;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, Staged> {
        Box::pin(async move { stage_commit(&groups, self).await })
    }
}

async fn stage_commit(groups: &Rc<Groups>, c: StageCommit) -> Staged {
    let shard = &groups.shard;
    if let Err(code) = check_member(groups, &c.group, &c.member, c.generation, c.instance) {
        return Staged::Answered(vec![code; c.offsets.len()]);
    }
    let now_ms = shard.clock().wall_ms() as i64;
    let mut batch = OffsetBatch::new(&c.group, c.offsets, now_ms);
    if batch.records.is_empty() {
        return Staged::Answered(batch.codes);
    }
    let accepted = std::mem::take(&mut batch.accepted);
    let appended = match append_pending(groups, &c.group, &batch.records, accepted).await {
        Ok(appended) => appended,
        Err(code) => {
            batch.fail(code);
            return Staged::Answered(batch.codes);
        }
    };
    if !too_many_pending(groups) {
        return Staged::Appended {
            codes: batch.codes,
            appended,
        };
    }
    // Backpressure: this connection waits for its commit before its next request.
    if let Err(code) = settle_pending(groups, &c.group, appended).await {
        batch.fail(code);
    }
    Staged::Answered(batch.codes)
}

/// OffsetCommit's later part: waits for the commit appended as `appended` (leader generation,
/// end offset) to commit, and applies it (with every commit before it in its partition). Err:
/// the code it failed with.
pub struct SettleCommit {
    pub group: String,
    pub appended: (u64, i64),
}

impl GroupRequest for SettleCommit {
    type Reply = Result<(), i16>;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move { settle_pending(&groups, &self.group, self.appended).await })
    }
}

/// A commit's write failed with `code`: every offset that was written (answered 0 so far)
/// answers it; those refused before the write keep their own code.
pub fn fail_written(codes: &mut [i16], code: i16) {
    for c in codes.iter_mut().filter(|c| **c == 0) {
        *c = code;
    }
}

/// The records of an offset commit: one per offset whose metadata fits, and a code per
/// offset.
struct OffsetBatch {
    codes: Vec<i16>,
    records: Vec<(Bytes, Option<Bytes>)>,
    accepted: Vec<((String, i32), CommittedOffset)>,
}

impl OffsetBatch {
    fn new(group: &str, offsets: Vec<OffsetEntry>, now_ms: i64) -> OffsetBatch {
        let mut b = OffsetBatch {
            codes: vec![0i16; offsets.len()],
            records: Vec::new(),
            accepted: Vec::new(),
        };
        for (i, (topic, partition, offset, epoch, metadata)) in offsets.into_iter().enumerate() {
            if metadata.len() > MAX_OFFSET_METADATA_BYTES {
                b.codes[i] = ResponseError::OffsetMetadataTooLarge.code();
                continue;
            }
            let value = CommittedOffset {
                offset,
                leader_epoch: epoch,
                metadata,
                commit_timestamp_ms: now_ms,
            };
            let key = Key::Offset {
                group: group.to_string(),
                topic: topic.clone(),
                partition,
            };
            b.records
                .push((key.encode(), Some(records::encode_offset(&value))));
            b.accepted.push(((topic, partition), value));
        }
        b
    }

    /// The append failed: every offset that was to be written answers `code`.
    fn fail(&mut self, code: i16) {
        fail_written(&mut self.codes, code);
    }
}

/// OffsetFetch for one group: the listed partitions, or (None) every committed one, each with
/// an error code. With `require_stable` (KIP-447), a partition a transaction not yet ended
/// holds an offset for answers UNSTABLE_OFFSET_COMMIT, which the client retries.
pub struct FetchOffsets {
    pub group: String,
    pub partitions: Option<Vec<(String, i32)>>,
    pub require_stable: bool,
}

impl GroupRequest for FetchOffsets {
    type Reply = Vec<(OffsetEntry, i16)>;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move {
            // Read after the group's own commits still in flight: a client that committed
            // and then asks (on the same connection, or after its commit's answer) sees them.
            if let Some(end_offset) = newest_pending(&groups, &self.group) {
                let _ = apply_once_committed(&groups, &self.group, end_offset).await;
            }
            let c = groups.coordinator.borrow();
            let group = c.groups.get(&self.group);
            let none = |t: &str, p: i32| (t.to_string(), p, -1, -1, String::new());
            let entry = |t: &str, p: i32| -> (OffsetEntry, i16) {
                let Some(g) = group else {
                    return (none(t, p), 0);
                };
                if self.require_stable && g.offsets.is_unstable(t, p) {
                    return (none(t, p), ResponseError::UnstableOffsetCommit.code());
                }
                match g.offsets.get(t, p) {
                    Some(o) => {
                        let e = (
                            t.to_string(),
                            p,
                            o.offset,
                            o.leader_epoch,
                            o.metadata.clone(),
                        );
                        (e, 0)
                    }
                    None => (none(t, p), 0),
                }
            };
            match self.partitions {
                Some(ps) => ps.iter().map(|(t, p)| entry(t, *p)).collect(),
                None => group
                    .map(|g| {
                        g.offsets
                            .committed()
                            .map(|((t, p), _)| entry(t, *p))
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
    }
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

/// DescribeGroups for one group ("Dead" when it does not exist).
pub struct Describe {
    pub group: String,
}

impl GroupRequest for Describe {
    type Reply = GroupDescription;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, GroupDescription> {
        Box::pin(async move { describe(&groups, &self.group) })
    }
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

/// ListGroups on one shard: (group, protocol type, state) of the groups it coordinates. Sent
/// to every shard (`list_all`), so it names no group.
pub struct List;

impl GroupRequest for List {
    type Reply = Vec<(String, String, &'static str)>;
    fn group(&self) -> &str {
        ""
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move {
            let c = groups.coordinator.borrow();
            c.groups
                .values()
                .map(|g| {
                    let protocol_type = g.protocol_type.clone().unwrap_or_default();
                    (g.id.clone(), protocol_type, g.state.name())
                })
                .collect()
        })
    }
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

/// DeleteGroups for one group (it must have no members): its offsets go with it.
pub struct Delete {
    pub group: String,
}

impl GroupRequest for Delete {
    type Reply = i16;
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, i16> {
        Box::pin(async move { delete(&groups, self.group).await })
    }
}

async fn delete(groups: &Rc<Groups>, group: String) -> i16 {
    let offsets: Vec<(String, i32)> = match groups.coordinator.borrow().groups.get(&group) {
        Some(g) => g.offsets.committed().map(|(k, _)| k.clone()).collect(),
        None => Vec::new(),
    };
    if let Err(e) = groups.coordinator.borrow_mut().delete(&group) {
        return e.code();
    }
    let mut tombstones: Vec<(Bytes, Option<Bytes>)> = offsets
        .into_iter()
        .map(|(topic, partition)| offset_tombstone(&group, topic, partition))
        .collect();
    let key = Key::Group {
        group: group.clone(),
    };
    tombstones.push((key.encode(), None));
    match append(groups, &group, &tombstones, -1, None).await {
        Ok(()) => 0,
        Err(code) => code,
    }
}

/// OffsetDelete: a top-level code and one per partition (a partition of a topic the group
/// subscribes to keeps its offset: GROUP_SUBSCRIBED_TO_TOPIC).
pub struct DeleteOffsets {
    pub group: String,
    pub partitions: Vec<(String, i32)>,
}

impl GroupRequest for DeleteOffsets {
    type Reply = (i16, Vec<i16>);
    fn group(&self) -> &str {
        &self.group
    }
    fn run(self, groups: Rc<Groups>) -> LocalBoxFuture<'static, (i16, Vec<i16>)> {
        Box::pin(async move { delete_offsets(&groups, self.group, self.partitions).await })
    }
}

async fn delete_offsets(
    groups: &Rc<Groups>,
    group: String,
    partitions: Vec<(String, i32)>,
) -> (i16, Vec<i16>) {
    let codes: Vec<i16> = {
        let c = groups.coordinator.borrow();
        let Some(g) = c.groups.get(&group) else {
            return (ResponseError::GroupIdNotFound.code(), Vec::new());
        };
        let code = |t: &str| {
            if g.is_subscribed_to(t) {
                ResponseError::GroupSubscribedToTopic.code()
            } else {
                0
            }
        };
        partitions.iter().map(|(t, _)| code(t)).collect()
    };
    let doomed: Vec<(String, i32)> = partitions
        .iter()
        .zip(&codes)
        .filter(|(_, c)| **c == 0)
        .map(|(p, _)| p.clone())
        .collect();
    if doomed.is_empty() {
        return (0, codes);
    }
    let tombstones: Vec<(Bytes, Option<Bytes>)> = doomed
        .iter()
        .map(|(topic, partition)| offset_tombstone(&group, topic.clone(), *partition))
        .collect();
    if let Err(code) = append(groups, &group, &tombstones, -1, None).await {
        return (code, Vec::new());
    }
    let mut c = groups.coordinator.borrow_mut();
    let g = c.group_mut(&group);
    for key in &doomed {
        g.offsets.remove(key);
    }
    (0, codes)
}
