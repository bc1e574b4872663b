//! Kafka-named configuration: topic-level LogConfig with the broker keys that default it, and the
//! `server.properties` file format. Bad values are errors that name the key.

use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("invalid value {value:?} for configuration {key}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{0:?} is not key=value")]
    NotKeyValue(String),
}

pub(crate) fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// The value of `key` parsed as a `T`, or `default` when the key is not set.
pub(crate) fn prop<T: std::str::FromStr>(
    props: &BTreeMap<String, String>,
    key: &str,
    default: T,
) -> Result<T, ConfigError> {
    match props.get(key) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| invalid(key, v, "not a valid value")),
    }
}

/// The number at `key`, at least `min`, or `default` when the key is not set.
pub(crate) fn number<T: std::str::FromStr + PartialOrd>(
    props: &BTreeMap<String, String>,
    key: &str,
    default: T,
    min: T,
) -> Result<T, ConfigError> {
    let Some(v) = props.get(key) else {
        return Ok(default);
    };
    match v.trim().parse::<T>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(invalid(key, v, "not a valid number, or below the minimum")),
    }
}

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// Per-partition log settings (Kafka's `LogConfig`), with Kafka's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub segment_jitter_ms: i64,
    pub segment_index_bytes: u64,
    pub index_interval_bytes: u64,
    /// -1 means unlimited.
    pub retention_ms: i64,
    /// -1 means unlimited. Applies per partition.
    pub retention_bytes: i64,
    pub flush_messages: i64,
    pub flush_ms: i64,
    pub file_delete_delay_ms: i64,
    pub message_timestamp_type: TimestampType,
    pub max_message_bytes: u64,
    pub min_insync_replicas: i32,
    pub cleanup_policy: String,
    pub compression_type: String,
    /// Reserve a new segment's disk space up front (`preallocate`, default false as in Kafka).
    pub preallocate: bool,
    /// Whether a replica outside the ISR may become leader when no ISR member is left
    /// (`unclean.leader.election.enable`, false as in Kafka).
    pub unclean_leader_election_enable: bool,
    /// `leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`:
    /// `partition:broker,...` or `*`, the replicas whose replication the brokers' throttled
    /// rates limit (kafka-reassign-partitions --throttle sets them).
    pub leader_throttled_replicas: String,
    pub follower_throttled_replicas: String,
    /// `min.cleanable.dirty.ratio` (0.5): the dirty share of a log above which the cleaner takes it.
    pub min_cleanable_dirty_ratio: Ratio,
    /// `min.compaction.lag.ms` (0): a record stays uncompacted at least this long.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms` (Long.MAX): a record becomes eligible for compaction after this long,
    /// whatever the dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms` (86400000): how long a tombstone is kept once the cleaner has seen it.
    pub delete_retention_ms: i64,
}

/// A ratio in [0, 1] (`min.cleanable.dirty.ratio`). Never NaN, so it can be `Eq`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Ratio(pub f64);

impl Eq for Ratio {}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            file_delete_delay_ms: 60_000,
            message_timestamp_type: TimestampType::CreateTime,
            max_message_bytes: 1024 * 1024 + 12,
            min_insync_replicas: 1,
            cleanup_policy: "delete".into(),
            compression_type: "producer".into(),
            preallocate: false,
            unclean_leader_election_enable: false,
            leader_throttled_replicas: String::new(),
            follower_throttled_replicas: String::new(),
            min_cleanable_dirty_ratio: Ratio(0.5),
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 86_400_000,
        }
    }
}

pub mod auth;
pub mod broker;
pub mod cleaner;
pub mod cluster;
pub mod connections;
pub mod consumer_groups;
pub mod principal_rules;
pub mod providers;
pub mod replication;
pub mod security;
pub mod ssl;

