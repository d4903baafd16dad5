//! FindCoordinator: a group is coordinated by the leader of its `__consumer_offsets` partition
//! (on a single node, this broker, on the shard that owns the partition, which the broker
//! routes to internally). v4 batches keys. Transaction coordinators are refused until
//! transactions exist.

use super::{decode, encode, str_bytes, Reply};
use crate::group::{offsets_partition, OFFSETS_TOPIC};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

const KEY_TYPE_GROUP: i8 = 0;

/// Where a key's coordinator is: Ok((node, host, port)) or Err(error code).
fn coordinator_of(shard: &Shard, key_type: i8, key: &str) -> Result<(i32, String, i32), i16> {
    // Transaction coordinators are not served yet: a transactional client is told so with an
    // error it does not retry (COORDINATOR_NOT_AVAILABLE would have it wait out its timeout),
    // the one InitProducerId answers transactional ids with.
    if key_type != KEY_TYPE_GROUP {
        return Err(ResponseError::TransactionalIdAuthorizationFailed.code());
    }
    // Groups need `__consumer_offsets` (created at first start, in a cluster once enough
    // brokers registered) and a leader for the group's partition; until then clients retry.
    let not_available = ResponseError::CoordinatorNotAvailable.code();
    let catalog = shard.catalog();
    let topic = catalog.topics.get(OFFSETS_TOPIC).ok_or(not_available)?;
    let leader = catalog.leader_of(topic, offsets_partition(key, topic.record.partitions));
    if leader == catalog.node_id {
        let (host, port) = shard.config.advertised();
        return Ok((leader, host, port));
    }
    let (host, port) = catalog.broker_address(leader).ok_or(not_available)?;
    Ok((leader, host.to_string(), port))
}

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: FindCoordinatorRequest = decode(body, version)?;
    let answer = |key: &str| match coordinator_of(shard, req.key_type, key) {
        Ok(found) => (0, found),
        Err(code) => (code, (-1, String::new(), -1)),
    };
    let resp = if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| {
                let (error, (node, host, port)) = answer(k);
                Coordinator::default()
                    .with_key(k.clone())
                    .with_node_id(BrokerId(node))
                    .with_host(str_bytes(&host))
                    .with_port(port)
                    .with_error_code(error)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let (error, (node, host, port)) = answer(&req.key);
        FindCoordinatorResponse::default()
            .with_error_code(error)
            .with_node_id(BrokerId(node))
            .with_host(str_bytes(&host))
            .with_port(port)
    };
    encode(&resp, version)
}
