//! Who may connect and what they may do, in Kafka's keys: the SASL mechanisms each listener
//! enables (PLAIN's users and the broker's own inter-broker login from JAAS configs),
//! re-authentication, and the authorizer.

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

/// A SASL login from a JAAS config: the broker's own to other brokers' inter-broker listener
/// (`sasl.mechanism.inter.broker.protocol`, with the `username` and `password` options of
/// `listener.name.<l>.<mechanism>.sasl.jaas.config` of that listener), or a client's
/// (`sasl.mechanism` with `sasl.jaas.config`, see `client_login`).
#[derive(Clone, PartialEq, Eq)]
pub struct JaasLogin {
    /// One of `MECHANISMS`, enabled on the inter-broker listener.
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for JaasLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JaasLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// `None`: no authorizer, every request is allowed (Kafka's default).
    pub authorizer: Option<AuthorizerSettings>,
    /// SASL settings of each SASL listener, by listener name.
    pub sasl: BTreeMap<String, ListenerSasl>,
    /// How this broker logs in to the others, when the inter-broker listener uses SASL.
    pub inter_broker: Option<JaasLogin>,
    /// How this node logs in to the controllers, when the controller listener uses SASL
    /// (`sasl.mechanism.controller.protocol`).
    pub controller: Option<JaasLogin>,
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
    "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
    INTER_BROKER_MECHANISM,
    CONTROLLER_MECHANISM,
];

/// Kafka's key of the mechanism brokers log in to each other with.
pub const INTER_BROKER_MECHANISM: &str = "sasl.mechanism.inter.broker.protocol";

/// Kafka's key of the mechanism voters and brokers log in to the controllers with.
pub const CONTROLLER_MECHANISM: &str = "sasl.mechanism.controller.protocol";

