//! Loading: rebuilds a shard's groups and committed offsets from each `__consumer_offsets`
//! partition it owns when this node starts leading it (at start-up, and in a cluster whenever
//! leadership moves here; the groups of a partition whose leadership moves away are
//! forgotten). The latest value of each key wins; a null value deletes. A record whose
//! key or value cannot be decoded is skipped, counted (`sluice_group_records_undecodable_total`)
//! and reported: the first with its offset, then a total at the end of the replay.

use super::records::{self, Key};
use super::state::{CommittedOffset, Coordinator, StoredGroup};
use super::{GroupService, Groups, OFFSETS_TOPIC};
use crate::metrics::add;
use crate::partition::Partition;
use crate::protocol::batch;
use crate::shard::coordinator_load::{self, read_from_start, Coordinated};
use crate::shard::Shard;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::rc::Rc;

/// A committed offset's key: (group, topic, partition).
type OffsetKey = (String, String, i32);

/// The latest value seen per key (None: deleted, or not decodable).
#[derive(Default)]
pub struct Latest {
    groups: BTreeMap<String, Option<StoredGroup>>,
    offsets: BTreeMap<(String, String, i32), Option<CommittedOffset>>,
    /// Transactional offset commits by producer id, until their transaction's marker.
    pending: BTreeMap<i64, Vec<(OffsetKey, CommittedOffset)>>,
    records: u64,
    undecodable: u64,
}

/// How often a shard looks for `__consumer_offsets` partitions whose leadership changed.
const LEADERSHIP_CHECK_MS: u64 = 100;

/// Keeps the shard's coordinator in step with leadership of its `__consumer_offsets`
/// partitions: loads each one this node starts leading, forgets the groups of each it stops
/// leading. Runs for as long as the shard does.
pub async fn follow_leadership(groups: Rc<Groups>) {
    let shard = &groups.shard;
    while !shard.is_shutting_down() {
        load_led(&groups).await;
        shard.housekeeping_sleep(LEADERSHIP_CHECK_MS).await;
    }
}

/// One pass of `follow_leadership` (also the start-up load, before clients are served). A
/// partition whose epoch start is not committed yet is left for a later pass: its groups
/// answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
pub async fn load_led(groups: &Rc<Groups>) {
    coordinator_load::load_led(groups).await;
}

impl Coordinated for Groups {
    type Loaded = ();

    fn topic(&self) -> &'static str {
        OFFSETS_TOPIC
    }

    fn loaded(&self) -> &std::cell::RefCell<std::collections::HashMap<i32, u64>> {
        &self.loaded
    }

    fn unload(&self, index: i32, partitions: u32) {
        unload(&self.shard, self, index, partitions);
    }

    fn waits(&self, p: &Partition, epoch_start: i64) {
        note_load_wait(&self.shard, self, p, epoch_start);
    }

    async fn load(self: &Rc<Self>, p: &Partition, partitions: u32) {
        let index = p.id().partition;
        // Markers committed from here on may come after the replay's last read.
        self.unsettled.borrow_mut().retain(|(i, _, _)| *i != index);
        load(&self.shard, self, p).await;
        settle_held(self, index, partitions);
    }

    fn on_loaded(self: &Rc<Self>, (): ()) {}
}

/// Settles the transactions whose markers were committed on partition `index` during its
/// load. One the replay saw already is settled again, which changes nothing: no transaction
/// could write new offsets to a group that was not loaded.
fn settle_held(service: &GroupService, index: i32, partitions: u32) {
    let held: Vec<(i32, i64, bool)> = {
        let mut all = service.unsettled.borrow_mut();
        let (mine, rest) = all.drain(..).partition(|(i, _, _)| *i == index);
        *all = rest;
        mine
    };
    let mut c = service.coordinator.borrow_mut();
    for (_, producer_id, commit) in held {
        c.settle_txn(
            |g| super::offsets_partition(g, partitions) == index,
            producer_id,
            commit,
        );
    }
}

