//! DeleteGroups: only groups without members; their offsets are deleted with them.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::group::{ops, route};
use crate::protocol::wire::Writer;
use crate::security::acl::Operation;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use kafka_protocol::ResponseError;

/// The first version whose results carry an error message; its request is v2's.
const ERROR_MESSAGE_VERSION: i16 = 3;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: DeleteGroupsRequest = decode(body, version.min(ERROR_MESSAGE_VERSION - 1))?;
    let mut results = Vec::with_capacity(req.groups_names.len());
    for g in &req.groups_names {
        let delete = ops::Delete {
            group: g.0.to_string(),
        };
        let code = match authorize::group(shard, caller, Operation::Delete, &g.0) {
            true => route(&services.groups, delete).await.unwrap_or_else(|c| c),
            false => ResponseError::GroupAuthorizationFailed.code(),
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(g.clone())
                .with_error_code(code),
        );
    }
    if version >= ERROR_MESSAGE_VERSION {
        return Ok(with_error_messages(&results));
    }
    encode(
        &DeleteGroupsResponse::default().with_results(results),
        version,
    )
}

/// A v3 response (the protocol crate has no schema for it): v2's, and each result's error
/// message after its code (null when there is no error).
fn with_error_messages(results: &[DeletableGroupResult]) -> Reply {
    let mut buf = BytesMut::new();
    let mut w = Writer {
        buf: &mut buf,
        flexible: true,
    };
    w.buf.put_i32(0); // throttle_time_ms
    w.array_len(results.len());
    for r in results {
        w.string(&r.group_id.0);
        w.buf.put_i16(r.error_code);
        match ResponseError::try_from_code(r.error_code) {
            Some(e) => w.string(&e.to_string()),
            None => w.bytes_len(None), // a null compact string
        }
        w.empty_tagged_fields();
    }
    w.empty_tagged_fields();
    Reply::Body(vec![buf.freeze().into()])
}
