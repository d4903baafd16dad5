//! The broker's assignors of the consumer group protocol (KIP-848): the coordinator, not a
//! member, computes each member's target assignment when the group's membership,
//! subscriptions or topics change. Pure: no I/O, no clock, same input, same output.
//!
//! - `uniform` (Kafka's default, `group.remote.assignor`): every partition of a subscribed
//!   topic goes to exactly one member that subscribes to it, the members' counts as even as
//!   their subscriptions allow, and a member keeps what it holds wherever the balance allows
//!   (sticky): a member joining takes partitions only from the members over the new share, a
//!   member leaving gives only its own partitions away.
//! - `range`: per topic, contiguous ranges in the members' order (static members first, by
//!   instance id, then the others by member id), the first `partitions % members` one
//!   partition longer, as Kafka's `RangeAssignor`. Members subscribed to the same topics of
//!   equal partition counts get the same partition numbers of each (co-partitioning, for
//!   joins). Sticky only through instance ids, as Kafka's.

use super::Partitions;
use crate::storage::catalog::TopicId;
use std::collections::{BTreeMap, BTreeSet};

/// Which assignor computes a group's target assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    /// The names clients send in `ServerAssignor` (`group.remote.assignor`); None: unknown,
    /// which a heartbeat answers with UNSUPPORTED_ASSIGNOR.
    pub fn by_name(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// Each member's target assignment (by member id), from the members' subscriptions and
    /// current target assignments and the subscribed topics' partition counts. A subscribed
    /// topic missing from `topics` (not created yet, or deleted) is assigned to no one.
    pub fn assign(self, members: &[MemberSpec], topics: &BTreeMap<TopicId, i32>) -> Targets {
        let targets = match self {
            Assignor::Uniform => uniform(members, topics),
            Assignor::Range => range(members, topics),
        };
        check_targets(members, topics, &targets);
        targets
    }
}

/// What an assignor knows of a member.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// The topics it subscribes to (a regular expression already resolved).
    pub subscribed: BTreeSet<TopicId>,
    /// Its target assignment so far: what stickiness keeps.
    pub current: Partitions,
}

/// Each member's target assignment, by member id.
pub type Targets = BTreeMap<String, Partitions>;

/// The assignor's postcondition: each partition of a topic someone subscribes to is held by
/// exactly one member that subscribes to its topic, and nothing else is held.
fn check_targets(members: &[MemberSpec], topics: &BTreeMap<TopicId, i32>, targets: &Targets) {
    assert_eq!(targets.len(), members.len(), "one target per member");
    let mut held: BTreeSet<(TopicId, i32)> = BTreeSet::new();
    for m in members {
        for (topic, partitions) in &targets[&m.member_id] {
            assert!(
                m.subscribed.contains(topic),
                "{} holds an unsubscribed topic",
                m.member_id
            );
            let count = topics.get(topic).copied().unwrap_or(0);
            for &p in partitions {
                assert!(
                    (0..count).contains(&p),
                    "{} holds {p} of {count}",
                    m.member_id
                );
                assert!(held.insert((*topic, p)), "partition {p} held twice");
            }
        }
    }
    let wanted: usize = subscribed_partitions(members, topics).count();
    assert_eq!(held.len(), wanted, "every subscribed partition is held");
}

/// Every partition of a topic that some member subscribes to and that exists, in order.
fn subscribed_partitions<'a>(
    members: &'a [MemberSpec],
    topics: &'a BTreeMap<TopicId, i32>,
) -> impl Iterator<Item = (TopicId, i32)> + 'a {
    let subscribed: BTreeSet<TopicId> = members
        .iter()
        .flat_map(|m| m.subscribed.iter().copied())
        .collect();
    subscribed
        .into_iter()
        .filter_map(|t| topics.get(&t).map(|&n| (t, n)))
        .flat_map(|(t, n)| (0..n).map(move |p| (t, p)))
}

// ---- uniform -----------------------------------------------------------------------------

/// One member's place in a uniform assignment under construction.
struct Slot<'a> {
    spec: &'a MemberSpec,
    held: Partitions,
    count: usize,
}

impl Slot<'_> {
    fn take(&mut self, (topic, p): (TopicId, i32)) {
        self.held.entry(topic).or_default().insert(p);
        self.count += 1;
    }

    /// The last partition it holds of a topic `other` subscribes to: the one to move.
    fn movable_to(&self, other: &MemberSpec) -> Option<(TopicId, i32)> {
        let (topic, partitions) = self
            .held
            .iter()
            .rev()
            .find(|(t, ps)| other.subscribed.contains(*t) && !ps.is_empty())?;
        Some((*topic, *partitions.last().expect("not empty")))
    }

    fn give(&mut self, (topic, p): (TopicId, i32)) {
        let partitions = self.held.get_mut(&topic).expect("held");
        assert!(partitions.remove(&p), "gives only what it holds");
        if partitions.is_empty() {
            self.held.remove(&topic);
        }
        self.count -= 1;
    }
}

