//! DescribeCluster (KIP-700): the brokers, the controller and the cluster id, as Metadata
//! names them, and the cluster's authorized operations when asked. v2's
//! `include_fenced_brokers` adds the fenced brokers of a cluster, marked.

use super::{authorized_operations, decode, encode, str_bytes, Reply};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// DescribeCluster v1's endpoint type for brokers (2 is controllers, which KRaft clients may
/// ask for; this broker is not a separate controller).
const BROKERS_ENDPOINT: i8 = 1;
const CONTROLLERS_ENDPOINT: i8 = 2;

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &super::Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: DescribeClusterRequest = decode(body, version)?;
    let mut resp = DescribeClusterResponse::default();
    if version >= 1 {
        // The answer names this endpoint's type (a broker's), as Kafka's does; a request for
        // the controllers' endpoints went to the wrong kind of listener.
        resp = resp.with_endpoint_type(BROKERS_ENDPOINT);
        if req.endpoint_type != BROKERS_ENDPOINT {
            let e = match req.endpoint_type {
                CONTROLLERS_ENDPOINT => ResponseError::MismatchedEndpointType,
                _ => ResponseError::UnsupportedEndpointType,
            };
            return encode(&resp.with_error_code(e.code()), version);
        }
    }
    let catalog = shard.catalog();
    let include_fenced = version >= 2 && req.include_fenced_brokers;
    let is_fenced = |id| catalog.brokers.iter().any(|b| b.node_id == id && b.fenced);
    // As Metadata lists them (this node among them even while fenced: `listed_brokers`),
    // marked when fenced if the client asks.
    let mut brokers: Vec<DescribeClusterBroker> =
        super::metadata::brokers(shard, &catalog, &caller.listener)
            .into_iter()
            .map(|(id, host, port, rack)| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(id))
                    .with_host(str_bytes(&host))
                    .with_port(port)
                    .with_rack(rack.as_deref().map(str_bytes))
                    .with_is_fenced(include_fenced && is_fenced(id))
            })
            .collect();
    if include_fenced {
        let listed: Vec<i32> = brokers.iter().map(|b| b.broker_id.0).collect();
        let fenced = catalog
            .brokers
            .iter()
            .filter(|b| b.fenced && !listed.contains(&b.node_id));
        brokers.extend(fenced.filter_map(|b| {
            let e = b.endpoint(&caller.listener.name)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.node_id))
                    .with_host(str_bytes(&e.host))
                    .with_port(e.port)
                    .with_rack(b.rack.as_deref().map(str_bytes))
                    .with_is_fenced(true),
            )
        }));
    }
    resp = resp
        .with_cluster_id(str_bytes(&catalog.cluster_id))
        .with_controller_id(BrokerId(catalog.here.controller_id))
        .with_brokers(brokers);
    resp.cluster_authorized_operations = if req.include_cluster_authorized_operations {
        authorized_operations::cluster()
    } else {
        authorized_operations::NOT_REQUESTED
    };
    encode(&resp, version)
}
