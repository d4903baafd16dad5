//! One consumer group of the KIP-848 protocol as its coordinator sees it, pure: heartbeats in,
//! answers out; no clock, no I/O, member ids drawn by the caller. Kafka's rules
//! (`GroupMetadataManager.consumerGroupHeartbeat`):
//!
//! - The **group epoch** moves whenever the membership, a subscription or a subscribed topic's
//!   partition count changes. The **target assignment** is recomputed by the group's assignor
//!   when the group epoch passes the assignment's epoch.
//! - Each member reconciles to its part of the target at its own pace (`reconcile.rs`); its
//!   **member epoch** reaches the target's epoch once it has revoked what it had to.
//! - A heartbeat must carry the member's epoch: a newer one, or an older one that is not the
//!   previous epoch with a subset of its assignment (a lost answer), is FENCED_MEMBER_EPOCH and
//!   the member rejoins with nothing.
//! - Epoch -1 leaves; -2 is a static member leaving for a while: its assignment waits for a
//!   member with its instance id, which takes it over under a new member id.
//!
//! Invariant (checked after every change): no partition is owned (assigned or pending
//! revocation) by two members.

use super::assignor::{Assignor, MemberSpec, Targets};
use super::reconcile::{MemberState, Reconciliation};
use super::Partitions;
use crate::storage::catalog::TopicId;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};

/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// The member epoch of a static member's heartbeat that leaves for now (its instance id keeps
/// its assignment until its session ends).
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// A ConsumerGroupHeartbeat's fields as the group uses them (None: not sent, unchanged).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed: Option<BTreeSet<String>>,
    pub assignor: Option<String>,
    pub owned: Option<Partitions>,
}

/// The answer to a heartbeat: the member's id and epoch, and its assignment when it changed
/// or the member sent a full request (a join, or a retry after an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub member_id: String,
    pub member_epoch: i32,
    pub assignment: Option<Partitions>,
}

/// A member of the group.
#[derive(Debug, Clone)]
pub struct Member {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed: BTreeSet<String>,
    pub assignor: Option<Assignor>,
    pub previous_epoch: i32,
    pub at: Reconciliation,
    /// When its session ends without a heartbeat (monotonic ms).
    pub session_deadline_ms: u64,
    /// While it must revoke partitions: when it is removed if it has not (its rebalance
    /// timeout from when it was asked).
    pub revoke_deadline_ms: Option<u64>,
}

/// Why a member's time ran out (`ConsumerGroup::expired`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No heartbeat within the session timeout.
    Session,
    /// Partitions not revoked within its rebalance timeout.
    Rebalance,
}

/// Limits the group enforces (`group.consumer.max.size`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_members: usize,
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout_ms: u64,
}

/// Topic name → (id, partition count), as the catalog says now.
pub type Topics = BTreeMap<String, (TopicId, i32)>;

#[derive(Debug, Default)]
pub struct ConsumerGroup {
    epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    targets: Targets,
    /// Each owned partition's member (assigned, or pending its revocation).
    owners: BTreeMap<(TopicId, i32), String>,
    /// The subscribed topics as last resolved; a change of them moves the group epoch.
    subscribed_topics: Topics,
}

impl ConsumerGroup {
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    pub fn members(&self) -> &BTreeMap<String, Member> {
        &self.members
    }

    pub fn target(&self, member_id: &str) -> Option<&Partitions> {
        self.targets.get(member_id)
    }

