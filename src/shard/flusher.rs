//! Group commit: one task per shard gathers every partition written since its last pass and
//! covers them with one fdatasync per file, then advances their high watermarks. Producers with
//! acks=all wait for that advance, so they are answered only after the sync that covers them.

use super::Shard;
use std::rc::Rc;
use std::time::Duration;

pub async fn run(shard: Rc<Shard>) {
    let interval_ms = shard.config.log.flush_interval_ms;
    loop {
        if shard.sync_queue.borrow().is_empty() {
            if shard.shutting_down.get() {
                return;
            }
            let listener = shard.sync_needed.listen();
            if shard.sync_queue.borrow().is_empty() {
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

/// One group: takes the queued partitions, syncs them concurrently, publishes the results.
pub async fn sync_once(shard: &Rc<Shard>) {
    let queued = std::mem::take(&mut *shard.sync_queue.borrow_mut());
    let mut work = Vec::with_capacity(queued.len());
    for partition in queued {
        partition.queued_for_sync.set(false);
        let job = partition.log.borrow_mut().take_sync_work();
        if let Some(job) = job {
            work.push((partition, job));
        }
    }
    let syncs = work.iter().map(|(_, job)| async move {
        for file in &job.files {
            file.fdatasync().await?;
        }
        Ok::<(), glommio::GlommioError<()>>(())
    });
    let results = futures::future::join_all(syncs).await;
    for ((partition, job), result) in work.into_iter().zip(results) {
        let mut log = partition.log.borrow_mut();
        match result {
            Ok(()) => log.complete_sync(job.target),
            Err(e) => {
                log::error!(
                    "fdatasync of {} failed: {e}; the partition is offline until restart",
                    log.dir.display()
                );
                log.failed = true;
            }
        }
    }
    shard.hw_advanced.notify(usize::MAX);
}

/// Flushes whatever is left, for shutdown.
pub async fn drain(shard: &Rc<Shard>) {
    while !shard.sync_queue.borrow().is_empty() {
        sync_once(shard).await;
    }
}
