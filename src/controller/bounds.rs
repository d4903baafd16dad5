//! The broker's bounds on topics and partitions, checked before a change is persisted: each
//! partition holds file descriptors, and a partition that cannot open (EMFILE) would leave its
//! producers waiting on a topic that was reported created. `max_topics` and
//! `max_partitions_per_shard` come from the file-descriptor budget (`server/fd_budget.rs`)
//! unless set; a change that would pass them is refused with POLICY_VIOLATION naming the key.

use super::{err, Outcome};
use crate::shard::Shard;
use crate::storage::catalog::CatalogRecord;
use kafka_protocol::ResponseError;

/// Checks that growing `topic` from `from` to `to` partitions (a new topic: `from` = 0 and
/// `new_topic`) keeps every shard within `max_partitions_per_shard` and the broker within
/// `max_topics`, given the topics in `record`.
pub fn check_new_partitions(
    shard: &Shard,
    record: &CatalogRecord,
    topic: &str,
    from: i32,
    to: i32,
    new_topic: bool,
) -> Result<(), Outcome> {
    let config = &shard.config;
    if new_topic && record.topics.len() >= config.max_topics {
        return Err(err(
            ResponseError::PolicyViolation,
            format!(
                "the broker holds {} topics, its limit (max_topics)",
                record.topics.len()
            ),
        ));
    }
    let mut per_shard = partitions_per_shard(shard, record);
    for p in from..to {
        per_shard[shard.owner(topic, p)] += 1;
    }
    let limit = config.max_partitions_per_shard;
    match per_shard.iter().enumerate().find(|(_, &n)| n > limit) {
        None => Ok(()),
        Some((s, &n)) => Err(err(
            ResponseError::PolicyViolation,
            format!(
                "{} partitions of {topic} would put {n} partitions on shard {s}, over its limit of {limit} (max_partitions_per_shard, set by the file-descriptor budget)",
                to - from
            ),
        )),
    }
}

/// How many partitions of `record`'s topics each shard owns.
fn partitions_per_shard(shard: &Shard, record: &CatalogRecord) -> Vec<usize> {
    let mut counts = vec![0usize; shard.router.shards()];
    for t in &record.topics {
        for p in 0..t.partitions as i32 {
            counts[shard.owner(&t.name, p)] += 1;
        }
    }
    counts
}
