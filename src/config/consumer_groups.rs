//! The consumer group protocol's keys (KIP-848, Kafka's `group.consumer.*` and
//! `group.coordinator.rebalance.protocols`), with Kafka's defaults and startup checks.

use std::collections::BTreeMap;

use super::{invalid as bad, prop, ConfigError};

/// The server-side assignors evenkeel offers (`group.consumer.assignors`), Kafka's default
/// first.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// The keys this module reads.
pub const KEYS: &[&str] = &[
    "group.coordinator.rebalance.protocols",
    "group.consumer.session.timeout.ms",
    "group.consumer.min.session.timeout.ms",
    "group.consumer.max.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.min.heartbeat.interval.ms",
    "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.max.size",
    "group.consumer.assignors",
];

/// The assignors by Kafka's class name, for `group.consumer.assignors` written either way.
const CLASS_NAMES: &[(&str, &str)] = &[
    (
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
        "uniform",
    ),
    (
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        "range",
    ),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    /// `group.coordinator.rebalance.protocols` names `consumer` (it does by default): the
    /// broker serves ConsumerGroupHeartbeat once `group.version` is 1.
    pub enabled: bool,
    /// `group.consumer.session.timeout.ms` (45000).
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms` (5000).
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size` (Int.MaxValue).
    pub max_size: usize,
    /// `group.consumer.assignors` (`uniform,range`): the default first.
    pub assignors: Vec<String>,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            enabled: true,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5000,
            max_size: i32::MAX as usize,
            assignors: ASSIGNORS.iter().map(|a| a.to_string()).collect(),
        }
    }
}

impl ConsumerGroupConfig {
    pub fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let session = bounded(props, "session.timeout.ms", 45_000, 45_000, 60_000)?;
        let heartbeat = bounded(props, "heartbeat.interval.ms", 5000, 5000, 15_000)?;
        if heartbeat >= session {
            return Err(bad(
                "group.consumer.heartbeat.interval.ms",
                &heartbeat.to_string(),
                "group.consumer.heartbeat.interval.ms must be less than \
                 group.consumer.session.timeout.ms",
            ));
        }
        let max_size: i32 = prop(props, "group.consumer.max.size", i32::MAX)?;
        if max_size < 1 {
            return Err(bad(
                "group.consumer.max.size",
                &max_size.to_string(),
                "Value must be at least 1",
            ));
        }
        Ok(ConsumerGroupConfig {
            enabled: protocols(props)?,
            session_timeout_ms: session,
            heartbeat_interval_ms: heartbeat,
            max_size: max_size as usize,
            assignors: assignors(props)?,
        })
    }
}

/// `group.consumer.<key>` within `group.consumer.min.<key>` and `group.consumer.max.<key>`.
fn bounded(
    props: &BTreeMap<String, String>,
    key: &str,
    default: i32,
    min_default: i32,
    max_default: i32,
) -> Result<i32, ConfigError> {
    let name = format!("group.consumer.{key}");
    let value: i32 = prop(props, &name, default)?;
    let min: i32 = prop(props, &format!("group.consumer.min.{key}"), min_default)?;
    let max: i32 = prop(props, &format!("group.consumer.max.{key}"), max_default)?;
    if value < 1 {
        return Err(bad(&name, &value.to_string(), "Value must be at least 1"));
    }
    if value < min || value > max {
        return Err(bad(
            &name,
            &value.to_string(),
            format!(
                "{name} must be greater than or equal to group.consumer.min.{key} ({min}) and \
                 less than or equal to group.consumer.max.{key} ({max})"
            ),
        ));
    }
    Ok(value)
}

/// Whether `group.coordinator.rebalance.protocols` enables the consumer protocol.
fn protocols(props: &BTreeMap<String, String>) -> Result<bool, ConfigError> {
    let key = "group.coordinator.rebalance.protocols";
    let Some(v) = props.get(key) else {
        return Ok(true);
    };
    let names: Vec<String> = v.split(',').map(|p| p.trim().to_lowercase()).collect();
    if !names.iter().any(|n| n == "classic") {
        return Err(bad(key, v, "The classic protocol must be enabled"));
    }
    if let Some(n) = names
        .iter()
        .find(|n| !["classic", "consumer", "share", "streams"].contains(&n.as_str()))
    {
        return Err(bad(key, v, format!("Unknown group protocol {n}")));
    }
    Ok(names.iter().any(|n| n == "consumer"))
}

/// `group.consumer.assignors` as assignor names.
fn assignors(props: &BTreeMap<String, String>) -> Result<Vec<String>, ConfigError> {
    let key = "group.consumer.assignors";
    let Some(v) = props.get(key) else {
        return Ok(ConsumerGroupConfig::default().assignors);
    };
    let mut out = Vec::new();
    for a in v.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let name = CLASS_NAMES
            .iter()
            .find(|(class, _)| *class == a)
            .map_or(a, |(_, n)| n);
        if !ASSIGNORS.contains(&name) {
            return Err(bad(
                key,
                v,
                format!("Unknown assignor {a}: evenkeel offers uniform and range"),
            ));
        }
        out.push(name.to_string());
    }
    if out.is_empty() {
        return Err(bad(key, v, "At least one assignor must be named"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(s: &[(&str, &str)]) -> BTreeMap<String, String> {
        s.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = ConsumerGroupConfig::from_props(&props(&[])).unwrap();
        assert_eq!(c, ConsumerGroupConfig::default());
        // Kafka's GroupCoordinatorConfig defaults, written out.
        assert!(c.enabled);
        assert_eq!(
            (c.session_timeout_ms, c.heartbeat_interval_ms),
            (45_000, 5000)
        );
        assert_eq!(c.max_size, i32::MAX as usize);
        assert_eq!(c.assignors, ["uniform", "range"]);
    }

    /// Why `pairs` are refused.
    fn refusal(pairs: &[(&str, &str)]) -> String {
        ConsumerGroupConfig::from_props(&props(pairs))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn values_are_checked_as_kafka_checks_them() {
        let e = refusal(&[("group.consumer.heartbeat.interval.ms", "500")]);
        assert!(
            e.contains("group.consumer.min.heartbeat.interval.ms (5000)"),
            "{e}"
        );
        let ok = props(&[
            ("group.consumer.min.heartbeat.interval.ms", "100"),
            ("group.consumer.heartbeat.interval.ms", "500"),
            ("group.consumer.min.session.timeout.ms", "1000"),
            ("group.consumer.session.timeout.ms", "6000"),
            (
                "group.consumer.assignors",
                "range,org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            ),
        ]);
        let c = ConsumerGroupConfig::from_props(&ok).unwrap();
        assert_eq!((c.heartbeat_interval_ms, c.session_timeout_ms), (500, 6000));
        assert_eq!(c.assignors, vec!["range", "uniform"]);
        let e = refusal(&[
            ("group.consumer.min.session.timeout.ms", "1000"),
            ("group.consumer.session.timeout.ms", "5000"),
        ]);
        assert!(
            e.contains("must be less than group.consumer.session.timeout.ms"),
            "{e}"
        );
        let e = refusal(&[("group.consumer.assignors", "sticky")]);
        assert!(e.contains("Unknown assignor sticky"), "{e}");
        let off = props(&[("group.coordinator.rebalance.protocols", "classic")]);
        assert!(!ConsumerGroupConfig::from_props(&off).unwrap().enabled);
        let bad = props(&[("group.coordinator.rebalance.protocols", "consumer")]);
        assert!(ConsumerGroupConfig::from_props(&bad).is_err());
    }
}
