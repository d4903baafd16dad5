//! ApiVersions: the table of served versions, and from v3 the features (KIP-584): the one
//! Sluice has is `transaction.version` (KIP-890 part 2), finalized at the configured level. A
//! request at a version newer than served gets UNSUPPORTED_VERSION in the v0 format, which
//! every client can read (KIP-511).

use super::{encode, str_bytes, Reply, SUPPORTED};
use crate::shard::Shard;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::ResponseError;

const TRANSACTION_VERSION: &str = "transaction.version";
/// The highest `transaction.version` served.
const MAX_TRANSACTION_VERSION: i16 = 2;
/// The finalized features' epoch: they change only with the configuration, so one value
/// (clients keep the features of the highest epoch they were told).
const FEATURES_EPOCH: i64 = 1;

pub const MAX_VERSION: i16 = 4;
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

pub fn handle(shard: &Shard, version: i16) -> anyhow::Result<Reply> {
    let level = shard.config.transactions.version;
    let supported = SupportedFeatureKey::default()
        .with_name(str_bytes(TRANSACTION_VERSION))
        .with_min_version(0)
        .with_max_version(MAX_TRANSACTION_VERSION);
    let finalized = FinalizedFeatureKey::default()
        .with_name(str_bytes(TRANSACTION_VERSION))
        .with_min_version_level(level)
        .with_max_version_level(level);
    let supported = match version >= ZERO_MIN_FEATURES_VERSION {
        true => vec![supported],
        false => Vec::new(),
    };
    let resp = response()
        .with_supported_features(supported)
        .with_finalized_features_epoch(FEATURES_EPOCH)
        .with_finalized_features(vec![finalized]);
    encode(&resp, version)
}

/// The answer to an ApiVersions request at an unsupported version: encoded as v0.
pub fn unsupported() -> anyhow::Result<Reply> {
    encode(
        &response().with_error_code(ResponseError::UnsupportedVersion.code()),
        0,
    )
}
