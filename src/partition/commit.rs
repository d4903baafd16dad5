//! What makes an offset committed: the one rule that moves a partition's high watermark.
//!
//! Consumers read only below the high watermark and acks=all producers are answered only once
//! it passes their records, so this rule is the broker's durability promise. Today a single
//! node commits what it has fsynced (`LocalSync`); with replication the rule becomes "fsynced
//! on every in-sync replica, and on at least min.insync.replicas of them", computed from the
//! followers' synced offsets. Either way the rule never commits past the local synced end: a
//! leader never acknowledges what it has not made durable itself.

use crate::storage::log::LogPosition;

pub trait CommitRule {
    /// How far the partition is committed, given how far its local log is synced. The result
    /// is at most `synced` and never moves back (the caller asserts both).
    fn committed(&self, synced: LogPosition) -> LogPosition;
    /// A short name for logs and metrics.
    fn name(&self) -> &'static str;
}

/// A single copy: committed once fsynced locally.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalSync;

impl CommitRule for LocalSync {
    fn committed(&self, synced: LogPosition) -> LogPosition {
        synced
    }

    fn name(&self) -> &'static str {
        "local-sync"
    }
}
