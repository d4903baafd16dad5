//! OffsetCommit: durable (fsynced) in `__consumer_offsets` before it is answered; appended in
//! its connection's request order and answered later (`group::ops::StageCommit`), so that a
//! client committing after every message does not hold up its own heartbeats. The layout
//! helpers are TxnOffsetCommit's too.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, encode_body, Reply};
use crate::group::ops::Staged;
use crate::group::{ops, route, OffsetEntry};
use crate::security::acl::Operation;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// Per request topic, each partition's index and either an index into the offsets to commit
/// or an error found here.
pub type Layout = Vec<(TopicName, Vec<(i32, Result<usize, i16>)>)>;

/// One partition's commit as a request carries it: index, offset, leader epoch, metadata.
pub type Requested<'a> = (i32, i64, i32, Option<&'a StrBytes>);

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: OffsetCommitRequest = decode(body, version)?;
    let group = req.group_id.0.to_string();
    let topics = req.topics.iter().map(|t| {
        let partitions = t.partitions.iter().map(|p| {
            // The leader epoch is v6+.
            let epoch = if version >= 6 {
                p.committed_leader_epoch
            } else {
                -1
            };
            let metadata = p.committed_metadata.as_ref();
            (p.partition_index, p.committed_offset, epoch, metadata)
        });
        (&t.name, partitions.collect())
    });
    let readable = |t: &str| authorize::topic(shard, caller, Operation::Read, t);
    let (offsets, mut layout) = listed(shard, topics, &readable);
    let n = offsets.len();
    let codes: Vec<i16> = if !authorize::group(shard, caller, Operation::Read, &group) {
        refuse_all(&mut layout, ResponseError::GroupAuthorizationFailed);
        Vec::new()
    } else if group.is_empty() {
        vec![ResponseError::InvalidGroupId.code(); n]
    } else if n == 0 {
        Vec::new()
    } else {
        let op = ops::StageCommit {
            group: group.clone(),
            member: req.member_id.to_string(),
            generation: req.generation_id_or_member_epoch,
            instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
            offsets,
        };
        match route(&services.groups, op).await {
            Err(code) => vec![code; n],
            Ok(Staged::Answered(codes)) => codes,
            Ok(Staged::Appended { codes, appended }) => {
                // Answered once the append commits, while the connection serves its next
                // requests (its heartbeats, its next commits: they share the fsync).
                let groups = services.groups.clone();
                return Ok(Reply::Later(Box::pin(async move {
                    let mut codes = codes;
                    let settle = ops::SettleCommit { group, appended };
                    if let Ok(Err(code)) | Err(code) = route(&groups, settle).await {
                        ops::fail_written(&mut codes, code);
                    }
                    encode_body(&response(layout, &codes), version)
                })));
            }
        }
    };
    encode(&response(layout, &codes), version)
}

/// The response: each partition's code, the error found here or the commit's.
fn response(layout: Layout, codes: &[i16]) -> OffsetCommitResponse {
    let topics = answered(layout, codes)
        .map(|(name, row)| {
            let partitions = row
                .map(|(p, code)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// Answers every partition of the layout with `e` (the group is not the caller's to use).
pub fn refuse_all(layout: &mut Layout, e: ResponseError) {
    for (_, row) in layout.iter_mut() {
        for (_, slot) in row.iter_mut() {
            *slot = Err(e.code());
        }
    }
}

/// The offsets to commit (partitions that exist, of topics the caller may read) and the
/// response's layout.
pub fn listed<'a>(
    shard: &Shard,
    topics: impl Iterator<Item = (&'a TopicName, Vec<Requested<'a>>)>,
    readable: &dyn Fn(&str) -> bool,
) -> (Vec<OffsetEntry>, Layout) {
    let catalog = shard.catalog();
    let mut offsets = Vec::new();
    let mut layout = Vec::new();
    for (topic, partitions) in topics {
        let name = topic.0.to_string();
        let known = catalog.topics.get(&name);
        let denied = !readable(&name);
        let row = partitions
            .into_iter()
            .map(|(index, offset, epoch, metadata)| {
                if denied {
                    return (index, Err(ResponseError::TopicAuthorizationFailed.code()));
                }
                if !known.is_some_and(|k| k.has_partition(index)) {
                    let unknown = ResponseError::UnknownTopicOrPartition.code();
                    return (index, Err(unknown));
                }
                let metadata = metadata.map(|m| m.to_string()).unwrap_or_default();
                offsets.push((name.clone(), index, offset, epoch, metadata));
                (index, Ok(offsets.len() - 1))
            })
            .collect();
        layout.push((topic.clone(), row));
    }
    (offsets, layout)
}

/// Each topic of the layout with its partitions' codes: the error found here, or the code
/// the commit answered for it.
pub fn answered<'a>(
    layout: Layout,
    codes: &'a [i16],
) -> impl Iterator<Item = (TopicName, impl Iterator<Item = (i32, i16)> + 'a)> + 'a {
    layout.into_iter().map(move |(name, row)| {
        let row = row
            .into_iter()
            .map(move |(p, slot)| (p, slot.map_or_else(|c| c, |i| codes[i])));
        (name, row)
    })
}
