//! Feature versioning on a broker (KIP-584): the supported and finalized features its
//! ApiVersions answer carries (`kafka-features describe`), and UpdateFeatures — ALTER on the
//! cluster, then forwarded to the active controller, which judges and commits it.

use std::sync::Arc;

use kafka_protocol::messages::{
    ApiVersionsResponse, UpdateFeaturesRequest, UpdateFeaturesResponse,
};

use super::auth::{Action, Session};
use super::controller_channel::is_not_controller;
use super::{Broker, Outcome};
use crate::metadata::features;
use crate::protocol::{api_versions, errors};
use crate::security::acl::AclOperation;

/// ApiVersions at `version`: the client listener's APIs, and the features of this broker's
/// metadata image.
/// The consumer group APIs are left out while the cluster does not run `group.version` 1.
pub fn api_versions(broker: &Arc<Broker>, version: i16) -> ApiVersionsResponse {
    let img = broker.image();
    let mut resp = api_versions::response(errors::NONE);
    if !super::group::consumer_api::enabled(broker, &img) {
        resp.api_keys.retain(|k| {
            !api_versions::CONSUMER_GROUP_APIS
                .iter()
                .any(|a| *a as i16 == k.api_key)
        });
    }
    features::advertise(resp, version, &img)
}

/// UpdateFeatures: CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster; else the active
/// controller's answer, given once this broker's image holds the levels it finalized.
pub fn update_features(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: UpdateFeaturesRequest,
) -> Outcome<UpdateFeaturesResponse> {
    if !broker.authorize(session, Action::cluster(AclOperation::Alter)) {
        let why = "updating features needs ALTER on the cluster".to_string();
        let error = Some((errors::CLUSTER_AUTHORIZATION_FAILED, why));
        return Outcome::Now(features::update_features_response(&req, version, error));
    }
    let wanted: Vec<(String, i16)> = match req.validate_only {
        true => Vec::new(),
        false => req
            .feature_updates
            .iter()
            .map(|u| (u.feature.to_string(), u.max_version_level))
            .collect(),
    };
    let unanswered = req.clone();
    super::admin::forward(
        broker,
        version,
        req,
        |r| is_not_controller(r.error_code),
        move |code| {
            features::update_features_response(&unanswered, version, Some((code, String::new())))
        },
        move |broker, resp| async move {
            if resp.error_code == errors::NONE {
                broker
                    .wait_for_image(|img| {
                        wanted
                            .iter()
                            .all(|(name, level)| img.feature(name).unwrap_or(0) == *level)
                    })
                    .await;
            }
            resp
        },
    )
}
