//! DeleteGroups: only groups without members; their offsets are deleted with them.

use super::{decode, encode, Reply};
use crate::group::{route, GroupOp, GroupReply};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: DeleteGroupsRequest = decode(body, version)?;
    let mut results = Vec::with_capacity(req.groups_names.len());
    for g in &req.groups_names {
        let code = match route(
            shard,
            g.0.as_str(),
            GroupOp::Delete {
                group: g.0.to_string(),
            },
        )
        .await
        {
            Ok(GroupReply::Code(c)) => c,
            Ok(_) => unreachable!("a delete gets a code"),
            Err(c) => c,
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
