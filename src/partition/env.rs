//! What the partitions of one shard share: the clock, the shard's counters, the flusher's queue,
//! the shard's journal and the rate limit on storage error log lines. The shard creates one and
//! hands it to every partition it opens.

use super::fifo_lock::Guard;
use super::journal::Journal;
use super::Partition;
use crate::clock::Clock;
use crate::metrics::{bump, LogLimiter, ShardMetrics};
use crate::storage::log::SyncWork;
use event_listener::{Event, EventListener};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Storage errors are logged at most this often per shard (all are counted in the metrics).
const STORAGE_ERROR_LOG_INTERVAL_MS: u64 = 1000;

pub struct Environment {
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<ShardMetrics>,
    pub sync_queue: SyncQueue,
    /// Where the flusher makes small appends durable (`journal.rs`); opened by the shard.
    pub journal: Journal,
    storage_errors: LogLimiter,
}

impl Environment {
    pub fn new(clock: Arc<dyn Clock>, metrics: Arc<ShardMetrics>) -> Rc<Environment> {
        Rc::new(Environment {
            clock,
            metrics,
            sync_queue: SyncQueue::default(),
            journal: Journal::disabled(),
            storage_errors: LogLimiter::new(STORAGE_ERROR_LOG_INTERVAL_MS),
        })
    }

    /// The journal's fence (`Journal::fence`: the lock returned held), its fdatasyncs counted
    /// with the flusher's in `sluice_fsyncs_total`.
    pub async fn fence_journal(&self) -> std::io::Result<Guard> {
        let (held, fsyncs) = self.journal.fence().await?;
        crate::metrics::add(&self.metrics.fsyncs, fsyncs);
        Ok(held)
    }

    /// Counts a failed storage operation and logs it, at most once a second per shard:
    /// producers retry a full disk as fast as they can, and the log must not fill it further.
    pub fn storage_error(&self, partition: &str, what: &str, e: &std::io::Error) {
        bump(&self.metrics.storage_errors);
        if let Some(suppressed) = self.storage_errors.admit(self.clock.monotonic_ms()) {
            log::error!(
                "partition {partition}: {what} failed: {e} ({suppressed} more storage errors since the last line)"
            );
        }
    }
}

/// One flusher pass's work: each partition with what to sync of it.
pub type SyncPass = Vec<(Rc<Partition>, SyncWork)>;

/// Partitions with written but unsynced data, in the order they became dirty, for the shard's
/// flusher (group commit). A partition is queued at most once (`Partition::queued_for_sync`).
#[derive(Default)]
pub struct SyncQueue {
    queued: RefCell<Vec<Rc<Partition>>>,
    /// Wakes the flusher when the queue gains work (or the shard stops).
    work: Event,
}

impl SyncQueue {
    pub(super) fn push(&self, partition: Rc<Partition>) {
        self.queued.borrow_mut().push(partition);
        self.work.notify(1);
    }

    /// One sync pass's work: every queued partition with what to sync of it
    /// (`Partition::take_sync_work`), each taken off the queue.
    pub fn take_work(&self) -> SyncPass {
        let queued = std::mem::take(&mut *self.queued.borrow_mut());
        queued
            .into_iter()
            .filter_map(|partition| partition.take_sync_work().map(|job| (partition, job)))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.borrow().is_empty()
    }

    pub fn listen(&self) -> EventListener {
        self.work.listen()
    }

    /// Wakes the flusher whatever the queue holds (shutdown).
    pub fn wake(&self) {
        self.work.notify(usize::MAX);
    }
}
