//! DeleteRecords: moves partitions' log start offsets up (the AdminClient's `delete_records`).
//! Each partition's owner does it durably and deletes the segments wholly below the new start
//! (see storage/retention.rs); the answer is the new low watermark.

use super::{decode, encode, per_partition, Reply};
use crate::shard::messages::{ShardReply, ShardRequest};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: DeleteRecordsRequest = decode(body, version)?;
    let outcomes = per_partition(
        shard,
        req.topics
            .iter()
            .map(|t| (&t.name, t.partitions.as_slice())),
        |p| p.partition_index,
        |topic, p| (topic.to_string(), p.partition_index, p.offset),
        |items| ShardRequest::DeleteRecords { items },
        |reply| match reply {
            ShardReply::DeleteRecords(v) => v,
            _ => unreachable!("a delete-records request gets a delete-records reply"),
        },
        |e| (e.code(), -1),
    )
    .await;
    let topics = outcomes
        .into_iter()
        .map(|(name, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, (error_code, low_watermark))| {
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
