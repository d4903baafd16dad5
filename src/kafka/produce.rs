//! Produce: decoded by the hand-written decoder (record bytes stay slices of the request),
//! split by owning shard, appended there, and answered per acks: not at all for acks=0, after
//! the append for acks=1, after the covering fdatasync for acks=all.

use super::{encode, Reply};
use crate::protocol::produce;
use crate::shard::messages::{ProduceItem, ProduceOutcome, ShardReply, ShardRequest};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, TopicName};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req =
        produce::decode(body, version).map_err(|e| anyhow::anyhow!("produce request: {}", e.0))?;
    let catalog = shard.catalog();
    let acks_valid = matches!(req.acks, -1..=1);
    // Items to route, and for each request partition either an index into them or an error.
    let mut items = Vec::new();
    let mut slots: Vec<Vec<(i32, Result<usize, ResponseError>)>> =
        Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let known = catalog.topics.get(&topic.name);
        let mut row = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let slot = if !acks_valid {
                Err(ResponseError::InvalidRequiredAcks)
            } else if known.is_none_or(|t| p.index < 0 || p.index >= t.record.partitions as i32) {
                Err(ResponseError::UnknownTopicOrPartition)
            } else {
                items.push(ProduceItem {
                    topic: topic.name.clone(),
                    partition: p.index,
                    records: p.records.clone(),
                });
                Ok(items.len() - 1)
            };
            row.push((p.index, slot));
        }
        slots.push(row);
    }
    let (acks, timeout_ms) = (req.acks, req.timeout_ms);
    let outcomes = shard
        .scatter(
            items,
            |i| shard.router.shard_of(&i.topic, i.partition),
            |items| ShardRequest::Produce {
                acks,
                timeout_ms,
                items,
            },
            |reply| match reply {
                ShardReply::Produce(v) => v,
                _ => unreachable!("a produce request gets a produce reply"),
            },
            || ProduceOutcome::failed(ResponseError::NotLeaderOrFollower),
        )
        .await;
    if acks == 0 {
        return Ok(Reply::None);
    }
    let responses = req
        .topics
        .iter()
        .zip(slots)
        .map(|(topic, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, slot)| {
                    let o = match slot {
                        Ok(i) => outcomes[i],
                        Err(e) => ProduceOutcome::failed(e),
                    };
                    let mut r = PartitionProduceResponse::default()
                        .with_index(index)
                        .with_error_code(o.error_code)
                        .with_base_offset(o.base_offset)
                        .with_log_append_time_ms(o.log_append_time_ms);
                    if version >= 5 {
                        r = r.with_log_start_offset(o.log_start_offset);
                    }
                    r
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(TopicName(super::str_bytes(&topic.name)))
                .with_partition_responses(partitions)
        })
        .collect();
    encode(
        &ProduceResponse::default().with_responses(responses),
        version,
    )
}
