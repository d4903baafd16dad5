//! The group coordinator's state machine (classic protocol), without I/O: requests and the time
//! come in as values; responses, deferred responses and records to persist come out.
//!
//! States: Empty → PreparingRebalance → CompletingRebalance → Stable, and Dead once deleted.
//! - A JoinGroup moves the group to PreparingRebalance; the join completes when every member has
//!   rejoined or the rebalance timeout passes (members that did not rejoin are removed). Then
//!   the generation increases and every joined member gets its JoinGroup response; the leader's
//!   carries the members' subscriptions.
//! - The leader's SyncGroup carries the assignment; every member's SyncGroup is answered with
//!   its share, and the group is Stable.
//! - Heartbeats keep a member alive for its session timeout; a member that misses it, or
//!   leaves, triggers a rebalance.
//! - Static members (KIP-345) keep their assignment across restarts inside the session timeout.
//!
//! Time is the monotonic clock's, passed in; member ids come from an injected `Ids`.
//!
//! Bounds: at most `max_groups` groups and `max_member_timers` members (joined or pending)
//! across them. The timing wheel holds one timer per member and at most one rebalance timer per
//! group, and has room for both bounds, so only admitting a new member or group can run out of
//! room: that join (or commit) is answered COORDINATOR_NOT_AVAILABLE and counted
//! (`take_refusals`), and every other timer insert is an invariant.

pub use super::offsets::CommittedOffset;
use super::offsets::GroupOffsets;
use crate::clock::{uuid_text, Ids};
use crate::timer::wheel::{TimerId, TimingWheel};
use bytes::Bytes;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
            State::Dead => "Dead",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    awaiting_join: bool,
    awaiting_sync: bool,
    /// The armed session timer and when it fires (None: none armed).
    session_timer: Option<(TimerId, u64)>,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug)]
pub struct Group {
    pub id: String,
    pub state: State,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id → member id.
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED and not joined yet (KIP-394).
    pending_members: HashMap<String, TimerId>,
    rebalance_timer: Option<TimerId>,
    /// The rebalance of an empty group waits out the initial delay even once all have joined.
    rebalance_timer_initial: bool,
    /// Committed offsets, and transactional ones waiting for their marker.
    pub offsets: GroupOffsets,
}

impl Group {
    fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            rebalance_timer: None,
            rebalance_timer_initial: false,
            offsets: GroupOffsets::default(),
        }
    }

    /// The group's invariants, checked after every operation that changes its membership (in
    /// release builds too: a broken one would hand out assignments from a wrong membership).
    fn check_invariants(&self) {
        let id = &self.id;
        if let Some(leader) = &self.leader {
            assert!(
                self.members.contains_key(leader),
                "group {id}: leader {leader} is not a member"
            );
        }
        for (instance, member_id) in &self.static_members {
            let member = self.members.get(member_id);
            assert!(
                member.is_some_and(|m| m.group_instance_id.as_deref() == Some(instance.as_str())),
                "group {id}: instance {instance} names {member_id}, which is not its member"
            );
        }
        let state = self.state.name();
        match self.state {
            State::Empty | State::Dead => {
                assert!(self.members.is_empty(), "group {id}: members while {state}")
            }
            State::CompletingRebalance | State::Stable => assert!(
                !self.members.is_empty() && self.leader.is_some(),
                "group {id}: {state} without members or a leader"
            ),
            State::PreparingRebalance => {}
        }
        assert!(
            self.state == State::CompletingRebalance
                || self.members.values().all(|m| !m.awaiting_sync),
            "group {id}: a member awaits its assignment while {state}"
        );
    }

    /// Topics the members' subscriptions name (consumer protocol only), for OffsetDelete.
    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        if self.protocol_type.as_deref() != Some("consumer") {
            return false;
        }
        let Some(protocol) = &self.protocol else {
            return false;
        };
        self.members.values().any(|m| {
            let meta = m.metadata_for(protocol);
            crate::group::records::subscribed_topics(&meta)
                .iter()
                .any(|t| t == topic)
        })
    }
}

