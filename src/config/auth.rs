//! Who may connect and what they may do, in Kafka's keys: the SASL mechanisms each listener
//! enables (with PLAIN's users from its JAAS config), re-authentication, and the authorizer.

use std::collections::BTreeMap;

use super::security::SecurityProtocolMap;
use super::{invalid as bad, number, parse_bool, ConfigError};

/// Kafka's class name of the KRaft authorizer, the one evenkeel implements.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The SASL mechanisms evenkeel serves.
pub const MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// `authorizer.class.name` and what the StandardAuthorizer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizerSettings {
    /// `super.users`: principals (`User:admin`) separated by `;`.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found` (false).
    pub allow_everyone_if_no_acl_found: bool,
}

/// SASL on one listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerSasl {
    /// `[listener.name.<l>.]sasl.enabled.mechanisms`, in the order given.
    pub mechanisms: Vec<String>,
    /// PLAIN's users and passwords: the `user_<name>="<password>"` options of
    /// `listener.name.<l>.plain.sasl.jaas.config` (Kafka's PlainLoginModule).
    pub plain_users: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// `None`: no authorizer, every request is allowed (Kafka's default).
    pub authorizer: Option<AuthorizerSettings>,
    /// SASL settings of each SASL listener, by listener name.
    pub sasl: BTreeMap<String, ListenerSasl>,
    /// `connections.max.reauth.ms` (0: a session never expires).
    pub connections_max_reauth_ms: u64,
    /// `sasl.server.max.receive.size` (524288): the largest SASL token accepted.
    pub sasl_server_max_receive_size: usize,
}

/// The keys read here (the `listener.name.` forms are matched by `is_auth_key`).
pub const KEYS: &[&str] = &[
    "authorizer.class.name",
    "super.users",
    "allow.everyone.if.no.acl.found",
    "sasl.enabled.mechanisms",
    "sasl.jaas.config",
    "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
];

/// Whether `key` is one of the per-listener SASL keys read here.
pub fn is_auth_key(key: &str) -> bool {
    KEYS.contains(&key)
        || key
            .strip_prefix("listener.name.")
            .and_then(|rest| rest.split_once('.'))
            .is_some_and(|(_, k)| {
                k == "sasl.enabled.mechanisms" || k.ends_with(".sasl.jaas.config")
            })
}

impl AuthConfig {
    pub fn from_props(
        props: &BTreeMap<String, String>,
        listeners: &[String],
        protocols: &SecurityProtocolMap,
    ) -> Result<AuthConfig, ConfigError> {
        let mut sasl = BTreeMap::new();
        for l in listeners {
            if protocols.protocol(l).is_sasl() {
                sasl.insert(l.clone(), listener_sasl(props, l)?);
            }
        }
        Ok(AuthConfig {
            authorizer: authorizer(props)?,
            sasl,
            connections_max_reauth_ms: number(props, "connections.max.reauth.ms", 0, 0)?,
            sasl_server_max_receive_size: number(
                props,
                "sasl.server.max.receive.size",
                524_288,
                1,
            )?,
        })
    }
}

