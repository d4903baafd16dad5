//! A consumer-group member in the simulated world, against the production coordinator
//! (`groups.rs`): it joins (KIP-394's member id round trip first), syncs its own assignment as
//! the group's leader, heartbeats, and commits the consumer's positions under its member id and
//! generation, rejoining whenever the coordinator says its membership is gone. Each change of
//! the group's metadata is persisted as the production shell does (`group::persist_group`: a
//! group record in the offsets partition, acks=1), so a new coordinator restores the member
//! from it and its commits go on being accepted there.

use super::clients::ClientEvent;
use super::groups::GROUP;
use super::node::Wire;
use super::replication::Answer;
use super::world::{World, CLIENT};
use crate::group::records::{self, Key};
use crate::group::state::{JoinRequest, JoinResponse, Output, Reply, SyncResponse};
use bytes::Bytes;
use kafka_protocol::ResponseError;

/// A request without an answer for this long is given up (lost on the way).
const REQUEST_RETRY_MS: u64 = 3_000;
/// The member's session and rebalance timeouts.
const SESSION_MS: i32 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Join,
    Sync,
    Stable,
}

/// The member's state: it outlives every node.
#[derive(Debug)]
pub struct Member {
    member_id: String,
    generation: i32,
    phase: Phase,
    /// A request on its way, sent then (world time).
    sent_ms: Option<u64>,
}

impl Default for Member {
    fn default() -> Member {
        Member {
            member_id: String::new(),
            generation: -1,
            phase: Phase::Join,
            sent_ms: None,
        }
    }
}

/// What the member sends its coordinator.
#[derive(Debug, Clone)]
pub enum MemberRequest {
    Join { member_id: String },
    Sync { member_id: String, generation: i32 },
    Heartbeat { member_id: String, generation: i32 },
}

impl Member {
    /// The member id and generation to commit under, while it is a stable member.
    pub fn commits_as(&self) -> Option<(String, i32)> {
        (self.phase == Phase::Stable).then(|| (self.member_id.clone(), self.generation))
    }

    fn rejoin(&mut self, forget_id: bool) {
        if forget_id {
            self.member_id.clear();
        }
        self.generation = -1;
        self.phase = Phase::Join;
        self.sent_ms = None;
    }
}

impl World {
    /// The member's next step, through the coordinator in node `i`'s metadata.
    pub(super) fn member_step(&mut self, i: usize) {
        let m = &self.groups.member;
        if m.sent_ms
            .is_some_and(|at| self.now_ms < at + REQUEST_RETRY_MS)
        {
            return;
        }
        let request = match m.phase {
            Phase::Join => MemberRequest::Join {
                member_id: m.member_id.clone(),
            },
            Phase::Sync => MemberRequest::Sync {
                member_id: m.member_id.clone(),
                generation: m.generation,
            },
            Phase::Stable => MemberRequest::Heartbeat {
                member_id: m.member_id.clone(),
                generation: m.generation,
            },
        };
        if let Some(coordinator) = self.coordinator_of(i) {
            self.groups.member.sent_ms = Some(self.now_ms);
            self.send_ordered((CLIENT, coordinator), i, coordinator, Wire::Member(request));
        }
    }

    /// A member's request on node `i`, answered by its coordinator now or, for a parked join
    /// or sync, through the coordinator's outputs.
    pub(super) fn on_member_request(&mut self, i: usize, request: MemberRequest) {
        let now_ms = self.clock_ms(i);
        let Some((_, c)) = self.serving(i) else {
            return; // NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS: the member retries
        };
        let answer = match request {
            MemberRequest::Join { member_id } => match c.join(now_ms, join_request(member_id)) {
                Reply::Now(response) => Some(ClientEvent::Joined(response)),
                Reply::Later(_) => None,
            },
            MemberRequest::Sync {
                member_id,
                generation,
            } => {
                let assignment = vec![(member_id.clone(), Bytes::from_static(b"all"))];
                match c.sync(now_ms, GROUP, &member_id, generation, None, assignment) {
                    Reply::Now(response) => Some(ClientEvent::Synced(response)),
                    Reply::Later(_) => None,
                }
            }
            MemberRequest::Heartbeat {
                member_id,
                generation,
            } => Some(ClientEvent::Heartbeat(
                c.heartbeat(now_ms, GROUP, &member_id, generation, None),
            )),
        };
        if let Some(answer) = answer {
            self.answer_client(i, answer);
        }
        self.coordinator_outputs(i);
    }

