//! ListOffsets: earliest (-2, and the local log's start, -4), latest (-1: the high watermark,
//! or for isolation level 1, read_committed, the last stable offset), the largest timestamp
//! (-3, KIP-734) and by timestamp. A current leader epoch the request names is checked as
//! Kafka does (KIP-320).

use super::authorize::{self, Caller};
use super::{decode, encode, per_partition, Reply};
use crate::partition::TopicPartition;
use crate::security::acl::Operation;
use crate::shard::mesh::Request;
use crate::shard::Shard;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

#[derive(Debug, Clone, Copy)]
struct OffsetsOutcome {
    error_code: i16,
    offset: i64,
    timestamp: i64,
    leader_epoch: i32,
}

/// Looks up offsets in partitions of one shard: (partition, (timestamp, current leader epoch))
/// per item, and whether the reader is read_committed.
struct ListOnOwner(Vec<(TopicPartition, (i64, i32))>, bool);

impl Request for ListOnOwner {
    type Reply = Vec<OffsetsOutcome>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<OffsetsOutcome>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(self.0.len());
            let read_committed = self.1;
            for (tp, (timestamp, current_epoch)) in self.0 {
                let Some(p) = shard.partition(tp) else {
                    out.push(failed(ResponseError::UnknownTopicOrPartition));
                    continue;
                };
                let epoch = p.leader_epoch();
                if current_epoch >= 0 && current_epoch != epoch {
                    out.push(failed(if current_epoch > epoch {
                        ResponseError::UnknownLeaderEpoch
                    } else {
                        ResponseError::FencedLeaderEpoch
                    }));
                    continue;
                }
                out.push(match p.offset_for(timestamp, read_committed).await {
                    // No record at or after the timestamp: no epoch either.
                    Ok((-1, -1)) => NOT_FOUND,
                    Ok((offset, timestamp)) => OffsetsOutcome {
                        error_code: 0,
                        offset,
                        timestamp,
                        leader_epoch: epoch,
                    },
                    Err(e) => failed(e),
                });
            }
            out
        })
    }
}

const NOT_FOUND: OffsetsOutcome = OffsetsOutcome {
    error_code: 0,
    offset: -1,
    timestamp: -1,
    leader_epoch: -1,
};

fn failed(e: ResponseError) -> OffsetsOutcome {
    OffsetsOutcome {
        error_code: e.code(),
        ..NOT_FOUND
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: ListOffsetsRequest = decode(body, version)?;
    let read_committed = req.isolation_level == 1;
    let describable = |t: &str| authorize::topic(shard, caller, Operation::Describe, t);
    let outcomes = per_partition(
        shard,
        (
            req.topics
                .iter()
                .map(|t| (&t.name, t.partitions.as_slice())),
            describable,
        ),
        |p| p.partition_index,
        |tp, p| (tp, (p.timestamp, p.current_leader_epoch)),
        |items| ListOnOwner(items, read_committed),
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
