//! The APIs each listener implements — the client listener of a broker and the controller
//! listener of a controller — advertised in ranges a real Kafka 4.x node advertises (capped
//! where the latest version is not stable in Kafka), and the ApiVersions answer.

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

/// `(api, min, max)` for every API the broker answers. Produce advertises v0 as Kafka 4.x does
/// (librdkafka needs to see it) but v0–v2 requests are refused with UNSUPPORTED_VERSION.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 12),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::UnregisterBroker, 0, 0),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::UpdateFeatures, 0, 2),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::AddRaftVoter, 0, 0),
    (ApiKey::RemoveRaftVoter, 0, 0),
];

/// The consumer group protocol's APIs (KIP-848): advertised only while the cluster's
/// `group.version` is 1 or more, as Kafka advertises them.
pub const CONSUMER_GROUP_APIS: &[ApiKey] = &[
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
];

/// What the controller listener answers: the quorum's own traffic aside (a private key), the
/// broker-to-controller APIs, the admin requests brokers forward, the observers' fetch, and the
/// SASL login of a SASL controller listener.
pub const CONTROLLER_SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Fetch, 12, 17),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::AlterPartition, 2, 3),
    (ApiKey::FetchSnapshot, 0, 1),
    (ApiKey::BrokerRegistration, 0, 4),
    (ApiKey::BrokerHeartbeat, 0, 1),
    (ApiKey::UnregisterBroker, 0, 0),
    (ApiKey::AllocateProducerIds, 0, 0),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::UpdateFeatures, 0, 2),
    (ApiKey::AddRaftVoter, 0, 0),
    (ApiKey::RemoveRaftVoter, 0, 0),
];

/// One listener's API table.
#[derive(Debug, Clone, Copy)]
pub struct ApiSet(pub &'static [(ApiKey, i16, i16)]);

/// The client listener of a broker.
pub const BROKER: ApiSet = ApiSet(SUPPORTED);
/// The controller listener.
pub const CONTROLLER: ApiSet = ApiSet(CONTROLLER_SUPPORTED);

impl ApiSet {
    pub fn range(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.0
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, lo, hi)| (*lo, *hi))
    }

    /// Whether a request of `key` at `version` is served here.
    pub fn is_served(&self, key: ApiKey, version: i16) -> bool {
        match self.range(key) {
            Some((lo, hi)) => {
                let lo = if key == ApiKey::Produce {
                    PRODUCE_MIN_SERVED
                } else {
                    lo
                };
                version >= lo && version <= hi
            }
            None => false,
        }
    }

    /// The ApiVersions response body listing this set, with `error_code`.
    pub fn response(&self, error_code: i16) -> ApiVersionsResponse {
        let keys = self
            .0
            .iter()
            .map(|(k, lo, hi)| {
                ApiVersion::default()
                    .with_api_key(*k as i16)
                    .with_min_version(*lo)
                    .with_max_version(*hi)
            })
            .collect();
        ApiVersionsResponse::default()
            .with_error_code(error_code)
            .with_api_keys(keys)
    }
}

/// What an ApiVersions answer says of features (KIP-584): the levels the node supports, and
/// those the cluster finalized as of metadata offset `epoch`.
pub struct Features<'a> {
    /// `(name, min, max)`.
    pub supported: &'a [(&'a str, i16, i16)],
    /// `(name, level)`, levels above 0 only.
    pub finalized: &'a [(&'a str, i16)],
    /// The metadata offset the finalized levels are read at; -1 when none are known yet.
    pub epoch: i64,
}

/// `resp` with `features` for a request of `version` (they are tagged fields of v3+). Below
/// v4 a supported feature whose minimum is 0 is left out, as Kafka leaves it out: older
/// clients refuse a range that starts at 0 (KAFKA-17492).
pub fn with_features(resp: ApiVersionsResponse, version: i16, f: &Features) -> ApiVersionsResponse {
    if version < 3 {
        return resp;
    }
    let supported = f
        .supported
        .iter()
        .filter(|(_, min, _)| version >= 4 || *min > 0)
        .map(|(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_string(name.to_string()))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    let finalized = f
        .finalized
        .iter()
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_string(name.to_string()))
                .with_min_version_level(*level)
                .with_max_version_level(*level)
        })
        .collect();
    resp.with_supported_features(supported)
        .with_finalized_features_epoch(f.epoch)
        .with_finalized_features(finalized)
}

/// The lowest Produce version actually served.
pub const PRODUCE_MIN_SERVED: i16 = 3;

/// The advertised range of `key` on the client listener, if implemented.
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    BROKER.range(key)
}

/// Whether a request of `key` at `version` is served on the client listener.
pub fn is_served(key: ApiKey, version: i16) -> bool {
    BROKER.is_served(key, version)
}

/// The client listener's ApiVersions response body, with `error_code`.
pub fn response(error_code: i16) -> ApiVersionsResponse {
    BROKER.response(error_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_tagged_fields_of_v3_and_a_zero_minimum_needs_v4() {
        let f = Features {
            supported: &[("group.version", 0, 0), ("metadata.version", 27, 27)],
            finalized: &[("metadata.version", 27)],
            epoch: 42,
        };
        let names = |r: &ApiVersionsResponse| -> Vec<String> {
            r.supported_features
                .iter()
                .map(|k| k.name.to_string())
                .collect()
        };
        assert!(names(&with_features(response(0), 2, &f)).is_empty());
        let v3 = with_features(response(0), 3, &f);
        assert_eq!(names(&v3), ["metadata.version"]);
        assert_eq!(v3.finalized_features_epoch, 42);
        assert_eq!(v3.finalized_features[0].max_version_level, 27);
        let v4 = with_features(response(0), 4, &f);
        assert_eq!(names(&v4), ["group.version", "metadata.version"]);
        assert_eq!(v4.supported_features[0].max_version, 0);
    }

    #[test]
    fn advertised_ranges_fit_what_the_codec_supports() {
        for (k, lo, hi) in SUPPORTED.iter().chain(CONTROLLER_SUPPORTED) {
            let v = k.valid_versions();
            let lo = if *k == ApiKey::Produce {
                PRODUCE_MIN_SERVED
            } else {
                *lo
            };
            assert!(v.min <= lo && *hi <= v.max, "{k:?} {lo}..{hi} vs {v}");
        }
    }

    #[test]
    fn produce_v2_is_advertised_but_not_served() {
        assert_eq!(range(ApiKey::Produce), Some((0, 12)));
        assert!(!is_served(ApiKey::Produce, 2));
        assert!(is_served(ApiKey::Produce, 3));
        assert!(!is_served(ApiKey::Fetch, 3));
        assert!(!is_served(ApiKey::SaslHandshake, 0));
    }
}
