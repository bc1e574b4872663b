//! The limits on the broker's client connections, with Kafka's names, defaults and checks
//! (`SocketServerConfigs` and `KafkaConfig.validateValues`): how many connections the broker
//! holds at once, how many from one address, and how long one may go without a request.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{invalid as bad, number, prop, ConfigError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionConfig {
    /// `max.connections` (Int.MaxValue): connections open at once across the broker's
    /// listeners; at the limit a listener accepts no more until one closes (Kafka blocks its
    /// acceptor the same way).
    pub max_connections: usize,
    /// `max.connections.per.ip` (Int.MaxValue): connections from one address; one more is
    /// closed as soon as it is accepted.
    pub max_connections_per_ip: usize,
    /// `max.connections.per.ip.overrides` (""): `host:count,host:count`, the hosts as written
    /// (an IP, or a name the broker resolves when it starts, as Kafka does).
    pub max_connections_per_ip_overrides: Vec<(String, usize)>,
    /// `connections.max.idle.ms` (600000): a connection that sends no request for this long
    /// is closed; negative: never.
    pub connections_max_idle_ms: i64,
    /// `max.connection.creation.rate` (Int.MaxValue): new connections a second across the
    /// listeners but the inter-broker one (KIP-612); over it a listener waits to accept.
    pub max_connection_creation_rate: u32,
    /// `listener.name.<l>.max.connection.creation.rate`, by listener name in lower case.
    pub listener_creation_rates: BTreeMap<String, u32>,
    /// `connection.failed.authentication.delay.ms` (100): how long a connection whose login
    /// failed is kept, answered, before it is closed (it slows password guessing). It must be
    /// less than `connections.max.idle.ms`.
    pub failed_authentication_delay_ms: i64,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            max_connections_per_ip_overrides: Vec::new(),
            connections_max_idle_ms: 600_000,
            max_connection_creation_rate: i32::MAX as u32,
            listener_creation_rates: BTreeMap::new(),
            failed_authentication_delay_ms: FAILED_AUTHENTICATION_DELAY_MS,
        }
    }
}

/// The keys read here, for the broker's list of known keys.
pub const KEYS: &[&str] = &[
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "connections.max.idle.ms",
    "max.connection.creation.rate",
    "connection.failed.authentication.delay.ms",
];

/// Whether `key` is a listener's own `max.connection.creation.rate`.
pub fn is_listener_key(key: &str) -> bool {
    listener_of(key).is_some()
}

/// The listener of `listener.name.<l>.max.connection.creation.rate`.
fn listener_of(key: &str) -> Option<&str> {
    key.strip_prefix("listener.name.")?
        .strip_suffix(".max.connection.creation.rate")
        .filter(|l| !l.is_empty() && !l.contains('.'))
}

/// Kafka's `connection.failed.authentication.delay.ms` default.
const FAILED_AUTHENTICATION_DELAY_MS: i64 = 100;

impl ConnectionConfig {
    pub fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let d = ConnectionConfig::default();
        let overrides = match props.get(KEYS[2]) {
            Some(v) => parse_per_ip_overrides(v)?,
            None => Vec::new(),
        };
        let c = ConnectionConfig {
            max_connections: number(props, KEYS[0], i32::MAX, 0)? as usize,
            max_connections_per_ip: number(props, KEYS[1], i32::MAX, 0)? as usize,
            max_connections_per_ip_overrides: overrides,
            connections_max_idle_ms: prop(props, KEYS[3], d.connections_max_idle_ms)?,
            max_connection_creation_rate: number(props, KEYS[4], i32::MAX, 0)? as u32,
            listener_creation_rates: listener_creation_rates(props)?,
            failed_authentication_delay_ms: number(
                props,
                KEYS[5],
                FAILED_AUTHENTICATION_DELAY_MS,
                0,
            )?,
        };
        c.validate()?;
        Ok(c)
    }

    /// Kafka's cross-key checks.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_connections_per_ip == 0 && self.max_connections_per_ip_overrides.is_empty() {
            return Err(bad(
                KEYS[1],
                "0",
                "max.connections.per.ip can be set to zero only if \
                 max.connections.per.ip.overrides property is set",
            ));
        }
        let idle = self.connections_max_idle_ms;
        let delay = self.failed_authentication_delay_ms;
        if (0..=delay).contains(&idle) {
            return Err(bad(
                KEYS[3],
                &idle.to_string(),
                format!(
                    "connection.failed.authentication.delay.ms={delay} \
                     should always be less than connections.max.idle.ms={idle}"
                ),
            ));
        }
        Ok(())
    }

    /// The creation rate of listener `name` (its own key), if it has one.
    pub fn listener_creation_rate(&self, name: &str) -> Option<u32> {
        self.listener_creation_rates
            .get(&name.to_lowercase())
            .copied()
    }

    /// How long a connection whose login failed is kept before it is closed.
    pub fn failed_authentication_delay(&self) -> Duration {
        Duration::from_millis(self.failed_authentication_delay_ms.max(0) as u64)
    }

    /// How long a connection may go without a request; `None` when it may forever.
    pub fn idle_timeout(&self) -> Option<Duration> {
        u64::try_from(self.connections_max_idle_ms)
            .ok()
            .map(Duration::from_millis)
    }
}

/// Every `listener.name.<l>.max.connection.creation.rate`, at least 0 each.
fn listener_creation_rates(
    props: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, u32>, ConfigError> {
    let mut out = BTreeMap::new();
    for (key, _) in props.iter().filter(|(k, _)| is_listener_key(k)) {
        let rate = number(props, key, i32::MAX, 0)? as u32;
        if let Some(l) = listener_of(key) {
            out.insert(l.to_lowercase(), rate);
        }
    }
    Ok(out)
}

/// Whether Kafka takes `host` as an address (`Utils.validHostPattern`: letters, digits and
/// `-%._:`, so IPv6 is written without brackets).
fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-%._:".contains(c))
}

