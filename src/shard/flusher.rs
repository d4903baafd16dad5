//! Group commit: one task per shard gathers every partition written since its last pass and
//! covers them with one fdatasync per file, then reports each completed sync to its partition,
//! whose commit rule moves the high watermark and wakes the waiters it commits. Producers with
//! acks=all wait for that, so they are answered only after the sync that covers them.

use super::Shard;
use std::rc::Rc;
use std::time::Duration;

pub async fn run(shard: Rc<Shard>) {
    let interval_ms = shard.config.log.flush_interval_ms;
    let queue = &shard.env.sync_queue;
    loop {
        if queue.is_empty() {
            if shard.is_shutting_down() {
                return;
            }
            let listener = queue.listen();
            if queue.is_empty() {
                listener.await;
                continue;
            }
        }
        if interval_ms > 0 {
            // Let more appends join this group.
            glommio::timer::sleep(Duration::from_millis(interval_ms)).await;
        }
        sync_once(&shard).await;
    }
}

/// One group: takes the queued partitions, syncs them concurrently, reports the results.
pub async fn sync_once(shard: &Shard) {
    let work: Vec<_> = shard
        .env
        .sync_queue
        .take()
        .into_iter()
        .filter_map(|partition| partition.take_sync_work().map(|job| (partition, job)))
        .collect();
    let syncs = work.iter().map(|(_, job)| async move {
        for file in &job.files {
            file.fdatasync().await.map_err(std::io::Error::from)?;
        }
        Ok::<(), std::io::Error>(())
    });
    let started_us = shard.clock().monotonic_us();
    let results = futures::future::join_all(syncs).await;
    if !work.is_empty() {
        let metrics = shard.metrics();
        let took_us = shard.clock().monotonic_us().saturating_sub(started_us);
        metrics.flush_duration.observe(took_us);
        let files: usize = work.iter().map(|(_, job)| job.files.len()).sum();
        crate::metrics::add(&metrics.fsyncs, files as u64);
    }
    for ((partition, job), result) in work.into_iter().zip(results) {
        partition.complete_sync(job.target, result);
    }
}

/// Flushes whatever is left, for shutdown.
pub async fn drain(shard: &Shard) {
    while !shard.env.sync_queue.is_empty() {
        sync_once(shard).await;
    }
}
