//! UpdateFeatures (KIP-584, `kafka-features.sh upgrade`): finalises feature levels on the
//! controller, all or nothing (`controller::features`). A refusal is the response's
//! top-level error with no per-feature results; success lists each feature with no error
//! (Kafka's KRaft answer).
//! Needs ALTER on the cluster.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::features::{FeatureUpdate, UPGRADE};
use crate::controller::{self, ControllerOp};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::ResponseError;

/// v0's `allow_downgrade` as v1's `upgrade_type`: a safe downgrade.
const SAFE_DOWNGRADE: i8 = 2;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: UpdateFeaturesRequest = decode(body, version)?;
    let updates: Vec<FeatureUpdate> = req
        .feature_updates
        .iter()
        .map(|f| FeatureUpdate {
            name: f.feature.to_string(),
            level: f.max_version_level,
            upgrade_type: match version {
                0 if f.allow_downgrade => SAFE_DOWNGRADE,
                0 => UPGRADE,
                _ => f.upgrade_type,
            },
        })
        .collect();
    let (code, message) = if !authorize::cluster(shard, caller, Operation::Alter) {
        let denied = ResponseError::ClusterAuthorizationFailed;
        (
            denied.code(),
            Some("ALTER on the cluster is needed".to_string()),
        )
    } else {
        let op = ControllerOp::UpdateFeatures {
            updates: updates.clone(),
            validate_only: req.validate_only,
        };
        match controller::submit(&services.controllers, op).await {
            // An active controller of an older release knows no levels: it cannot take one.
            Ok(outcomes) => match outcomes.into_iter().next().unwrap_or((0, None)) {
                (code, why) if code == ResponseError::UnsupportedVersion.code() => {
                    (ResponseError::InvalidUpdateVersion.code(), why)
                }
                outcome => outcome,
            },
            Err(_) => (ResponseError::NotController.code(), None),
        }
    };
    let results = match code {
        0 => updates
            .iter()
            .map(|u| UpdatableFeatureResult::default().with_feature(str_bytes(&u.name)))
            .collect(),
        _ => Vec::new(),
    };
    let message = message.as_deref().map(str_bytes);
    let resp = UpdateFeaturesResponse::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_results(results);
    encode(&resp, version)
}
