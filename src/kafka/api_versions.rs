//! ApiVersions: the table of served versions, and from v3 the features (KIP-584):
//! `metadata.version`, finalized by the controller (`controller::features`), and
//! `transaction.version` (KIP-890 part 2), finalized at the configured level. A
//! request at a version newer than served gets UNSUPPORTED_VERSION in the v0 format, which
//! every client can read (KIP-511). From v5 (KIP-1242) a client may name the cluster and node
//! it means to reach; a broker that is not that node answers REBOOTSTRAP_REQUIRED, so that a
//! client whose address now leads elsewhere bootstraps again.

use super::{encode, str_bytes, Reply, SUPPORTED};
use crate::protocol::wire::{Reader, WireResult};
use crate::shard::Shard;
use crate::storage::features::{MAX_METADATA_VERSION, METADATA_VERSION, MIN_METADATA_VERSION};
use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::ResponseError;

const TRANSACTION_VERSION: &str = "transaction.version";
/// The highest `transaction.version` served.
const MAX_TRANSACTION_VERSION: i16 = 2;

pub const MAX_VERSION: i16 = 5;
/// The first version whose request names the cluster and node the client means (KIP-1242);
/// its response is v4's.
const INTENDED_NODE_VERSION: i16 = 5;
/// Below this version a supported feature whose lowest level is 0 is left out, as Kafka
/// leaves it out (KAFKA-17011: older clients refuse a minimum of 0).
const ZERO_MIN_FEATURES_VERSION: i16 = 4;

pub fn response() -> ApiVersionsResponse {
    let api_keys = SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    ApiVersionsResponse::default().with_api_keys(api_keys)
}

pub fn handle(shard: &Shard, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    if version >= INTENDED_NODE_VERSION {
        let intended = intended_node(body).map_err(|e| anyhow::anyhow!("ApiVersions: {}", e.0))?;
        let catalog = shard.catalog();
        if let Err(e) = check_intended(intended, &catalog.cluster_id, catalog.here.node_id) {
            // Kafka's answer: the code alone, no API or feature listed.
            let refused = ApiVersionsResponse::default().with_error_code(e.code());
            return encode(&refused, INTENDED_NODE_VERSION - 1);
        }
    }
    let metadata_version = shard.catalog().metadata_version;
    let transaction_version = shard.config.transactions.version;
    let mut supported = vec![supported_feature(
        METADATA_VERSION,
        MIN_METADATA_VERSION,
        MAX_METADATA_VERSION,
    )];
    if version >= ZERO_MIN_FEATURES_VERSION {
        supported.push(supported_feature(
            TRANSACTION_VERSION,
            0,
            MAX_TRANSACTION_VERSION,
        ));
    }
    let finalized = vec![
        finalized_feature(METADATA_VERSION, metadata_version),
        finalized_feature(TRANSACTION_VERSION, transaction_version),
    ];
    // Clients keep the features of the highest epoch they were told: the metadata level only
    // rises, and `transaction.version` changes only with a restart.
    let resp = response()
        .with_supported_features(supported)
        .with_finalized_features_epoch(i64::from(metadata_version))
        .with_finalized_features(finalized);
    // v5's response is v4's, field for field.
    encode(&resp, version.min(INTENDED_NODE_VERSION - 1))
}

fn supported_feature(name: &'static str, min: i16, max: i16) -> SupportedFeatureKey {
    SupportedFeatureKey::default()
        .with_name(str_bytes(name))
        .with_min_version(min)
        .with_max_version(max)
}

fn finalized_feature(name: &'static str, level: i16) -> FinalizedFeatureKey {
    FinalizedFeatureKey::default()
        .with_name(str_bytes(name))
        .with_min_version_level(level)
        .with_max_version_level(level)
}

/// The (cluster id, node id) a v5+ request names: the client names both or neither.
fn intended_node(body: Bytes) -> WireResult<(Option<String>, i32)> {
    let mut r = Reader::new(body, true);
    r.string()?; // ClientSoftwareName
    r.string()?; // ClientSoftwareVersion
    let cluster_id = r.nullable_string()?;
    let node_id = r.i32()?;
    r.skip_tagged_fields()?;
    Ok((cluster_id, node_id))
}

/// Whether a request meant for `intended` may be served here: one naming no node reaches any;
/// one naming another cluster or node is REBOOTSTRAP_REQUIRED; one naming half of an address
/// (a cluster without a node, or a node without a cluster) INVALID_REQUEST, as Kafka answers.
fn check_intended(
    intended: (Option<String>, i32),
    cluster_id: &str,
    node_id: i32,
) -> Result<(), ResponseError> {
    match intended {
        (None, -1) => Ok(()),
        (Some(cluster), node) if node >= 0 => match cluster == cluster_id && node == node_id {
            true => Ok(()),
            false => Err(ResponseError::RebootstrapRequired),
        },
        _ => Err(ResponseError::InvalidRequest),
    }
}

/// The answer to an ApiVersions request at an unsupported version: encoded as v0.
pub fn unsupported() -> anyhow::Result<Reply> {
    encode(
        &response().with_error_code(ResponseError::UnsupportedVersion.code()),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_for_another_node_or_cluster_is_not_for_this_one() {
        let check = |cluster: Option<&str>, node| {
            check_intended((cluster.map(String::from), node), "c1", 1)
        };
        assert_eq!(check(Some("c1"), 1), Ok(()));
        assert_eq!(check(None, -1), Ok(()), "naming no node reaches any");
        assert_eq!(
            check(Some("c1"), 2),
            Err(ResponseError::RebootstrapRequired)
        );
        assert_eq!(
            check(Some("c2"), 1),
            Err(ResponseError::RebootstrapRequired)
        );
        assert_eq!(check(None, 2), Err(ResponseError::InvalidRequest));
        assert_eq!(check(Some("c1"), -1), Err(ResponseError::InvalidRequest));
    }
}
