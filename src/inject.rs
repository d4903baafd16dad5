//! Bugs planted on purpose, for the simulator to prove it catches them (`sluice-sim --inject`).
//!
//! They exist only in simulation builds (the `simulation` feature): elsewhere `active` is a
//! constant false and every planted branch compiles away. A simulation runs on one thread, so
//! the bug it plants is a thread-local.

/// A planted bug, by the name `--inject` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The controller's Raft log is written but not fdatasynced before votes and appends are
    /// acknowledged.
    RaftSkipsFsync,
    /// A fenced leader's partitions get a new leader from all live replicas, not only the
    /// in-sync ones: a replica that lacks committed records is elected.
    ElectOutOfSyncReplica,
    /// The controller takes an in-sync set change (AlterPartition) from a leader of an older
    /// epoch, a deposed leader that has not yet heard of its successor.
    StaleIsrChange,
    /// The controller leader never reports a snapshot it sent as finished (the bug the
    /// simulator found in the first driver: a follower that missed the snapshot stayed behind).
    SnapshotNotReported,
    /// A follower of a new leader keeps the tail it wrote under an older leader, records the
    /// new leader never had (KIP-279's truncation skipped).
    SkipDivergentTruncation,
    /// A partition leader commits (moves its high watermark, answers acks=all) what it has
    /// synced itself, without waiting for its in-sync followers.
    AckBeforeQuorumSynced,
    /// A partition leader that restarts before its session expires keeps its leader epoch (the
    /// bug the simulator found: followers kept a tail the restarted leader had lost).
    RestartKeepsLeaderEpoch,
    /// A member the leader asked to add to the in-sync set does not hold the high watermark
    /// until the controller answers (the race the simulator found: the controller committed a
    /// set whose new member lacked committed records).
    JoinerNotCounted,
    /// A restarted node rebuilds no idempotent-producer state from its log, so a producer's
    /// retry of a batch already written is appended again.
    ForgetProducerState,
    /// A new leader of a `__consumer_offsets` partition loads its groups at once, before its
    /// epoch start is committed: commits an earlier leader acknowledged may lie above its high
    /// watermark.
    CoordinatorLoadsEarly,
    /// A replica truncated by replication forgets the producer state past the cut instead of
    /// rebuilding it: a transaction whose marker was cut stays closed (the bug a Jepsen-style
    /// run found: read_committed through that replica returned an aborted transaction).
    TruncationKeepsClosedTransactions,
    /// A transaction coordinator whose write of a transaction's completion fails does not try
    /// again (the bug a Jepsen-style run found: the id stayed in PrepareCommit for good).
    CompletionNotRetried,
    /// A follower appends its leader's batches without checking that they continue its log
    /// (`ReplicaState::take_replica_batches`): the answer to a fetch it gave up on, arriving
    /// after a newer one's, is written a second time past the log end.
    FollowerSkipsGapCheck,
    /// A new leader does not note its epoch's start in its leader epoch cache
    /// (`ReplicaState::assign`): a follower's OffsetsForLeaderEpoch query about an older epoch
    /// is answered with this log's end, so the follower keeps its divergent tail.
    LeaderSkipsEpochStart,
    /// The flusher's plan of a sync calls the bytes it covers synced at once
    /// (`LogPositions::take_sync`), before the fdatasync returns: the commit rule may
    /// acknowledge records a crash then loses.
    FlusherAcksBeforeFsync,
    /// Start-up recovery scans the last segment's batches only structurally, without their
    /// CRCs (`storage::recovery::scan`): a crash's torn tail whose lost sectors read as zeros
    /// inside a batch is kept as if whole.
    RecoverySkipsCrc,
    /// A truncation keeps the segment's offset-index entries at or past the cut
    /// (`SegmentMeta::cut_at`): the index points past the log end, so the segment's
    /// bookkeeping ends there too, and reads and the next append go astray.
    TruncationKeepsIndexPastEnd,
    /// A roll makes the next segment's name durable without syncing the closing segment first
    /// (`PartitionLog::roll`, the bug the simulator found once its logs rolled): a power cut
    /// that loses the closing segment's tail leaves a later segment after a gap.
    RollSkipsClosingSync,
    /// The undo of a failed append cuts the epoch cache too (`PartitionLog::write`, the bug
    /// the simulator found once replica logs could fill up): a new leader whose first append
    /// fails loses its own epoch's start, and a follower keeps a divergent tail.
    UndoDropsEpochStart,
    /// A replicated partition opens leading itself in epoch 0, as a single node's does
    /// (`ReplicaState::new`, the bug the simulator found once it ran `Partition`): a restarted
    /// replica takes appends before the controller's assignment reaches it, and commits them
    /// alone.
    OpenedReplicaLeadsAlone,
}

