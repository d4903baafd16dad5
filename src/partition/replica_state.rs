//! What a partition knows of its replicas besides its log: the replicas and its role with the
//! commit rule over them (`commit.rs`), whether a follower must cut a divergent tail first,
//! which leadership this node holds and where its epoch began, the topic's
//! `min.insync.replicas`, and the high watermark last checkpointed.
//!
//! Invariant: the leader generation only grows, and moves exactly when this node starts a new
//! leadership; `epoch_start` is the log end at that moment.

use super::commit::{Replicas, Role};
use std::cell::{Cell, Ref, RefCell, RefMut};

pub struct ReplicaState {
    /// The replicas, this node's role, and the commit rule over them.
    replicas: RefCell<Replicas>,
    /// Set when this node starts following a new leader epoch: the fetcher cuts the log's
    /// divergent tail (OffsetsForLeaderEpoch) before it fetches.
    needs_truncation: Cell<bool>,
    /// Where this node's current leader epoch began in the log (a leader's view).
    epoch_start: Cell<i64>,
    /// Bumped each time this node becomes the partition's leader, so that state built from
    /// the log while leading (the coordinators') knows when to load it again.
    leader_generation: Cell<u64>,
    /// The topic's `min.insync.replicas`.
    min_insync_replicas: Cell<i32>,
    /// The high watermark last checkpointed (`hw_checkpoint.rs`); Some(i64::MAX) for a lone
    /// copy, which never checkpoints (its whole recovered log is committed).
    hw_checkpointed: Cell<Option<i64>>,
}

impl ReplicaState {
    /// A partition alone on this node until the controller assigns it (`replicated`: its
    /// topic has assignments, so its high watermark is checkpointed).
    pub fn new(min_insync_replicas: i32, replicated: bool) -> ReplicaState {
        ReplicaState {
            replicas: RefCell::new(Replicas::alone()),
            needs_truncation: Cell::new(false),
            epoch_start: Cell::new(0),
            leader_generation: Cell::new(0),
            min_insync_replicas: Cell::new(min_insync_replicas),
            hw_checkpointed: Cell::new(if replicated { None } else { Some(i64::MAX) }),
        }
    }

    pub fn replicas(&self) -> Ref<'_, Replicas> {
        self.replicas.borrow()
    }

    pub fn replicas_mut(&self) -> RefMut<'_, Replicas> {
        self.replicas.borrow_mut()
    }

    pub fn is_leader(&self) -> bool {
        self.replicas.borrow().is_leader()
    }

    pub fn is_follower(&self) -> bool {
        matches!(self.replicas.borrow().role, Role::Follower { .. })
    }

    /// This node became the leader with its log ending at `log_end`: a new leadership.
    pub fn begin_leading(&self, log_end: i64) {
        let generation = self.leader_generation.get() + 1;
        self.leader_generation.set(generation);
        self.epoch_start.set(log_end);
        assert!(self.is_leader(), "a leadership begins only on a leader");
    }

    /// While this node leads: its leadership's generation and the offset its epoch began at.
    pub fn leadership(&self) -> Option<(u64, i64)> {
        self.is_leader()
            .then(|| (self.leader_generation.get(), self.epoch_start.get()))
    }

    pub fn epoch_start(&self) -> i64 {
        self.epoch_start.get()
    }

    /// The in-sync replicas' count, and the topic's `min.insync.replicas` (at least 1).
    pub fn insync(&self) -> (usize, usize) {
        let isr = self.replicas.borrow().isr.len();
        (isr, self.min_insync_replicas.get().max(1) as usize)
    }

    pub fn set_min_insync_replicas(&self, min: i32) {
        self.min_insync_replicas.set(min);
    }

    pub fn needs_truncation(&self) -> bool {
        self.needs_truncation.get()
    }

    pub fn set_needs_truncation(&self, needed: bool) {
        self.needs_truncation.set(needed);
    }

    /// Whether a high watermark of `hw` is news to the checkpoint file.
    pub fn checkpoint_due(&self, hw: i64) -> bool {
        self.hw_checkpointed.get().is_none_or(|c| c < hw)
    }

    pub fn checkpointed(&self, hw: i64) {
        assert!(
            self.checkpoint_due(hw),
            "the checkpointed high watermark never moves back"
        );
        self.hw_checkpointed.set(Some(hw));
    }
}
