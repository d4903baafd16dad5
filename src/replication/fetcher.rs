//! The follower fetch loop: on each shard, one task per leader this shard's partitions follow,
//! over one connection to that leader's Kafka listener (so per shard pair: the kernel hands
//! the connection to one of the leader's shards, which routes each partition to its owner over
//! the mesh, as for any fetch).
//!
//! A round: cut the divergent tail of partitions that started following a new epoch
//! (OffsetForLeaderEpoch, KIP-101/279), then one Fetch (with this node's replica id) of every
//! followed partition from its log end, append what came, wait for this node's fsync of it,
//! and only then fetch again: the next fetch's offsets tell the leader what is synced here,
//! which is what its commit rule counts (`partition/commit.rs`).

use super::follower_rules::{next_ask, react, Ask, Fetched, Reaction};
use crate::partition::replica_state::FollowerView;
use crate::partition::{Partition, Watch};
use crate::protocol::topics::group_by_topic;
use crate::rpc::kafka_client::KafkaClient;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, OffsetForLeaderEpochRequest,
};
use kafka_protocol::ResponseError;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// Who the leader sees fetching.
const CLIENT_ID: &str = "sluice-replica-fetcher";
/// Fetch version the follower speaks: topics by name, replica id in the request.
const FETCH_VERSION: i16 = 12;
const EPOCH_VERSION: i16 = 3;
/// How long a follower's fetch parks on the leader when there is nothing new.
const MAX_WAIT_MS: i32 = 500;
/// Bounds on one fetch's bytes (Kafka's replica.fetch.max.bytes and
/// replica.fetch.response.max.bytes).
const PARTITION_MAX_BYTES: i32 = 1 << 20;
const RESPONSE_MAX_BYTES: i32 = 10 << 20;
/// How long a response (after the long poll) or this node's sync may take before the round
/// is abandoned and retried.
const CALL_LIMIT: Duration = Duration::from_secs(10);
const SYNC_LIMIT_MS: u64 = 30_000;
/// Pause after a failed round (leader unreachable, stale metadata).
const BACKOFF_MS: u64 = 200;

/// A followed partition in one round.
struct Followed {
    partition: Rc<Partition>,
    topic: Rc<str>,
    index: i32,
    view: FollowerView,
}

/// Follows `leader` for this shard's partitions until none follows it any more.
pub async fn follow(shard: Rc<Shard>, leader: i32) {
    let mut client: Option<KafkaClient> = None;
    let mut failures = 0u64;
    while !shard.is_shutting_down() {
        let followed = followed_from(&shard, leader);
        if followed.is_empty() {
            return;
        }
        let Some(target) = shard.inter_broker_target(leader) else {
            shard.housekeeping_sleep(BACKOFF_MS).await;
            continue;
        };
        if client.as_ref().is_none_or(|c| c.target != target) {
            let login = shard.login.clone();
            client = Some(KafkaClient::new(target, CLIENT_ID, login));
        }
        let c = client.as_mut().expect("just made");
        match round(&shard, c, followed).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(50) {
                    log::warn!(
                        "shard {}: replicating from node {leader} ({}): {e} ({failures} failed rounds)",
                        shard.id,
                        c.target.addr
                    );
                }
                shard.housekeeping_sleep(BACKOFF_MS).await;
            }
        }
    }
}

/// This shard's partitions that follow `leader` now.
pub fn followed_from(shard: &Shard, leader: i32) -> Vec<(Rc<Partition>, FollowerView)> {
    shard
        .partition_list()
        .into_iter()
        .filter_map(|p| {
            let view = p.replication().follower_view()?;
            (view.leader == leader).then_some((p, view))
        })
        .collect()
}

async fn round(
    shard: &Rc<Shard>,
    client: &mut KafkaClient,
    followed: Vec<(Rc<Partition>, FollowerView)>,
) -> std::io::Result<()> {
    let catalog = shard.catalog();
    let followed: Vec<Followed> = followed
        .into_iter()
        .filter_map(|(partition, view)| {
            let topic = catalog.by_id.get(&partition.id().topic_id)?;
            Some(Followed {
                topic: Rc::from(&*topic.name),
                index: partition.id().partition,
                partition,
                view,
            })
        })
        .collect();
    // Each partition's next request, decided once: (partition, epoch, newest epoch) to check,
    // (partition, epoch, offset) to fetch.
    let (mut diverged, mut ready) = (Vec::new(), Vec::new());
    for f in followed {
        match next_ask(&f.view) {
            Ask::EpochEnd { epoch, latest } => diverged.push((f, epoch, latest)),
            Ask::Fetch { epoch, offset } => ready.push((f, epoch, offset)),
        }
    }
    if !diverged.is_empty() {
        truncate(shard, client, &diverged).await?;
    }
    if ready.is_empty() {
        return Ok(());
    }
    fetch(shard, client, ready).await
}

