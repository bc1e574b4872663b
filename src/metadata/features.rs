//! The cluster's features (Kafka's KIP-584 feature versioning): the levels an evenkeel node can
//! run (`SUPPORTED`, what ApiVersions advertises) and how UpdateFeatures is judged against them
//! and the finalized levels of the metadata image, with the words of Kafka's controller.

use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{
    ApiVersionsResponse, UpdateFeaturesRequest, UpdateFeaturesResponse,
};

use super::image::MetadataImage;
use super::records::MetadataRecord;
use crate::protocol::{api_versions, str_bytes};

/// The feature that versions the metadata log's records.
pub const METADATA_VERSION: &str = "metadata.version";
/// The `metadata.version` evenkeel runs and a new cluster starts at (Kafka 4.1's latest
/// production level, `4.1-IV1`); the records it writes are those of this level only.
pub const METADATA_VERSION_LEVEL: i16 = 27;

/// The feature that says whether the quorum's voters can change (KIP-853).
pub const KRAFT_VERSION: &str = "kraft.version";

/// A feature a node supports: every level from `min` to `max` can be finalized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Supported {
    pub name: &'static str,
    pub min: i16,
    pub max: i16,
}

const fn only(name: &'static str, level: i16) -> Supported {
    Supported {
        name,
        min: level,
        max: level,
    }
}

/// The `metadata.version` levels a node runs (a broker registers them).
pub const METADATA_VERSION_RANGE: Supported = only(METADATA_VERSION, METADATA_VERSION_LEVEL);

/// Every feature the newest Kafka release's tools know, sorted, each with the levels evenkeel
/// runs: `metadata.version` 27, `group.version` 0–1 (1: the consumer group protocol,
/// KIP-848, which a new cluster starts with), `kraft.version` 0–1 (1: a dynamic quorum, KIP-853,
/// finalized by its first controller; 0: the voters of `controller.quorum.voters`), and 0 for
/// what it does not serve yet — `transaction.version` 1–2 (transactions), `eligible.leader.replicas.version` 1 (KIP-966),
/// `share.version` 1 (share groups, KIP-932), `streams.version` 1 (KIP-1071). A tool that asks
/// for one of those levels is refused, as a Kafka controller refuses a level it cannot run.
pub const SUPPORTED: &[Supported] = &[
    only("eligible.leader.replicas.version", 0),
    Supported {
        name: "group.version",
        min: 0,
        max: 1,
    },
    Supported {
        name: KRAFT_VERSION,
        min: 0,
        max: 1,
    },
    METADATA_VERSION_RANGE,
    only("share.version", 0),
    only("streams.version", 0),
    only("transaction.version", 0),
];

/// The supported range of `name`, if evenkeel knows the feature.
pub fn supported(name: &str) -> Option<Supported> {
    SUPPORTED.iter().copied().find(|f| f.name == name)
}

/// `resp` (an ApiVersions answer to a request of `version`) with the features of a node
/// reading `img`: `SUPPORTED`, and the levels `img` finalized as of its last offset (-1 before
/// the first controller finalized `metadata.version`).
pub fn advertise(
    resp: ApiVersionsResponse,
    version: i16,
    img: &MetadataImage,
) -> ApiVersionsResponse {
    let supported: Vec<(&str, i16, i16)> =
        SUPPORTED.iter().map(|f| (f.name, f.min, f.max)).collect();
    let finalized: Vec<(&str, i16)> = img
        .features()
        .iter()
        .map(|(name, level)| (name.as_str(), *level))
        .collect();
    let epoch = if finalized.is_empty() {
        -1
    } else {
        img.last_offset
    };
    let features = api_versions::Features {
        supported: &supported,
        finalized: &finalized,
        epoch,
    };
    api_versions::with_features(resp, version, &features)
}

/// UpdateFeatures' `upgrade_type` (v1+; v0's `allow_downgrade` is a safe downgrade).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpgradeType {
    Upgrade,
    SafeDowngrade,
    UnsafeDowngrade,
}

impl UpgradeType {
    /// From the wire: 1 upgrade, 2 safe downgrade, 3 unsafe downgrade; `None` for another value.
    pub fn from_wire(v: i8) -> Option<UpgradeType> {
        match v {
            1 => Some(UpgradeType::Upgrade),
            2 => Some(UpgradeType::SafeDowngrade),
            3 => Some(UpgradeType::UnsafeDowngrade),
            _ => None,
        }
    }
}

/// One update of an UpdateFeatures request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureUpdate {
    pub name: String,
    pub level: i16,
    pub upgrade_type: UpgradeType,
}

