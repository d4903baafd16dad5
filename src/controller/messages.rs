//! What nodes say to each other over RPC (`crate::rpc`): the frame kinds and their payloads,
//! rkyv-encoded and validated on decode (a peer's bytes are untrusted like a client's).

use super::{ControllerOp, Outcome};
use crate::storage::catalog::EndpointRecord;

/// One-way: a Raft message between voters (`RaftEnvelope`).
pub const RAFT: u8 = 1;
/// Call: a controller operation forwarded to the active controller (`ControllerOp`), answered
/// with its outcomes (`REPLY`, `Vec<Outcome>`).
pub const FORWARD: u8 = 2;
/// Call: a broker's heartbeat to the active controller (`BrokerHeartbeat`), answered with a
/// `HeartbeatReply`.
pub const HEARTBEAT: u8 = 3;
/// Call: a block of producer ids for the caller (`()`), answered with `ProducerIdBlock`.
pub const PRODUCER_IDS: u8 = 4;
/// Call: the feature levels a broker's binary runs (`SupportedLevels`), to each new active
/// controller and every 10 s to the same one, answered with an empty `REPLY`. Added after 0.1, whose controllers answer
/// "unknown kind" (and so never raise a level).
pub const FEATURES: u8 = 5;
/// Call: the controller quorum as the active controller sees it (`()`), answered with a
/// `QuorumView`: DescribeQuorum on a node that does not lead the quorum. Added after 0.1, whose
/// controllers answer "unknown kind" (the client then gets NOT_LEADER_OR_FOLLOWER, as from 0.1).
pub const QUORUM: u8 = 6;
/// A call's successful reply.
pub const REPLY: u8 = 128;
/// A call's failure: a Kafka error code and a message (`Failure`).
pub const FAILURE: u8 = 129;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct RaftEnvelope {
    /// The sender's cluster id ("" while it has not learned one).
    pub cluster_id: String,
    pub from_leader: bool,
    /// raft-rs's message, protobuf-encoded.
    pub message: Vec<u8>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct BrokerHeartbeat {
    pub cluster_id: String,
    pub node_id: i32,
    pub incarnation: u64,
    /// The incarnation this node's data dir last registered with (0: none): a restart of the
    /// same node may take over its registration at once, another node may not.
    pub previous_incarnation: u64,
    /// Its Kafka listeners, as advertised.
    pub listeners: Vec<EndpointRecord>,
    pub rack: Option<String>,
    /// The metadata version the sender holds; a broker that is not a voter is sent the
    /// catalog when it is behind.
    pub metadata_version: u64,
    pub voter: bool,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct SupportedLevels {
    pub node_id: i32,
    pub incarnation: u64,
    /// `metadata.version`'s (min, max).
    pub metadata_version: (i16, i16),
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct HeartbeatReply {
    pub controller_id: i32,
    /// (version, `catalog::encode` bytes) when the sender is behind and not a voter.
    pub catalog: Option<(u64, Vec<u8>)>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: i16,
    pub message: String,
    /// The active controller, when the receiver knows it (-1 otherwise).
    pub controller_id: i32,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct ProducerIdBlock {
    pub first: i64,
    pub end: i64,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct Forward {
    pub op: ControllerOp,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct Outcomes(pub Vec<Outcome>);

/// A payload's bytes.
pub fn encode<T>(value: &T) -> Vec<u8>
where
    T: for<'a> rkyv::Serialize<
        rkyv::api::high::HighSerializer<
            rkyv::util::AlignedVec,
            rkyv::ser::allocator::ArenaHandle<'a>,
            rkyv::rancor::Error,
        >,
    >,
{
    rkyv::to_bytes::<rkyv::rancor::Error>(value)
        .expect("messages always serialize")
        .to_vec()
}

/// A payload from untrusted bytes: validated, then deserialized.
pub fn decode<T>(raw: &[u8]) -> Result<T, String>
where
    T: rkyv::Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>
        + rkyv::Deserialize<T, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
{
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(raw);
    rkyv::from_bytes::<T, rkyv::rancor::Error>(&aligned).map_err(|e| format!("bad message: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_operation_keeps_the_archived_size_of_0_1() {
        // A 0.1 controller reads operations forwarded by a newer node during a rolling
        // upgrade: a variant added since must not be larger than the largest of 0.1's, or
        // every operation would move (new variants box their payloads).
        assert_eq!(std::mem::size_of::<ArchivedForward>(), 56);
    }

    #[test]
    fn payloads_round_trip_and_garbage_is_an_error() {
        let hb = BrokerHeartbeat {
            cluster_id: "c".into(),
            node_id: 3,
            incarnation: 7,
            previous_incarnation: 6,
            listeners: vec![EndpointRecord {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
                security_protocol: 0,
            }],
            rack: Some("r1".into()),
            metadata_version: 4,
            voter: true,
        };
        assert_eq!(decode::<BrokerHeartbeat>(&encode(&hb)), Ok(hb));
        assert!(decode::<BrokerHeartbeat>(b"garbage").is_err());
        assert!(decode::<HeartbeatReply>(&[0xff; 64]).is_err());
    }
}