/// Asks the leader where each partition's newest epoch ends and cuts the log there.
async fn truncate(
    shard: &Shard,
    client: &mut KafkaClient,
    diverged: &[(Followed, i32, i32)],
) -> std::io::Result<()> {
    let topics = group_by_topic(diverged.iter().map(|(f, epoch, latest)| {
        let p = OffsetForLeaderPartition::default()
            .with_partition(f.index)
            .with_current_leader_epoch(*epoch)
            .with_leader_epoch(*latest);
        (f.topic.clone(), p)
    }))
    .into_iter()
    .map(|(topic, partitions)| {
        OffsetForLeaderTopic::default()
            .with_topic(topic)
            .with_partitions(partitions)
    })
    .collect();
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(shard.catalog().here.node_id))
        .with_topics(topics);
    let resp = client.call(EPOCH_VERSION, &req, CALL_LIMIT).await?;
    let mut answers = HashMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            answers.insert((t.topic.0.to_string(), p.partition), p.clone());
        }
    }
    for (f, _, _) in diverged {
        let Some(a) = answers.get(&(f.topic.to_string(), f.index)) else {
            continue;
        };
        if a.error_code != 0 {
            continue; // stale metadata on one side: the next round asks again
        }
        let replication = f.partition.replication();
        let (end, complete) = replication.cut_point((a.leader_epoch, a.end_offset));
        if let Err(e) = replication.truncate_diverged(end, complete).await {
            log::error!(
                "replica of {}: truncation failed: {e:?}",
                f.partition.name()
            );
        }
    }
    Ok(())
}

/// One Fetch of every ready partition from its log end; appends what came, waits for its
/// fsync here, then takes the leader's high watermarks.
async fn fetch(
    shard: &Shard,
    client: &mut KafkaClient,
    ready: Vec<(Followed, i32, i64)>,
) -> std::io::Result<()> {
    let req = fetch_request(shard.catalog().here.node_id, &ready);
    let ready: Vec<Followed> = ready.into_iter().map(|(f, _, _)| f).collect();
    let resp: FetchResponse = client.call(FETCH_VERSION, &req, CALL_LIMIT).await?;
    let by_key: HashMap<(&str, i32), &Followed> =
        ready.iter().map(|f| ((&*f.topic, f.index), f)).collect();
    // (partition, its end after this round's append, the leader's high watermark and log start)
    let mut appended: Vec<(&Followed, i64, i64, i64)> = Vec::new();
    let mut stale = false;
    for t in &resp.responses {
        for p in &t.partitions {
            let Some(f) = by_key.get(&(t.topic.0.as_str(), p.partition_index)) else {
                continue;
            };
            let Some(end) = take_answer(f, p, &mut stale).await else {
                continue;
            };
            appended.push((f, end, p.high_watermark, p.log_start_offset));
        }
    }
    let deadline_ms = shard.clock().monotonic_ms() + SYNC_LIMIT_MS;
    for (f, end, leader_hw, leader_log_start) in appended {
        let deadline = shard.housekeeping_sleep_until(deadline_ms);
        f.partition.wait_for(Watch::Synced, end, deadline).await;
        take_leader_offsets(&f.partition, (leader_hw, leader_log_start)).await;
    }
    if stale {
        shard.housekeeping_sleep(BACKOFF_MS).await;
    }
    Ok(())
}

/// One partition's fetch answer (`take_fetched`): its log end after this round's append, or
/// None where it was cut, restarted, or is stale (then `stale` is set).
async fn take_answer(f: &Followed, p: &PartitionData, stale: &mut bool) -> Option<i64> {
    let records = p.records.clone().filter(|r| !r.is_empty());
    let offsets = (p.high_watermark, p.log_start_offset);
    let fetched = Fetched::of(p.error_code, records.as_ref(), offsets);
    match take_fetched(&f.partition, &f.view, &fetched, records).await {
        Taken::WaitSynced(end) => Some(end),
        Taken::Rewritten => None,
        Taken::BackOff => {
            *stale = true;
            None
        }
    }
}

