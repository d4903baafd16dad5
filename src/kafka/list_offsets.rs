//! ListOffsets: earliest (-2), latest (-1, the high watermark) and by timestamp.

use super::{decode, encode, per_partition, Reply};
use crate::shard::messages::{OffsetsItem, OffsetsOutcome, ShardReply, ShardRequest};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

fn failed(e: ResponseError) -> OffsetsOutcome {
    OffsetsOutcome {
        error_code: e.code(),
        offset: -1,
        timestamp: -1,
        leader_epoch: -1,
    }
}

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: ListOffsetsRequest = decode(body, version)?;
    let outcomes = per_partition(
        shard,
        req.topics
            .iter()
            .map(|t| (&t.name, t.partitions.as_slice())),
        |p| p.partition_index,
        |topic, p| OffsetsItem {
            topic: topic.to_string(),
            partition: p.partition_index,
            timestamp: p.timestamp,
        },
        |items| ShardRequest::ListOffsets { items },
        |reply| match reply {
            ShardReply::ListOffsets(v) => v,
            _ => unreachable!("a list-offsets request gets a list-offsets reply"),
        },
        failed,
    )
    .await;
    let topics = outcomes
        .into_iter()
        .map(|(name, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, o)| {
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(index)
                        .with_error_code(o.error_code)
                        .with_timestamp(o.timestamp)
                        .with_offset(o.offset);
                    if version >= 4 {
                        r = r.with_leader_epoch(o.leader_epoch);
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    encode(&ListOffsetsResponse::default().with_topics(topics), version)
}