/// A value that must not be printed (it holds passwords).
const HIDDEN: &str = "(hidden)";

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
    /// The settings of the client `listeners`; `inter_broker` names the inter-broker listener
    /// of a node with the broker role (`None` for a controller only).
    pub fn from_props(
        props: &BTreeMap<String, String>,
        listeners: &[String],
        protocols: &SecurityProtocolMap,
        inter_broker: Option<&str>,
    ) -> Result<AuthConfig, ConfigError> {
        let mut sasl = BTreeMap::new();
        for l in listeners {
            if protocols.protocol(l).is_sasl() {
                sasl.insert(l.clone(), listener_sasl(props, l)?);
            }
        }
        let inter_broker = match inter_broker {
            Some(l) => sasl
                .get(l)
                .map(|enabled| own_login(props, &INTER_BROKER, l, Some(enabled)))
                .transpose()?,
            None => None,
        };
        Ok(AuthConfig {
            authorizer: authorizer(props)?,
            sasl,
            inter_broker,
            controller: None,
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

impl AuthConfig {
    /// With the controller listener `l` on SASL: its settings where this node serves it (a
    /// voter), and the login this node connects to it with (voters and brokers alike).
    pub fn with_controller(
        mut self,
        props: &BTreeMap<String, String>,
        l: &str,
        voter: bool,
    ) -> Result<AuthConfig, ConfigError> {
        let served = voter.then(|| listener_sasl(props, l)).transpose()?;
        self.controller = Some(own_login(props, &CONTROLLER, l, served.as_ref())?);
        if let Some(served) = served {
            self.sasl.insert(l.to_string(), served);
        }
        Ok(self)
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
        plain_users = jaas_options(jaas, PLAIN_MODULE)
            .map_err(|reason| bad(&jaas_key, HIDDEN, reason))?
            .into_iter()
            .filter_map(|(name, value)| Some((name.strip_prefix("user_")?.to_string(), value)))
            .collect();
    }
    Ok(ListenerSasl {
        mechanisms,
        plain_users,
    })
}

/// Which of a node's own logins: the key naming its mechanism, and what it connects to.
struct OwnLogin {
    key: &'static str,
    role: &'static str,
    connects: &'static str,
    /// Whether SCRAM can serve: not between voters, who would need the metadata log they
    /// cannot yet agree on to check each other's SCRAM credentials.
    scram: bool,
}

const INTER_BROKER: OwnLogin = OwnLogin {
    key: INTER_BROKER_MECHANISM,
    role: "the inter-broker listener",
    connects: "the broker logs in to other brokers",
    scram: true,
};

const CONTROLLER: OwnLogin = OwnLogin {
    key: CONTROLLER_MECHANISM,
    role: "the controller listener",
    connects: "voters and brokers log in to the controllers",
    scram: false,
};

/// The node's own login on listener `l` (the inter-broker or the controller listener, as
/// `which` says): the mechanism must be set (Kafka's default, GSSAPI, is not served) and, where
/// this node serves `l` (`enabled`), enabled there; the JAAS config of that mechanism on `l`
/// must give `username` and `password`.
fn own_login(
    props: &BTreeMap<String, String>,
    which: &OwnLogin,
    l: &str,
    enabled: Option<&ListenerSasl>,
) -> Result<JaasLogin, ConfigError> {
    let (key, role) = (which.key, which.role);
    let Some(value) = props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
        let choices = match which.scram {
            true => MECHANISMS.join(", "),
            false => "PLAIN".to_string(),
        };
        let reason = format!(
            "{role} {l} uses SASL: name the mechanism {} with ({choices}); Kafka's default, \
             GSSAPI, is not served by evenkeel",
            which.connects,
        );
        return Err(bad(key, "", reason));
    };
    let mechanism = value.to_uppercase();
    if !MECHANISMS.contains(&mechanism.as_str()) {
        let reason = format!(
            "not served by evenkeel (it serves {})",
            MECHANISMS.join(", ")
        );
        return Err(bad(key, value, reason));
    }
    if !which.scram && mechanism.starts_with("SCRAM-") {
        let reason = format!(
            "{role} {l} cannot log in with SCRAM: its credentials live in the metadata log, \
             which the voters must reach each other to agree on; use PLAIN"
        );
        return Err(bad(key, value, reason));
    }
    if let Some(enabled) = enabled.filter(|e| !e.mechanisms.contains(&mechanism)) {
        let reason = format!(
            "{role} {l} does not enable it (its sasl.enabled.mechanisms: {})",
            enabled.mechanisms.join(",")
        );
        return Err(bad(key, value, reason));
    }
    let jaas_key = format!(
        "listener.name.{}.{}.sasl.jaas.config",
        l.to_lowercase(),
        mechanism.to_lowercase()
    );
    let Some(jaas) = props.get(&jaas_key) else {
        let reason = format!(
            "{} with {mechanism}: give its username=\"…\" and password=\"…\" as options of {}",
            which.connects,
            login_module(&mechanism)
        );
        return Err(bad(&jaas_key, "", reason));
    };
    jaas_login(&jaas_key, jaas, mechanism)
}

/// Kafka's client keys `sasl.mechanism` (PLAIN, Kafka's default, or SCRAM-SHA-256/512) and
/// `sasl.jaas.config` (its login module with `username="…" password="…"`).
pub fn client_login(props: &BTreeMap<String, String>) -> Result<JaasLogin, ConfigError> {
    let key = "sasl.mechanism";
    let given = props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mechanism = given.unwrap_or("PLAIN").to_uppercase();
    if !MECHANISMS.contains(&mechanism.as_str()) {
        let reason = format!("evenkeel's client speaks {}", MECHANISMS.join(", "));
        return Err(bad(key, given.unwrap_or_default(), reason));
    }
    let jaas_key = "sasl.jaas.config";
    let Some(jaas) = props.get(jaas_key).filter(|v| !v.trim().is_empty()) else {
        let reason = format!(
            "SASL needs a login: {} required username=\"…\" password=\"…\";",
            login_module(&mechanism)
        );
        return Err(bad(jaas_key, "", reason));
    };
    jaas_login(jaas_key, jaas, mechanism)
}

/// The login module Kafka uses for `mechanism` (one of `MECHANISMS`).
fn login_module(mechanism: &str) -> &'static str {
    if mechanism == "PLAIN" {
        PLAIN_MODULE
    } else {
        SCRAM_MODULE
    }
}

/// The `username` and `password` options of `jaas` (the value of `jaas_key`), a login with
/// `mechanism`'s module.
fn jaas_login(jaas_key: &str, jaas: &str, mechanism: String) -> Result<JaasLogin, ConfigError> {
    let options = jaas_options(jaas, login_module(&mechanism))
        .map_err(|reason| bad(jaas_key, HIDDEN, reason))?;
    let option = |name: &str| {
        options
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    match (option("username"), option("password")) {
        (Some(username), Some(password)) => Ok(JaasLogin {
            mechanism,
            username,
            password,
        }),
        _ => Err(bad(
            jaas_key,
            HIDDEN,
            "needs username=\"…\" and password=\"…\": the login to the brokers",
        )),
    }
}

/// Kafka's login modules, by class name.
const PLAIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
const SCRAM_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// The `name="value"` options, in order, of a JAAS login module line for `module`:
/// `org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
/// password="admin-secret" user_admin="admin-secret";`.
fn jaas_options(jaas: &str, module: &str) -> Result<Vec<(String, String)>, String> {
    let body = jaas.trim().trim_end_matches(';');
    let mut words = body.splitn(3, char::is_whitespace);
    let given = words.next().unwrap_or("");
    let short = module.rsplit('.').next().unwrap_or(module);
    if given != module && given != short {
        return Err(format!("{given:?} is not Kafka's {module}"));
    }
    let mut rest = words.nth(1).unwrap_or("").trim();
    let mut options = Vec::new();
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once('=')
            .ok_or_else(|| format!("expected name=\"value\" at {:?}", first_word(rest)))?;
        let after = after.trim_start();
        let value_and_rest = after
            .strip_prefix('"')
            .ok_or_else(|| format!("the value of {} must be quoted", name.trim()))?;
        let (value, after) = quoted_value(value_and_rest)
            .ok_or_else(|| format!("the value of {} has no closing quote", name.trim()))?;
        options.push((name.trim().to_string(), value));
        rest = after.trim_start();
    }
    Ok(options)
}

/// A quoted JAAS value after its opening quote, and the text after its closing one. A
/// backslash escapes the next character as in Java's StreamTokenizer, which Kafka's JaasConfig
/// reads with: `\"` is a quote, `\\` a backslash, `\n`, `\t`, `\r`, `\b`, `\f` their controls.
fn quoted_value(s: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &s[i + 1..])),
            '\\' => {
                let (_, e) = chars.next()?;
                value.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    other => other,
                });
            }
            c => value.push(c),
        }
    }
    None
}