/// What a follower's taking of one partition's fetch answer left to do (`take_fetched`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Wait until the log is synced up to this end (what came was appended, or nothing
    /// came), then take the leader's high watermark and log start.
    WaitSynced(i64),
    /// The log was cut past the leader's end, or restarted at the leader's log start: the
    /// next round fetches from its new end.
    Rewritten,
    /// Not the leader any more, a newer epoch there, or the append failed: pause, then ask
    /// again.
    BackOff,
}

/// Takes one partition's fetch answer (`fetched`, with the `records` that came) as
/// `follower_rules::react` decides, the follower being in the state `view` says. The
/// simulator takes its followers' answers through this too.
pub async fn take_fetched(
    partition: &Rc<Partition>,
    view: &FollowerView,
    fetched: &Fetched,
    records: Option<Bytes>,
) -> Taken {
    match react(view, partition.log_start_offset(), fetched) {
        Reaction::Nothing => Taken::WaitSynced(view.log_end_offset),
        Reaction::Append { restart_at } => {
            let records = records.expect("an append reacts to records that came");
            match append_from_leader(partition, restart_at, records).await {
                Ok(end) => Taken::WaitSynced(end),
                Err(e) => {
                    log::warn!("replica of {}: append failed: {e:?}", partition.name());
                    Taken::BackOff
                }
            }
        }
        Reaction::RestartAt(start) => {
            restart_at_leader_start(partition, start).await;
            Taken::Rewritten
        }
        Reaction::TruncateTo(offset) => {
            truncate_past_leader_end(partition, offset).await;
            Taken::Rewritten
        }
        Reaction::Stale => Taken::BackOff,
    }
}

/// What a follower takes of its leader's fetch answer once it synced what came
/// (`Taken::WaitSynced`): the leader's high watermark, then its log start.
pub async fn take_leader_offsets(partition: &Partition, (high_watermark, log_start): (i64, i64)) {
    let replication = partition.replication();
    replication.learn_leader_high_watermark(high_watermark);
    replication.learn_leader_log_start(log_start).await;
}

/// Appends what the leader sent, after moving an empty log back to `restart_at`
/// (`Reaction::Append`).
async fn append_from_leader(
    partition: &Rc<Partition>,
    restart_at: Option<i64>,
    records: Bytes,
) -> Result<i64, ResponseError> {
    if let Some(base) = restart_at {
        partition.replication().restart_log_at(base).await?;
    }
    partition.append_replica(records).await
}

/// `Reaction::RestartAt`: an empty log at the leader's log start replaces this one.
async fn restart_at_leader_start(partition: &Partition, leader_log_start: i64) {
    if let Err(e) = partition
        .replication()
        .restart_log_at(leader_log_start)
        .await
    {
        log::error!(
            "replica of {}: restart at the leader's log start failed: {e:?}",
            partition.name()
        );
    }
}

/// `Reaction::TruncateTo`: the tail past the leader's high watermark goes.
async fn truncate_past_leader_end(partition: &Partition, leader_hw: i64) {
    if let Err(e) = partition
        .replication()
        .truncate_diverged(leader_hw, true)
        .await
    {
        log::error!("replica of {}: truncation failed: {e:?}", partition.name());
    }
}

fn fetch_request(node_id: i32, ready: &[(Followed, i32, i64)]) -> FetchRequest {
    let topics = group_by_topic(ready.iter().map(|(f, epoch, offset)| {
        let p = FetchPartition::default()
            .with_partition(f.index)
            .with_current_leader_epoch(*epoch)
            .with_fetch_offset(*offset)
            .with_partition_max_bytes(PARTITION_MAX_BYTES);
        (f.topic.clone(), p)
    }))
    .into_iter()
    .map(|(topic, partitions)| {
        FetchTopic::default()
            .with_topic(topic)
            .with_partitions(partitions)
    })
    .collect();
    FetchRequest::default()
        .with_replica_id(BrokerId(node_id))
        .with_max_wait_ms(MAX_WAIT_MS)
        .with_min_bytes(1)
        .with_max_bytes(RESPONSE_MAX_BYTES)
        .with_session_epoch(-1)
        .with_topics(topics)
}
