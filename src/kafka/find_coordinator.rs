//! FindCoordinator: every group is coordinated by this broker (on the shard that owns its
//! `__consumer_offsets` partition, which the broker routes to internally). v4 batches keys.
//! Transaction coordinators are refused until transactions exist.

use super::{decode, encode, str_bytes, Reply};
use crate::group::OFFSETS_TOPIC;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

const KEY_TYPE_GROUP: i8 = 0;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: FindCoordinatorRequest = decode(body, version)?;
    let (host, port) = shard.config.advertised();
    let ready = shard.catalog().topics.contains_key(OFFSETS_TOPIC);
    // Transaction coordinators are not served yet: a transactional client is told so with an
    // error it does not retry (COORDINATOR_NOT_AVAILABLE would have it wait out its timeout),
    // the one InitProducerId answers transactional ids with. Groups need `__consumer_offsets`,
    // created at first start; until then clients retry.
    let error = if req.key_type != KEY_TYPE_GROUP {
        ResponseError::TransactionalIdAuthorizationFailed.code()
    } else if !ready {
        ResponseError::CoordinatorNotAvailable.code()
    } else {
        0
    };
    let node = BrokerId(if error == 0 { shard.config.node_id } else { -1 });
    let resp = if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| {
                Coordinator::default()
                    .with_key(k.clone())
                    .with_node_id(node)
                    .with_host(str_bytes(if error == 0 { &host } else { "" }))
                    .with_port(if error == 0 { port } else { -1 })
                    .with_error_code(error)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        FindCoordinatorResponse::default()
            .with_error_code(error)
            .with_node_id(node)
            .with_host(str_bytes(if error == 0 { &host } else { "" }))
            .with_port(if error == 0 { port } else { -1 })
    };
    encode(&resp, version)
}
