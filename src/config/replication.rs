//! The keys of replication between brokers, with Kafka's names and defaults: how followers
//! fetch from leaders, when a follower falls out of the ISR, and where consumers may read.

use std::collections::BTreeMap;

use super::{invalid as bad, number, ConfigError};

#[derive(Debug, Clone, PartialEq)]
pub struct ReplicationConfig {
    /// `replica.lag.time.max.ms`: a follower that has not caught up for this long leaves the ISR.
    pub lag_time_max_ms: i64,
    /// `num.replica.fetchers`: fetchers per source broker.
    pub num_fetchers: usize,
    /// `replica.fetch.max.bytes`: per partition in one fetch.
    pub fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: per fetch response.
    pub fetch_response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms` and `replica.fetch.min.bytes`: how long the leader may hold a
    /// follower's fetch waiting for data.
    pub fetch_wait_max_ms: i32,
    pub fetch_min_bytes: i32,
    /// `replica.fetch.backoff.ms`: the pause after a failed fetch.
    pub fetch_backoff_ms: u64,
    /// `replica.socket.timeout.ms`: how long a fetch may go unanswered.
    pub socket_timeout_ms: u64,
    /// `replica.high.watermark.checkpoint.interval.ms`.
    pub high_watermark_checkpoint_interval_ms: i64,
    /// `replica.selector.class`: Kafka's `RackAwareReplicaSelector` lets consumers with a
    /// `client.rack` read from a replica in their rack (KIP-392); unset, they read the leader.
    pub rack_aware_selector: bool,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            lag_time_max_ms: 30_000,
            num_fetchers: 1,
            fetch_max_bytes: 1_048_576,
            fetch_response_max_bytes: 10_485_760,
            fetch_wait_max_ms: 500,
            fetch_min_bytes: 1,
            fetch_backoff_ms: 1000,
            socket_timeout_ms: 30_000,
            high_watermark_checkpoint_interval_ms: 5000,
            rack_aware_selector: false,
        }
    }
}

/// The keys read here, for the broker's list of known keys.
pub const KEYS: &[&str] = &[
    "replica.lag.time.max.ms",
    "num.replica.fetchers",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.wait.max.ms",
    "replica.fetch.min.bytes",
    "replica.fetch.backoff.ms",
    "replica.socket.timeout.ms",
    "replica.high.watermark.checkpoint.interval.ms",
    "replica.selector.class",
];

/// Kafka's rack-aware selector, the one `replica.selector.class` may name.
pub const RACK_AWARE_SELECTOR: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

impl ReplicationConfig {
    pub fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let d = ReplicationConfig::default();
        let selector = props
            .get("replica.selector.class")
            .map(|s| s.trim())
            .filter(|s| !s.is_empty());
        let rack_aware_selector =
            match selector {
                None => false,
                Some(RACK_AWARE_SELECTOR) => true,
                Some(other) => return Err(bad(
                    "replica.selector.class",
                    other,
                    "only org.apache.kafka.common.replica.RackAwareReplicaSelector is supported",
                )),
            };
        Ok(ReplicationConfig {
            lag_time_max_ms: number(props, KEYS[0], d.lag_time_max_ms, 1)?,
            num_fetchers: number(props, KEYS[1], d.num_fetchers, 1)?,
            fetch_max_bytes: number(props, KEYS[2], d.fetch_max_bytes, 0)?,
            fetch_response_max_bytes: number(props, KEYS[3], d.fetch_response_max_bytes, 0)?,
            fetch_wait_max_ms: number(props, KEYS[4], d.fetch_wait_max_ms, 0)?,
            fetch_min_bytes: number(props, KEYS[5], d.fetch_min_bytes, 0)?,
            fetch_backoff_ms: number(props, KEYS[6], d.fetch_backoff_ms, 0)?,
            socket_timeout_ms: number(props, KEYS[7], d.socket_timeout_ms, 1)?,
            high_watermark_checkpoint_interval_ms: number(
                props,
                KEYS[8],
                d.high_watermark_checkpoint_interval_ms,
                1,
            )?,
            rack_aware_selector,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_defaults_and_the_rack_aware_selector() {
        let c = ReplicationConfig::from_props(&BTreeMap::new()).unwrap();
        assert_eq!(c, ReplicationConfig::default());
        let p = BTreeMap::from([
            (
                "replica.selector.class".to_string(),
                RACK_AWARE_SELECTOR.to_string(),
            ),
            ("replica.lag.time.max.ms".to_string(), "10000".to_string()),
        ]);
        let c = ReplicationConfig::from_props(&p).unwrap();
        assert!(c.rack_aware_selector);
        assert_eq!(c.lag_time_max_ms, 10_000);
        let p = BTreeMap::from([("replica.selector.class".to_string(), "x.Y".to_string())]);
        let e = ReplicationConfig::from_props(&p).unwrap_err().to_string();
        assert!(e.contains("RackAwareReplicaSelector"), "{e}");
    }
}
