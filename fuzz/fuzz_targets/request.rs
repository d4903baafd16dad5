//! A request frame (without its size prefix): the header parser, then the body decoder of every
//! API the broker serves, at the version the header names, exactly as the handlers decode it.
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;
use sluice::kafka;
use sluice::protocol::{batch, frame, produce};

fn decode<M: Decodable>(mut body: Bytes, version: i16) {
    let _ = M::decode(&mut body, version);
}

fuzz_target!(|data: &[u8]| {
    let Ok((header, body)) = frame::parse_request(Bytes::copy_from_slice(data), kafka::supported)
    else {
        return;
    };
    let v = header.api_version;
    match header.api_key {
        ApiKey::Produce => {
            if let Ok(req) = produce::decode(body, v) {
                for p in req.topics.iter().flat_map(|t| &t.partitions) {
                    if let Some(records) = &p.records {
                        let _ = batch::validate_all(records);
                    }
                }
            }
        }
        // The handler reads nothing past the header.
        ApiKey::ApiVersions => {}
        ApiKey::Fetch => decode::<FetchRequest>(body, v),
        ApiKey::ListOffsets => decode::<ListOffsetsRequest>(body, v),
        ApiKey::Metadata => decode::<MetadataRequest>(body, v),
        ApiKey::CreateTopics => decode::<CreateTopicsRequest>(body, v),
        ApiKey::DeleteTopics => decode::<DeleteTopicsRequest>(body, v),
        ApiKey::DescribeConfigs => decode::<DescribeConfigsRequest>(body, v),
        ApiKey::CreatePartitions => decode::<CreatePartitionsRequest>(body, v),
        ApiKey::FindCoordinator => decode::<FindCoordinatorRequest>(body, v),
        ApiKey::JoinGroup => decode::<JoinGroupRequest>(body, v),
        ApiKey::SyncGroup => decode::<SyncGroupRequest>(body, v),
        ApiKey::Heartbeat => decode::<HeartbeatRequest>(body, v),
        ApiKey::LeaveGroup => decode::<LeaveGroupRequest>(body, v),
        ApiKey::OffsetCommit => decode::<OffsetCommitRequest>(body, v),
        ApiKey::OffsetFetch => decode::<OffsetFetchRequest>(body, v),
        ApiKey::DescribeGroups => decode::<DescribeGroupsRequest>(body, v),
        ApiKey::ListGroups => decode::<ListGroupsRequest>(body, v),
        ApiKey::DeleteGroups => decode::<DeleteGroupsRequest>(body, v),
        ApiKey::OffsetDelete => decode::<OffsetDeleteRequest>(body, v),
        ApiKey::InitProducerId => decode::<InitProducerIdRequest>(body, v),
        ApiKey::AddPartitionsToTxn => decode::<AddPartitionsToTxnRequest>(body, v),
        ApiKey::AddOffsetsToTxn => decode::<AddOffsetsToTxnRequest>(body, v),
        ApiKey::EndTxn => decode::<EndTxnRequest>(body, v),
        ApiKey::TxnOffsetCommit => decode::<TxnOffsetCommitRequest>(body, v),
        ApiKey::WriteTxnMarkers => decode::<WriteTxnMarkersRequest>(body, v),
        ApiKey::DescribeTransactions => decode::<DescribeTransactionsRequest>(body, v),
        ApiKey::ListTransactions => decode::<ListTransactionsRequest>(body, v),
        ApiKey::DescribeProducers => decode::<DescribeProducersRequest>(body, v),
        ApiKey::DescribeLogDirs => decode::<DescribeLogDirsRequest>(body, v),
        ApiKey::DescribeClientQuotas => decode::<DescribeClientQuotasRequest>(body, v),
        ApiKey::DeleteRecords => decode::<DeleteRecordsRequest>(body, v),
        ApiKey::AlterConfigs => decode::<AlterConfigsRequest>(body, v),
        ApiKey::IncrementalAlterConfigs => decode::<IncrementalAlterConfigsRequest>(body, v),
        ApiKey::DescribeCluster => decode::<DescribeClusterRequest>(body, v),
        ApiKey::DescribeQuorum => decode::<DescribeQuorumRequest>(body, v),
        ApiKey::OffsetForLeaderEpoch => decode::<OffsetForLeaderEpochRequest>(body, v),
        ApiKey::ElectLeaders => decode::<ElectLeadersRequest>(body, v),
        ApiKey::AlterPartitionReassignments => {
            decode::<AlterPartitionReassignmentsRequest>(body, v)
        }
        ApiKey::ListPartitionReassignments => decode::<ListPartitionReassignmentsRequest>(body, v),
        ApiKey::SaslHandshake => decode::<SaslHandshakeRequest>(body, v),
        ApiKey::SaslAuthenticate => decode::<SaslAuthenticateRequest>(body, v),
        ApiKey::DescribeUserScramCredentials => {
            decode::<DescribeUserScramCredentialsRequest>(body, v)
        }
        ApiKey::AlterUserScramCredentials => decode::<AlterUserScramCredentialsRequest>(body, v),
        ApiKey::CreateAcls => decode::<CreateAclsRequest>(body, v),
        ApiKey::DescribeAcls => decode::<DescribeAclsRequest>(body, v),
        ApiKey::DeleteAcls => decode::<DeleteAclsRequest>(body, v),
        ApiKey::UpdateFeatures => decode::<UpdateFeaturesRequest>(body, v),
        other => panic!("kafka::SUPPORTED serves {other:?}, which this target does not decode"),
    }
});