fn authorizer(props: &BTreeMap<String, String>) -> Result<Option<AuthorizerSettings>, ConfigError> {
    let key = "authorizer.class.name";
    match props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => return Ok(None),
        Some(STANDARD_AUTHORIZER) => {}
        Some(other) => {
            return Err(bad(
                key,
                other,
                format!("evenkeel implements {STANDARD_AUTHORIZER} only"),
            ))
        }
    }
    let super_users = props
        .get("super.users")
        .map(|v| {
            v.split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if let Some(u) = super_users.iter().find(|u| !u.contains(':')) {
        return Err(bad(
            "super.users",
            u,
            "a principal is TYPE:NAME, such as User:admin",
        ));
    }
    Ok(Some(AuthorizerSettings {
        super_users,
        allow_everyone_if_no_acl_found: props
            .get("allow.everyone.if.no.acl.found")
            .map(|v| parse_bool("allow.everyone.if.no.acl.found", v))
            .transpose()?
            .unwrap_or(false),
    }))
}

/// The SASL settings of listener `l`: its mechanisms (each one served here) and PLAIN's users.
fn listener_sasl(props: &BTreeMap<String, String>, l: &str) -> Result<ListenerSasl, ConfigError> {
    let prefix = format!("listener.name.{}.", l.to_lowercase());
    let own = format!("{prefix}sasl.enabled.mechanisms");
    let (key, value) = match props.get(&own) {
        Some(v) => (own.as_str(), v.as_str()),
        None => match props.get("sasl.enabled.mechanisms") {
            Some(v) => ("sasl.enabled.mechanisms", v.as_str()),
            None => {
                return Err(bad(
                    "sasl.enabled.mechanisms",
                    "",
                    format!(
                        "listener {l} uses SASL: name its mechanisms ({}); Kafka's default, \
                         GSSAPI, is not served by evenkeel",
                        MECHANISMS.join(", ")
                    ),
                ))
            }
        },
    };
    let mechanisms: Vec<String> = value
        .split(',')
        .map(|m| m.trim().to_uppercase())
        .filter(|m| !m.is_empty())
        .collect();
    if mechanisms.is_empty() {
        return Err(bad(key, value, "names no mechanism"));
    }
    if let Some(m) = mechanisms
        .iter()
        .find(|m| !MECHANISMS.contains(&m.as_str()))
    {
        return Err(bad(
            key,
            value,
            format!(
                "{m} is not served by evenkeel (it serves {})",
                MECHANISMS.join(", ")
            ),
        ));
    }
    let mut plain_users = BTreeMap::new();
    if mechanisms.iter().any(|m| m == "PLAIN") {
        let jaas_key = format!("{prefix}plain.sasl.jaas.config");
        let Some(jaas) = props.get(&jaas_key) else {
            return Err(bad(
                &jaas_key,
                "",
                "PLAIN is enabled: give its users as user_<name>=\"<password>\" options of \
                 org.apache.kafka.common.security.plain.PlainLoginModule",
            ));
        };
        plain_users = jaas_users(jaas).map_err(|reason| bad(&jaas_key, "(hidden)", reason))?;
    }
    Ok(ListenerSasl {
        mechanisms,
        plain_users,
    })
}

/// The `user_<name>="<password>"` options of a JAAS login module line:
/// `org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
/// password="admin-secret" user_admin="admin-secret";`.
fn jaas_users(jaas: &str) -> Result<BTreeMap<String, String>, String> {
    let body = jaas.trim().trim_end_matches(';');
    let mut words = body.splitn(3, char::is_whitespace);
    let module = words.next().unwrap_or("");
    if !module.ends_with("PlainLoginModule") {
        return Err(format!("{module:?} is not Kafka's PlainLoginModule"));
    }
    let mut rest = words.nth(1).unwrap_or("").trim();
    let mut users = BTreeMap::new();
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once('=')
            .ok_or_else(|| format!("expected name=\"value\" at {:?}", first_word(rest)))?;
        let after = after.trim_start();
        let value_and_rest = after
            .strip_prefix('"')
            .ok_or_else(|| format!("the value of {} must be quoted", name.trim()))?;
        let end = value_and_rest
            .find('"')
            .ok_or_else(|| format!("the value of {} has no closing quote", name.trim()))?;
        if let Some(user) = name.trim().strip_prefix("user_") {
            users.insert(user.to_string(), value_and_rest[..end].to_string());
        }
        rest = value_and_rest[end + 1..].trim_start();
    }
    Ok(users)
}

fn first_word(s: &str) -> &str {
    s.split_whitespace().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(text: &str) -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    fn auth(text: &str) -> Result<AuthConfig, ConfigError> {
        let p = props(text);
        let map = SecurityProtocolMap::from_props(&p, &[], &[]).unwrap();
        AuthConfig::from_props(&p, &["SASL_PLAINTEXT".into(), "PLAINTEXT".into()], &map)
    }

    #[test]
    fn a_sasl_listener_reads_its_mechanisms_and_plain_users() {
        let c = auth(
            "sasl.enabled.mechanisms=SCRAM-SHA-512\n\
             listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,scram-sha-256\n\
             listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"a s\" user_admin=\"a s\" user_alice=\"x=y\";\n",
        )
        .unwrap();
        let l = &c.sasl["SASL_PLAINTEXT"];
        assert_eq!(l.mechanisms, vec!["PLAIN", "SCRAM-SHA-256"]);
        assert_eq!(l.plain_users["admin"], "a s");
        assert_eq!(l.plain_users["alice"], "x=y");
        assert_eq!(l.plain_users.len(), 2);
        assert!(!c.sasl.contains_key("PLAINTEXT"));
        assert!(c.authorizer.is_none());
    }

    #[test]
    fn unserved_or_missing_mechanisms_are_refused_by_name() {
        for (text, key) in [
            ("", "sasl.enabled.mechanisms"),
            ("sasl.enabled.mechanisms=GSSAPI", "sasl.enabled.mechanisms"),
            ("sasl.enabled.mechanisms=PLAIN", "plain.sasl.jaas.config"),
            (
                "sasl.enabled.mechanisms=PLAIN\nlistener.name.sasl_plaintext.plain.sasl.jaas.config=Foo required;",
                "plain.sasl.jaas.config",
            ),
        ] {
            let e = auth(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn the_standard_authorizer_reads_super_users() {
        let c = auth(&format!(
            "sasl.enabled.mechanisms=SCRAM-SHA-512\nauthorizer.class.name={STANDARD_AUTHORIZER}\n\
             super.users=User:admin; User:ANONYMOUS\nallow.everyone.if.no.acl.found=true"
        ))
        .unwrap();
        let a = c.authorizer.unwrap();
        assert_eq!(a.super_users, vec!["User:admin", "User:ANONYMOUS"]);
        assert!(a.allow_everyone_if_no_acl_found);
        let e = auth("sasl.enabled.mechanisms=SCRAM-SHA-512\nauthorizer.class.name=kafka.security.authorizer.AclAuthorizer")
            .unwrap_err()
            .to_string();
        assert!(e.contains("authorizer.class.name"), "{e}");
    }

    #[test]
    fn the_per_listener_keys_are_known() {
        assert!(is_auth_key(
            "listener.name.external.sasl.enabled.mechanisms"
        ));
        assert!(is_auth_key(
            "listener.name.external.scram-sha-512.sasl.jaas.config"
        ));
        assert!(!is_auth_key("listener.name.external.ssl.keystore.location"));
    }
}
