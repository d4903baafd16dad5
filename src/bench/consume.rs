//! Consumer threads: one librdkafka consumer each, reading an assigned share of the
//! partitions, pinned to a core.

use super::args::{BenchArgs, Mode};
use super::payload;
use super::stats::Meter;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct Shared {
    pub meter: Meter,
    pub stop: AtomicBool,
    pub epoch: Instant,
    /// Records received in total (for --count in consume mode).
    pub received: AtomicU64,
    /// (producer, seq) of every record received in e2e mode, to prove none was lost.
    pub seen: Mutex<HashSet<(u32, u64)>>,
    pub duplicates: AtomicU64,
}

pub fn client_config(args: &BenchArgs) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &args.bootstrap)
        .set("group.id", format!("sluice-bench-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    for (k, v) in &args.client_config {
        c.set(k, v);
    }
    c
}

/// Assigns partitions `worker, worker + consumers, …` starting at `starts[p]`.
pub fn run(
    worker: usize,
    args: &BenchArgs,
    shared: Arc<Shared>,
    starts: &[Offset],
) -> Result<(), KafkaError> {
    let consumer: BaseConsumer = client_config(args).create()?;
    let mut tpl = TopicPartitionList::new();
    for (p, start) in starts
        .iter()
        .enumerate()
        .skip(worker)
        .step_by(args.consumers)
    {
        tpl.add_partition_offset(&args.topic, p as i32, *start)?;
    }
    if tpl.count() == 0 {
        return Ok(()); // more consumers than partitions
    }
    consumer.assign(&tpl)?;
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(result) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let msg = match result {
            Ok(m) => m,
            Err(e) => {
                shared.meter.error();
                eprintln!("bench: consume error: {e}");
                continue;
            }
        };
        let payload = msg.payload().unwrap_or_default();
        let latency_us = match args.mode {
            Mode::E2e => match payload::read(payload) {
                Some(stamp) => {
                    if !shared
                        .seen
                        .lock()
                        .expect("seen lock")
                        .insert((stamp.producer, stamp.seq))
                    {
                        shared.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    (shared.epoch.elapsed().as_nanos() as u64).saturating_sub(stamp.sent_ns) / 1000
                }
                None => {
                    shared.meter.error();
                    continue;
                }
            },
            // Consume mode: the age of the record when it arrives.
            _ => {
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0);
                let ts = msg.timestamp().to_millis().unwrap_or(now_ms);
                (now_ms - ts).max(0) as u64 * 1000
            }
        };
        shared.meter.record(worker, payload.len(), latency_us);
        shared.received.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
