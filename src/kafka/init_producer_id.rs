//! InitProducerId. An idempotent producer gets a new producer id (unique across restarts) with
//! epoch 0. A transactional one is answered by its id's transaction coordinator: the id's
//! producer id with its epoch bumped, which fences every older instance (an ongoing
//! transaction of theirs is aborted first: CONCURRENT_TRANSACTIONS until it is, which clients
//! retry). A producer that names the id and epoch it has (v3+, KIP-360) must hold the
//! current ones, or be retrying the bump that made them: an older one is PRODUCER_FENCED.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::security::acl::{Operation, ResourceType};
use crate::shard::Shard;
use crate::txn::{ops, service};
use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: InitProducerIdRequest = decode(body, version)?;
    let answer = match &req.transactional_id {
        Some(id) if !authorize::transactional_id(shard, caller, Operation::Write, id) => {
            Err(ResponseError::TransactionalIdAuthorizationFailed.code())
        }
        // An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
        // (KIP-679).
        None if !idempotent_allowed(shard, caller) => {
            Err(ResponseError::ClusterAuthorizationFailed.code())
        }
        Some(id) => {
            let known = (req.producer_id.0 >= 0 && req.producer_epoch >= 0)
                .then_some((req.producer_id.0, req.producer_epoch));
            let init = ops::Init {
                id: id.0.to_string(),
                timeout_ms: req.transaction_timeout_ms,
                producer: known,
            };
            match service::route(&services.txns, init).await {
                Ok(answer) => answer.map_err(|e| super::txn_error_code(e, version, 4)),
                Err(e) => Err(e.code()),
            }
        }
        // Kafka gives a non-transactional producer a fresh id on every request, also when it
        // asks for an epoch bump (KIP-360): its old sequence state is then simply unused.
        None => match crate::controller::allocate_producer_id(&services.controllers).await {
            Ok(Ok(id)) => Ok((id, 0)),
            Ok(Err(code)) => Err(code),
            Err(_) => Err(ResponseError::CoordinatorNotAvailable.code()),
        },
    };
    let resp = match answer {
        Ok((id, epoch)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(epoch),
        Err(code) => InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    encode(&resp, version)
}

/// WRITE on some topic (asked quietly), else IDEMPOTENT_WRITE on the cluster (a refusal
/// counted and logged once).
fn idempotent_allowed(shard: &Shard, caller: &Caller) -> bool {
    let catalog = shard.catalog();
    let (principal, host) = (&caller.principal, &caller.host);
    let security = &catalog.security;
    security.allows_any(principal, host, Operation::Write, ResourceType::Topic)
        || authorize::cluster(shard, caller, Operation::IdempotentWrite)
}
