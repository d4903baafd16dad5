//! TxnOffsetCommit v0–5: a transactional producer commits a group's offsets in its
//! transaction. The transaction coordinator first confirms that AddOffsetsToTxn put the
//! group's offsets partition in the producer's ongoing transaction (KIP-890 part 1: nothing is
//! written to a transaction no coordinator will end), or from v5 (transaction version 2,
//! KIP-890 part 2, where the producer sends no AddOffsetsToTxn) adds it; the group
//! coordinator then writes them as a transactional batch, and they take effect with the
//! transaction's commit marker.

use super::add_offsets_to_txn::group_partition;
use super::authorize::{self, Caller};
use super::offset_commit::{answered, listed, refuse_all};
use super::Services;
use super::{decode, encode, Reply};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use crate::txn::{ops as txn_ops, remote};
use bytes::Bytes;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::ResponseError;

/// The first TxnOffsetCommit version of transaction version 2: it adds the offsets partition.
const IMPLICIT_ADD_VERSION: i16 = 5;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: TxnOffsetCommitRequest = decode(body, version)?;
    let topics = req.topics.iter().map(|t| {
        let partitions = t.partitions.iter().map(|p| {
            let metadata = p.committed_metadata.as_ref();
            let epoch = p.committed_leader_epoch; // -1 before v2, as decoded
            (p.partition_index, p.committed_offset, epoch, metadata)
        });
        (&t.name, partitions.collect())
    });
    let readable = |t: &str| authorize::topic(shard, caller, Operation::Read, t);
    let (offsets, mut layout) = listed(shard, topics, &readable);
    let n = offsets.len();
    // WRITE on the transactional id, then READ on the group (Kafka's order).
    let refused =
        if !authorize::transactional_id(shard, caller, Operation::Write, &req.transactional_id.0) {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else if !authorize::group(shard, caller, Operation::Read, &req.group_id.0) {
            Some(ResponseError::GroupAuthorizationFailed)
        } else {
            None
        };
    if let Some(e) = refused {
        refuse_all(&mut layout, e);
    }
    let codes = match verify(services, &req, version >= IMPLICIT_ADD_VERSION).await {
        _ if refused.is_some() => Vec::new(),
        Err(e) => vec![e.code(); n],
        Ok(()) if n == 0 => Vec::new(),
        Ok(()) => {
            let op = ops::TxnCommit {
                group: req.group_id.0.to_string(),
                member: req.member_id.to_string(),
                generation: req.generation_id,
                instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
                offsets,
                producer: (req.producer_id.0, req.producer_epoch),
            };
            route(&services.groups, op)
                .await
                .unwrap_or_else(|c| vec![c; n])
        }
    };
    let topics = answered(layout, &codes)
        .map(|(name, row)| {
            let partitions = row
                .map(|(p, code)| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &TxnOffsetCommitResponse::default().with_topics(topics),
        version,
    )
}

/// Whether the group's offsets partition is in the producer's ongoing transaction (added
/// first with `add`).
async fn verify(
    services: &Services,
    req: &TxnOffsetCommitRequest,
    add: bool,
) -> Result<(), ResponseError> {
    let shard = &services.shard;
    if req.group_id.is_empty() {
        return Err(ResponseError::InvalidGroupId);
    }
    // Another node's group is refused before its transaction is asked about (Kafka's order).
    crate::group::coordinated_partition(&services.groups, &req.group_id)?;
    let check = txn_ops::Verify {
        id: req.transactional_id.0.to_string(),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        partitions: vec![group_partition(shard, &req.group_id)?],
        add,
    };
    let verdicts = remote::verify(&services.txns, check).await?;
    verdicts
        .into_iter()
        .next()
        .unwrap_or(Err(ResponseError::InvalidTxnState))
}
