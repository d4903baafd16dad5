//! Dropping a partition's old records: the periodic retention pass (`retention.ms`,
//! `retention.bytes`) and DeleteRecords. Both hold the partition's append lock, so that no
//! append, roll or truncation interleaves with a segment deletion. The rules themselves are
//! pure, in `storage/retention.rs`.

use super::env::Environment;
use super::fifo_lock::FifoLock;
use crate::metrics::add;
use crate::storage::log::PartitionLog;
use crate::storage::retention::{self, AdvanceError, Policy};
use kafka_protocol::ResponseError;
use std::cell::RefCell;

/// The parts of a partition that dropping old records works on (`Partition::retention`).
pub struct Retention<'a> {
    name: &'a str,
    log: &'a RefCell<PartitionLog>,
    append_lock: &'a FifoLock,
    env: &'a Environment,
}

impl<'a> Retention<'a> {
    pub fn new(
        name: &'a str,
        log: &'a RefCell<PartitionLog>,
        append_lock: &'a FifoLock,
        env: &'a Environment,
    ) -> Retention<'a> {
        Retention {
            name,
            log,
            append_lock,
            env,
        }
    }

    fn is_failed(&self) -> bool {
        self.log.borrow().failed
    }

    /// Deletes the oldest segments that `policy` lets go. A storage error is logged (rate
    /// limited) and counted; the next pass tries again.
    pub async fn enforce(&self, policy: Policy) {
        let _turn = self.append_lock.lock().await;
        if self.is_failed() {
            return;
        }
        if let Err(e) = self.delete_segments(policy).await {
            self.env.storage_error(self.name, "retention", &e);
        }
    }

    /// Deletes the oldest segments `policy` lets go. The caller holds the append lock.
    async fn delete_segments(&self, policy: Policy) -> std::io::Result<()> {
        let now_ms = self.env.clock.wall_ms();
        let count = retention::count(&self.log.borrow(), now_ms, policy);
        let freed = retention::delete_oldest(self.log, count, now_ms).await?;
        add(&self.env.metrics.retention_deleted_segments, count as u64);
        add(&self.env.metrics.retention_deleted_bytes, freed);
        Ok(())
    }

    /// DeleteRecords: moves the log start offset up to `offset` (-1: the high watermark),
    /// durably, and deletes the segments wholly below it. Returns the new low watermark.
    /// `deletes` is whether the topic's `cleanup.policy` includes `delete`: Kafka removes the
    /// records of a compacted topic by compaction alone.
    pub async fn delete_records(&self, offset: i64, deletes: bool) -> Result<i64, ResponseError> {
        if !deletes {
            return Err(ResponseError::PolicyViolation);
        }
        let _turn = self.append_lock.lock().await;
        if self.is_failed() {
            return Err(ResponseError::KafkaStorageError);
        }
        let advanced = match retention::advance_log_start(self.log, offset).await {
            Ok(Ok(low_watermark)) => self
                .delete_segments(Policy::LOG_START_ONLY)
                .await
                .map(|()| Ok(low_watermark)),
            other => other,
        };
        match advanced {
            Ok(Ok(low_watermark)) => Ok(low_watermark),
            Ok(Err(AdvanceError::OffsetOutOfRange)) => Err(ResponseError::OffsetOutOfRange),
            Err(e) => {
                self.env.storage_error(self.name, "delete records", &e);
                Err(ResponseError::KafkaStorageError)
            }
        }
    }
}