#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a join without a member id gets MEMBER_ID_REQUIRED and a fresh id.
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, Default)]
pub struct JoinResponse {
    pub error_code: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    pub skip_assignment: bool,
    /// (member id, group instance id, metadata): only for the leader.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinResponse {
    /// A failed join: no generation, the member id the client should use (or its own).
    pub fn error(e: ResponseError, member_id: impl Into<String>) -> JoinResponse {
        JoinResponse {
            error_code: e.code(),
            generation_id: -1,
            member_id: member_id.into(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct SyncResponse {
    pub error_code: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

/// What the shell must do after an input.
#[derive(Debug)]
pub enum Output {
    /// Answer the parked JoinGroup of this member.
    Join {
        group_id: String,
        member_id: String,
        response: JoinResponse,
    },
    /// Answer the parked SyncGroup of this member.
    Sync {
        group_id: String,
        member_id: String,
        response: SyncResponse,
    },
    /// The group's metadata changed: persist it (members, generation, assignments).
    PersistGroup { group_id: String },
}

/// A join or sync that is answered now, or later through an `Output` for this member id.
#[derive(Debug)]
pub enum Reply<T> {
    Now(T),
    Later(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TimerKind {
    /// A member's session ends at `deadline_ms`, unless it was re-armed or disarmed since
    /// (then its `session_timer` does not end then: the timer is stale).
    Heartbeat {
        group: String,
        member: String,
        deadline_ms: u64,
    },
    Rebalance {
        group: String,
        generation: i32,
    },
    Pending {
        group: String,
        member: String,
    },
}

impl TimerKind {
    fn group(&self) -> &str {
        match self {
            TimerKind::Heartbeat { group, .. }
            | TimerKind::Rebalance { group, .. }
            | TimerKind::Pending { group, .. } => group,
        }
    }
}

/// Limits that protect the coordinator from runaway clients.
pub const MAX_MEMBERS_PER_GROUP: usize = 10_000;
pub const MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;

/// How a coordinator is set up.
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorConfig {
    /// Delay before the first rebalance of an empty group completes, so members starting
    /// together land in one generation (Kafka's group.initial.rebalance.delay.ms).
    pub initial_rebalance_delay_ms: u64,
    pub min_session_timeout_ms: i32,
    /// Groups the coordinator holds at most (`max_groups_per_shard`).
    pub max_groups: usize,
    /// Members (joined, or pending a KIP-394 rejoin) across all groups.
    pub max_member_timers: usize,
}

/// Bound on members across a coordinator's groups: one timer each on its wheel.
pub const MAX_MEMBER_TIMERS: usize = 1_000_000;

/// What a refused admission is answered with: the coordinator cannot take more members or
/// groups now; clients retry (and succeed once members leave or the bound is raised).
const REFUSED: ResponseError = ResponseError::CoordinatorNotAvailable;

pub struct Coordinator {
    pub groups: HashMap<String, Group>,
    wheel: TimingWheel<TimerKind>,
    outputs: Vec<Output>,
    config: CoordinatorConfig,
    ids: Box<dyn Ids>,
    /// Admissions refused for want of room since the last `take_refusals`.
    refusals: u64,
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

impl Coordinator {
    pub fn new(now_ms: u64, config: CoordinatorConfig, ids: Box<dyn Ids>) -> Coordinator {
        Coordinator {
            groups: HashMap::new(),
            wheel: TimingWheel::new(1, 256, now_ms, config.max_member_timers + config.max_groups),
            outputs: Vec::new(),
            config,
            ids,
            refusals: 0,
        }
    }

    /// Admissions refused (a new member or group with no room) since the last call.
    pub fn take_refusals(&mut self) -> u64 {
        std::mem::take(&mut self.refusals)
    }

    /// Whether a new member's timer fits while leaving room for every group's rebalance timer.
    fn member_room(&mut self) -> bool {
        let room = self.wheel.len() < self.config.max_member_timers;
        if !room {
            self.refusals += 1;
        }
        room
    }

    /// Whether group `id` exists or may be created within `max_groups`.
    fn group_room(&mut self, id: &str) -> bool {
        let room = self.groups.contains_key(id) || self.groups.len() < self.config.max_groups;
        if !room {
            self.refusals += 1;
        }
        room
    }

    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outputs)
    }

    pub fn next_deadline(&mut self) -> Option<u64> {
        self.wheel.next_expiration()
    }

    pub fn group_mut(&mut self, id: &str) -> &mut Group {
        self.groups
            .entry(id.to_string())
            .or_insert_with(|| Group::new(id))
    }

    /// Checks group `id`'s invariants, if it exists (see `Group::check_invariants`).
    fn check_group(&self, id: &str) {
        if let Some(group) = self.groups.get(id) {
            group.check_invariants();
        }
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        format!("{client_id}-{}", uuid_text(self.ids.uuid()))
    }

    // ---- JoinGroup ---------------------------------------------------------------------

    pub fn join(&mut self, now_ms: u64, req: JoinRequest) -> Reply<JoinResponse> {
        let group_id = req.group_id.clone();
        let reply = self.join_unchecked(now_ms, req);
        self.check_group(&group_id);
        reply
    }

    fn join_unchecked(&mut self, now_ms: u64, req: JoinRequest) -> Reply<JoinResponse> {
        let fail = |e: ResponseError, member_id: &str| {
            Reply::Now(JoinResponse::error(e, member_id.to_string()))
        };
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > MAX_SESSION_TIMEOUT_MS
        {
            return fail(ResponseError::InvalidSessionTimeout, &req.member_id);
        }
        if req.protocol_type.is_empty() || req.protocols.is_empty() {
            return fail(ResponseError::InconsistentGroupProtocol, &req.member_id);
        }
        if !self.group_room(&req.group_id) {
            return fail(REFUSED, &req.member_id);
        }
        let group = self.group_mut(&req.group_id);
        if group.state == State::Dead {
            return fail(ResponseError::CoordinatorNotAvailable, &req.member_id);
        }
        // The group's protocol type must match, and the members must share a protocol.
        if group.state != State::Empty || !group.members.is_empty() {
            let type_ok = group.protocol_type.as_deref() == Some(req.protocol_type.as_str());
            let shared = group.members.values().all(|m| {
                m.protocols
                    .iter()
                    .any(|(n, _)| req.protocols.iter().any(|(r, _)| r == n))
            });
            if !type_ok || !shared {
                return fail(ResponseError::InconsistentGroupProtocol, &req.member_id);
            }
        }
        if let Some(instance) = req.group_instance_id.clone() {
            return self.join_static(now_ms, req, instance);
        }
        if req.member_id.is_empty() {
            let member_id = self.new_member_id(&req.client_id);
            if req.require_known_member_id {
                return self.add_pending_member(now_ms, &req, member_id);
            }
            return self.add_member_and_rebalance(now_ms, req, member_id);
        }
        let group = self.group_mut(&req.group_id);
        if let Some(t) = group.pending_members.remove(&req.member_id) {
            self.wheel.cancel(t);
            let id = req.member_id.clone();
            return self.add_member_and_rebalance(now_ms, req, id);
        }
        if !group.members.contains_key(&req.member_id) {
            return fail(ResponseError::UnknownMemberId, &req.member_id);
        }
        self.update_member_and_rebalance(now_ms, req)
    }

    /// KIP-394: a join without a member id gets MEMBER_ID_REQUIRED and a fresh id, which the
    /// group holds for a session timeout awaiting the rejoin.
    fn add_pending_member(
        &mut self,
        now_ms: u64,
        req: &JoinRequest,
        member_id: String,
    ) -> Reply<JoinResponse> {
        let group = self.group_mut(&req.group_id);
        if group.members.len() + group.pending_members.len() >= MAX_MEMBERS_PER_GROUP {
            return Reply::Now(JoinResponse::error(ResponseError::GroupMaxSizeReached, ""));
        }
        if !self.member_room() {
            return Reply::Now(JoinResponse::error(REFUSED, ""));
        }
        let timer = self
            .wheel
            .insert(
                now_ms + req.session_timeout_ms as u64,
                TimerKind::Pending {
                    group: req.group_id.clone(),
                    member: member_id.clone(),
                },
            )
            .expect("member_room checked");
        self.group_mut(&req.group_id)
            .pending_members
            .insert(member_id.clone(), timer);
        Reply::Now(JoinResponse::error(
            ResponseError::MemberIdRequired,
            member_id,
        ))
    }

    fn join_static(
        &mut self,
        now_ms: u64,
        req: JoinRequest,
        instance: String,
    ) -> Reply<JoinResponse> {
        let group = self.group_mut(&req.group_id);
        match group.static_members.get(&instance).cloned() {
            None => {
                if !req.member_id.is_empty() {
                    return Reply::Now(JoinResponse::error(
                        ResponseError::UnknownMemberId,
                        req.member_id.clone(),
                    ));
                }
                let member_id = self.new_member_id(&req.client_id);
                self.add_member_and_rebalance(now_ms, req, member_id)
            }
            Some(old_id) if req.member_id.is_empty() => {
                self.replace_static_member(now_ms, req, instance, old_id)
            }
            Some(old_id) if old_id != req.member_id => Reply::Now(JoinResponse::error(
                ResponseError::FencedInstanceId,
                req.member_id.clone(),
            )),
            Some(_) => self.update_member_and_rebalance(now_ms, req),
        }
    }

    /// A restarted static member (its instance id, no member id): it takes over the old
    /// member's slot under a new id, and the old incarnation's parked join is fenced. With the
    /// same subscription in a Stable group there is no rebalance: it gets the current
    /// generation and fetches its stored assignment with SyncGroup.
    fn replace_static_member(
        &mut self,
        now_ms: u64,
        req: JoinRequest,
        instance: String,
        old_id: String,
    ) -> Reply<JoinResponse> {
        let new_id = self.new_member_id(&req.client_id);
        let group = self.group_mut(&req.group_id);
        let Some(mut member) = group.members.remove(&old_id) else {
            group.static_members.remove(&instance);
            return self.add_member_and_rebalance(now_ms, req, new_id);
        };
        let protocols_changed = member.protocols != req.protocols;
        if let Some((t, _)) = member.session_timer.take() {
            self.wheel.cancel(t);
        }
        let was_awaiting_join = member.awaiting_join;
        member.member_id = new_id.clone();
        member.session_timeout_ms = req.session_timeout_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.awaiting_join = false;
        member.awaiting_sync = false;
        let group = self.group_mut(&req.group_id);
        group.members.insert(new_id.clone(), member);
        group.static_members.insert(instance, new_id.clone());
        if group.leader.as_deref() == Some(old_id.as_str()) {
            group.leader = Some(new_id.clone());
        }
        if was_awaiting_join {
            self.outputs.push(Output::Join {
                group_id: req.group_id.clone(),
                member_id: old_id.clone(),
                response: JoinResponse::error(ResponseError::FencedInstanceId, old_id),
            });
        }
        if self.group_mut(&req.group_id).state != State::Stable || protocols_changed {
            let req = JoinRequest {
                member_id: new_id,
                ..req
            };
            return self.update_member_and_rebalance(now_ms, req);
        }
        self.schedule_heartbeat(now_ms, &req.group_id, &new_id);
        self.outputs.push(Output::PersistGroup {
            group_id: req.group_id.clone(),
        });
        let group = self.group_mut(&req.group_id);
        Reply::Now(JoinResponse {
            error_code: 0,
            generation_id: group.generation,
            protocol_type: group.protocol_type.clone(),
            protocol_name: group.protocol.clone(),
            leader: group.leader.clone().unwrap_or_default(),
            member_id: new_id,
            skip_assignment: false,
            members: Vec::new(),
        })
    }

    fn add_member_and_rebalance(
        &mut self,
        now_ms: u64,
        req: JoinRequest,
        member_id: String,
    ) -> Reply<JoinResponse> {
        let group = self.group_mut(&req.group_id);
        if group.members.len() >= MAX_MEMBERS_PER_GROUP {
            return Reply::Now(JoinResponse::error(
                ResponseError::GroupMaxSizeReached,
                member_id,
            ));
        }
        if !self.member_room() {
            return Reply::Now(JoinResponse::error(REFUSED, member_id));
        }
        let group = self.group_mut(&req.group_id);
        if group.members.is_empty() {
            group.protocol_type = Some(req.protocol_type.clone());
        }
        if let Some(instance) = &req.group_instance_id {
            group
                .static_members
                .insert(instance.clone(), member_id.clone());
        }
        group.members.insert(
            member_id.clone(),
            Member {
                member_id: member_id.clone(),
                group_instance_id: req.group_instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                session_timeout_ms: req.session_timeout_ms,
                protocol_type: req.protocol_type.clone(),
                protocols: req.protocols.clone(),
                assignment: Bytes::new(),
                awaiting_join: true,
                awaiting_sync: false,
                session_timer: None,
            },
        );
        self.schedule_heartbeat(now_ms, &req.group_id, &member_id);
        self.prepare_rebalance(now_ms, &req.group_id);
        self.maybe_complete_join(now_ms, &req.group_id);
        Reply::Later(member_id)
    }

    fn update_member_and_rebalance(
        &mut self,
        now_ms: u64,
        req: JoinRequest,
    ) -> Reply<JoinResponse> {
        let group = self.group_mut(&req.group_id);
        let member = group
            .members
            .get_mut(&req.member_id)
            .expect("caller checked the member");
        if member.awaiting_join {
            // A second join from the same member replaces the first; the first is answered
            // with an error so that its client does not wait forever.
            self.outputs.push(Output::Join {
                group_id: req.group_id.clone(),
                member_id: req.member_id.clone(),
                response: JoinResponse::error(
                    ResponseError::RebalanceInProgress,
                    req.member_id.clone(),
                ),
            });
        }
        let group = self.group_mut(&req.group_id);
        let member = group.members.get_mut(&req.member_id).expect("present");
        member.protocols = req.protocols.clone();
        member.session_timeout_ms = req.session_timeout_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.awaiting_join = true;
        let state = group.state;
        self.schedule_heartbeat(now_ms, &req.group_id, &req.member_id);
        // A rejoin in Stable or CompletingRebalance starts a new rebalance, as in Kafka.
        if state != State::PreparingRebalance {
            self.prepare_rebalance(now_ms, &req.group_id);
        }
        self.maybe_complete_join(now_ms, &req.group_id);
        Reply::Later(req.member_id)
    }

    fn prepare_rebalance(&mut self, now_ms: u64, group_id: &str) {
        let initial_delay = self.config.initial_rebalance_delay_ms;
        let group = self.group_mut(group_id);
        if group.state == State::PreparingRebalance {
            return;
        }
        // Members waiting for their sync must rejoin.
        let waiting_sync: Vec<String> = group
            .members
            .values()
            .filter(|m| m.awaiting_sync)
            .map(|m| m.member_id.clone())
            .collect();
        let was_empty = group.state == State::Empty;
        group.state = State::PreparingRebalance;
        let generation = group.generation;
        let timeout = if was_empty {
            initial_delay
        } else {
            group
                .members
                .values()
                .map(|m| m.rebalance_timeout_ms.max(0) as u64)
                .max()
                .unwrap_or(0)
        };
        for member_id in waiting_sync {
            if let Some(m) = self.group_mut(group_id).members.get_mut(&member_id) {
                m.awaiting_sync = false;
            }
            self.outputs.push(Output::Sync {
                group_id: group_id.to_string(),
                member_id,
                response: SyncResponse {
                    error_code: code(ResponseError::RebalanceInProgress),
                    ..Default::default()
                },
            });
        }
        if let Some(old) = self.group_mut(group_id).rebalance_timer.take() {
            self.wheel.cancel(old);
        }
        // The wheel keeps room for one rebalance timer per group (see the module's bounds).
        let timer = self
            .wheel
            .insert(
                now_ms + timeout,
                TimerKind::Rebalance {
                    group: group_id.to_string(),
                    generation,
                },
            )
            .expect("room is kept for every group's rebalance timer");
        self.group_mut(group_id).rebalance_timer = Some(timer);
        // An empty group waits out the initial delay so that members starting together land
        // in one generation; otherwise the join completes as soon as everyone has rejoined.
        if was_empty && initial_delay > 0 {
            self.group_mut(group_id).rebalance_timer_initial = true;
        }
    }

    /// Completes the join phase when every member has rejoined (and no initial delay is
    /// pending).
    fn maybe_complete_join(&mut self, now_ms: u64, group_id: &str) {
        let group = self.group_mut(group_id);
        if group.state != State::PreparingRebalance || group.rebalance_timer_initial {
            return;
        }
        if group.members.values().all(|m| m.awaiting_join) && group.pending_members.is_empty() {
            self.complete_join(now_ms, group_id);
        }
    }

    fn complete_join(&mut self, now_ms: u64, group_id: &str) {
        let group = self.group_mut(group_id);
        if let Some(t) = group.rebalance_timer.take() {
            self.wheel.cancel(t);
        }
        let group = self.group_mut(group_id);
        group.rebalance_timer_initial = false;
        // Members that did not rejoin in time are out (static members keep their slot only
        // while their session lasts, which their heartbeat timer enforces).
        let gone: Vec<String> = group
            .members
            .values()
            .filter(|m| !m.awaiting_join)
            .map(|m| m.member_id.clone())
            .collect();
        for id in gone {
            self.remove_member(group_id, &id);
        }
        let group = self.group_mut(group_id);
        // The new generation is made of the members that joined it, and no others.
        assert!(
            group.members.values().all(|m| m.awaiting_join),
            "group {group_id}: a member that did not join"
        );
        group.generation += 1;
        if group.members.is_empty() {
            group.state = State::Empty;
            group.protocol = None;
            group.leader = None;
            self.outputs.push(Output::PersistGroup {
                group_id: group_id.to_string(),
            });
            return;
        }
        group.state = State::CompletingRebalance;
        group.protocol = select_protocol(group);
        if group
            .leader
            .as_ref()
            .is_none_or(|l| !group.members.contains_key(l))
        {
            group.leader = group.members.keys().next().cloned();
        }
        self.answer_joins(now_ms, group_id);
    }

    /// Answers every member's parked JoinGroup with the new generation; the leader's answer
    /// carries the members' subscriptions.
    fn answer_joins(&mut self, now_ms: u64, group_id: &str) {
        let group = self.group_mut(group_id);
        let protocol = group.protocol.clone().unwrap_or_default();
        let leader = group.leader.clone().unwrap_or_default();
        let members_meta: Vec<(String, Option<String>, Bytes)> = group
            .members
            .values()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.group_instance_id.clone(),
                    m.metadata_for(&protocol),
                )
            })
            .collect();
        let generation = group.generation;
        let protocol_type = group.protocol_type.clone();
        for m in group.members.values_mut() {
            m.awaiting_join = false;
            m.assignment = Bytes::new();
        }
        let ids: Vec<String> = group.members.keys().cloned().collect();
        for id in ids {
            // A completed join counts as a heartbeat (Kafka's
            // completeAndScheduleNextHeartbeatExpiration).
            self.schedule_heartbeat(now_ms, group_id, &id);
            let members = if id == leader {
                members_meta.clone()
            } else {
                Vec::new()
            };
            self.outputs.push(Output::Join {
                group_id: group_id.to_string(),
                member_id: id.clone(),
                response: JoinResponse {
                    error_code: 0,
                    generation_id: generation,
                    protocol_type: protocol_type.clone(),
                    protocol_name: Some(protocol.clone()),
                    leader: leader.clone(),
                    member_id: id,
                    skip_assignment: false,
                    members,
                },
            });
        }
    }

    fn remove_member(&mut self, group_id: &str, member_id: &str) {
        let group = self.group_mut(group_id);
        let Some(m) = group.members.remove(member_id) else {
            return;
        };
        if let Some(instance) = &m.group_instance_id {
            if group.static_members.get(instance).map(String::as_str) == Some(member_id) {
                group.static_members.remove(instance);
            }
        }
        if group.leader.as_deref() == Some(member_id) {
            group.leader = None;
        }
        if let Some((t, _)) = m.session_timer {
            self.wheel.cancel(t);
        }
        if m.awaiting_join {
            self.outputs.push(Output::Join {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
                response: JoinResponse::error(
                    ResponseError::UnknownMemberId,
                    member_id.to_string(),
                ),
            });
        }
        if m.awaiting_sync {
            self.outputs.push(Output::Sync {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
                response: SyncResponse {
                    error_code: code(ResponseError::UnknownMemberId),
                    ..Default::default()
                },
            });
        }
    }

    /// A member left or timed out: rebalance the rest.
    fn member_gone(&mut self, now_ms: u64, group_id: &str, member_id: &str) {
        self.remove_member(group_id, member_id);
        let group = self.group_mut(group_id);
        match group.state {
            State::Stable | State::CompletingRebalance => {
                if group.members.is_empty() {
                    group.state = State::Empty;
                    group.generation += 1;
                    group.protocol = None;
                    self.outputs.push(Output::PersistGroup {
                        group_id: group_id.to_string(),
                    });
                } else {
                    self.prepare_rebalance(now_ms, group_id);
                }
            }
            State::PreparingRebalance => self.maybe_complete_join(now_ms, group_id),
            State::Empty | State::Dead => {}
        }
    }

    /// (Re)arms a member's session timer. A member was admitted with room for one
    /// (`member_room`), and re-arming cancels the old timer first, so this cannot run out of
    /// room.
    fn schedule_heartbeat(&mut self, now_ms: u64, group_id: &str, member_id: &str) {
        let group = self.group_mut(group_id);
        let Some(m) = group.members.get_mut(member_id) else {
            return;
        };
        let old = m.session_timer.take();
        let deadline = now_ms + m.session_timeout_ms.max(0) as u64;
        if let Some((t, _)) = old {
            self.wheel.cancel(t);
        }
        let t = self
            .wheel
            .insert(
                deadline,
                TimerKind::Heartbeat {
                    group: group_id.to_string(),
                    member: member_id.to_string(),
                    deadline_ms: deadline,
                },
            )
            .expect("an admitted member has room for its timer");
        if let Some(m) = self.group_mut(group_id).members.get_mut(member_id) {
            m.session_timer = Some((t, deadline));
        }
    }

    // ---- SyncGroup ---------------------------------------------------------------------

    pub fn sync(
        &mut self,
        now_ms: u64,
        group_id: &str,
        member_id: &str,
        generation: i32,
        group_instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> Reply<SyncResponse> {
        let member = (member_id, generation, group_instance_id);
        let reply = self.sync_unchecked(now_ms, group_id, member, assignments);
        self.check_group(group_id);
        reply
    }

    /// `sync` before its check: `member` is (member id, generation, group instance id).
    fn sync_unchecked(
        &mut self,
        now_ms: u64,
        group_id: &str,
        (member_id, generation, group_instance_id): (&str, i32, Option<&str>),
        assignments: Vec<(String, Bytes)>,
    ) -> Reply<SyncResponse> {
        let fail = |e: ResponseError| {
            Reply::Now(SyncResponse {
                error_code: code(e),
                ..Default::default()
            })
        };
        let Some(group) = self.groups.get_mut(group_id) else {
            return fail(ResponseError::UnknownMemberId);
        };
        if let Err(e) = check_member(group, member_id, group_instance_id) {
            return fail(e);
        }
        if generation != group.generation {
            return fail(ResponseError::IllegalGeneration);
        }
        match group.state {
            State::PreparingRebalance => fail(ResponseError::RebalanceInProgress),
            State::Empty | State::Dead => fail(ResponseError::UnknownMemberId),
            State::Stable => {
                let m = &group.members[member_id];
                let response = SyncResponse {
                    error_code: 0,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol.clone(),
                    assignment: m.assignment.clone(),
                };
                self.schedule_heartbeat(now_ms, group_id, member_id);
                Reply::Now(response)
            }
            State::CompletingRebalance => {
                let m = group.members.get_mut(member_id).expect("checked");
                m.awaiting_sync = true;
                if group.leader.as_deref() == Some(member_id) {
                    self.assign(now_ms, group_id, &assignments);
                }
                self.schedule_heartbeat(now_ms, group_id, member_id);
                Reply::Later(member_id.to_string())
            }
        }
    }

    /// The leader's SyncGroup: the group takes its assignment and is Stable; every member's
    /// parked SyncGroup is answered with its share.
    fn assign(&mut self, now_ms: u64, group_id: &str, assignments: &[(String, Bytes)]) {
        let group = self.groups.get_mut(group_id).expect("the caller found it");
        for m in group.members.values_mut() {
            m.assignment = assignments
                .iter()
                .find(|(id, _)| *id == m.member_id)
                .map(|(_, a)| a.clone())
                .unwrap_or_default();
        }
        group.state = State::Stable;
        let (protocol_type, protocol_name) = (group.protocol_type.clone(), group.protocol.clone());
        let answered: Vec<String> = group
            .members
            .values()
            .filter(|m| m.awaiting_sync)
            .map(|m| m.member_id.clone())
            .collect();
        for m in group.members.values_mut().filter(|m| m.awaiting_sync) {
            m.awaiting_sync = false;
            self.outputs.push(Output::Sync {
                group_id: group_id.to_string(),
                member_id: m.member_id.clone(),
                response: SyncResponse {
                    error_code: 0,
                    protocol_type: protocol_type.clone(),
                    protocol_name: protocol_name.clone(),
                    assignment: m.assignment.clone(),
                },
            });
        }
        // A completed sync counts as a heartbeat, as a completed join does.
        for id in answered {
            self.schedule_heartbeat(now_ms, group_id, &id);
        }
        self.outputs.push(Output::PersistGroup {
            group_id: group_id.to_string(),
        });
    }

    // ---- Heartbeat, LeaveGroup ---------------------------------------------------------

    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        group_id: &str,
        member_id: &str,
        generation: i32,
        group_instance_id: Option<&str>,
    ) -> i16 {
        let Some(group) = self.groups.get_mut(group_id) else {
            return code(ResponseError::UnknownMemberId);
        };
        if let Err(e) = check_member(group, member_id, group_instance_id) {
            return code(e);
        }
        let result = match group.state {
            State::Empty | State::Dead => code(ResponseError::UnknownMemberId),
            _ if generation != group.generation => code(ResponseError::IllegalGeneration),
            State::PreparingRebalance => code(ResponseError::RebalanceInProgress),
            State::CompletingRebalance | State::Stable => 0,
        };
        // A heartbeat during a rebalance still proves the member alive.
        self.schedule_heartbeat(now_ms, group_id, member_id);
        result
    }

    /// Leave by member id or (v3+) by group instance id; one result per member.
    pub fn leave(
        &mut self,
        now_ms: u64,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> (i16, Vec<i16>) {
        let results = self.leave_unchecked(now_ms, group_id, members);
        self.check_group(group_id);
        results
    }

    fn leave_unchecked(
        &mut self,
        now_ms: u64,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> (i16, Vec<i16>) {
        if !self.groups.contains_key(group_id) {
            return (
                0,
                members
                    .iter()
                    .map(|_| code(ResponseError::UnknownMemberId))
                    .collect(),
            );
        }
        let mut results = Vec::with_capacity(members.len());
        for (member_id, instance) in members {
            let group = self.groups.get_mut(group_id).expect("group");
            let id = match instance {
                Some(inst) => match group.static_members.get(inst) {
                    Some(id) if member_id.is_empty() || id == member_id => id.clone(),
                    Some(_) => {
                        results.push(code(ResponseError::FencedInstanceId));
                        continue;
                    }
                    None => {
                        results.push(code(ResponseError::UnknownMemberId));
                        continue;
                    }
                },
                None => member_id.clone(),
            };
            if let Some(t) = group.pending_members.remove(&id) {
                self.wheel.cancel(t);
                results.push(0);
                self.maybe_complete_join(now_ms, group_id);
                continue;
            }
            if !group.members.contains_key(&id) {
                results.push(code(ResponseError::UnknownMemberId));
                continue;
            }
            self.member_gone(now_ms, group_id, &id);
            results.push(0);
        }
        (0, results)
    }

    // ---- time --------------------------------------------------------------------------

    /// Fires every timer due at `now_ms`: expired sessions, rebalance timeouts, pending
    /// member ids that never joined.
    pub fn tick(&mut self, now_ms: u64) {
        let mut touched = std::collections::BTreeSet::new();
        for timer in self.wheel.poll(now_ms) {
            touched.insert(timer.group().to_string());
            match timer {
                TimerKind::Heartbeat {
                    group,
                    member,
                    deadline_ms,
                } => {
                    let Some(m) = self
                        .groups
                        .get_mut(&group)
                        .and_then(|g| g.members.get_mut(&member))
                    else {
                        continue;
                    };
                    if m.session_timer.map(|(_, d)| d) != Some(deadline_ms) {
                        continue; // re-armed after this timer was taken from the wheel
                    }
                    m.session_timer = None;
                    if m.awaiting_join || m.awaiting_sync {
                        // A member parked in JoinGroup or SyncGroup is alive (Kafka's
                        // shouldKeepAlive): the rebalance timeout bounds the join phase, and
                        // a leader that never syncs expires and restarts the rebalance.
                        self.schedule_heartbeat(now_ms, &group, &member);
                        continue;
                    }
                    log::info!("group {group}: member {member} session expired");
                    self.member_gone(now_ms, &group, &member);
                }
                TimerKind::Rebalance { group, generation } => {
                    let Some(g) = self.groups.get_mut(&group) else {
                        continue;
                    };
                    if g.state == State::PreparingRebalance && g.generation == generation {
                        g.rebalance_timer = None;
                        g.rebalance_timer_initial = false;
                        self.complete_join(now_ms, &group);
                    }
                }
                TimerKind::Pending { group, member } => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.pending_members.remove(&member);
                    }
                    self.maybe_complete_join(now_ms, &group);
                }
            }
        }
        for group in &touched {
            self.check_group(group);
        }
    }

    // ---- offsets -----------------------------------------------------------------------

    /// Checks an OffsetCommit's membership: generation -1 with no member id is a "simple"
    /// commit, allowed only while the group has no members.
    pub fn check_commit(
        &mut self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        group_instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        if !self.group_room(group_id) {
            return Err(REFUSED);
        }
        let group = self.group_mut(group_id);
        if generation < 0 && member_id.is_empty() {
            return if group.members.is_empty() {
                Ok(())
            } else {
                Err(ResponseError::UnknownMemberId)
            };
        }
        check_member(group, member_id, group_instance_id)?;
        if generation != group.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        // Kafka's rule (ClassicGroup.validateOffsetCommit): a member of the current generation
        // may commit while the next rebalance is being prepared (a cooperative consumer commits
        // what it is about to revoke); only while the assignment is being handed out
        // (CompletingRebalance) is a commit REBALANCE_IN_PROGRESS.
        match group.state {
            State::Stable | State::PreparingRebalance => Ok(()),
            State::CompletingRebalance => Err(ResponseError::RebalanceInProgress),
            State::Empty | State::Dead => Err(ResponseError::UnknownMemberId),
        }
    }

    /// Forgets the groups `which` names, with their members' timers: this node stopped
    /// coordinating them (it no longer leads their `__consumer_offsets` partition), or is about
    /// to load them again from that partition. Returns how many went.
    pub fn unload(&mut self, which: impl Fn(&str) -> bool) -> usize {
        let gone: Vec<String> = self.groups.keys().filter(|g| which(g)).cloned().collect();
        for id in &gone {
            let g = self.groups.remove(id).expect("listed");
            let timers = g
                .members
                .values()
                .filter_map(|m| m.session_timer.map(|(t, _)| t));
            for t in timers.chain(g.rebalance_timer) {
                self.wheel.cancel(t);
            }
        }
        gone.len()
    }

    /// Deletes a group that has no members; its offsets go with it.
    pub fn delete(&mut self, group_id: &str) -> Result<(), ResponseError> {
        match self.groups.get(group_id) {
            None => Err(ResponseError::GroupIdNotFound),
            Some(g) if g.state == State::Dead => Err(ResponseError::GroupIdNotFound),
            Some(g) if !g.members.is_empty() || g.state != State::Empty => {
                Err(ResponseError::NonEmptyGroup)
            }
            Some(_) => {
                self.groups.remove(group_id);
                Ok(())
            }
        }
    }
}

fn check_member(
    group: &Group,
    member_id: &str,
    group_instance_id: Option<&str>,
) -> Result<(), ResponseError> {
    if let Some(instance) = group_instance_id {
        match group.static_members.get(instance) {
            Some(id) if id != member_id => return Err(ResponseError::FencedInstanceId),
            None => return Err(ResponseError::UnknownMemberId),
            _ => {}
        }
    }
    if !group.members.contains_key(member_id) {
        return Err(ResponseError::UnknownMemberId);
    }
    Ok(())
}

/// The protocol every member supports, preferring the members' first choices (Kafka's vote).
fn select_protocol(group: &Group) -> Option<String> {
    let candidates: Vec<&String> = group
        .members
        .values()
        .next()?
        .protocols
        .iter()
        .map(|(n, _)| n)
        .filter(|n| {
            group
                .members
                .values()
                .all(|m| m.protocols.iter().any(|(p, _)| p == *n))
        })
        .collect();
    let mut votes: Vec<(usize, &String)> = candidates
        .iter()
        .map(|c| {
            (
                group
                    .members
                    .values()
                    .filter(|m| {
                        m.protocols
                            .iter()
                            .find(|(p, _)| candidates.contains(&p))
                            .map(|(p, _)| p)
                            == Some(*c)
                    })
                    .count(),
                *c,
            )
        })
        .collect();
    votes.sort_by_key(|v| std::cmp::Reverse(v.0));
    votes.first().map(|(_, n)| (*n).clone())
}

/// A group as persisted in `__consumer_offsets` (Kafka's GroupMetadataValue).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredGroup {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<StoredMember>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

impl Coordinator {
    pub fn snapshot(&self, group_id: &str, now_ms: u64) -> Option<StoredGroup> {
        let g = self.groups.get(group_id)?;
        let protocol = g.protocol.clone();
        Some(StoredGroup {
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            generation: g.generation,
            protocol: protocol.clone(),
            leader: g.leader.clone(),
            current_state_timestamp_ms: now_ms as i64,
            members: g
                .members
                .values()
                .map(|m| StoredMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata_for(protocol.as_deref().unwrap_or_default()),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// Restores a committed offset at start-up (a group may hold offsets and no members: a
    /// simple consumer's). Refused (counted) past the bound on groups.
    pub fn restore_offset(
        &mut self,
        group_id: &str,
        topic: String,
        partition: i32,
        value: CommittedOffset,
    ) {
        if self.group_room(group_id) {
            self.group_mut(group_id)
                .offsets
                .commit([((topic, partition), value)]);
        }
    }

    /// Restores a transactional offset commit whose transaction had not ended when the
    /// replay reached the end of the log; its marker settles it later (`GroupOffsets::settle_txn`).
    pub fn restore_pending_offset(
        &mut self,
        group_id: &str,
        producer_id: i64,
        key: (String, i32),
        value: CommittedOffset,
    ) {
        if self.group_room(group_id) {
            let g = self.group_mut(group_id);
            g.offsets.hold(producer_id, [(key, value)]);
        }
    }

    /// Ends `producer_id`'s transaction for every group `which` names (the groups of the
    /// `__consumer_offsets` partition its marker was written to).
    pub fn settle_txn(&mut self, which: impl Fn(&str) -> bool, producer_id: i64, commit: bool) {
        for (_, g) in self.groups.iter_mut().filter(|(id, _)| which(id)) {
            g.offsets.settle_txn(producer_id, commit);
        }
    }

    /// Rebuilds a group from its stored form at start-up: Stable with its members (who must
    /// heartbeat within their session timeout, counted from now), or Empty. Groups and members
    /// past the coordinator's bounds are not restored (counted as refusals); their clients
    /// rejoin.
    pub fn restore(&mut self, now_ms: u64, group_id: &str, stored: StoredGroup) {
        if !self.group_room(group_id) {
            return;
        }
        let group = self.group_mut(group_id);
        group.generation = stored.generation;
        group.protocol_type =
            (!stored.protocol_type.is_empty()).then_some(stored.protocol_type.clone());
        group.members.clear();
        group.static_members.clear();
        if stored.members.is_empty() || stored.protocol.is_none() {
            group.state = State::Empty;
            group.protocol = None;
            group.leader = None;
            return;
        }
        group.state = State::Stable;
        group.protocol = stored.protocol.clone();
        group.leader = stored.leader.clone();
        let protocol = stored.protocol.clone().unwrap_or_default();
        for m in stored.members {
            if !self.member_room() {
                continue;
            }
            let id = m.member_id.clone();
            let group = self.group_mut(group_id);
            if let Some(instance) = &m.group_instance_id {
                group.static_members.insert(instance.clone(), id.clone());
            }
            let member = Member {
                member_id: id.clone(),
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                protocol_type: stored.protocol_type.clone(),
                protocols: vec![(protocol.clone(), m.subscription)],
                assignment: m.assignment,
                awaiting_join: false,
                awaiting_sync: false,
                session_timer: None,
            };
            group.members.insert(id.clone(), member);
            self.schedule_heartbeat(now_ms, group_id, &id);
        }
        self.settle_restored(group_id);
    }

    /// A restored group is what its bounds let in: without members it is Empty; a leader
    /// left out hands its role to another member (the next rebalance elects one anyway).
    fn settle_restored(&mut self, group_id: &str) {
        let group = self.group_mut(group_id);
        if group.members.is_empty() {
            group.state = State::Empty;
            group.protocol = None;
            group.leader = None;
        } else if group
            .leader
            .as_ref()
            .is_none_or(|l| !group.members.contains_key(l))
        {
            group.leader = group.members.keys().next().cloned();
        }
        self.check_group(group_id);
    }
}

#[cfg(test)]
mod tests;