/// Says (at most every 10 s) that a led partition's groups wait for its epoch
/// start to be committed.
fn note_load_wait(shard: &Shard, service: &GroupService, p: &Partition, epoch_start: i64) {
    if let Some(more) = service
        .load_waits_logged
        .admit(shard.clock().monotonic_ms())
    {
        log::info!(
            "{}: its groups load once epoch start {epoch_start} is committed (high watermark {}); {more} such lines suppressed",
            p.name(),
            p.high_watermark()
        );
    }
}

/// Forgets the groups of `__consumer_offsets` partition `index`.
fn unload(shard: &Shard, service: &GroupService, index: i32, partitions: u32) {
    // Commits appended under the lost leadership: a later load replays what of them the log
    // kept.
    service
        .pending_commits
        .borrow_mut()
        .retain(|(i, _, _), _| *i != index);
    let gone = service
        .coordinator
        .borrow_mut()
        .unload(|g| super::offsets_partition(g, partitions) == index);
    if gone > 0 {
        log::info!(
            "shard {}: {OFFSETS_TOPIC}-{index} no longer led here; {gone} groups unloaded",
            shard.id
        );
    }
}

/// Loads one partition's groups and offsets, up to the high watermark.
async fn load(shard: &Shard, service: &GroupService, p: &Partition) {
    let mut latest = Latest::default();
    read_partition(p, &mut latest).await;
    if latest.undecodable > 0 {
        add(
            &shard.metrics().group_records_undecodable,
            latest.undecodable,
        );
        log::warn!(
            "{}: skipped {} undecodable records during replay",
            p.name(),
            latest.undecodable
        );
    }
    restore(shard, service, p.name(), latest);
}

/// Reads one partition from its start to its high watermark into `latest`.
async fn read_partition(partition: &Partition, latest: &mut Latest) {
    read_from_start(partition, |data| {
        learn_batches(partition.name(), data, latest)
    })
    .await
}

/// Learns every record of the whole batches in `data`; returns the offset after the last.
fn learn_batches(partition: &str, data: &Bytes, latest: &mut Latest) -> Option<i64> {
    let mut at = 0;
    let mut next = None;
    while at < data.len() {
        let size = batch::peek_size(&data[at..])?;
        let bytes = &data[at..(at + size).min(data.len())];
        let h = batch::parse_header(bytes).ok()?;
        next = Some(h.next_offset());
        at += size;
        if h.is_control() {
            latest.end_txn(partition, &h, bytes);
            continue;
        }
        let txn = h.is_transactional().then_some(h.producer_id);
        for r in batch::records(bytes).unwrap_or_default() {
            latest.records += 1;
            if !latest.learn_in(txn, r.key, r.value) {
                latest.undecodable += 1;
                if latest.undecodable == 1 {
                    log::warn!(
                        "{partition}: an undecodable group record in the batch at offset {}; skipped",
                        h.base_offset
                    );
                }
            }
        }
    }
    next
}

