//! EndTxn v0–3: commit or abort the producer's ongoing transaction. Answered once the
//! coordinator's Prepare state is durable; the markers are written after (requests for the id
//! answer CONCURRENT_TRANSACTIONS until they are).

use super::{decode, encode, Reply};
use crate::shard::Shard;
use crate::txn::{ops, service};
use bytes::Bytes;
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: EndTxnRequest = decode(body, version)?;
    let end = ops::End {
        id: req.transactional_id.0.to_string(),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        commit: req.committed,
    };
    let code = match service::route(shard, end).await {
        Ok(Ok(())) => 0,
        Ok(Err(e)) | Err(e) => super::txn_error_code(e, version, 2),
    };
    encode(&EndTxnResponse::default().with_error_code(code), version)
}
