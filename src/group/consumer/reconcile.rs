//! How one member of a consumer group (KIP-848) moves to its target assignment: revoke before
//! assign, and never hand out a partition another member still owns. Pure, as Kafka's
//! `CurrentAssignmentBuilder`: the coordinator calls `reconcile` on each heartbeat with the
//! group's target and what the member reported owning.
//!
//! A member is in one of three states:
//! - `Stable`: it owns its whole assignment at its epoch. When the group's target epoch moves
//!   past its epoch it reconciles.
//! - `UnrevokedPartitions`: it must give up `pending_revocation` first and stays at its epoch
//!   until a heartbeat's owned partitions no longer name any of them; then it moves to the
//!   next epoch and reconciles again.
//! - `UnreleasedPartitions`: it is at the target epoch but some partitions of its target are
//!   still owned by others (assigned to them, or pending their revocation); it gets each as
//!   its owner lets it go.
//!
//! So no partition is ever assigned to two members at once: a partition enters a member's
//! `assigned` only when no other member has it assigned or pending revocation.

use super::Partitions;
use crate::storage::catalog::TopicId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

/// A member's place in reconciliation: its epoch, what it is told it owns, and what it must
/// give up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    pub state: MemberState,
    pub member_epoch: i32,
    /// The partitions it may consume (sent back as the heartbeat's assignment).
    pub assigned: Partitions,
    /// Partitions it still owns but must revoke; they are not given to anyone meanwhile.
    pub pending_revocation: Partitions,
}

impl Reconciliation {
    /// A member that just joined, at `epoch`, with nothing.
    pub fn joined(epoch: i32) -> Reconciliation {
        Reconciliation {
            state: MemberState::Stable,
            member_epoch: epoch,
            assigned: Partitions::new(),
            pending_revocation: Partitions::new(),
        }
    }

    /// The next state, given the group's target (`target_epoch`, this member's `target`),
    /// what the member reported owning (None: not reported in this heartbeat, so it is taken
    /// to own all it had) and whether another member owns a partition now (`owned_elsewhere`:
    /// assigned to it or pending its revocation).
    pub fn reconcile(
        &self,
        (target_epoch, target): (i32, &Partitions),
        owned: Option<&Partitions>,
        owned_elsewhere: impl Fn(TopicId, i32) -> bool,
    ) -> Reconciliation {
        assert!(
            self.member_epoch <= target_epoch,
            "a member is never ahead of its group"
        );
        let next = match self.state {
            MemberState::Stable if self.member_epoch == target_epoch => return self.clone(),
            MemberState::Stable | MemberState::UnreleasedPartitions => self.next_assignment(
                self.member_epoch,
                (target_epoch, target),
                owned,
                &owned_elsewhere,
            ),
            MemberState::UnrevokedPartitions => {
                if still_owns_any(owned, &self.pending_revocation) {
                    return self.clone();
                }
                let epoch = self.member_epoch + 1;
                self.next_assignment(epoch, (target_epoch, target), owned, &owned_elsewhere)
            }
        };
        next.check(target);
        next
    }

    /// Revocations first; else what is free of the target is added and the member moves to
    /// the target epoch.
    fn next_assignment(
        &self,
        epoch: i32,
        (target_epoch, target): (i32, &Partitions),
        owned: Option<&Partitions>,
        owned_elsewhere: &impl Fn(TopicId, i32) -> bool,
    ) -> Reconciliation {
        let kept = intersect(&self.assigned, target);
        let revoke = subtract(&self.assigned, &kept);
        if !revoke.is_empty() && still_owns_any(owned, &revoke) {
            return Reconciliation {
                state: MemberState::UnrevokedPartitions,
                member_epoch: epoch,
                assigned: kept,
                pending_revocation: revoke,
            };
        }
        let mut assigned = kept;
        let mut unreleased = false;
        for (topic, partitions) in subtract(target, &assigned) {
            for p in partitions {
                if owned_elsewhere(topic, p) {
                    unreleased = true;
                } else {
                    assigned.entry(topic).or_default().insert(p);
                }
            }
        }
        Reconciliation {
            state: match unreleased {
                true => MemberState::UnreleasedPartitions,
                false => MemberState::Stable,
            },
            member_epoch: target_epoch,
            assigned,
            pending_revocation: Partitions::new(),
        }
    }

    /// Invariants: what it is assigned lies in its target; what it must revoke lies outside
    /// it and only while it waits to revoke; a stable member holds its whole target.
    fn check(&self, target: &Partitions) {
        assert!(
            subtract(&self.assigned, target).is_empty(),
            "assigned beyond the target"
        );
        assert!(
            intersect(&self.pending_revocation, target).is_empty(),
            "revoking a target"
        );
        let revoking = self.state == MemberState::UnrevokedPartitions;
        assert_eq!(
            revoking,
            !self.pending_revocation.is_empty(),
            "revocation and state agree"
        );
        if self.state == MemberState::Stable {
            assert_eq!(&self.assigned, target, "a stable member holds its target");
        }
    }
}

/// Whether the member still owns any of `revoke`; a heartbeat that did not report what it owns
/// counts as owning them all (it has not said it let them go).
fn still_owns_any(owned: Option<&Partitions>, revoke: &Partitions) -> bool {
    let Some(owned) = owned else {
        return true;
    };
    revoke.iter().any(|(topic, partitions)| {
        owned
            .get(topic)
            .is_some_and(|o| partitions.iter().any(|p| o.contains(p)))
    })
}

fn intersect(a: &Partitions, b: &Partitions) -> Partitions {
    a.iter()
        .filter_map(|(t, ps)| {
            let other = b.get(t)?;
            let both: std::collections::BTreeSet<i32> = ps.intersection(other).copied().collect();
            (!both.is_empty()).then_some((*t, both))
        })
        .collect()
}

fn subtract(a: &Partitions, b: &Partitions) -> Partitions {
    a.iter()
        .filter_map(|(t, ps)| {
            let left: std::collections::BTreeSet<i32> = match b.get(t) {
                Some(other) => ps.difference(other).copied().collect(),
                None => ps.clone(),
            };
            (!left.is_empty()).then_some((*t, left))
        })
        .collect()
}

#[cfg(test)]
mod tests;
