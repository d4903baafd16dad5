//! EndTxn v0–5: commit or abort the producer's ongoing transaction. Answered once the
//! coordinator's Prepare state is durable; the markers are written after (requests for the id
//! answer CONCURRENT_TRANSACTIONS until they are). v5 is transaction version 2 (KIP-890 part
//! 2): the end bumps the producer's epoch, and the answer names the producer id and epoch its
//! next transaction is written under.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::security::acl::Operation;
use crate::txn::{ops, service};
use bytes::Bytes;
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};
use kafka_protocol::ResponseError;

/// The first EndTxn version of transaction version 2.
pub const EPOCH_BUMP_VERSION: i16 = 5;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: EndTxnRequest = decode(body, version)?;
    if !authorize::transactional_id(shard, caller, Operation::Write, &req.transactional_id.0) {
        let code = ResponseError::TransactionalIdAuthorizationFailed.code();
        return encode(&EndTxnResponse::default().with_error_code(code), version);
    }
    let end = ops::End {
        id: req.transactional_id.0.to_string(),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        commit: req.committed,
        bump_epoch: version >= EPOCH_BUMP_VERSION,
    };
    let resp = match service::route(&services.txns, end).await {
        Ok(Ok((producer_id, epoch))) if version >= EPOCH_BUMP_VERSION => EndTxnResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Ok(Ok(_)) => EndTxnResponse::default(),
        Ok(Err(e)) | Err(e) => {
            EndTxnResponse::default().with_error_code(super::txn_error_code(e, version, 2))
        }
    };
    encode(&resp, version)
}
