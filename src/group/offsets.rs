//! A group's offsets: the committed ones, by topic and partition, and the transactional commits
//! (TxnOffsetCommit) that wait for their transaction's marker, by producer id. A commit marker
//! makes a producer's pending offsets committed ones; an abort drops them (KIP-98, KIP-447).

use std::collections::BTreeMap;

/// A topic and a partition.
pub type Key = (String, i32);

#[derive(Debug, Clone, PartialEq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

#[derive(Debug, Default)]
pub struct GroupOffsets {
    committed: BTreeMap<Key, CommittedOffset>,
    /// Durable but waiting for their transaction's marker, by producer id.
    pending: BTreeMap<i64, BTreeMap<Key, CommittedOffset>>,
}

impl GroupOffsets {
    pub fn get(&self, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.committed.get(&(topic.to_string(), partition))
    }

    /// The committed offsets, in topic and partition order.
    pub fn committed(&self) -> impl Iterator<Item = (&Key, &CommittedOffset)> {
        self.committed.iter()
    }

    /// Commits are durable: they become the group's offsets.
    pub fn commit(&mut self, offsets: impl IntoIterator<Item = (Key, CommittedOffset)>) {
        self.committed.extend(offsets);
    }

    /// OffsetDelete: the partition's committed offset goes.
    pub fn remove(&mut self, key: &Key) {
        self.committed.remove(key);
    }

    /// A transactional commit of `producer_id` is durable: it waits for the marker.
    pub fn hold(
        &mut self,
        producer_id: i64,
        offsets: impl IntoIterator<Item = (Key, CommittedOffset)>,
    ) {
        self.pending.entry(producer_id).or_default().extend(offsets);
    }

    /// Whether a transaction not yet ended holds an offset commit for (`topic`, `partition`):
    /// OffsetFetch with require_stable then answers UNSTABLE_OFFSET_COMMIT (KIP-447).
    pub fn is_unstable(&self, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.pending.values().any(|o| o.contains_key(&key))
    }

    /// Ends `producer_id`'s transaction here: its pending offsets become the committed ones
    /// (`commit`) or are dropped.
    pub fn settle_txn(&mut self, producer_id: i64, commit: bool) {
        let Some(pending) = self.pending.remove(&producer_id) else {
            return;
        };
        if commit {
            self.committed.extend(pending);
        }
    }
}
