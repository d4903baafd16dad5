//! Fetch: decoded with kafka-protocol (no record bytes in a request), served by the owning
//! shards, encoded by the hand-written encoder so record bytes go out as read.
//!
//! Long poll: when fewer than min_bytes are available, the request parks on the owning shards
//! until a high watermark moves past a fetched offset or max_wait_ms passes, then re-reads.
//! Fetch sessions (KIP-227) are declined by answering session id 0, which clients accept by
//! sending full fetches.

use super::{decode, Reply};
use crate::protocol::chunk::Chunk;
use crate::protocol::fetch::{self as codec, PartitionResponse, TopicResponse};
use crate::shard::messages::{FetchItem, FetchOutcome, ShardReply, ShardRequest};
use crate::shard::{now_ms, Shard};
use bytes::Bytes;
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// Upper bound on max_wait_ms, so a client cannot park a request for hours.
const MAX_WAIT_MS_LIMIT: i32 = 5 * 60 * 1000;

fn failed(e: ResponseError) -> FetchOutcome {
    FetchOutcome {
        error_code: e.code(),
        high_watermark: -1,
        log_start_offset: -1,
        records: None,
    }
}

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: FetchRequest = decode(body, version)?;
    let catalog = shard.catalog();
    let response_max_bytes = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    let mut items = Vec::new();
    let mut layout = Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let name = if version >= 13 {
            catalog.by_id.get(topic.topic_id.as_bytes()).cloned()
        } else {
            Some(topic.topic.0.to_string())
        };
        let meta = name.as_ref().and_then(|n| catalog.topics.get(n));
        let mut row = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let slot = match (&name, meta) {
                (None, _) => Err(ResponseError::UnknownTopicId),
                (Some(_), None) => Err(ResponseError::UnknownTopicOrPartition),
                (Some(_), Some(t))
                    if p.partition < 0 || p.partition >= t.record.partitions as i32 =>
                {
                    Err(ResponseError::UnknownTopicOrPartition)
                }
                (Some(n), Some(_)) => {
                    items.push(FetchItem {
                        topic: n.clone(),
                        partition: p.partition,
                        offset: p.fetch_offset,
                        max_bytes: (p.partition_max_bytes.max(0) as usize).min(response_max_bytes),
                        leader_epoch: p.current_leader_epoch,
                        zero_copy: shard.config.fetch.zero_copy,
                    });
                    Ok(items.len() - 1)
                }
            };
            row.push((p.partition, slot));
        }
        let id = meta
            .map(|t| t.record.id)
            .unwrap_or(*topic.topic_id.as_bytes());
        layout.push((name.unwrap_or_default(), id, row));
    }
    let deadline_ms = now_ms() + req.max_wait_ms.clamp(0, MAX_WAIT_MS_LIMIT) as u64;
    let min_bytes = req.min_bytes.max(0) as usize;
    let outcomes = loop {
        let outcomes = read_all(shard, &items).await;
        let bytes: usize = outcomes
            .iter()
            .filter_map(|o| o.records.as_ref())
            .map(Chunk::len)
            .sum();
        let any_error = outcomes.iter().any(|o| o.error_code != 0);
        if bytes >= min_bytes.max(1) || any_error || items.is_empty() || now_ms() >= deadline_ms {
            break outcomes;
        }
        if !park(shard, &items, deadline_ms).await {
            break outcomes; // no room to park: answer with what there is
        }
    };
    // Each outcome is used once: the request names a partition once per topic entry.
    let mut outcomes: Vec<Option<FetchOutcome>> = outcomes.into_iter().map(Some).collect();
    let topics = layout
        .into_iter()
        .map(|(name, topic_id, row)| TopicResponse {
            name,
            topic_id,
            partitions: row
                .into_iter()
                .map(|(partition, slot)| {
                    let o = match slot {
                        Ok(i) => outcomes[i].take().expect("each outcome is used once"),
                        Err(e) => failed(e),
                    };
                    PartitionResponse {
                        partition,
                        error_code: o.error_code,
                        high_watermark: o.high_watermark,
                        last_stable_offset: o.high_watermark,
                        log_start_offset: o.log_start_offset,
                        records: o.records,
                    }
                })
                .collect(),
        })
        .collect();
    let resp = codec::FetchResponse {
        error_code: 0,
        session_id: 0,
        topics,
    };
    let (chunks, _) = codec::encode(resp, version);
    Ok(Reply::Body(chunks))
}

async fn read_all(shard: &Rc<Shard>, items: &[FetchItem]) -> Vec<FetchOutcome> {
    shard
        .scatter(
            items.to_vec(),
            |i| shard.router.shard_of(&i.topic, i.partition),
            |items| ShardRequest::Fetch { items },
            |reply| match reply {
                ShardReply::Fetch(v) => v,
                _ => unreachable!("a fetch request gets a fetch reply"),
            },
            || failed(ResponseError::NotLeaderOrFollower),
        )
        .await
}

/// Waits until any owning shard reports new data for these items, or the deadline. False when
/// a shard could not park the wait (its bound on parked operations was hit).
async fn park(shard: &Rc<Shard>, items: &[FetchItem], deadline_ms: u64) -> bool {
    let mut by_shard: Vec<Vec<(String, i32, i64)>> = vec![Vec::new(); shard.router.shards()];
    for i in items {
        by_shard[shard.router.shard_of(&i.topic, i.partition)].push((
            i.topic.clone(),
            i.partition,
            i.offset,
        ));
    }
    let waits: Vec<_> = by_shard
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(s, items)| Box::pin(shard.call(s, ShardRequest::WaitForData { items, deadline_ms })))
        .collect();
    // Which shard woke first does not matter: the caller re-reads them all.
    let (first, _, _) = futures::future::select_all(waits).await;
    !matches!(first, Ok(ShardReply::Parked(false)))
}