/// Topic config keys with the broker key that sets their default (Kafka's `TopicConfigSynonyms`).
pub const TOPIC_CONFIG_SYNONYMS: &[(&str, &str)] = &[
    ("segment.bytes", "log.segment.bytes"),
    ("segment.ms", "log.roll.ms"),
    ("segment.jitter.ms", "log.roll.jitter.ms"),
    ("segment.index.bytes", "log.index.size.max.bytes"),
    ("index.interval.bytes", "log.index.interval.bytes"),
    ("retention.ms", "log.retention.ms"),
    ("retention.bytes", "log.retention.bytes"),
    ("flush.messages", "log.flush.interval.messages"),
    ("flush.ms", "log.flush.interval.ms"),
    ("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    ("message.timestamp.type", "log.message.timestamp.type"),
    ("max.message.bytes", "message.max.bytes"),
    ("min.insync.replicas", "min.insync.replicas"),
    ("cleanup.policy", "log.cleanup.policy"),
    ("compression.type", "compression.type"),
    ("preallocate", "log.preallocate"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
    ),
    ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    ("delete.retention.ms", "log.cleaner.delete.retention.ms"),
    // No broker key sets these.
    ("leader.replication.throttled.replicas", ""),
    ("follower.replication.throttled.replicas", ""),
];

/// Kafka's ThrottledReplicaListValidator: empty, `*`, or `partition:broker` pairs.
fn parse_throttled_replicas(key: &str, v: &str) -> Result<String, ConfigError> {
    let v = v.trim();
    if v.is_empty() || v == "*" {
        return Ok(v.to_string());
    }
    for item in v.split(',').map(str::trim) {
        let ok = item
            .split_once(':')
            .is_some_and(|(p, b)| p.parse::<i32>().is_ok() && b.parse::<i32>().is_ok());
        if !ok {
            return Err(invalid(
                key,
                v,
                "must be the literal '*' or a list of replicas in the format [partitionId]:[brokerId],[partitionId]:[brokerId],...",
            ));
        }
    }
    Ok(v.to_string())
}

/// Whether a throttled-replicas list names partition `partition` on broker `broker`.
pub fn throttles(list: &str, partition: i32, broker: i32) -> bool {
    let list = list.trim();
    list == "*"
        || list.split(',').any(|item| {
            item.trim()
                .split_once(':')
                .is_some_and(|(p, b)| p.parse() == Ok(partition) && b.parse() == Ok(broker))
        })
}

fn parse_i64(key: &str, v: &str, min: i64) -> Result<i64, ConfigError> {
    let n: i64 = v
        .trim()
        .parse()
        .map_err(|_| invalid(key, v, "not a whole number"))?;
    if n < min {
        return Err(invalid(key, v, format!("must be at least {min}")));
    }
    Ok(n)
}

/// A double between 0 and 1 inclusive (Kafka's `between(0, 1)`).
pub fn parse_ratio(key: &str, v: &str) -> Result<Ratio, ConfigError> {
    let n: f64 = v
        .trim()
        .parse()
        .map_err(|_| invalid(key, v, "not a number"))?;
    if !(0.0..=1.0).contains(&n) {
        return Err(invalid(key, v, "value must be between 0 and 1"));
    }
    Ok(Ratio(n))
}

/// Kafka's booleans: `true` or `false`, in any case.
pub fn parse_bool(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, v, "must be true or false")),
    }
}

impl LogConfig {
    /// Whether `flush.messages` or `flush.ms` is set, rather than flushing being left to the OS.
    pub fn has_flush_policy(&self) -> bool {
        self.flush_messages != i64::MAX || self.flush_ms != i64::MAX
    }

    /// Whether `cleanup.policy` includes `compact` (Kafka's `LogConfig.compact`).
    pub fn compact(&self) -> bool {
        self.cleanup_policy
            .split(',')
            .any(|p| p.trim() == "compact")
    }

    /// Whether `cleanup.policy` includes `delete` (Kafka's `LogConfig.delete`).
    pub fn delete(&self) -> bool {
        self.cleanup_policy.split(',').any(|p| p.trim() == "delete")
    }

