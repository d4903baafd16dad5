//! DeleteGroups: only groups without members; their offsets are deleted with them.

use super::authorize::{self, Caller};
use super::{decode, encode, Reply};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: DeleteGroupsRequest = decode(body, version)?;
    let mut results = Vec::with_capacity(req.groups_names.len());
    for g in &req.groups_names {
        let delete = ops::Delete {
            group: g.0.to_string(),
        };
        let code = match authorize::group(shard, caller, Operation::Delete, &g.0) {
            true => route(shard, delete).await.unwrap_or_else(|c| c),
            false => ResponseError::GroupAuthorizationFailed.code(),
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(g.clone())
                .with_error_code(code),
        );
    }
    encode(
        &DeleteGroupsResponse::default().with_results(results),
        version,
    )
}
