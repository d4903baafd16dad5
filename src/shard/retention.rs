//! What a shard does to drop old records from its partitions: the periodic retention pass
//! (`retention.ms`, `retention.bytes`) and DeleteRecords. Both run under the partition's append
//! lock, so that no append, roll or truncation interleaves with a segment deletion.

use super::{now_ms, Partition, Shard};
use crate::storage::log::PartitionLog;
use crate::storage::retention::{AdvanceError, Policy};
use kafka_protocol::ResponseError;
use std::rc::Rc;

impl Shard {
    /// Applies retention to every partition of this shard each
    /// `log.retention_check_interval_ms`, parked on the timing wheel in between.
    pub async fn enforce_retention(self: Rc<Self>) {
        let period_ms = self.config.log.retention_check_interval_ms;
        loop {
            self.housekeeping_sleep(period_ms).await;
            for ((topic, p), partition) in self.partition_list() {
                let Some(policy) = self.retention_policy(&topic) else {
                    continue; // deleted meanwhile
                };
                let Ok(_permit) = partition.append_lock.acquire_permit(1).await else {
                    continue; // the partition is closing
                };
                if partition.log.borrow().failed {
                    continue;
                }
                if let Err(e) = self.delete_segments(&partition, policy).await {
                    self.storage_error(&topic, p, "retention", &e);
                }
            }
        }
    }

    fn retention_policy(&self, topic: &str) -> Option<Policy> {
        let catalog = self.catalog();
        let config = &catalog.topics.get(topic)?.config;
        Some(Policy {
            delete: config.deletes(),
            retention_ms: config.retention_ms,
            retention_bytes: config.retention_bytes,
        })
    }

    /// Deletes the oldest segments `policy` lets go. The caller holds the append lock.
    async fn delete_segments(&self, partition: &Partition, policy: Policy) -> std::io::Result<()> {
        let now = now_ms();
        let count = partition.log.borrow().retention_count(now, policy);
        let freed = PartitionLog::delete_oldest(&partition.log, count, now).await?;
        crate::metrics::add(&self.metrics.retention_deleted_segments, count as u64);
        crate::metrics::add(&self.metrics.retention_deleted_bytes, freed);
        Ok(())
    }

    /// DeleteRecords for partitions of this shard: (error code, low watermark) per item.
    pub(crate) async fn delete_records_local(
        &self,
        items: Vec<(String, i32, i64)>,
    ) -> Vec<(i16, i64)> {
        let mut out = Vec::with_capacity(items.len());
        for (topic, p, offset) in items {
            out.push(self.delete_records_one(&topic, p, offset).await);
        }
        out
    }

    async fn delete_records_one(&self, topic: &str, p: i32, offset: i64) -> (i16, i64) {
        let fail = |e: ResponseError| (e.code(), -1);
        let (Some(partition), Some(policy)) =
            (self.partition(topic, p), self.retention_policy(topic))
        else {
            return fail(ResponseError::UnknownTopicOrPartition);
        };
        if !policy.delete {
            // Kafka: records of a compacted topic are removed by compaction alone.
            return fail(ResponseError::PolicyViolation);
        }
        let Ok(_permit) = partition.append_lock.acquire_permit(1).await else {
            return fail(ResponseError::KafkaStorageError);
        };
        if partition.log.borrow().failed {
            return fail(ResponseError::KafkaStorageError);
        }
        let advanced = match PartitionLog::advance_log_start(&partition.log, offset).await {
            Ok(Ok(low_watermark)) => self
                .delete_segments(&partition, Policy::LOG_START_ONLY)
                .await
                .map(|()| Ok(low_watermark)),
            other => other,
        };
        match advanced {
            Ok(Ok(low_watermark)) => (0, low_watermark),
            Ok(Err(AdvanceError::OffsetOutOfRange)) => fail(ResponseError::OffsetOutOfRange),
            Err(e) => {
                self.storage_error(topic, p, "delete records", &e);
                fail(ResponseError::KafkaStorageError)
            }
        }
    }
}
