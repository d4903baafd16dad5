//! Group commit: one task per shard gathers every partition written since its last pass and
//! makes their new bytes durable (small appends through the shard's journal with one
//! fdatasync, larger ones with one fdatasync per file), then reports each to its partition,
//! whose commit rule moves the high watermark and wakes the waiters it commits. Producers with
//! acks=all wait for that, so they are answered only after the sync that covers them.

use super::Shard;
use crate::partition::journal::Batch;
use crate::storage::log::sync_files;
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

/// One group: takes the queued partitions, makes their new bytes durable (small appends in
/// one journal record each and one fdatasync of the journal, the rest by syncing their files,
/// concurrently), and reports the results. Holds the journal's lock throughout, so that no
/// partition changes its files under a pass (`partition/journal.rs`).
pub async fn sync_once(shard: &Shard) {
    let journal = &shard.env.journal;
    let _turn = journal.lock().await;
    let work = shard.env.sync_queue.take_work();
    let mut batch = Batch::default();
    let journaled: Vec<bool> = work
        .iter()
        .map(|(p, job)| journal.admit(&mut batch, p.name(), p.id().topic_id, job))
        .collect();
    let direct = work
        .iter()
        .zip(&journaled)
        .map(|((_, job), &j)| async move {
            if j {
                return Ok(0);
            }
            sync_files(&job.files).await
        });
    let started_us = shard.clock().monotonic_us();
    let (journal_result, mut results) =
        futures::join!(journal.commit(&batch), futures::future::join_all(direct));
    let mut fsyncs = match journal_result {
        Ok(n) => n,
        Err(e) => {
            log::error!(
                "shard {}: journal failed: {e}; appends are synced in their own files from now on",
                shard.id
            );
            for (((_, job), &j), result) in work.iter().zip(&journaled).zip(&mut results) {
                if j {
                    *result = sync_files(&job.files).await;
                }
            }
            0
        }
    };
    if !work.is_empty() {
        let metrics = shard.metrics();
        let took_us = shard.clock().monotonic_us().saturating_sub(started_us);
        metrics.flush_duration.observe(took_us);
        fsyncs += results.iter().flatten().sum::<u64>();
        crate::metrics::add(&metrics.fsyncs, fsyncs);
        crate::metrics::add(&metrics.journal_records, batch.records() as u64);
    }
    for ((partition, job), result) in work.into_iter().zip(results) {
        partition.complete_sync(job.target, result.map(|_| ()));
    }
}

/// Flushes whatever is left, for shutdown.
pub async fn drain(shard: &Shard) {
    while !shard.env.sync_queue.is_empty() {
        sync_once(shard).await;
    }
}
