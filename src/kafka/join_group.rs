//! JoinGroup: parks until the rebalance completes (see group/state.rs).

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::group::state::{JoinRequest, JoinResponse};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
    client_id: &str,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: JoinGroupRequest = decode(body, version)?;
    if !authorize::group(shard, caller, Operation::Read, &req.group_id.0) {
        let code = ResponseError::GroupAuthorizationFailed.code();
        return encode(&JoinGroupResponse::default().with_error_code(code), version);
    }
    let client_host = caller.client_host.as_str();
    let group = req.group_id.0.to_string();
    let join = JoinRequest {
        group_id: group.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: if version >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let r = if group.is_empty() {
        Err(ResponseError::InvalidGroupId.code())
    } else {
        route(&services.groups, ops::Join(join)).await
    };
    let resp = match r {
        Ok(r) => joined(r, version),
        Err(code) => JoinGroupResponse::default()
            .with_error_code(code)
            .with_generation_id(-1)
            .with_member_id(req.member_id.clone())
            .with_protocol_name(if version >= 7 {
                None
            } else {
                Some(str_bytes(""))
            }),
    };
    encode(&resp, version)
}

/// The answer to a join the coordinator decided.
fn joined(r: JoinResponse, version: i16) -> JoinGroupResponse {
    let members = r
        .members
        .iter()
        .map(|(id, instance, meta)| {
            let mut m = JoinGroupResponseMember::default()
                .with_member_id(str_bytes(id))
                .with_metadata(meta.clone());
            if version >= 5 {
                m = m.with_group_instance_id(instance.as_deref().map(str_bytes));
            }
            m
        })
        .collect();
    let mut resp = JoinGroupResponse::default()
        .with_error_code(r.error_code)
        .with_generation_id(r.generation_id)
        .with_protocol_name(Some(str_bytes(
            r.protocol_name.as_deref().unwrap_or_default(),
        )))
        .with_leader(str_bytes(&r.leader))
        .with_member_id(str_bytes(&r.member_id))
        .with_members(members);
    if version >= 7 {
        resp = resp
            .with_protocol_type(r.protocol_type.as_deref().map(str_bytes))
            .with_protocol_name(r.protocol_name.as_deref().map(str_bytes));
    }
    resp
}