    /// Sets one topic-level key. Unknown keys are reported as `Ok(false)`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, ConfigError> {
        let v = value;
        match key {
            "segment.bytes" => self.segment_bytes = parse_i64(key, v, 14)? as u64,
            "segment.ms" => self.segment_ms = parse_i64(key, v, 1)?,
            "segment.jitter.ms" => self.segment_jitter_ms = parse_i64(key, v, 0)?,
            "segment.index.bytes" => self.segment_index_bytes = parse_i64(key, v, 4)? as u64,
            "index.interval.bytes" => self.index_interval_bytes = parse_i64(key, v, 0)? as u64,
            "retention.ms" => self.retention_ms = parse_i64(key, v, -1)?,
            "retention.bytes" => self.retention_bytes = parse_i64(key, v, -1)?,
            "flush.messages" => self.flush_messages = parse_i64(key, v, 1)?,
            "flush.ms" => self.flush_ms = parse_i64(key, v, 0)?,
            "file.delete.delay.ms" => self.file_delete_delay_ms = parse_i64(key, v, 0)?,
            "max.message.bytes" => self.max_message_bytes = parse_i64(key, v, 0)? as u64,
            "min.insync.replicas" => self.min_insync_replicas = parse_i64(key, v, 1)? as i32,
            "preallocate" => self.preallocate = parse_bool(key, v)?,
            "min.cleanable.dirty.ratio" => self.min_cleanable_dirty_ratio = parse_ratio(key, v)?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = parse_i64(key, v, 0)?,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = parse_i64(key, v, 1)?,
            "delete.retention.ms" => self.delete_retention_ms = parse_i64(key, v, 0)?,
            "leader.replication.throttled.replicas" => {
                self.leader_throttled_replicas = parse_throttled_replicas(key, v)?
            }
            "follower.replication.throttled.replicas" => {
                self.follower_throttled_replicas = parse_throttled_replicas(key, v)?
            }
            "unclean.leader.election.enable" => {
                self.unclean_leader_election_enable = parse_bool(key, v)?
            }
            "message.timestamp.type" => {
                self.message_timestamp_type = match v.trim() {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(invalid(key, v, "must be CreateTime or LogAppendTime")),
                }
            }
            "cleanup.policy" => {
                for p in v.split(',') {
                    if !matches!(p.trim(), "delete" | "compact") {
                        return Err(invalid(key, v, "must be delete, compact or both"));
                    }
                }
                self.cleanup_policy = v.trim().to_string();
            }
            "compression.type" => {
                if !matches!(
                    v.trim(),
                    "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd"
                ) {
                    return Err(invalid(
                        key,
                        v,
                        "must be producer, uncompressed, gzip, snappy, lz4 or zstd",
                    ));
                }
                self.compression_type = v.trim().to_string();
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Topic defaults from broker properties, honouring Kafka's `.hours`/`.minutes` variants.
    pub fn from_broker_props(props: &BTreeMap<String, String>) -> Result<LogConfig, ConfigError> {
        let mut c = LogConfig::default();
        // Coarse units first, so that the finer key wins when both are set, as in Kafka.
        for (coarse, mult, topic_key) in [
            ("log.roll.hours", 3_600_000i64, "segment.ms"),
            ("log.retention.hours", 3_600_000, "retention.ms"),
            ("log.retention.minutes", 60_000, "retention.ms"),
            ("log.roll.jitter.hours", 3_600_000, "segment.jitter.ms"),
        ] {
            if let Some(v) = props.get(coarse) {
                let n = parse_i64(coarse, v, -1)?;
                let ms = if n < 0 { -1 } else { n.saturating_mul(mult) };
                c.set(topic_key, &ms.to_string())?;
            }
        }
        for (topic_key, broker_key) in TOPIC_CONFIG_SYNONYMS {
            if let Some(v) = props.get(*broker_key) {
                c.set(topic_key, v).map_err(|e| match e {
                    ConfigError::InvalidValue { value, reason, .. } => ConfigError::InvalidValue {
                        key: broker_key.to_string(),
                        value,
                        reason,
                    },
                    other => other,
                })?;
            }
        }
        Ok(c)
    }

    /// This config overridden by topic-level keys; unknown keys are returned for a warning.
    pub fn with_overrides<'a>(
        &self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(LogConfig, Vec<String>), ConfigError> {
        let mut c = self.clone();
        let mut unknown = Vec::new();
        for (k, v) in overrides {
            if !c.set(k, v)? {
                unknown.push(k.to_string());
            }
        }
        Ok((c, unknown))
    }
}

/// Kafka's `ConfigDef.Type` ids, as DescribeConfigs reports them.
pub const CONFIG_TYPE_BOOLEAN: i8 = 1;
pub const CONFIG_TYPE_STRING: i8 = 2;
pub const CONFIG_TYPE_INT: i8 = 3;
pub const CONFIG_TYPE_LONG: i8 = 5;
pub const CONFIG_TYPE_DOUBLE: i8 = 6;
pub const CONFIG_TYPE_LIST: i8 = 7;

impl LogConfig {
    /// The value of a topic-level key as Kafka prints it, with its `ConfigDef.Type`.
    pub fn value_of(&self, key: &str) -> Option<(String, i8)> {
        let v = match key {
            "segment.bytes" => (self.segment_bytes.to_string(), CONFIG_TYPE_INT),
            "segment.ms" => (self.segment_ms.to_string(), CONFIG_TYPE_LONG),
            "segment.jitter.ms" => (self.segment_jitter_ms.to_string(), CONFIG_TYPE_LONG),
            "segment.index.bytes" => (self.segment_index_bytes.to_string(), CONFIG_TYPE_INT),
            "index.interval.bytes" => (self.index_interval_bytes.to_string(), CONFIG_TYPE_INT),
            "retention.ms" => (self.retention_ms.to_string(), CONFIG_TYPE_LONG),
            "retention.bytes" => (self.retention_bytes.to_string(), CONFIG_TYPE_LONG),
            "flush.messages" => (self.flush_messages.to_string(), CONFIG_TYPE_LONG),
            "flush.ms" => (self.flush_ms.to_string(), CONFIG_TYPE_LONG),
            "file.delete.delay.ms" => (self.file_delete_delay_ms.to_string(), CONFIG_TYPE_LONG),
            "message.timestamp.type" => (
                match self.message_timestamp_type {
                    TimestampType::CreateTime => "CreateTime".to_string(),
                    TimestampType::LogAppendTime => "LogAppendTime".to_string(),
                },
                CONFIG_TYPE_STRING,
            ),
            "max.message.bytes" => (self.max_message_bytes.to_string(), CONFIG_TYPE_INT),
            "min.insync.replicas" => (self.min_insync_replicas.to_string(), CONFIG_TYPE_INT),
            "cleanup.policy" => (self.cleanup_policy.clone(), CONFIG_TYPE_LIST),
            "compression.type" => (self.compression_type.clone(), CONFIG_TYPE_STRING),
            "preallocate" => (self.preallocate.to_string(), CONFIG_TYPE_BOOLEAN),
            "min.cleanable.dirty.ratio" => (
                self.min_cleanable_dirty_ratio.0.to_string(),
                CONFIG_TYPE_DOUBLE,
            ),
            "min.compaction.lag.ms" => (self.min_compaction_lag_ms.to_string(), CONFIG_TYPE_LONG),
            "max.compaction.lag.ms" => (self.max_compaction_lag_ms.to_string(), CONFIG_TYPE_LONG),
            "delete.retention.ms" => (self.delete_retention_ms.to_string(), CONFIG_TYPE_LONG),
            "leader.replication.throttled.replicas" => {
                (self.leader_throttled_replicas.clone(), CONFIG_TYPE_LIST)
            }
            "follower.replication.throttled.replicas" => {
                (self.follower_throttled_replicas.clone(), CONFIG_TYPE_LIST)
            }
            "unclean.leader.election.enable" => (
                self.unclean_leader_election_enable.to_string(),
                CONFIG_TYPE_BOOLEAN,
            ),
            _ => return None,
        };
        Some(v)
    }

    /// Every topic-level key evenkeel knows, in Kafka's order of listing (alphabetical).
    pub fn topic_keys() -> Vec<&'static str> {
        let mut keys: Vec<&str> = TOPIC_CONFIG_SYNONYMS.iter().map(|(t, _)| *t).collect();
        keys.sort_unstable();
        keys
    }
}

/// Parses Java-properties text as Kafka's server.properties uses it: `key=value` or `key: value`
/// lines, `#`/`!` comments, blank lines. Continuation lines end with a backslash.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim_start();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            pending.push_str(stripped);
            continue;
        }
        pending.push_str(line);
        let entry = std::mem::take(&mut pending);
        let split = entry.find(['=', ':']).unwrap_or(entry.len());
        let key = entry[..split].trim().to_string();
        let value = entry.get(split + 1..).unwrap_or("").trim().to_string();
        if !key.is_empty() {
            out.insert(key, value);
        }
    }
    out
}

