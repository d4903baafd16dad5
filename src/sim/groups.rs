//! Consumer-group offsets in the simulated world. Each node that leads the offsets partition
//! runs the production coordinator (`group::state::Coordinator`: OffsetCommit's membership
//! check, and the committed offsets OffsetFetch serves), loaded as `group::replay` loads it:
//! once the leader's epoch start is committed (`shard::coordinator_load::may_load`), every
//! committed record replayed through `replay::learn` in the production `__consumer_offsets`
//! schemas. A commit is appended like an acks=all produce and applied once committed
//! (`group::ops::commit`).
//!
//! The client commits the consumer's positions (they only grow), as the group's member
//! (`members.rs`) while it is one, and fetches them back, in order on one connection per
//! coordinator (`World::send_ordered`, as Kafka's clients send them, so that a commit never
//! lands after a later one: Kafka keeps the last commit it receives). Checked:
//! an OffsetFetch answered by the coordinator of the partition's newest epoch never returns
//! less than what was acknowledged before it was asked (committed group offsets never go
//! backwards; this client never resets them). A deposed coordinator that has not heard of its
//! successor may answer from what it had, as Kafka's does: that is not held to it.

use super::checks::Violation;
use super::clients::ClientEvent;
use super::members::Member;
use super::node::Wire;
use super::replication::{tp_name, Answer, Tp};
use super::world::{World, CLIENT};
use crate::clock::SeededIds;
use crate::group::records::{self, Key};
use crate::group::replay::{self, Latest};
use crate::group::state::{CommittedOffset, Coordinator};
use crate::storage::catalog::OFFSETS_TOPIC;
use bytes::Bytes;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};

pub const GROUP: &str = "sim-group";

/// A node's coordinator: lost with its process.
pub struct SimCoordinator {
    pub coordinator: Coordinator,
    /// The offsets partition's leader generation it is loaded for.
    loaded: Option<u64>,
}

impl SimCoordinator {
    pub fn new(now_ms: u64, config: &crate::config::Config, seed: u64) -> SimCoordinator {
        let ids = Box::new(SeededIds::new(seed));
        SimCoordinator {
            coordinator: crate::group::coordinator(now_ms, config, ids),
            loaded: None,
        }
    }
}

/// The committing client, and the `__consumer_offsets` records' bytes by batch payload (a
/// simulated batch carries only its payload id).
#[derive(Default)]
pub struct Groups {
    /// Per partition, the highest offset whose commit was acknowledged.
    acked: BTreeMap<Tp, i64>,
    pub records: BTreeMap<u64, (Bytes, Option<Bytes>)>,
    /// The group's one member (`members.rs`).
    pub member: Member,
    /// Partitions with a commit on its way: the client sends the next once it is taken or
    /// lost, so that no commit lands after a later one (a client that let commits overtake
    /// each other could set its offsets back itself, as with Kafka).
    commits_in_flight: BTreeSet<Tp>,
}

impl Groups {
    /// The commit of `tp` on its way was taken (or refused) by a node, or lost.
    pub fn commit_settled(&mut self, tp: Tp) {
        self.commits_in_flight.remove(&tp);
    }
}

/// The topic name a commit of `tp` carries: its whole id (the trace's short names may clash).
fn topic_key(tp: Tp) -> String {
    tp.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// The committed offset a record names, as the coordinator keeps it.
fn value(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: 0,
    }
}

impl World {
    /// The offsets partition and its leader in node `i`'s catalog.
    fn offsets_partition(&self, i: usize) -> Option<(Tp, i32)> {
        let node = self.slots[i].node.as_ref()?;
        node.applied.read(|c| {
            let t = c.topics.iter().find(|t| t.name == OFFSETS_TOPIC)?;
            Some(((t.id, 0), t.assignment.first()?.leader))
        })
    }

    /// The coordinator in node `i`'s metadata: the offsets partition's leader.
    pub(super) fn coordinator_of(&self, i: usize) -> Option<usize> {
        let (_, leader) = self.offsets_partition(i)?;
        usize::try_from(leader).ok()
    }

    /// The client, with node `i`'s metadata, commits the consumer's position of a partition:
    /// as the group's member while it is one, else as a simple consumer (which the coordinator
    /// refuses while the group has members).
    pub(super) fn commit_offset(&mut self, i: usize) {
        let positions = self.clients.positions();
        if positions.is_empty() {
            return;
        }
        let (tp, offset) = positions[self.rng.gen_range(0..positions.len())];
        if self.groups.commits_in_flight.contains(&tp) {
            return;
        }
        let member = self.groups.member.commits_as();
        if let Some(coordinator) = self.coordinator_of(i) {
            let wire = Wire::OffsetCommit { tp, offset, member };
            if self.send_ordered((CLIENT, coordinator), i, coordinator, wire) {
                self.groups.commits_in_flight.insert(tp);
                let note = format!(
                    "client commits {} at {offset} to node {coordinator}",
                    tp_name(tp)
                );
                self.trace.note(self.now_ms, note);
            }
        }
    }

    /// The client asks for a partition's committed offset, knowing what was acknowledged.
    pub(super) fn fetch_offset(&mut self, i: usize) {
        let acked: Vec<(Tp, i64)> = self.groups.acked.iter().map(|(t, o)| (*t, *o)).collect();
        if acked.is_empty() {
            return;
        }
        let (tp, floor) = acked[self.rng.gen_range(0..acked.len())];
        if let Some(coordinator) = self.coordinator_of(i) {
            let wire = Wire::OffsetFetch { tp, floor };
            self.send_ordered((CLIENT, coordinator), i, coordinator, wire);
        }
    }

