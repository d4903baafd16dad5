//! The consumer group protocol of KIP-848 (`group.protocol=consumer`): the broker computes
//! the assignment and each member reconciles to it through heartbeats, without stopping the
//! group. Being built (issue 41); what stands so far, pure and unit-tested:
//! - `assignor.rs`: the broker's assignors, `uniform` (sticky, balanced) and `range`;
//! - `reconcile.rs`: one member's way to its target assignment (revoke before assign, no
//!   partition given while another member owns it);
//! - `group.rs`: one group as its coordinator sees it: heartbeats in, answers out (member and
//!   group epochs, the target assignment, static members, leaving, Kafka's error codes), and
//!   each member's session and revocation deadlines (`expired`).
//!
//! Still to come: the ConsumerGroupHeartbeat and ConsumerGroupDescribe handlers, the group's
//! records in `__consumer_offsets` and their replay, the deadlines on the coordinator's wheel,
//! regular-expression subscriptions, rack-aware assignment, offsets with member epochs, and
//! the migration between classic and consumer groups.
//!
//! Not yet wired to a Kafka API: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69)
//! are not advertised.

pub mod assignor;
pub mod group;
pub mod reconcile;

use crate::storage::catalog::TopicId;
use std::collections::{BTreeMap, BTreeSet};

/// Partitions by topic, in order (a deterministic order keeps assignments and the simulator's
/// runs reproducible).
pub type Partitions = BTreeMap<TopicId, BTreeSet<i32>>;

/// The tests' random walks: `draw(n)` is a seeded draw in 0..n (a 64-bit LCG, Knuth's MMIX).
#[cfg(test)]
fn draws(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    }
}