    /// Handles a heartbeat (`new_id`: a member id for a dynamic member joining without one).
    /// Err: the error code to answer, with the group unchanged.
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        (topics, limits, now_ms): (&Topics, Limits, u64),
        new_id: impl FnOnce() -> String,
    ) -> Result<Answer, ResponseError> {
        validate(&hb)?;
        if hb.member_epoch == LEAVE_EPOCH || hb.member_epoch == STATIC_LEAVE_EPOCH {
            return self.leave(&hb, topics);
        }
        let member_id = match hb.member_id.is_empty() {
            true => new_id(),
            false => hb.member_id.clone(),
        };
        let before = self.admit(&member_id, &hb, limits)?;
        let full = hb.member_epoch == 0
            || (hb.rebalance_timeout_ms != -1 && hb.subscribed.is_some() && hb.owned.is_some());
        let member = self.members.get_mut(&member_id).expect("admitted");
        let changed = update(member, &hb);
        // One step of the group epoch for whatever moved, as Kafka counts.
        if self.resolve_topics(topics) || changed || before.is_none() {
            self.epoch += 1;
        }
        if self.epoch > self.assignment_epoch {
            self.assign();
        }
        let assigned = self.reconcile(&member_id, hb.owned.as_ref(), now_ms);
        let member = self.members.get_mut(&member_id).expect("admitted");
        member.session_deadline_ms = now_ms + limits.session_timeout_ms;
        let moved = before.as_ref() != Some(&member.at.assigned);
        Ok(Answer {
            member_id,
            member_epoch: member.at.member_epoch,
            assignment: (full || moved).then_some(assigned),
        })
    }

    /// Re-resolves the subscribed topics against the catalog (a topic created, deleted or
    /// grown): the group epoch moves when they changed. The caller calls this when the
    /// catalog changes; heartbeats call it too.
    pub fn refresh_topics(&mut self, topics: &Topics) {
        if self.resolve_topics(topics) {
            self.epoch += 1;
        }
    }

    /// Resolves the members' subscriptions against the catalog; true when that changed them.
    fn resolve_topics(&mut self, topics: &Topics) -> bool {
        let names: BTreeSet<&String> = self.members.values().flat_map(|m| &m.subscribed).collect();
        let now: Topics = names
            .into_iter()
            .filter_map(|n| topics.get(n).map(|t| (n.clone(), *t)))
            .collect();
        let changed = now != self.subscribed_topics;
        self.subscribed_topics = now;
        changed
    }

    /// The members whose time ran out at `now_ms`, for the caller to `remove`: no heartbeat
    /// within the session timeout (a static member that left with -2 too), or partitions
    /// still unrevoked at the end of the rebalance timeout.
    pub fn expired(&self, now_ms: u64) -> Vec<(String, Expiry)> {
        let over = |deadline: u64| deadline <= now_ms;
        self.members
            .iter()
            .filter_map(|(id, m)| {
                let why = match (over(m.session_deadline_ms), m.revoke_deadline_ms) {
                    (true, _) => Expiry::Session,
                    (false, Some(d)) if over(d) => Expiry::Rebalance,
                    _ => return None,
                };
                Some((id.clone(), why))
            })
            .collect()
    }

    /// Removes a member (it left, or its session or rebalance timeout ran out): its
    /// partitions are free at once and the group epoch moves.
    pub fn remove(&mut self, member_id: &str, topics: &Topics) {
        if self.members.remove(member_id).is_none() {
            return;
        }
        self.targets.remove(member_id);
        self.owners.retain(|_, owner| owner != member_id);
        self.resolve_topics(topics);
        self.epoch += 1;
        self.check();
    }

    /// The member this heartbeat is from, joined if it may join (its assignment before this
    /// heartbeat: None for a member that just joined).
    fn admit(
        &mut self,
        member_id: &str,
        hb: &Heartbeat,
        limits: Limits,
    ) -> Result<Option<Partitions>, ResponseError> {
        let known = self.members.contains_key(member_id);
        if let Some(instance) = &hb.instance_id {
            return self.admit_static(member_id, instance, hb, limits);
        }
        if !known && hb.member_epoch != 0 {
            return Err(ResponseError::UnknownMemberId);
        }
        if !known {
            self.join(member_id, None, limits)?;
            return Ok(None);
        }
        let member = &self.members[member_id];
        check_epoch(member, hb)?;
        Ok(Some(member.at.assigned.clone()))
    }

    fn admit_static(
        &mut self,
        member_id: &str,
        instance: &str,
        hb: &Heartbeat,
        limits: Limits,
    ) -> Result<Option<Partitions>, ResponseError> {
        let holder = self.static_member(instance);
        if hb.member_epoch != 0 {
            let holder = holder.ok_or(ResponseError::UnknownMemberId)?;
            if holder != member_id {
                return Err(ResponseError::FencedInstanceId);
            }
            let member = &self.members[member_id];
            check_epoch(member, hb)?;
            return Ok(Some(member.at.assigned.clone()));
        }
        match holder {
            None => {
                self.join(member_id, Some(instance), limits)?;
                Ok(None)
            }
            Some(old) if self.members[&old].at.member_epoch != STATIC_LEAVE_EPOCH => {
                Err(ResponseError::UnreleasedInstanceId)
            }
            Some(old) => {
                self.take_over(&old, member_id);
                Ok(Some(self.members[member_id].at.assigned.clone()))
            }
        }
    }

    fn static_member(&self, instance: &str) -> Option<String> {
        let mut holders = self
            .members
            .iter()
            .filter(|(_, m)| m.instance_id.as_deref() == Some(instance));
        let holder = holders.next().map(|(id, _)| id.clone());
        assert!(
            holders.next().is_none(),
            "instance id {instance} held twice"
        );
        holder
    }

    fn join(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        limits: Limits,
    ) -> Result<(), ResponseError> {
        if self.members.len() >= limits.max_members {
            return Err(ResponseError::GroupMaxSizeReached);
        }
        let member = Member {
            instance_id: instance_id.map(str::to_string),
            rack_id: None,
            rebalance_timeout_ms: -1,
            subscribed: BTreeSet::new(),
            assignor: None,
            previous_epoch: 0,
            at: Reconciliation::joined(0),
            session_deadline_ms: 0, // set by the heartbeat that joins it
            revoke_deadline_ms: None,
        };
        self.members.insert(member_id.to_string(), member);
        Ok(())
    }

    /// A static member rejoining under a new member id takes over its instance's member:
    /// subscription, target and partitions, at epoch 0 (it reconciles to the target at once).
    fn take_over(&mut self, old: &str, new: &str) {
        let mut member = self.members.remove(old).expect("held");
        member.at.member_epoch = 0;
        member.previous_epoch = 0;
        self.members.insert(new.to_string(), member);
        if let Some(target) = self.targets.remove(old) {
            self.targets.insert(new.to_string(), target);
        }
        for owner in self.owners.values_mut().filter(|o| *o == old) {
            *owner = new.to_string();
        }
    }

    /// A heartbeat with epoch -1 or -2.
    fn leave(&mut self, hb: &Heartbeat, topics: &Topics) -> Result<Answer, ResponseError> {
        let member_id = match &hb.instance_id {
            None => hb.member_id.clone(),
            Some(instance) => {
                let holder = self
                    .static_member(instance)
                    .ok_or(ResponseError::UnknownMemberId)?;
                if holder != hb.member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
                holder
            }
        };
        if !self.members.contains_key(&member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        if hb.member_epoch == STATIC_LEAVE_EPOCH && hb.instance_id.is_some() {
            let member = self.members.get_mut(&member_id).expect("known");
            member.at.member_epoch = STATIC_LEAVE_EPOCH;
            member.at.pending_revocation.clear();
            member.revoke_deadline_ms = None; // its session still runs
            self.owners.retain(|tp, owner| {
                owner != &member_id
                    || member
                        .at
                        .assigned
                        .get(&tp.0)
                        .is_some_and(|s| s.contains(&tp.1))
            });
        } else {
            self.remove(&member_id, topics);
        }
        Ok(Answer {
            member_id,
            member_epoch: hb.member_epoch,
            assignment: None,
        })
    }

    /// The group's assignor (the one most members name; uniform when none does) computes the
    /// target assignment for the group epoch.
    fn assign(&mut self) {
        let specs: Vec<MemberSpec> = self
            .members
            .iter()
            .map(|(id, m)| MemberSpec {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                subscribed: m
                    .subscribed
                    .iter()
                    .filter_map(|n| self.subscribed_topics.get(n).map(|t| t.0))
                    .collect(),
                current: self.targets.get(id).cloned().unwrap_or_default(),
            })
            .collect();
        let counts: BTreeMap<TopicId, i32> = self.subscribed_topics.values().copied().collect();
        self.targets = self.preferred_assignor().assign(&specs, &counts);
        self.assignment_epoch = self.epoch;
    }

    fn preferred_assignor(&self) -> Assignor {
        let mut votes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.assignor) {
            *votes.entry(a.name()).or_default() += 1;
        }
        let best = votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, *name == "uniform"));
        best.and_then(|(name, _)| Assignor::by_name(name))
            .unwrap_or(Assignor::Uniform)
    }

    /// Moves a member toward its target (`reconcile.rs`) and records what it now owns.
    /// Returns what it is assigned.
    fn reconcile(
        &mut self,
        member_id: &str,
        owned: Option<&Partitions>,
        now_ms: u64,
    ) -> Partitions {
        let empty = Partitions::new();
        let target = self.targets.get(member_id).unwrap_or(&empty);
        let owners = &self.owners;
        let elsewhere = |t: TopicId, p: i32| owners.get(&(t, p)).is_some_and(|o| o != member_id);
        let member = &self.members[member_id];
        let next = member
            .at
            .reconcile((self.assignment_epoch, target), owned, elsewhere);
        self.owners.retain(|_, owner| owner != member_id);
        for (topic, partitions) in next.assigned.iter().chain(&next.pending_revocation) {
            for &p in partitions {
                let previous = self.owners.insert((*topic, p), member_id.to_string());
                assert!(previous.is_none(), "partition {p} owned twice");
            }
        }
        let member = self.members.get_mut(member_id).expect("known");
        let asked = next.state == MemberState::UnrevokedPartitions
            && (member.at.state != next.state || member.at.member_epoch != next.member_epoch);
        if asked {
            member.revoke_deadline_ms = Some(now_ms + member.rebalance_timeout_ms.max(0) as u64);
        } else if next.state != MemberState::UnrevokedPartitions {
            member.revoke_deadline_ms = None;
        }
        if next.member_epoch != member.at.member_epoch {
            member.previous_epoch = member.at.member_epoch;
        }
        member.at = next;
        self.check();
        self.members[member_id].at.assigned.clone()
    }

    /// The invariants: every owned partition's owner is a member that has it assigned or
    /// pending revocation, and no member is ahead of the target epoch.
    fn check(&self) {
        for ((topic, p), owner) in &self.owners {
            let m = self.members.get(owner).expect("an owner is a member");
            let has = |ps: &Partitions| ps.get(topic).is_some_and(|s| s.contains(p));
            assert!(
                has(&m.at.assigned) || has(&m.at.pending_revocation),
                "owner without {p}"
            );
        }
        for m in self.members.values() {
            assert!(
                m.at.member_epoch <= self.assignment_epoch.max(0),
                "member ahead of target"
            );
        }
    }
}