    /// Node `i`'s coordinator, if it leads the offsets partition and has loaded it: the
    /// partition too.
    pub(super) fn serving(&mut self, i: usize) -> Option<(Tp, &mut Coordinator)> {
        let (tp, _) = self.offsets_partition(i)?;
        let slot = &mut self.slots[i];
        let (generation, _) = slot.partitions.replicas.get(&tp)?.leadership()?;
        let c = slot.coordinator.as_mut()?;
        (c.loaded == Some(generation)).then_some((tp, &mut c.coordinator))
    }

    /// An OffsetCommit on node `i`: checked, then appended like an acks=all produce.
    pub(super) fn on_offset_commit(
        &mut self,
        i: usize,
        tp: Tp,
        offset: i64,
        member: Option<(String, i32)>,
    ) -> Result<(), Violation> {
        self.groups.commit_settled(tp);
        let Some((offsets, c)) = self.serving(i) else {
            return Ok(()); // NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS: the client retries
        };
        let (member_id, generation) = member.unwrap_or((String::new(), -1));
        if c.check_commit(GROUP, &member_id, generation, None).is_err() {
            return Ok(());
        }
        let key = Key::Offset {
            group: GROUP.into(),
            topic: topic_key(tp),
            partition: tp.1,
        };
        let payload = self.clients.payload();
        let record = (key.encode(), Some(records::encode_offset(&value(offset))));
        self.groups.records.insert(payload, record);
        let note = format!(
            "node {i}: commit of {} at {offset} is payload {payload}",
            tp_name(tp)
        );
        self.trace.note(self.now_ms, note);
        let answer = Answer::OffsetCommit { tp, offset };
        self.append(i, offsets, (payload, None), true, answer, None);
        Ok(())
    }

    /// A commit is durable on coordinator `i`: its cache takes it (`group::ops::commit`) and
    /// the client is answered.
    pub(super) fn offset_committed(&mut self, i: usize, tp: Tp, offset: i64) {
        if let Some(c) = self.slots[i].coordinator.as_mut() {
            let g = c.coordinator.group_mut(GROUP);
            g.offsets.commit([((topic_key(tp), tp.1), value(offset))]);
        }
        let note = format!(
            "node {i}: commit of {} at {offset} acknowledged",
            tp_name(tp)
        );
        self.trace.note(self.now_ms, note);
        self.answer_client(i, ClientEvent::OffsetCommitted { tp, offset });
    }

    /// An OffsetFetch on node `i`, answered from its coordinator with the world's view of
    /// whether it leads the partition's newest epoch.
    pub(super) fn on_offset_fetch(&mut self, i: usize, tp: Tp, floor: i64) {
        let Some((offsets, c)) = self.serving(i) else {
            return;
        };
        let offset = c
            .groups
            .get(GROUP)
            .and_then(|g| g.offsets.get(&topic_key(tp), tp.1))
            .map_or(-1, |v| v.offset);
        let epoch = self.slots[i].partitions.replicas[&offsets].epoch();
        let current = self
            .ledger
            .history
            .newest_epoch
            .get(&offsets)
            .is_none_or(|e| *e <= epoch);
        let note = format!(
            "node {i}: offset of {} is {offset} (epoch {epoch}, asked after {floor})",
            tp_name(tp)
        );
        self.trace.note(self.now_ms, note);
        let answer = ClientEvent::Offset {
            tp,
            floor,
            offset,
            current,
            node: i,
        };
        self.answer_client(i, answer);
    }

    pub(super) fn on_offset_answer(&mut self, event: ClientEvent) -> Result<(), Violation> {
        match event {
            ClientEvent::OffsetCommitted { tp, offset } => {
                let acked = self.groups.acked.entry(tp).or_insert(offset);
                *acked = (*acked).max(offset);
                self.ledger.stats.offsets_committed += 1;
                Ok(())
            }
            ClientEvent::Offset { current: false, .. } => Ok(()),
            ClientEvent::Offset {
                tp,
                floor,
                offset,
                current: true,
                node,
            } if offset < floor => Err(Violation {
                invariant: "committed group offsets never go backwards",
                detail: format!(
                    "{}: coordinator node {node} answered offset {offset} after {floor} was acknowledged",
                    tp_name(tp)
                ),
            }),
            _ => {
                self.ledger.stats.offsets_fetched += 1;
                Ok(())
            }
        }
    }

    /// Node `i`'s coordinator follows the offsets partition's leadership (`replay::load_led`):
    /// forgets the group when leadership moves away or anew, and loads it once
    /// `coordinator_load::may_load` allows.
    pub(super) fn follow_offsets_leadership(&mut self, i: usize) {
        let now_ms = self.clock_ms(i);
        let Some((tp, _)) = self.offsets_partition(i) else {
            return;
        };
        let slot = &mut self.slots[i];
        let (Some(r), Some(c)) = (slot.partitions.replicas.get(&tp), slot.coordinator.as_mut())
        else {
            return;
        };
        let Some((generation, epoch_start)) = r.leadership() else {
            if c.loaded.take().is_some() {
                c.coordinator.unload(|_| true);
            }
            return;
        };
        if c.loaded == Some(generation) {
            return;
        }
        if c.loaded.take().is_some() {
            c.coordinator.unload(|_| true);
        }
        if !crate::shard::coordinator_load::may_load(r.high_watermark(), epoch_start) {
            return;
        }
        let mut latest = Latest::default();
        for b in r
            .log
            .batches
            .iter()
            .filter(|b| b.end() <= r.high_watermark())
        {
            if let Some((key, value)) = self.groups.records.get(&b.payload) {
                replay::learn(Some(key), value.as_deref(), &mut latest);
            }
        }
        latest.restore_into(&mut c.coordinator, now_ms);
        c.loaded = Some(generation);
        let note = format!("node {i} loads the group offsets (generation {generation})");
        self.trace.note(self.now_ms, note);
    }
}
