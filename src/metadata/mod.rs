//! The cluster's metadata as brokers and controllers both read it: the records of the metadata
//! log, the image they build, and the internal topics' names and rules. Below broker and
//! controller alike, so neither has to reach into the other for them.

pub mod authorizer;
pub mod bootstrap;
pub mod features;
pub mod image;
pub mod initial_voters;
pub mod quota_image;
pub mod records;
pub mod security_image;

/// The metadata log's topic (Kafka's `__cluster_metadata`).
pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// The group coordinator's topic: committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Kafka's internal topics: users may not create, delete or produce to them.
pub fn is_internal_topic(name: &str) -> bool {
    name == METADATA_TOPIC || name == OFFSETS_TOPIC
}

/// Topics not shown in Metadata at all (the metadata log).
pub fn is_hidden_topic(name: &str) -> bool {
    name == METADATA_TOPIC
}
