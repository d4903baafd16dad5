//! AddOffsetsToTxn v0–3: a transactional producer adds a group's offsets to its ongoing
//! transaction before TxnOffsetCommit: the coordinator puts the group's `__consumer_offsets`
//! partition in the transaction, so that EndTxn writes a marker there too.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::group::{offsets_partition, OFFSETS_TOPIC};
use crate::security::acl::Operation;
use crate::shard::Shard;
use crate::txn::{ops, service};
use bytes::Bytes;
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use kafka_protocol::ResponseError;

/// The `__consumer_offsets` partition of `group`, as a transaction's partition.
pub fn group_partition(shard: &Shard, group: &str) -> Result<(String, i32), ResponseError> {
    let catalog = shard.catalog();
    let topic = catalog
        .topics
        .get(OFFSETS_TOPIC)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let index = offsets_partition(group, topic.record.partitions);
    Ok((OFFSETS_TOPIC.to_string(), index))
}

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: AddOffsetsToTxnRequest = decode(body, version)?;
    let code =
        if !authorize::transactional_id(shard, caller, Operation::Write, &req.transactional_id.0) {
            ResponseError::TransactionalIdAuthorizationFailed.code()
        } else if !authorize::group(shard, caller, Operation::Read, &req.group_id.0) {
            ResponseError::GroupAuthorizationFailed.code()
        } else {
            match add(services, &req).await {
                Ok(()) => 0,
                Err(e) => super::txn_error_code(e, version, 2),
            }
        };
    encode(
        &AddOffsetsToTxnResponse::default().with_error_code(code),
        version,
    )
}

async fn add(services: &Services, req: &AddOffsetsToTxnRequest) -> Result<(), ResponseError> {
    let shard = &services.shard;
    if req.group_id.is_empty() {
        return Err(ResponseError::InvalidGroupId);
    }
    let add = ops::AddPartitions {
        id: req.transactional_id.0.to_string(),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        partitions: vec![group_partition(shard, &req.group_id)?],
    };
    service::route(&services.txns, add).await?
}
