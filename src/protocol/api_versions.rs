//! The APIs this broker implements, advertised in ranges a real Kafka 4.x broker advertises
//! (capped where the latest version is not stable in Kafka), and the ApiVersions answer.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

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
    (ApiKey::DescribeCluster, 0, 1),
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
];

/// The lowest Produce version actually served.
pub const PRODUCE_MIN_SERVED: i16 = 3;

/// The advertised range of `key`, if implemented.
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// Whether a request of `key` at `version` is served.
pub fn is_served(key: ApiKey, version: i16) -> bool {
    match range(key) {
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

/// The ApiVersions response body listing `SUPPORTED`, with `error_code`.
pub fn response(error_code: i16) -> ApiVersionsResponse {
    let keys = SUPPORTED
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_ranges_fit_what_the_codec_supports() {
        for (k, lo, hi) in SUPPORTED {
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