    /// Node `i`'s coordinator runs its timers (`group::drive`).
    pub(super) fn coordinator_tick(&mut self, i: usize) {
        let now_ms = self.clock_ms(i);
        if let Some(c) = self.slots[i].coordinator.as_mut() {
            c.coordinator.tick(now_ms);
        }
        self.coordinator_outputs(i);
    }

    /// What node `i`'s coordinator asks of its shell (`group::process_outputs`): answers to
    /// parked joins and syncs, and group records to persist.
    fn coordinator_outputs(&mut self, i: usize) {
        let Some(c) = self.slots[i].coordinator.as_mut() else {
            return;
        };
        let outputs = c.coordinator.take_outputs();
        for o in outputs {
            match o {
                Output::Join { response, .. } => {
                    self.answer_client(i, ClientEvent::Joined(response))
                }
                Output::Sync { response, .. } => {
                    self.answer_client(i, ClientEvent::Synced(response))
                }
                Output::PersistGroup { group_id } => self.persist_group(i, &group_id),
            }
        }
    }

    /// Appends the group's metadata record to the offsets partition on node `i` (acks=1).
    fn persist_group(&mut self, i: usize, group_id: &str) {
        let now_ms = self.clock_ms(i);
        let Some((offsets, c)) = self.serving(i) else {
            return;
        };
        let Some(g) = c.snapshot(group_id, now_ms) else {
            return;
        };
        let key = Key::Group {
            group: group_id.to_string(),
        };
        let payload = self.clients.payload();
        let record = (key.encode(), Some(records::encode_group(&g)));
        self.groups.records.insert(payload, record);
        self.append(i, offsets, (payload, None), false, Answer::Nobody, None);
    }

    /// The coordinator's answer reaches the member.
    pub(super) fn on_member_answer(&mut self, event: ClientEvent) {
        let m = &mut self.groups.member;
        m.sent_ms = None;
        match event {
            ClientEvent::Joined(r) => on_joined(m, r),
            ClientEvent::Synced(r) => {
                let syncing = m.phase == Phase::Sync;
                on_synced(m, r);
                if syncing && m.phase == Phase::Stable {
                    self.ledger.stats.generations_joined += 1;
                }
            }
            ClientEvent::Heartbeat(code) => on_heartbeat(m, code),
            _ => {}
        }
    }
}

fn join_request(member_id: String) -> JoinRequest {
    JoinRequest {
        group_id: GROUP.into(),
        member_id,
        group_instance_id: None,
        client_id: "sim".into(),
        client_host: "sim".into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: SESSION_MS,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::new())],
        require_known_member_id: true,
    }
}

fn on_joined(m: &mut Member, r: JoinResponse) {
    if m.phase != Phase::Join {
        return; // a late answer to a join given up on
    }
    if r.error_code == ResponseError::MemberIdRequired.code() {
        m.member_id = r.member_id;
    } else if r.error_code == 0 {
        m.member_id = r.member_id;
        m.generation = r.generation_id;
        m.phase = Phase::Sync;
    } else {
        m.rejoin(r.error_code == ResponseError::UnknownMemberId.code());
    }
}

fn on_synced(m: &mut Member, r: SyncResponse) {
    if m.phase != Phase::Sync {
        return;
    }
    if r.error_code == 0 {
        m.phase = Phase::Stable;
    } else {
        m.rejoin(r.error_code == ResponseError::UnknownMemberId.code());
    }
}

fn on_heartbeat(m: &mut Member, code: i16) {
    if m.phase == Phase::Stable && code != 0 {
        m.rejoin(code == ResponseError::UnknownMemberId.code());
    }
}