fn uniform(members: &[MemberSpec], topics: &BTreeMap<TopicId, i32>) -> Targets {
    let mut order: Vec<&MemberSpec> = members.iter().collect();
    order.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let mut slots: Vec<Slot> = order
        .into_iter()
        .map(|spec| Slot {
            spec,
            held: Partitions::new(),
            count: 0,
        })
        .collect();
    let free = keep_current(&mut slots, members, topics);
    place_free(&mut slots, free);
    balance(&mut slots);
    slots
        .into_iter()
        .map(|s| (s.spec.member_id.clone(), s.held))
        .collect()
}

/// Each member keeps what it holds of the topics it still subscribes to, as long as they exist
/// (a partition two members claim, which a consistent group never has, goes to the first).
/// Returns the partitions no one kept.
fn keep_current(
    slots: &mut [Slot],
    members: &[MemberSpec],
    topics: &BTreeMap<TopicId, i32>,
) -> Vec<(TopicId, i32)> {
    let mut kept: BTreeSet<(TopicId, i32)> = BTreeSet::new();
    for slot in slots.iter_mut() {
        for (topic, partitions) in &slot.spec.current {
            let count = topics.get(topic).copied().unwrap_or(0);
            if !slot.spec.subscribed.contains(topic) {
                continue;
            }
            for &p in partitions.range(0..count) {
                if kept.insert((*topic, p)) {
                    slot.take((*topic, p));
                }
            }
        }
    }
    subscribed_partitions(members, topics)
        .filter(|tp| !kept.contains(tp))
        .collect()
}

/// Gives each free partition to the subscriber holding fewest, the partitions with the fewest
/// subscribers first (they have the fewest places to go).
fn place_free(slots: &mut [Slot], mut free: Vec<(TopicId, i32)>) {
    let subscribers = |t: &TopicId| {
        slots
            .iter()
            .filter(|s| s.spec.subscribed.contains(t))
            .count()
    };
    let mut by_topic: BTreeMap<TopicId, usize> = BTreeMap::new();
    for (t, _) in &free {
        by_topic.entry(*t).or_insert_with(|| subscribers(t));
    }
    free.sort_by_key(|(t, p)| (by_topic[t], *t, *p));
    for tp in free {
        let least = slots
            .iter_mut()
            .filter(|s| s.spec.subscribed.contains(&tp.0))
            .min_by_key(|s| s.count)
            .expect("a free partition has a subscriber");
        least.take(tp);
    }
}

/// Moves partitions from the members holding most to those holding fewest that subscribe to
/// them, one at a time, until no member holds two more than another that could take one of
/// its partitions. Each move lowers the sum of the squared counts, so this ends; the bound
/// says so out loud.
fn balance(slots: &mut [Slot]) {
    let total: usize = slots.iter().map(|s| s.count).sum();
    let limit = total * total + 1;
    for _ in 0..limit {
        let Some((from, to, tp)) = best_move(slots) else {
            return;
        };
        slots[from].give(tp);
        slots[to].take(tp);
    }
    panic!("uniform assignor: balancing did not settle within {limit} moves");
}

/// The move that most evens two members' counts: from the fullest member that has a
/// partition some member two or more below it subscribes to, to the emptiest such member.
fn best_move(slots: &[Slot]) -> Option<(usize, usize, (TopicId, i32))> {
    let mut by_count: Vec<usize> = (0..slots.len()).collect();
    by_count.sort_by_key(|&i| (std::cmp::Reverse(slots[i].count), i));
    for &from in &by_count {
        for &to in by_count.iter().rev() {
            if slots[to].count + 1 >= slots[from].count {
                break; // the rest are fuller still
            }
            if let Some(tp) = slots[from].movable_to(slots[to].spec) {
                return Some((from, to, tp));
            }
        }
    }
    None
}

// ---- range -------------------------------------------------------------------------------

fn range(members: &[MemberSpec], topics: &BTreeMap<TopicId, i32>) -> Targets {
    let mut order: Vec<&MemberSpec> = members.iter().collect();
    // Static members first, by instance id: a restarted static member gets its ranges back.
    order.sort_by(|a, b| match (&a.instance_id, &b.instance_id) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    });
    let mut targets: Targets = members
        .iter()
        .map(|m| (m.member_id.clone(), Partitions::new()))
        .collect();
    for (&topic, &count) in topics {
        let subscribers: Vec<&&MemberSpec> = order
            .iter()
            .filter(|m| m.subscribed.contains(&topic))
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        let (quota, extra) = (
            count as usize / subscribers.len(),
            count as usize % subscribers.len(),
        );
        let mut start = 0;
        for (i, m) in subscribers.iter().enumerate() {
            let end = start + quota + usize::from(i < extra);
            if start < end {
                let held = targets
                    .get_mut(&m.member_id)
                    .expect("every member has a target");
                held.insert(topic, (start as i32..end as i32).collect());
            }
            start = end;
        }
        assert_eq!(start, count as usize, "the ranges cover the topic");
    }
    targets
}

#[cfg(test)]
mod tests;