/// `value` quoted for a JAAS line: `quoted_value` reads it back unchanged.
pub fn jaas_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn first_word(s: &str) -> &str {
    s.split_whitespace().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_jaas_values_round_trip_quotes_and_backslashes() {
        for v in [
            "plain",
            "with \"quotes\"",
            "back\\slash\\",
            "",
            "x\"; y=\"z",
        ] {
            let line = format!(
                "ScramLoginModule required username={} password=\"p\";",
                jaas_quote(v)
            );
            let opts = jaas_options(
                &line,
                "org.apache.kafka.common.security.scram.ScramLoginModule",
            )
            .unwrap();
            assert_eq!(opts[0], ("username".to_string(), v.to_string()), "{line}");
            assert_eq!(opts[1].1, "p");
        }
        assert!(jaas_options(
            "PlainLoginModule required a=\"open\\\";",
            "PlainLoginModule"
        )
        .is_err());
    }

    fn props(text: &str) -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    fn auth(text: &str) -> Result<AuthConfig, ConfigError> {
        let p = props(text);
        let map = SecurityProtocolMap::from_props(&p, &[], &[]).unwrap();
        AuthConfig::from_props(
            &p,
            &["SASL_PLAINTEXT".into(), "PLAINTEXT".into()],
            &map,
            None,
        )
    }

    /// The config of a broker whose inter-broker listener is INTERNAL (SASL_SSL).
    fn inter_broker(text: &str) -> Result<AuthConfig, ConfigError> {
        let p = props(&format!(
            "listener.security.protocol.map=INTERNAL:SASL_SSL,EXTERNAL:PLAINTEXT\n{text}"
        ));
        let map = SecurityProtocolMap::from_props(&p, &[], &[]).unwrap();
        let names = ["INTERNAL".to_string(), "EXTERNAL".to_string()];
        AuthConfig::from_props(&p, &names, &map, Some("INTERNAL"))
    }

    const SCRAM_JAAS: &str = "listener.name.internal.scram-sha-512.sasl.jaas.config=\
        org.apache.kafka.common.security.scram.ScramLoginModule required \
        username=\"admin\" password=\"admin-secret\";";

    #[test]
    fn the_inter_broker_login_comes_from_the_listeners_jaas_config_for_its_mechanism() {
        let c = inter_broker(&format!(
            "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN\n\
             listener.name.internal.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"broker\" password=\"p w\" user_broker=\"p w\";\n\
             sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n{SCRAM_JAAS}"
        ))
        .unwrap();
        let login = c.inter_broker.unwrap();
        assert_eq!(login.mechanism, "SCRAM-SHA-512");
        assert_eq!(login.username, "admin");
        assert_eq!(login.password, "admin-secret");
        assert!(
            !format!("{login:?}").contains("admin-secret"),
            "Debug hides it"
        );
        let c = inter_broker(
            "sasl.enabled.mechanisms=PLAIN\n\
             sasl.mechanism.inter.broker.protocol=PLAIN\n\
             listener.name.internal.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"broker\" password=\"p w\" user_broker=\"p w\";",
        )
        .unwrap();
        let login = c.inter_broker.unwrap();
        assert_eq!(
            (login.username.as_str(), login.password.as_str()),
            ("broker", "p w")
        );
        assert_eq!(c.sasl["INTERNAL"].plain_users["broker"], "p w");
    }

    /// The controller listener CONTROLLER on SASL_PLAINTEXT, for a voter or a broker-only node.
    fn controller(text: &str, voter: bool) -> Result<AuthConfig, ConfigError> {
        let p = props(text);
        let map = SecurityProtocolMap::from_props(&p, &[], &[]).unwrap();
        let c = AuthConfig::from_props(&p, &[], &map, None)?;
        c.with_controller(&p, "CONTROLLER", voter)
    }

    const CONTROLLER_JAAS: &str = "listener.name.controller.plain.sasl.jaas.config=\
        org.apache.kafka.common.security.plain.PlainLoginModule required \
        username=\"quorum\" password=\"q\" user_quorum=\"q\";";

    #[test]
    fn the_controller_login_comes_from_the_controller_listeners_jaas_config() {
        let text = format!(
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN\n\
             sasl.mechanism.controller.protocol=PLAIN\n{CONTROLLER_JAAS}"
        );
        let c = controller(&text, true).unwrap();
        let login = c.controller.unwrap();
        assert_eq!(
            (login.mechanism.as_str(), login.username.as_str()),
            ("PLAIN", "quorum")
        );
        // A voter serves it: its mechanisms and PLAIN's users.
        assert_eq!(c.sasl["CONTROLLER"].plain_users["quorum"], "q");
        // A broker-only node only logs in: it needs no enabled list and serves nothing.
        let c = controller(
            &format!("sasl.mechanism.controller.protocol=PLAIN\n{CONTROLLER_JAAS}"),
            false,
        )
        .unwrap();
        assert!(c.controller.is_some() && c.sasl.is_empty());
    }

    #[test]
    fn controller_logins_are_refused_by_key() {
        let mech = "sasl.mechanism.controller.protocol";
        let enabled = "listener.name.controller.sasl.enabled.mechanisms";
        for (text, voter, key, words) in [
            (
                format!("{enabled}=PLAIN\n{CONTROLLER_JAAS}"),
                true,
                mech,
                "GSSAPI, is not served",
            ),
            (
                format!("{enabled}=SCRAM-SHA-512\n{mech}=PLAIN\n{CONTROLLER_JAAS}"),
                true,
                mech,
                "does not enable it",
            ),
            (
                format!("{enabled}=SCRAM-SHA-512\n{mech}=SCRAM-SHA-512"),
                true,
                mech,
                "cannot log in with SCRAM",
            ),
            (
                format!("{mech}=PLAIN"),
                false,
                "listener.name.controller.plain.sasl.jaas.config",
                "voters and brokers log in to the controllers with PLAIN",
            ),
        ] {
            let e = controller(&text, voter).unwrap_err().to_string();
            assert!(
                e.contains(&format!("configuration {key}:")) && e.contains(words),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn a_plaintext_or_ssl_inter_broker_listener_needs_no_login() {
        let p = props("listener.security.protocol.map=INTERNAL:SSL,EXTERNAL:SASL_PLAINTEXT\nsasl.enabled.mechanisms=SCRAM-SHA-256");
        let map = SecurityProtocolMap::from_props(&p, &[], &[]).unwrap();
        let names = ["INTERNAL".to_string(), "EXTERNAL".to_string()];
        let c = AuthConfig::from_props(&p, &names, &map, Some("INTERNAL")).unwrap();
        assert_eq!(c.inter_broker, None);
    }

    #[test]
    fn inter_broker_logins_are_refused_by_key() {
        let mech = "sasl.mechanism.inter.broker.protocol";
        let jaas = "listener.name.internal.scram-sha-512.sasl.jaas.config";
        for (text, key, words) in [
            ("sasl.enabled.mechanisms=SCRAM-SHA-512", mech, "GSSAPI, is not served"),
            (
                "sasl.enabled.mechanisms=SCRAM-SHA-512\nsasl.mechanism.inter.broker.protocol=GSSAPI",
                mech,
                "not served",
            ),
            (
                "sasl.enabled.mechanisms=SCRAM-SHA-256\nsasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
                mech,
                "does not enable it",
            ),
            (
                "sasl.enabled.mechanisms=SCRAM-SHA-512\nsasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
                jaas,
                "ScramLoginModule",
            ),
            (
                "sasl.enabled.mechanisms=SCRAM-SHA-512\nsasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n\
                 listener.name.internal.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"secret\";",
                jaas,
                "is not Kafka's org.apache.kafka.common.security.scram.ScramLoginModule",
            ),
            (
                "sasl.enabled.mechanisms=SCRAM-SHA-512\nsasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n\
                 listener.name.internal.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\";",
                jaas,
                "needs username",
            ),
        ] {
            let e = inter_broker(text).unwrap_err().to_string();
            assert!(e.contains(&format!("configuration {key}:")) && e.contains(words), "{text}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
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
    fn a_clients_login_is_its_mechanism_with_the_jaas_configs_user() {
        let scram = props(
            "sasl.mechanism=SCRAM-SHA-256\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"alice-secret\";",
        );
        let l = client_login(&scram).unwrap();
        assert_eq!(
            (
                l.mechanism.as_str(),
                l.username.as_str(),
                l.password.as_str()
            ),
            ("SCRAM-SHA-256", "alice", "alice-secret")
        );
        let plain = props(
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"bob\" password=\"b\";",
        );
        assert_eq!(
            client_login(&plain).unwrap().mechanism,
            "PLAIN",
            "Kafka's default"
        );
        for (text, key, words) in [
            ("sasl.mechanism=GSSAPI", "sasl.mechanism", "speaks PLAIN"),
            ("sasl.mechanism=PLAIN", "sasl.jaas.config", "PlainLoginModule required"),
            (
                "sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"secret\";",
                "sasl.jaas.config",
                "ScramLoginModule",
            ),
            (
                "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password=\"secret\";",
                "sasl.jaas.config",
                "needs username",
            ),
        ] {
            let e = client_login(&props(text)).unwrap_err().to_string();
            assert!(e.contains(&format!("configuration {key}:")) && e.contains(words), "{text}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn the_per_listener_keys_are_known() {
        assert!(is_auth_key("sasl.mechanism.inter.broker.protocol"));
        assert!(is_auth_key(
            "listener.name.external.sasl.enabled.mechanisms"
        ));
        assert!(is_auth_key(
            "listener.name.external.scram-sha-512.sasl.jaas.config"
        ));
        assert!(!is_auth_key("listener.name.external.ssl.keystore.location"));
    }
}