/// The updates of an UpdateFeatures request (v0's `allow_downgrade` is a safe downgrade), or
/// why it cannot be read: an upgrade type no version defines.
pub fn updates_of(req: &UpdateFeaturesRequest, version: i16) -> Result<Vec<FeatureUpdate>, String> {
    req.feature_updates
        .iter()
        .map(|u| {
            let upgrade_type = match (version, u.allow_downgrade) {
                (0, true) => Some(UpgradeType::SafeDowngrade),
                (0, false) => Some(UpgradeType::Upgrade),
                _ => UpgradeType::from_wire(u.upgrade_type),
            };
            Ok(FeatureUpdate {
                name: u.feature.to_string(),
                level: u.max_version_level,
                upgrade_type: upgrade_type.ok_or_else(|| {
                    format!(
                        "Invalid upgrade type {} for feature {}",
                        u.upgrade_type, u.feature
                    )
                })?,
            })
        })
        .collect()
}

/// The UpdateFeatures answer: `error` (code, message) at the top, as Kafka answers, and below v2
/// one result per update, each without an error of its own (the client fails them all with the
/// top-level error).
pub fn update_features_response(
    req: &UpdateFeaturesRequest,
    version: i16,
    error: Option<(i16, String)>,
) -> UpdateFeaturesResponse {
    let results = if version < 2 {
        req.feature_updates
            .iter()
            .map(|u| UpdatableFeatureResult::default().with_feature(u.feature.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let (code, message) = error.map_or((0, None), |(c, m)| (c, Some(str_bytes(m))));
    UpdateFeaturesResponse::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_results(results)
}

/// Kafka's prefix of a refusal: one bad update fails them all.
const FAILED_ALL: &str =
    "The update failed for all features since the following feature had an error: ";

/// Judges `updates` as Kafka's FeatureControlManager does, against `SUPPORTED` and the levels
/// `img` has finalized (a feature it lacks is at 0), for the controller `controller`: the
/// records that finalize the changes (none for an update to the level already finalized), or
/// the message of the first refusal, which fails the whole request (INVALID_UPDATE_VERSION).
pub fn plan(
    updates: &[FeatureUpdate],
    img: &MetadataImage,
    controller: i32,
) -> Result<Vec<MetadataRecord>, String> {
    let mut records = Vec::new();
    for (i, u) in updates.iter().enumerate() {
        if updates[..i].iter().any(|earlier| earlier.name == u.name) {
            return Err(format!(
                "{FAILED_ALL}Feature {} was specified more than once.",
                u.name
            ));
        }
        let current = img.feature(&u.name).unwrap_or(0);
        judge(u, current, controller).map_err(|why| format!("{FAILED_ALL}{why}"))?;
        if u.level != current {
            records.push(MetadataRecord::FeatureLevel {
                name: u.name.clone(),
                level: u.level,
            });
        }
    }
    Ok(records)
}

/// Why `u` cannot be applied to a feature finalized at `current`, if it cannot.
fn judge(u: &FeatureUpdate, current: i16, controller: i32) -> Result<(), String> {
    let invalid = format!("Invalid update version {} for feature {}.", u.level, u.name);
    let Some(range) = supported(&u.name) else {
        return Err(format!(
            "{invalid} Local controller {controller} does not support this feature."
        ));
    };
    if u.level < range.min || u.level > range.max {
        return Err(format!(
            "{invalid} Local controller {controller} only supports versions {}-{}",
            range.min, range.max
        ));
    }
    if u.level < current && u.upgrade_type == UpgradeType::Upgrade {
        return Err(format!(
            "{invalid} Can't downgrade the version of this feature without setting the upgrade \
             type to either safe or unsafe downgrade."
        ));
    }
    if u.name == KRAFT_VERSION && u.level != current {
        return Err(format!(
            "{invalid} The kraft.version of a quorum follows how it was formed: 0 for the voters \
             of controller.quorum.voters, 1 for a dynamic quorum found through \
             controller.quorum.bootstrap.servers; evenkeel does not convert one into the other."
        ));
    }
    if u.name == METADATA_VERSION && u.level < current {
        return Err(format!(
            "Unsupported metadata.version downgrade from {current} to {}.",
            u.level
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(features: &[(&str, i16)]) -> MetadataImage {
        let records: Vec<MetadataRecord> = features
            .iter()
            .map(|(name, level)| MetadataRecord::FeatureLevel {
                name: name.to_string(),
                level: *level,
            })
            .collect();
        MetadataImage::from_snapshot_records(&records, records.len() as i64 - 1, 1, 0)
    }

    fn update(name: &str, level: i16, upgrade_type: UpgradeType) -> FeatureUpdate {
        FeatureUpdate {
            name: name.into(),
            level,
            upgrade_type,
        }
    }

    #[test]
    fn kraft_version_follows_the_quorum_and_is_never_updated() {
        let img = image(&[(METADATA_VERSION, METADATA_VERSION_LEVEL)]);
        let e = plan(&[update(KRAFT_VERSION, 1, UpgradeType::Upgrade)], &img, 1).unwrap_err();
        assert!(e.contains("kraft.version of a quorum follows"), "{e}");
        let dynamic = image(&[(KRAFT_VERSION, 1)]);
        let e = plan(
            &[update(KRAFT_VERSION, 0, UpgradeType::UnsafeDowngrade)],
            &dynamic,
            1,
        )
        .unwrap_err();
        assert!(e.contains("Invalid update version 0"), "{e}");
        // Asking for the level in force changes nothing.
        assert!(plan(
            &[update(KRAFT_VERSION, 1, UpgradeType::Upgrade)],
            &dynamic,
            1
        )
        .unwrap()
        .is_empty());
    }

    #[test]
    fn the_table_is_sorted_and_each_range_holds_what_a_new_cluster_finalizes() {
        let names: Vec<&str> = SUPPORTED.iter().map(|f| f.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        let mv = supported(METADATA_VERSION).unwrap();
        assert!(mv.min <= METADATA_VERSION_LEVEL && METADATA_VERSION_LEVEL <= mv.max);
        assert!(SUPPORTED.iter().all(|f| f.min <= f.max && f.min >= 0));
    }

    #[test]
    fn an_update_to_the_finalized_level_is_a_no_op() {
        let img = image(&[(METADATA_VERSION, METADATA_VERSION_LEVEL)]);
        let updates = [
            update(
                METADATA_VERSION,
                METADATA_VERSION_LEVEL,
                UpgradeType::Upgrade,
            ),
            update("group.version", 0, UpgradeType::SafeDowngrade),
        ];
        assert_eq!(plan(&updates, &img, 1), Ok(Vec::new()));
    }

    #[test]
    fn levels_nobody_can_run_and_unknown_features_fail_the_whole_request() {
        let img = image(&[(METADATA_VERSION, METADATA_VERSION_LEVEL)]);
        let e = plan(
            &[
                update("group.version", 0, UpgradeType::Upgrade),
                update("group.version", 1, UpgradeType::Upgrade),
            ],
            &img,
            3,
        )
        .unwrap_err();
        assert!(e.contains("more than once"), "{e}");
        let e = plan(&[update("group.version", 2, UpgradeType::Upgrade)], &img, 3).unwrap_err();
        assert_eq!(
            e,
            "The update failed for all features since the following feature had an error: \
             Invalid update version 2 for feature group.version. Local controller 3 only \
             supports versions 0-1"
        );
        let e = plan(&[update("share.version", 1, UpgradeType::Upgrade)], &img, 3).unwrap_err();
        assert!(e.ends_with("only supports versions 0-0"), "{e}");
        let e = plan(
            &[update("unknown.feature", 1, UpgradeType::Upgrade)],
            &img,
            3,
        )
        .unwrap_err();
        assert!(
            e.ends_with("Local controller 3 does not support this feature."),
            "{e}"
        );
        let e = plan(
            &[update(METADATA_VERSION, 7, UpgradeType::UnsafeDowngrade)],
            &img,
            3,
        )
        .unwrap_err();
        assert!(e.contains("only supports versions 27-27"), "{e}");
    }

    #[test]
    fn a_downgrade_needs_a_downgrade_type_and_metadata_version_never_goes_down() {
        // A wider table than evenkeel's, to reach the checks behind the range check.
        let img = image(&[("group.version", 0)]);
        let down = update(
            METADATA_VERSION,
            METADATA_VERSION_LEVEL,
            UpgradeType::Upgrade,
        );
        let e = judge(&down, METADATA_VERSION_LEVEL + 1, 1).unwrap_err();
        assert!(e.contains("Can't downgrade"), "{e}");
        let safe = update(
            METADATA_VERSION,
            METADATA_VERSION_LEVEL,
            UpgradeType::SafeDowngrade,
        );
        let e = judge(&safe, METADATA_VERSION_LEVEL + 1, 1).unwrap_err();
        assert!(
            e.starts_with("Unsupported metadata.version downgrade"),
            "{e}"
        );
        assert_eq!(
            plan(&[update("group.version", 0, UpgradeType::Upgrade)], &img, 1),
            Ok(Vec::new())
        );
    }

    #[test]
    fn group_version_goes_up_and_down_between_0_and_1() {
        let img = image(&[("group.version", 0)]);
        let up = plan(&[update("group.version", 1, UpgradeType::Upgrade)], &img, 1);
        let record = MetadataRecord::FeatureLevel {
            name: "group.version".into(),
            level: 1,
        };
        assert_eq!(up, Ok(vec![record]));
        let img = image(&[("group.version", 1)]);
        let e = plan(&[update("group.version", 0, UpgradeType::Upgrade)], &img, 1).unwrap_err();
        assert!(e.contains("Can't downgrade"), "{e}");
        let down = plan(
            &[update("group.version", 0, UpgradeType::SafeDowngrade)],
            &img,
            1,
        );
        assert_eq!(down.map(|r| r.len()), Ok(1));
    }
}