/// `key=value` pairs as given on a command line (`--producer-props acks=1 linger.ms=5`), in
/// their order, trimmed.
pub fn parse_key_values(items: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    items
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| ConfigError::NotKeyValue(kv.clone()))
        })
        .collect()
}

/// Reads a properties file.
pub fn load_properties(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(parse_properties(&text))
}

/// Properties from `(key, value)` pairs, as unit tests write a config.
#[cfg(test)]
pub(crate) fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let c = LogConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.segment_index_bytes, 10_485_760);
        assert_eq!(c.index_interval_bytes, 4096);
        assert_eq!(c.retention_ms, 604_800_000);
        assert_eq!(c.retention_bytes, -1);
        assert_eq!(c.max_message_bytes, 1_048_588);
    }

    #[test]
    fn broker_keys_default_topic_configs() {
        let props = parse_properties(
            "# comment\nlog.segment.bytes=1048576\nlog.retention.hours = 1\nlog.message.timestamp.type: LogAppendTime\n",
        );
        let c = LogConfig::from_broker_props(&props).unwrap();
        assert_eq!(c.segment_bytes, 1_048_576);
        assert_eq!(c.retention_ms, 3_600_000);
        assert_eq!(c.message_timestamp_type, TimestampType::LogAppendTime);
    }

    #[test]
    fn finer_retention_unit_wins() {
        let props = parse_properties("log.retention.hours=1\nlog.retention.ms=5000\n");
        assert_eq!(
            LogConfig::from_broker_props(&props).unwrap().retention_ms,
            5000
        );
    }

    #[test]
    fn cleaner_topic_keys_have_kafkas_defaults_synonyms_and_ranges() {
        let c = LogConfig::default();
        assert_eq!(c.min_cleanable_dirty_ratio, Ratio(0.5));
        assert_eq!(c.min_compaction_lag_ms, 0);
        assert_eq!(c.max_compaction_lag_ms, i64::MAX);
        assert_eq!(c.delete_retention_ms, 86_400_000);
        let props = parse_properties(
            "log.cleaner.min.cleanable.ratio=0.1\nlog.cleaner.delete.retention.ms=5\n\
             log.cleaner.min.compaction.lag.ms=7\nlog.cleaner.max.compaction.lag.ms=9\n",
        );
        let c = LogConfig::from_broker_props(&props).unwrap();
        assert_eq!(c.min_cleanable_dirty_ratio, Ratio(0.1));
        assert_eq!(
            (
                c.delete_retention_ms,
                c.min_compaction_lag_ms,
                c.max_compaction_lag_ms
            ),
            (5, 7, 9)
        );
        let mut t = LogConfig::default();
        assert!(t.set("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(t.set("max.compaction.lag.ms", "0").is_err());
        assert!(t.set("delete.retention.ms", "-1").is_err());
        t.set("cleanup.policy", "compact,delete").unwrap();
        assert!(t.compact() && t.delete());
        assert_eq!(
            t.value_of("min.cleanable.dirty.ratio"),
            Some(("0.5".to_string(), CONFIG_TYPE_DOUBLE))
        );
    }

    #[test]
    fn bad_value_names_the_broker_key() {
        let props = parse_properties("log.segment.bytes=lots\n");
        let e = LogConfig::from_broker_props(&props).unwrap_err();
        assert!(e.to_string().contains("log.segment.bytes"), "{e}");
    }

    #[test]
    fn topic_overrides_report_unknown_keys() {
        let (c, unknown) = LogConfig::default()
            .with_overrides([("retention.bytes", "100"), ("no.such.key", "1")])
            .unwrap();
        assert_eq!(c.retention_bytes, 100);
        assert_eq!(unknown, vec!["no.such.key".to_string()]);
        assert!(LogConfig::default()
            .with_overrides([("segment.bytes", "10")])
            .is_err());
    }
}

/// DescribeConfigs `ConfigSource` ids.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

/// One topic config as DescribeConfigs and CreateTopics report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfigEntry {
    pub name: &'static str,
    pub value: String,
    pub config_type: i8,
    pub source: i8,
}

/// Every topic config of a topic with `overrides`, its value and where the value comes from:
/// the override, the broker's `server.properties` (`broker_props`), or Kafka's default.
pub fn topic_config_entries(
    defaults: &LogConfig,
    overrides: &BTreeMap<String, String>,
    broker_props: &BTreeMap<String, String>,
) -> Vec<TopicConfigEntry> {
    let cfg = defaults
        .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|(c, _)| c)
        .unwrap_or_else(|_| defaults.clone());
    LogConfig::topic_keys()
        .into_iter()
        .filter_map(|k| {
            let (value, config_type) = cfg.value_of(k)?;
            let source = if overrides.contains_key(k) {
                SOURCE_DYNAMIC_TOPIC
            } else if TOPIC_CONFIG_SYNONYMS
                .iter()
                .any(|(t, b)| *t == k && broker_props.contains_key(*b))
            {
                SOURCE_STATIC_BROKER
            } else {
                SOURCE_DEFAULT
            };
            Some(TopicConfigEntry {
                name: k,
                value,
                config_type,
                source,
            })
        })
        .collect()
}
