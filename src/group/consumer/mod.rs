//! The consumer group protocol of KIP-848 (`group.protocol=consumer`): the broker computes
//! the assignment and each member reconciles to it through heartbeats, without stopping the
//! group. Being built (issue 41); what stands so far, pure and unit-tested:
//! - `assignor.rs`: the broker's assignors, `uniform` (sticky, balanced) and `range`;
//! - `reconcile.rs`: one member's way to its target assignment (revoke before assign, no
//!   partition given while another member owns it).
//!
//! Not yet wired to a Kafka API: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69)
//! are not advertised.

pub mod assignor;
pub mod reconcile;

use crate::storage::catalog::TopicId;
use std::collections::{BTreeMap, BTreeSet};

/// Partitions by topic, in order (a deterministic order keeps assignments and the simulator's
/// runs reproducible).
pub type Partitions = BTreeMap<TopicId, BTreeSet<i32>>;