impl Bug {
    pub const ALL: [Bug; 20] = [
        Bug::RaftSkipsFsync,
        Bug::ElectOutOfSyncReplica,
        Bug::StaleIsrChange,
        Bug::SnapshotNotReported,
        Bug::SkipDivergentTruncation,
        Bug::AckBeforeQuorumSynced,
        Bug::RestartKeepsLeaderEpoch,
        Bug::JoinerNotCounted,
        Bug::ForgetProducerState,
        Bug::CoordinatorLoadsEarly,
        Bug::TruncationKeepsClosedTransactions,
        Bug::CompletionNotRetried,
        Bug::FollowerSkipsGapCheck,
        Bug::LeaderSkipsEpochStart,
        Bug::FlusherAcksBeforeFsync,
        Bug::RecoverySkipsCrc,
        Bug::TruncationKeepsIndexPastEnd,
        Bug::RollSkipsClosingSync,
        Bug::UndoDropsEpochStart,
        Bug::OpenedReplicaLeadsAlone,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::RaftSkipsFsync => "raft-skips-fsync",
            Bug::ElectOutOfSyncReplica => "elect-out-of-sync-replica",
            Bug::StaleIsrChange => "stale-isr-change",
            Bug::SnapshotNotReported => "snapshot-not-reported",
            Bug::SkipDivergentTruncation => "skip-divergent-truncation",
            Bug::AckBeforeQuorumSynced => "ack-before-quorum-synced",
            Bug::RestartKeepsLeaderEpoch => "restart-keeps-leader-epoch",
            Bug::JoinerNotCounted => "joiner-not-counted",
            Bug::ForgetProducerState => "forget-producer-state",
            Bug::CoordinatorLoadsEarly => "coordinator-loads-early",
            Bug::TruncationKeepsClosedTransactions => "truncation-keeps-closed-transactions",
            Bug::CompletionNotRetried => "completion-not-retried",
            Bug::FollowerSkipsGapCheck => "follower-skips-gap-check",
            Bug::LeaderSkipsEpochStart => "leader-skips-epoch-start",
            Bug::FlusherAcksBeforeFsync => "flusher-acks-before-fsync",
            Bug::RecoverySkipsCrc => "recovery-skips-crc",
            Bug::TruncationKeepsIndexPastEnd => "truncation-keeps-index-past-end",
            Bug::RollSkipsClosingSync => "roll-skips-closing-sync",
            Bug::UndoDropsEpochStart => "undo-drops-epoch-start",
            Bug::OpenedReplicaLeadsAlone => "opened-replica-leads-alone",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Bug::RaftSkipsFsync => {
                "the controller's Raft log is not fdatasynced before votes and appends are acknowledged"
            }
            Bug::ElectOutOfSyncReplica => {
                "a fenced leader's partitions elect any live replica, even one that lacks committed records"
            }
            Bug::StaleIsrChange => {
                "the controller accepts an in-sync set change from a deposed leader of an older epoch"
            }
            Bug::SnapshotNotReported => {
                "the controller leader never reports a snapshot sent, so a follower that missed it stays behind"
            }
            Bug::SkipDivergentTruncation => {
                "a follower of a new leader keeps its divergent tail (no KIP-279 truncation)"
            }
            Bug::AckBeforeQuorumSynced => {
                "a partition leader commits and acknowledges what it synced, before its in-sync followers have"
            }
            Bug::RestartKeepsLeaderEpoch => {
                "a leader restarted within its session keeps its epoch, so followers keep the tail it lost"
            }
            Bug::JoinerNotCounted => {
                "a replica asked to join the in-sync set does not hold the high watermark until it is in"
            }
            Bug::ForgetProducerState => {
                "a restarted node forgets its idempotent producers, so a retried batch is written twice"
            }
            Bug::CoordinatorLoadsEarly => {
                "a new group coordinator loads its offsets before its epoch start is committed, missing acknowledged commits"
            }
            Bug::TruncationKeepsClosedTransactions => {
                "a truncated replica keeps a transaction closed by a cut marker, so the marker fetched again gets no aborted-transaction entry"
            }
            Bug::CompletionNotRetried => {
                "a transaction coordinator does not retry a failed write of a completion, leaving the id preparing for good"
            }
            Bug::FollowerSkipsGapCheck => {
                "a follower appends fetched batches that do not continue its log (a late answer to a fetch it gave up on)"
            }
            Bug::LeaderSkipsEpochStart => {
                "a new leader does not note its epoch's start, so followers asking about older epochs keep divergent tails"
            }
            Bug::FlusherAcksBeforeFsync => {
                "the flusher calls a sync's bytes synced when it plans it, before the fdatasync returns"
            }
            Bug::RecoverySkipsCrc => {
                "recovery takes the last segment's batches without checking their CRCs, keeping a torn tail's zeroed sectors"
            }
            Bug::TruncationKeepsIndexPastEnd => {
                "a truncation keeps offset-index entries past the cut, so the index points past the log end"
            }
            Bug::RollSkipsClosingSync => {
                "a roll creates the next segment durably before the closing one is synced, so a power cut leaves a gap"
            }
            Bug::UndoDropsEpochStart => {
                "undoing a failed append cuts the leader's own epoch start from the epoch cache"
            }
            Bug::OpenedReplicaLeadsAlone => {
                "a replicated partition opens leading itself, taking appends before the controller assigns it"
            }
        }
    }

    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }
}

#[cfg(feature = "simulation")]
thread_local! {
    static PLANTED: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Plants `bug` (or none) on this thread.
#[cfg(feature = "simulation")]
pub fn plant(bug: Option<Bug>) {
    PLANTED.with(|p| p.set(bug));
}

/// Whether `bug` is planted: always false outside simulation builds.
#[cfg(feature = "simulation")]
pub fn active(bug: Bug) -> bool {
    PLANTED.with(|p| p.get() == Some(bug))
}

#[cfg(not(feature = "simulation"))]
#[inline(always)]
pub const fn active(_bug: Bug) -> bool {
    false
}
