//! ApiVersions: the table of served versions. A request at a version newer than served gets
//! UNSUPPORTED_VERSION in the v0 format, which every client can read (KIP-511).

use super::{encode, Reply, SUPPORTED};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::ResponseError;

pub const MAX_VERSION: i16 = 3;

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

pub fn handle(version: i16) -> anyhow::Result<Reply> {
    encode(&response(), version)
}

/// The answer to an ApiVersions request at an unsupported version: encoded as v0.
pub fn unsupported() -> anyhow::Result<Reply> {
    encode(
        &response().with_error_code(ResponseError::UnsupportedVersion.code()),
        0,
    )
}
