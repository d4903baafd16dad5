//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: HeartbeatRequest = decode(body, version)?;
    if !authorize::group(shard, caller, Operation::Read, &req.group_id.0) {
        let code = ResponseError::GroupAuthorizationFailed.code();
        return encode(&HeartbeatResponse::default().with_error_code(code), version);
    }
    let op = ops::Heartbeat {
        group: req.group_id.0.to_string(),
        member: req.member_id.to_string(),
        generation: req.generation_id,
        instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
    };
    let code = route(&services.groups, op).await.unwrap_or_else(|c| c);
    encode(&HeartbeatResponse::default().with_error_code(code), version)
}
