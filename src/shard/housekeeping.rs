//! The shard's periodic passes over its partitions, each parked on the timing wheel between
//! runs: idle producer expiry, retention (`retention.ms`, `retention.bytes`) and the log
//! cleaner (compaction).

use super::Shard;
use crate::metrics::add;
use crate::partition::compaction::CleanPolicy;
use crate::storage::retention::Policy;
use std::rc::Rc;

/// Forgets idle idempotent producers (`producer_id_expiration_ms`), checking every quarter
/// of that period (at most every minute).
pub async fn expire_producers(shard: Rc<Shard>) {
    let expiration_ms = shard.config.producer_id_expiration_ms;
    let period_ms = (expiration_ms / 4).clamp(250, 60_000);
    loop {
        shard.housekeeping_sleep(period_ms).await;
        for p in shard.partition_list() {
            p.expire_producers(expiration_ms);
        }
    }
}

/// Applies retention to every partition each `log.retention_check_interval_ms`.
pub async fn enforce_retention(shard: Rc<Shard>) {
    let period_ms = shard.config.log.retention_check_interval_ms;
    loop {
        shard.housekeeping_sleep(period_ms).await;
        for p in shard.partition_list() {
            let policy = shard.catalog().by_id.get(&p.id().topic_id).map(|t| Policy {
                delete: t.config.deletes(),
                retention_ms: t.config.retention_ms,
                retention_bytes: t.config.retention_bytes,
            });
            if let Some(policy) = policy {
                p.retention().enforce(policy).await;
            }
        }
        add(&shard.metrics().retention_passes, 1);
    }
}

/// Cleans the compacted partitions each `log.cleaner.backoff.ms` (the config file's
/// `log.cleaner_interval_ms` unless changed dynamically; both cleaner settings are read
/// again for every pass).
pub async fn compact_logs(shard: Rc<Shard>) {
    loop {
        let period_ms = shard.catalog().broker.cleaner_backoff_ms;
        shard.housekeeping_sleep(period_ms).await;
        let catalog = shard.catalog();
        let dedupe_buffer_bytes = catalog.broker.cleaner_dedupe_buffer_bytes;
        for p in shard.partition_list() {
            let policy = catalog.by_id.get(&p.id().topic_id).and_then(|t| {
                t.config.compacts().then_some(CleanPolicy {
                    min_dirty_ratio: t.config.min_cleanable_dirty_ratio,
                    delete_retention_ms: t.config.delete_retention_ms,
                    min_lag_ms: t.config.min_compaction_lag_ms,
                    max_lag_ms: t.config.max_compaction_lag_ms,
                    dedupe_buffer_bytes,
                })
            });
            if let Some(policy) = policy {
                p.compaction().compact(policy).await;
            }
        }
        add(&shard.metrics().cleaner_passes, 1);
    }
}

/// Checkpoints replicated partitions' high watermarks every 5 s (Kafka's
/// replica.high.watermark.checkpoint.interval.ms).
pub async fn checkpoint_high_watermarks(shard: Rc<Shard>) {
    const PERIOD_MS: u64 = 5_000;
    while !shard.is_shutting_down() {
        shard.housekeeping_sleep(PERIOD_MS).await;
        for p in shard.partition_list() {
            p.checkpoint_high_watermark();
        }
    }
}
