//! DeleteRecords: moves partitions' log start offsets up (the AdminClient's `delete_records`).
//! Each partition's owner does it durably and deletes the segments wholly below the new start
//! (see storage/retention.rs); the answer is the new low watermark.

use super::authorize::{self, Caller};
use super::{decode, encode, per_partition, Reply};
use crate::partition::TopicPartition;
use crate::security::acl::Operation;
use crate::shard::mesh::Request;
use crate::shard::Shard;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// Moves log start offsets in partitions of one shard: (partition, offset) per item; each
/// answer is (error code, new low watermark).
struct DeleteOnOwner(Vec<(TopicPartition, i64)>);

impl Request for DeleteOnOwner {
    type Reply = Vec<(i16, i64)>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<(i16, i64)>> {
        Box::pin(async move {
            let catalog = shard.catalog();
            let mut out = Vec::with_capacity(self.0.len());
            for (tp, offset) in self.0 {
                let topic = catalog.by_id.get(&tp.topic_id);
                let (Some(p), Some(topic)) = (shard.partition(tp), topic) else {
                    out.push((ResponseError::UnknownTopicOrPartition.code(), -1));
                    continue;
                };
                out.push(
                    match p
                        .retention()
                        .delete_records(offset, topic.config.deletes())
                        .await
                    {
                        Ok(low_watermark) => (0, low_watermark),
                        Err(e) => (e.code(), -1),
                    },
                );
            }
            out
        })
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: DeleteRecordsRequest = decode(body, version)?;
    let deletable = |t: &str| authorize::topic(shard, caller, Operation::Delete, t);
    let outcomes = per_partition(
        shard,
        (
            req.topics
                .iter()
                .map(|t| (&t.name, t.partitions.as_slice())),
            deletable,
        ),
        |p| p.partition_index,
        |tp, p| (tp, p.offset),
        DeleteOnOwner,
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
