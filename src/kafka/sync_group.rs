//! SyncGroup: the leader hands out the assignment; everyone gets its share.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: SyncGroupRequest = decode(body, version)?;
    if !authorize::group(shard, caller, Operation::Read, &req.group_id.0) {
        let code = ResponseError::GroupAuthorizationFailed.code();
        return encode(&SyncGroupResponse::default().with_error_code(code), version);
    }
    let op = ops::Sync {
        group: req.group_id.0.to_string(),
        member: req.member_id.to_string(),
        generation: req.generation_id,
        instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
        assignments: req
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect(),
    };
    let resp = match route(&services.groups, op).await {
        Ok(r) => {
            let mut resp = SyncGroupResponse::default()
                .with_error_code(r.error_code)
                .with_assignment(r.assignment);
            if version >= 5 {
                resp = resp
                    .with_protocol_type(r.protocol_type.as_deref().map(str_bytes))
                    .with_protocol_name(r.protocol_name.as_deref().map(str_bytes));
            }
            resp
        }
        Err(code) => SyncGroupResponse::default().with_error_code(code),
    };
    encode(&resp, version)
}