/// Records one key/value; false when it cannot be decoded.
pub fn learn(key: Option<&[u8]>, value: Option<&[u8]>, latest: &mut Latest) -> bool {
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
fn restore(shard: &Shard, service: &GroupService, partition: &str, latest: Latest) {
    let now_ms = shard.clock().monotonic_ms();
    let records = latest.records;
    let mut c = service.coordinator.borrow_mut();
    latest.restore_into(&mut c, now_ms);
    if records > 0 {
        log::info!(
            "shard {}: replayed {records} group records of {partition}, {} groups",
            shard.id,
            c.groups.len()
        );
    }
}

impl Latest {
    /// Learns one record, of producer `txn`'s transaction when given: a transactional offset
    /// commit waits for its marker. False when it cannot be decoded.
    fn learn_in(&mut self, txn: Option<i64>, key: Option<&[u8]>, value: Option<&[u8]>) -> bool {
        let Some(producer_id) = txn else {
            return learn(key, value, self);
        };
        let key = key.and_then(|k| Key::decode(k).ok());
        let value = value.map(records::decode_offset);
        let (
            Some(Key::Offset {
                group,
                topic,
                partition,
            }),
            Some(Ok(v)),
        ) = (key, value)
        else {
            return false;
        };
        let pending = self.pending.entry(producer_id).or_default();
        pending.push(((group, topic, partition), v));
        true
    }

    /// A marker: its producer's transactional offset commits take effect here, in log order
    /// (commit), or are dropped (abort).
    fn end_txn(&mut self, partition: &str, h: &batch::BatchHeader, bytes: &[u8]) {
        let Some(commit) = crate::protocol::control::commits(bytes) else {
            log::warn!(
                "{partition}: an unknown control record in the batch at offset {}; skipped",
                h.base_offset
            );
            return;
        };
        let Some(pending) = self.pending.remove(&h.producer_id) else {
            return;
        };
        if commit {
            for (key, value) in pending {
                self.offsets.insert(key, Some(value));
            }
        }
    }

    /// Gives the coordinator every group and offset found (deleted ones stay away).
    pub fn restore_into(self, c: &mut Coordinator, now_ms: u64) {
        for (group, stored) in self.groups {
            if let Some(g) = stored {
                c.restore(now_ms, &group, g);
            }
        }
        for ((group, topic, partition), value) in self.offsets {
            if let Some(v) = value {
                c.restore_offset(&group, topic, partition, v);
            }
        }
        for (producer_id, pending) in self.pending {
            for ((group, topic, partition), v) in pending {
                c.restore_pending_offset(&group, producer_id, (topic, partition), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::state::CoordinatorConfig;
    use crate::protocol::control;

    fn offset_record(group: &str, partition: i32, offset: i64) -> (Bytes, Bytes) {
        let key = Key::Offset {
            group: group.to_string(),
            topic: "t".to_string(),
            partition,
        };
        let value = CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        };
        (key.encode(), records::encode_offset(&value))
    }

    /// Batches laid end to end with offsets assigned, as a log holds them.
    fn log(batches: Vec<Vec<u8>>) -> Bytes {
        let mut out = Vec::new();
        let mut next = 0i64;
        for mut b in batches {
            b[0..8].copy_from_slice(&next.to_be_bytes());
            next += batch::parse_header(&b).unwrap().last_offset_delta as i64 + 1;
            out.extend(b);
        }
        Bytes::from(out)
    }

    fn txn_offsets(producer_id: i64, partition: i32, offset: i64) -> Vec<u8> {
        let (k, v) = offset_record("g", partition, offset);
        control::transactional(&[(Some(&k[..]), Some(&v[..]))], producer_id, 0, 0)
    }

    #[test]
    fn transactional_offsets_take_effect_at_their_commit_marker_only() {
        let (k, v) = offset_record("g", 0, 5);
        let plain = batch::build(&[(Some(&k[..]), Some(&v[..]))], 0);
        let data = log(vec![
            plain,
            txn_offsets(10, 0, 7), // committed below
            txn_offsets(11, 1, 9), // aborted below
            txn_offsets(12, 2, 4), // no marker yet
            control::marker(11, 0, false, 0, 0),
            control::marker(10, 0, true, 0, 0),
        ]);
        let mut latest = Latest::default();
        assert_eq!(learn_batches("p", &data, &mut latest), Some(6));
        assert_eq!(latest.undecodable, 0);
        let config = CoordinatorConfig {
            initial_rebalance_delay_ms: 0,
            min_session_timeout_ms: 6000,
            max_groups: 10,
            max_member_timers: 10,
        };
        let mut c = Coordinator::new(0, config, Box::new(crate::clock::SeededIds::new(1)));
        latest.restore_into(&mut c, 0);
        let g = &c.groups["g"];
        let committed: Vec<(i32, i64)> = g
            .offsets
            .committed()
            .map(|((_, p), o)| (*p, o.offset))
            .collect();
        assert_eq!(committed, vec![(0, 7)]);
        assert!(g.offsets.is_unstable("t", 2) && !g.offsets.is_unstable("t", 1));
        let g = c.group_mut("g");
        g.offsets.settle_txn(12, true);
        assert_eq!(g.offsets.get("t", 2).map(|o| o.offset), Some(4));
        assert!(!g.offsets.is_unstable("t", 2));
    }
}
