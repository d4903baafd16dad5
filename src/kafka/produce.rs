//! Produce: decoded by the hand-written decoder (record bytes stay slices of the request),
//! split by owning shard, appended there, and answered per acks: not at all for acks=0, after
//! the append for acks=1, after the covering fdatasync for acks=all.

use super::{encode, Reply};
use crate::partition::TopicPartition;
use crate::protocol::produce;
use crate::shard::mesh::Request;
use crate::shard::Shard;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, TopicName};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// One partition's answer.
#[derive(Debug, Clone, Copy)]
struct ProduceOutcome {
    error_code: i16,
    base_offset: i64,
    log_append_time_ms: i64,
    log_start_offset: i64,
}

impl ProduceOutcome {
    fn failed(e: ResponseError) -> ProduceOutcome {
        ProduceOutcome {
            error_code: e.code(),
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        }
    }
}

/// Appends to the partitions of one shard, each as `acks` asks; one outcome per item, in order.
/// None records: the request's records for that partition were not a record set.
struct AppendOnOwner {
    acks: i16,
    timeout_ms: i32,
    items: Vec<(TopicPartition, Option<Bytes>)>,
}

impl Request for AppendOnOwner {
    type Reply = Vec<ProduceOutcome>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<ProduceOutcome>> {
        Box::pin(async move {
            let (acks, timeout_ms) = (self.acks, self.timeout_ms);
            let appends = self
                .items
                .into_iter()
                .map(|(tp, records)| append_one(&shard, tp, records, acks, timeout_ms));
            futures::future::join_all(appends).await
        })
    }
}

async fn append_one(
    shard: &Shard,
    tp: TopicPartition,
    records: Option<Bytes>,
    acks: i16,
    timeout_ms: i32,
) -> ProduceOutcome {
    let Some(partition) = shard.partition(tp) else {
        return ProduceOutcome::failed(ResponseError::UnknownTopicOrPartition);
    };
    let Some(records) = records else {
        return ProduceOutcome::failed(ResponseError::CorruptMessage);
    };
    match shard.produce(&partition, records, acks, timeout_ms).await {
        Ok(a) => ProduceOutcome {
            error_code: 0,
            base_offset: a.base_offset,
            log_append_time_ms: a.log_append_time_ms,
            log_start_offset: partition.log_start_offset(),
        },
        Err(e) => ProduceOutcome::failed(e),
    }
}

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
            let slot = match known {
                _ if !acks_valid => Err(ResponseError::InvalidRequiredAcks),
                Some(t) if t.has_partition(p.index) => {
                    let tp = TopicPartition {
                        topic_id: t.record.id,
                        partition: p.index,
                    };
                    items.push((shard.owner(&t.name, p.index), (tp, p.records.clone())));
                    Ok(items.len() - 1)
                }
                _ => Err(ResponseError::UnknownTopicOrPartition),
            };
            row.push((p.index, slot));
        }
        slots.push(row);
    }
    let (acks, timeout_ms) = (req.acks, req.timeout_ms);
    let outcomes = shard
        .scatter(
            items,
            |items| AppendOnOwner {
                acks,
                timeout_ms,
                items,
            },
            || ProduceOutcome::failed(ResponseError::NotLeaderOrFollower),
        )
        .await;
    if acks == 0 {
        return Ok(Reply::None);
    }
    let responses = respond(&req, slots, &outcomes, version);
    encode(
        &ProduceResponse::default().with_responses(responses),
        version,
    )
}

/// The response: per request topic and partition, its outcome or the error found before
/// routing.
fn respond(
    req: &produce::ProduceRequest,
    slots: Vec<Vec<(i32, Result<usize, ResponseError>)>>,
    outcomes: &[ProduceOutcome],
    version: i16,
) -> Vec<TopicProduceResponse> {
    req.topics
        .iter()
        .zip(slots)
        .map(|(topic, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, slot)| {
                    let o = slot.map_or_else(ProduceOutcome::failed, |i| outcomes[i]);
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
        .collect()
}