/// A heartbeat's epoch against the member's: the member's own, or its previous one with no
/// more than it is assigned (the answer that moved it was lost), or 0: a member that was
/// fenced rejoins under its id, owning nothing (KAFKA-19233, Kafka 4.2 on).
fn check_epoch(member: &Member, hb: &Heartbeat) -> Result<(), ResponseError> {
    let epoch = member.at.member_epoch;
    if hb.member_epoch == 0 {
        return Ok(());
    }
    if hb.member_epoch > epoch {
        return Err(ResponseError::FencedMemberEpoch);
    }
    if hb.member_epoch < epoch {
        let subset = hb.owned.as_ref().is_some_and(|owned| {
            owned
                .iter()
                .all(|(t, ps)| member.at.assigned.get(t).is_some_and(|a| ps.is_subset(a)))
        });
        if hb.member_epoch != member.previous_epoch || !subset {
            return Err(ResponseError::FencedMemberEpoch);
        }
    }
    Ok(())
}

/// The member's fields the heartbeat sets (`validate` passed). Returns whether its
/// subscription changed (the group epoch moves).
fn update(member: &mut Member, hb: &Heartbeat) -> bool {
    if let Some(assignor) = hb.assignor.as_deref().and_then(Assignor::by_name) {
        member.assignor = Some(assignor);
    }
    if hb.rack_id.is_some() {
        member.rack_id = hb.rack_id.clone();
    }
    if hb.rebalance_timeout_ms != -1 {
        member.rebalance_timeout_ms = hb.rebalance_timeout_ms;
    }
    match &hb.subscribed {
        Some(s) if *s != member.subscribed => {
            member.subscribed = s.clone();
            true
        }
        _ => false,
    }
}

/// Kafka's checks of a heartbeat's fields, all INVALID_REQUEST.
fn validate(hb: &Heartbeat) -> Result<(), ResponseError> {
    let empty = |s: &Option<String>| s.as_deref() == Some("");
    if empty(&hb.instance_id) || empty(&hb.rack_id) {
        return Err(ResponseError::InvalidRequest);
    }
    match hb.member_epoch {
        0 => {
            let subscribed = hb.subscribed.as_ref().is_some_and(|s| !s.is_empty());
            let owns_nothing = hb.owned.as_ref().is_some_and(|o| o.is_empty());
            if hb.rebalance_timeout_ms == -1 || !subscribed || !owns_nothing {
                return Err(ResponseError::InvalidRequest);
            }
        }
        e if e > 0 || e == LEAVE_EPOCH => {
            if hb.member_id.is_empty() {
                return Err(ResponseError::InvalidRequest);
            }
        }
        STATIC_LEAVE_EPOCH if !hb.member_id.is_empty() && hb.instance_id.is_some() => {}
        _ => return Err(ResponseError::InvalidRequest),
    }
    if let Some(name) = &hb.assignor {
        Assignor::by_name(name).ok_or(ResponseError::UnsupportedAssignor)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
