//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use super::{decode, encode, Reply};
use crate::group::{route, GroupOp, GroupReply};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: HeartbeatRequest = decode(body, version)?;
    let group = req.group_id.0.to_string();
    let op = GroupOp::Heartbeat {
        group: group.clone(),
        member: req.member_id.to_string(),
        generation: req.generation_id,
        instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
    };
    let code = match route(shard, &group, op).await {
        Ok(GroupReply::Code(c)) => c,
        Ok(_) => unreachable!("a heartbeat gets a code"),
        Err(c) => c,
    };
    encode(&HeartbeatResponse::default().with_error_code(code), version)
}