/// Parses `max.connections.per.ip.overrides`: `host:count` items separated by commas, the count
/// after the last colon (so `::1:5` is 5 connections for `::1`). A later item for the same host
/// wins, as in Kafka's map; a negative count, which Kafka accepts, admits nothing.
pub fn parse_per_ip_overrides(value: &str) -> Result<Vec<(String, usize)>, ConfigError> {
    let key = KEYS[2];
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (host, count) = item
            .rsplit_once(':')
            .ok_or_else(|| bad(key, value, format!("{item:?} is not host:count")))?;
        let host = host.trim();
        if !valid_host(host) {
            return Err(bad(
                key,
                value,
                format!("contains invalid addresses : {host}"),
            ));
        }
        let count: i32 = count.trim().parse().map_err(|_| {
            bad(
                key,
                value,
                format!("{count:?} (for {host}) is not a number of connections"),
            )
        })?;
        out.push((host.to_string(), count.max(0) as usize));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::props;

    #[test]
    fn kafka_defaults() {
        let c = ConnectionConfig::from_props(&BTreeMap::new()).unwrap();
        assert_eq!(c, ConnectionConfig::default());
        assert_eq!(c.max_connections, 2_147_483_647);
        assert_eq!(c.max_connections_per_ip, 2_147_483_647);
        assert_eq!(c.idle_timeout(), Some(Duration::from_secs(600)));
    }

    #[test]
    fn creation_rates_are_read_broker_wide_and_per_listener() {
        let c = ConnectionConfig::from_props(&props(&[
            ("max.connection.creation.rate", "10"),
            ("listener.name.external.max.connection.creation.rate", "3"),
        ]))
        .unwrap();
        assert_eq!(c.max_connection_creation_rate, 10);
        assert_eq!(c.listener_creation_rate("EXTERNAL"), Some(3));
        assert_eq!(c.listener_creation_rate("INTERNAL"), None);
        assert!(is_listener_key(
            "listener.name.external.max.connection.creation.rate"
        ));
        assert!(!is_listener_key(
            "listener.name..max.connection.creation.rate"
        ));
        let key = "listener.name.external.max.connection.creation.rate";
        let e = ConnectionConfig::from_props(&props(&[(key, "-1")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{e}");
    }

    #[test]
    fn overrides_are_host_count_pairs_split_at_the_last_colon() {
        let o = parse_per_ip_overrides(" hostName:100 , 127.0.0.1:200,::1:5,,").unwrap();
        assert_eq!(
            o,
            vec![
                ("hostName".to_string(), 100),
                ("127.0.0.1".to_string(), 200),
                ("::1".to_string(), 5),
            ]
        );
        assert_eq!(parse_per_ip_overrides("").unwrap(), vec![]);
        assert_eq!(
            parse_per_ip_overrides("a:-3").unwrap(),
            vec![("a".to_string(), 0)]
        );
    }

    #[test]
    fn bad_overrides_name_the_key_and_the_item() {
        for (value, expect) in [
            ("hostName#:100", "contains invalid addresses : hostName#"),
            ("[::1]:100", "contains invalid addresses : [::1]"),
            (":100", "contains invalid addresses"),
            ("hostName", "\"hostName\" is not host:count"),
            ("hostName:many", "\"many\" (for hostName) is not a number"),
            ("hostName:2147483648", "is not a number"),
        ] {
            let e = parse_per_ip_overrides(value).unwrap_err().to_string();
            assert!(e.contains("max.connections.per.ip.overrides"), "{e}");
            assert!(e.contains(expect), "{value}: {e}");
        }
    }

    #[test]
    fn kafkas_checks_across_keys() {
        let e = ConnectionConfig::from_props(&props(&[("max.connections.per.ip", "0")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("can be set to zero only if"), "{e}");
        let c = ConnectionConfig::from_props(&props(&[
            ("max.connections.per.ip", "0"),
            ("max.connections.per.ip.overrides", "10.0.0.1:3"),
        ]))
        .unwrap();
        assert_eq!(c.max_connections_per_ip, 0);
        assert_eq!(
            c.max_connections_per_ip_overrides,
            vec![("10.0.0.1".to_string(), 3)]
        );
        for idle in ["0", "100"] {
            let e = ConnectionConfig::from_props(&props(&[("connections.max.idle.ms", idle)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains("should always be less than"), "{idle}: {e}");
        }
        let c = ConnectionConfig::from_props(&props(&[("connections.max.idle.ms", "-1")])).unwrap();
        assert_eq!(c.idle_timeout(), None);
        let c =
            ConnectionConfig::from_props(&props(&[("connections.max.idle.ms", "101")])).unwrap();
        assert_eq!(c.idle_timeout(), Some(Duration::from_millis(101)));
    }

    #[test]
    fn counts_are_kafka_ints_of_at_least_zero() {
        for (k, v) in [
            ("max.connections", "-1"),
            ("max.connections", "2147483648"),
            ("max.connections.per.ip", "-1"),
            ("max.connections.per.ip", "lots"),
            ("connections.max.idle.ms", "soon"),
        ] {
            let e = ConnectionConfig::from_props(&props(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(k), "{k}={v}: {e}");
        }
        let c = ConnectionConfig::from_props(&props(&[("max.connections", "0")])).unwrap();
        assert_eq!(c.max_connections, 0);
    }
}
