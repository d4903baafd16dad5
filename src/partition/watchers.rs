//! The waiters of one partition, one offset monitor per position they wait on: the high
//! watermark (consumers, acks=all produces), the last stable offset (read_committed
//! consumers), the written end (a follower's long poll on its leader) and the synced end (a
//! follower's fetcher before it reports what it synced).
//!
//! Each monitor wakes only the waiters an advance covers (see `monitor.rs`). Which position a
//! partition has reached is the partition's to say; this part only keeps and wakes waiters.

use super::monitor::{OffsetMonitor, Registration, Waiter};
use std::rc::Rc;

/// Which of a partition's positions a waiter waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// The high watermark (consumers reading uncommitted, acks=all produces).
    Committed,
    /// The last stable offset (read_committed consumers).
    Stable,
    /// The written end (a follower's fetch on its leader).
    Written,
    /// The synced end (a follower's fetcher, before it reports its position).
    Synced,
}

/// A partition's monitors, keyed by what their waiters wait for.
pub struct Watchers {
    committed: Rc<OffsetMonitor>,
    stable: Rc<OffsetMonitor>,
    written: Rc<OffsetMonitor>,
    synced: Rc<OffsetMonitor>,
}

impl Default for Watchers {
    fn default() -> Watchers {
        Watchers {
            committed: OffsetMonitor::new(),
            stable: OffsetMonitor::new(),
            written: OffsetMonitor::new(),
            synced: OffsetMonitor::new(),
        }
    }
}

impl Watchers {
    fn of(&self, what: Watch) -> &Rc<OffsetMonitor> {
        match what {
            Watch::Committed => &self.committed,
            Watch::Stable => &self.stable,
            Watch::Written => &self.written,
            Watch::Synced => &self.synced,
        }
    }

    /// Registers `waiter` to wake once the position `what` reaches `offset`. The caller has
    /// checked it has not already.
    pub fn register(&self, what: Watch, offset: i64, waiter: &Rc<Waiter>) -> Registration {
        self.of(what).register(offset, waiter)
    }

    /// The position `what` moved to `offset`: wakes the waiters it covers.
    pub fn advance(&self, what: Watch, offset: i64) {
        self.of(what).advance(offset);
    }

    /// This node stopped leading: acks=all producers and followers' long polls wake and find
    /// out (the partition answers NOT_LEADER_OR_FOLLOWER).
    pub fn wake_on_demotion(&self) {
        self.committed.wake_all();
        self.written.wake_all();
    }

    /// The partition failed or was deleted: every waiter wakes and finds it so.
    pub fn wake_all(&self) {
        for what in [
            Watch::Committed,
            Watch::Stable,
            Watch::Written,
            Watch::Synced,
        ] {
            self.of(what).wake_all();
        }
    }
}
