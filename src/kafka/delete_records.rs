//! DeleteRecords: moves partitions' log start offsets up (the AdminClient's `delete_records`).
//! Each partition's owner does it durably and deletes the segments wholly below the new start
//! (see storage/retention.rs); the answer is the new low watermark.

use super::{decode, encode, route_partitions, Reply};
use crate::shard::messages::{ShardReply, ShardRequest};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: DeleteRecordsRequest = decode(body, version)?;
    let (items, layout) = route_partitions(
        &shard.catalog(),
        req.topics
            .iter()
            .map(|t| (&t.name, t.partitions.as_slice())),
        |p| p.partition_index,
        |topic, p| (topic.to_string(), p.partition_index, p.offset),
    );
    let outcomes = shard
        .scatter(
            items,
            |(topic, p, _)| shard.router.shard_of(topic, *p),
            |items| ShardRequest::DeleteRecords { items },
            |reply| match reply {
                ShardReply::DeleteRecords(v) => v,
                _ => unreachable!("a delete-records request gets a delete-records reply"),
            },
            || (ResponseError::NotLeaderOrFollower.code(), -1),
        )
        .await;
    let topics = layout
        .into_iter()
        .map(|(name, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, slot)| {
                    let (error_code, low_watermark) = match slot {
                        Ok(i) => outcomes[i],
                        Err(e) => (e.code(), -1),
                    };
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(index)
                        .with_low_watermark(low_watermark)
                        .with_error_code(error_code)
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &DeleteRecordsResponse::default().with_topics(topics),
        version,
    )
}
