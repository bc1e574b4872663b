//! How each listener is secured: Kafka's four security protocols and
//! `listener.security.protocol.map`, which names one for every listener.

use std::collections::BTreeMap;

use super::broker::Listener;
use super::{invalid as bad, ConfigError};

/// Kafka's `SecurityProtocol`, with its wire ids (the ids go into broker registrations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The id Kafka writes in `RegisterBrokerRecord` endpoints and DescribeCluster.
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn from_id(id: i16) -> Option<SecurityProtocol> {
        Self::ALL.into_iter().find(|p| p.id() == id)
    }

    /// Whether connections begin with a TLS handshake.
    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether a client must authenticate with SASL before any other request.
    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or(())
    }
}

/// `listener.security.protocol.map`: the security protocol of every listener name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityProtocolMap {
    by_name: BTreeMap<String, SecurityProtocol>,
}

impl Default for SecurityProtocolMap {
    /// Kafka's default: each protocol's name is a listener of that protocol.
    fn default() -> Self {
        SecurityProtocolMap {
            by_name: SecurityProtocol::ALL
                .into_iter()
                .map(|p| (p.name().to_string(), p))
                .collect(),
        }
    }
}

pub const PROTOCOL_MAP_KEY: &str = "listener.security.protocol.map";

impl SecurityProtocolMap {
    /// Reads the map and checks that every listener has a protocol this version serves. A
    /// controller listener left out of the map is PLAINTEXT, as in Kafka.
    pub fn from_props(
        props: &BTreeMap<String, String>,
        listeners: &[Listener],
        controller_names: &[String],
    ) -> Result<SecurityProtocolMap, ConfigError> {
        let key = PROTOCOL_MAP_KEY;
        let shown = || props.get(key).map(String::as_str).unwrap_or("").to_string();
        let mut map = SecurityProtocolMap::default();
        if let Some(v) = props.get(key) {
            map.by_name.clear();
            for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (n, p) = item
                    .split_once(':')
                    .ok_or_else(|| bad(key, v, format!("{item:?} is not NAME:PROTOCOL")))?;
                let protocol = p.parse().map_err(|_| {
                    bad(key, v, format!("{p:?} is not a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"))
                })?;
                map.by_name.insert(n.trim().to_string(), protocol);
            }
        }
        for l in listeners {
            if !map.by_name.contains_key(&l.name) && controller_names.contains(&l.name) {
                map.by_name
                    .insert(l.name.clone(), SecurityProtocol::Plaintext);
            }
            if !map.by_name.contains_key(&l.name) {
                return Err(bad(
                    key,
                    &shown(),
                    format!("no security protocol is defined for listener {}", l.name),
                ));
            }
        }
        Ok(map)
    }

    /// The protocol of listener `name`; PLAINTEXT for a name the map does not hold.
    pub fn protocol(&self, name: &str) -> SecurityProtocol {
        self.by_name
            .get(name)
            .copied()
            .unwrap_or(SecurityProtocol::Plaintext)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(name: &str) -> Listener {
        Listener {
            name: name.into(),
            host: String::new(),
            port: 0,
        }
    }

    fn map(
        v: Option<&str>,
        names: &[&str],
        controllers: &[&str],
    ) -> Result<SecurityProtocolMap, ConfigError> {
        let props = v
            .map(|v| BTreeMap::from([(PROTOCOL_MAP_KEY.to_string(), v.to_string())]))
            .unwrap_or_default();
        let ls: Vec<_> = names.iter().map(|n| listener(n)).collect();
        let cs: Vec<_> = controllers.iter().map(|c| c.to_string()).collect();
        SecurityProtocolMap::from_props(&props, &ls, &cs)
    }

    #[test]
    fn the_protocol_of_each_listener_is_read_from_the_map() {
        let m = map(
            Some("EXTERNAL:SASL_PLAINTEXT, INTERNAL:PLAINTEXT, SECURE:SSL, BOTH:SASL_SSL"),
            &["EXTERNAL", "INTERNAL", "SECURE", "BOTH", "CONTROLLER"],
            &["CONTROLLER"],
        )
        .unwrap();
        assert_eq!(m.protocol("EXTERNAL"), SecurityProtocol::SaslPlaintext);
        assert_eq!(m.protocol("INTERNAL"), SecurityProtocol::Plaintext);
        assert_eq!(m.protocol("CONTROLLER"), SecurityProtocol::Plaintext);
        assert_eq!(m.protocol("SECURE"), SecurityProtocol::Ssl);
        assert_eq!(m.protocol("BOTH"), SecurityProtocol::SaslSsl);
        let d = map(None, &["SASL_PLAINTEXT"], &[]).unwrap();
        assert_eq!(
            d.protocol("SASL_PLAINTEXT"),
            SecurityProtocol::SaslPlaintext
        );
    }

    #[test]
    fn an_unmapped_or_unknown_protocol_is_refused() {
        let e = map(Some("A:PLAINTEXT"), &["B"], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no security protocol is defined for listener B"),
            "{e}"
        );
        let e = map(Some("A:TLS"), &["A"], &[]).unwrap_err().to_string();
        assert!(e.contains("is not a security protocol"), "{e}");
        // Every protocol may serve the controller listener, on voters and broker-only nodes.
        let m = map(Some("C:SASL_SSL"), &["C"], &["C"]).unwrap();
        assert_eq!(m.protocol("C"), SecurityProtocol::SaslSsl);
        let m = map(Some("B:PLAINTEXT,C:SASL_PLAINTEXT"), &["B"], &["C"]).unwrap();
        assert_eq!(m.protocol("C"), SecurityProtocol::SaslPlaintext);
        let m = map(Some("B:PLAINTEXT,C:SSL"), &["B"], &["C"]).unwrap();
        assert_eq!(m.protocol("C"), SecurityProtocol::Ssl);
    }

    #[test]
    fn ids_round_trip_as_kafka_numbers_them() {
        for p in SecurityProtocol::ALL {
            assert_eq!(SecurityProtocol::from_id(p.id()), Some(p));
            assert_eq!(p.name().parse::<SecurityProtocol>(), Ok(p));
        }
        assert_eq!(SecurityProtocol::SaslSsl.id(), 3);
    }
}
