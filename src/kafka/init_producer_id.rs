//! InitProducerId for idempotent producers: a new producer id (unique across restarts) with
//! epoch 0. Transactional ids are not served yet.

use super::{decode, encode, Reply};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: InitProducerIdRequest = decode(body, version)?;
    let resp = if req.transactional_id.is_some() {
        InitProducerIdResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    } else {
        // Kafka gives a non-transactional producer a fresh id on every request, also when it
        // asks for an epoch bump (KIP-360): its old sequence state is then simply unused.
        match crate::controller::allocate_producer_id(shard).await {
            Ok(Ok(id)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Ok(Err(code)) => InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            Err(_) => InitProducerIdResponse::default()
                .with_error_code(ResponseError::CoordinatorNotAvailable.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        }
    };
    encode(&resp, version)
}
