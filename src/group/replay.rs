//! Start-up: rebuilds a shard's groups and committed offsets from the `__consumer_offsets`
//! partitions it owns. The latest value of each key wins; a null value deletes. A record whose
//! key or value cannot be decoded is skipped, counted (`sluice_group_records_undecodable_total`)
//! and reported: the first with its offset, then a total at the end of the replay.

use super::records::{self, Key};
use super::state::{CommittedOffset, StoredGroup};
use super::{GroupService, OFFSETS_TOPIC};
use crate::metrics::add;
use crate::partition::{Partition, ReadRequest};
use crate::protocol::batch;
use crate::protocol::chunk::Chunk;
use crate::shard::Shard;
use bytes::Bytes;
use std::collections::HashMap;
use std::rc::Rc;

/// Bytes read from a partition at a time during replay.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// The latest value seen per key (None: deleted, or not decodable).
#[derive(Default)]
struct Latest {
    groups: HashMap<String, Option<StoredGroup>>,
    offsets: HashMap<(String, String, i32), Option<CommittedOffset>>,
    records: u64,
    undecodable: u64,
}

pub async fn replay(shard: &Rc<Shard>) {
    let Some(topic) = shard.catalog().topics.get(OFFSETS_TOPIC).cloned() else {
        return;
    };
    let mut latest = Latest::default();
    for p in shard.partition_list() {
        if p.id().topic_id == topic.record.id {
            read_partition(&p, &mut latest).await;
        }
    }
    if latest.undecodable > 0 {
        add(
            &shard.metrics().group_records_undecodable,
            latest.undecodable,
        );
        log::warn!(
            "shard {}: skipped {} undecodable {OFFSETS_TOPIC} records during replay",
            shard.id,
            latest.undecodable
        );
    }
    restore(shard, latest);
}

/// Reads one partition from its start to its high watermark into `latest`.
async fn read_partition(partition: &Partition, latest: &mut Latest) {
    let mut offset = partition.log_start_offset();
    loop {
        let read = partition
            .read(ReadRequest {
                offset,
                max_bytes: REPLAY_READ_BYTES,
                leader_epoch: -1,
                zero_copy: false,
                whole_first_batch: true,
            })
            .await;
        let data = match read.records {
            Some(Chunk::Bytes(b)) if read.error_code == 0 && !b.is_empty() => b,
            _ => return,
        };
        match learn_batches(partition.name(), &data, latest) {
            Some(next) if next > offset => offset = next,
            _ => return,
        }
    }
}

/// Learns every record of the whole batches in `data`; returns the offset after the last.
fn learn_batches(partition: &str, data: &Bytes, latest: &mut Latest) -> Option<i64> {
    let mut at = 0;
    let mut next = None;
    while at < data.len() {
        let size = batch::peek_size(&data[at..])?;
        let bytes = &data[at..(at + size).min(data.len())];
        let h = batch::parse_header(bytes).ok()?;
        for r in batch::records(bytes).unwrap_or_default() {
            latest.records += 1;
            if !learn(r.key, r.value, latest) {
                latest.undecodable += 1;
                if latest.undecodable == 1 {
                    log::warn!(
                        "{partition}: an undecodable group record in the batch at offset {}; skipped",
                        h.base_offset
                    );
                }
            }
        }
        next = Some(h.next_offset());
        at += size;
    }
    next
}

/// Records one key/value; false when it cannot be decoded.
fn learn(key: Option<&[u8]>, value: Option<&[u8]>, latest: &mut Latest) -> bool {
    let Some(key) = key.and_then(|k| Key::decode(k).ok()) else {
        return false;
    };
    match key {
        Key::Group { group } => {
            let stored = match value {
                None => None,
                Some(v) => match records::decode_group(v) {
                    Ok(g) => Some(g),
                    Err(_) => return false,
                },
            };
            latest.groups.insert(group, stored);
        }
        Key::Offset {
            group,
            topic,
            partition,
        } => {
            let stored = match value {
                None => None,
                Some(v) => match records::decode_offset(v) {
                    Ok(o) => Some(o),
                    Err(_) => return false,
                },
            };
            latest.offsets.insert((group, topic, partition), stored);
        }
    }
    true
}

/// Hands what the replay found to the coordinator.
fn restore(shard: &Shard, latest: Latest) {
    let service = shard.service::<GroupService>();
    let now_ms = shard.clock().monotonic_ms();
    let mut c = service.coordinator.borrow_mut();
    for (group, stored) in latest.groups {
        if let Some(g) = stored {
            c.restore(now_ms, &group, g);
        }
    }
    for ((group, topic, partition), value) in latest.offsets {
        if let Some(v) = value {
            c.restore_offset(&group, topic, partition, v);
        }
    }
    if latest.records > 0 {
        log::info!(
            "shard {}: replayed {} group records, {} groups",
            shard.id,
            latest.records,
            c.groups.len()
        );
    }
}
