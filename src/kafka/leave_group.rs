//! LeaveGroup: one member (v0–v2) or a batch by member or instance id (v3+, KIP-345).

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: LeaveGroupRequest = decode(body, version)?;
    if !authorize::group(shard, caller, Operation::Read, &req.group_id.0) {
        let code = ResponseError::GroupAuthorizationFailed.code();
        return encode(
            &LeaveGroupResponse::default().with_error_code(code),
            version,
        );
    }
    let group = req.group_id.0.to_string();
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let leave = ops::Leave {
        group,
        members: members.clone(),
    };
    // A group not served here (NOT_COORDINATOR, ...) is answered with its top-level error
    // alone and no member rows, as Kafka does.
    let (code, each) = route(&services.groups, leave)
        .await
        .unwrap_or_else(|c| (c, Vec::new()));
    let resp = if version >= 3 {
        let results = members
            .iter()
            .zip(each.iter().copied())
            .map(|((id, instance), c)| {
                MemberResponse::default()
                    .with_member_id(super::str_bytes(id))
                    .with_group_instance_id(instance.as_deref().map(super::str_bytes))
                    .with_error_code(c)
            })
            .collect();
        LeaveGroupResponse::default()
            .with_error_code(code)
            .with_members(results)
    } else {
        LeaveGroupResponse::default().with_error_code(if code != 0 {
            code
        } else {
            each.first().copied().unwrap_or(0)
        })
    };
    encode(&resp, version)
}
