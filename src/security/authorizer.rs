//! Kafka's StandardAuthorizer decision: may this principal, from this host, do this operation on
//! this resource? Super users may do anything; otherwise a matching DENY wins over any ALLOW,
//! ALLOWs of READ/WRITE/DELETE/ALTER imply DESCRIBE (and ALTER_CONFIGS implies
//! DESCRIBE_CONFIGS), and a resource no ACL names follows `allow.everyone.if.no.acl.found`.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::config::auth::AuthorizerSettings;

use super::acl::{
    AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType, WILDCARD, WILDCARD_PRINCIPAL,
};

/// `authorizer.class.name` for Kafka's KRaft authorizer, the one evenkeel implements.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The answer to one question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
}

/// Which rule decided, for the debug log (Kafka logs the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    SuperUser,
    /// No ACL names the resource: `allow.everyone.if.no.acl.found`.
    NoAcl(Decision),
    /// ACLs name the resource, none matched this principal, host and operation.
    NoMatchingAcl,
    MatchingAcl(AclBinding),
}

/// `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    pub super_users: HashSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl From<&AuthorizerSettings> for AuthorizerConfig {
    fn from(s: &AuthorizerSettings) -> Self {
        AuthorizerConfig {
            super_users: s.super_users.iter().cloned().collect(),
            allow_everyone_if_no_acl_found: s.allow_everyone_if_no_acl_found,
        }
    }
}

/// The ACLs of one resource type, indexed the way a decision reads them.
#[derive(Debug, Default, Clone)]
struct TypeAcls {
    /// LITERAL patterns by name (`*` included).
    literal: HashMap<String, Vec<AclBinding>>,
    /// PREFIXED patterns by prefix.
    prefixed: BTreeMap<String, Vec<AclBinding>>,
}

/// Decisions over a set of ACLs (the metadata log's); the broker counts them for Kafka's
/// authorizer-metrics report.
#[derive(Debug, Default)]
pub struct StandardAuthorizer {
    config: AuthorizerConfig,
    acls: HashMap<ResourceType, TypeAcls>,
}

impl StandardAuthorizer {
    pub fn new(config: AuthorizerConfig, acls: impl IntoIterator<Item = AclBinding>) -> Self {
        let mut a = StandardAuthorizer {
            config,
            ..StandardAuthorizer::default()
        };
        for b in acls {
            a.add(b);
        }
        a
    }

    /// Adds one ACL (an AccessControlEntryRecord); a copy of one present is ignored.
    fn add(&mut self, b: AclBinding) {
        let t = self.acls.entry(b.pattern.resource_type).or_default();
        let list = match b.pattern.pattern_type {
            PatternType::Prefixed => t.prefixed.entry(b.pattern.name.clone()).or_default(),
            _ => t.literal.entry(b.pattern.name.clone()).or_default(),
        };
        if !list.contains(&b) {
            list.push(b);
        }
    }

    /// Every ACL `filter` matches (DescribeAcls; DeleteAcls removes these).
    pub fn acls(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let mut out: Vec<AclBinding> = self
            .acls
            .values()
            .flat_map(|t| t.literal.values().chain(t.prefixed.values()))
            .flatten()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// May `principal` (`User:alice`) from `host` do `op` on the resource `name` of type `rt`?
    /// Logged at debug with the rule that decided.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        op: AclOperation,
        rt: ResourceType,
        name: &str,
    ) -> Decision {
        let rule = self.rule(principal, host, op, rt, name);
        let decision = match &rule {
            Rule::SuperUser => Decision::Allowed,
            Rule::NoAcl(d) => *d,
            Rule::NoMatchingAcl => Decision::Denied,
            Rule::MatchingAcl(b) if b.permission == PermissionType::Allow => Decision::Allowed,
            Rule::MatchingAcl(_) => Decision::Denied,
        };
        tracing::debug!(
            principal, host, operation = %op, resource_type = %rt, resource = name,
            ?decision, ?rule, "authorization"
        );
        decision
    }

    /// May `principal` do `op` on some resource of type `rt` (Kafka's authorizeByResourceType,
    /// KIP-679: an idempotent producer needs WRITE on any topic)? Yes for a super user, or when
    /// an ALLOW applies whose pattern no DENY covers (a DENY on the literal wildcard covers
    /// everything; a prefixed DENY covers the names it prefixes).
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        op: AclOperation,
        rt: ResourceType,
    ) -> Decision {
        if self.config.super_users.contains(principal) {
            return Decision::Allowed;
        }
        let Some(t) = self.acls.get(&rt) else {
            return match self.config.allow_everyone_if_no_acl_found {
                true => Decision::Allowed,
                false => Decision::Denied,
            };
        };
        let all = t.literal.values().chain(t.prefixed.values()).flatten();
        let (mut allows, mut denies) = (Vec::new(), Vec::new());
        for b in all {
            match matches(b, principal, host, op) {
                Some(PermissionType::Deny) => denies.push(&b.pattern),
                Some(_) => allows.push(&b.pattern),
                None => {}
            }
        }
        let covered = |a: &ResourcePattern| {
            denies.iter().any(|d| {
                (d.pattern_type == PatternType::Literal && d.name == WILDCARD)
                    || (d.pattern_type == PatternType::Prefixed && a.name.starts_with(&d.name))
                    || (d.pattern_type == a.pattern_type && d.name == a.name)
            })
        };
        match allows.into_iter().any(|a| !covered(a)) {
            true => Decision::Allowed,
            false => Decision::Denied,
        }
    }

    /// The rule that decides, as Kafka's StandardAuthorizerData finds it: a matching DENY,
    /// else a matching ALLOW, else the no-ACL default only if no ACL names the resource at
    /// all (KAFKA-14435: a resource with ACLs is never open to everyone).
    fn rule(
        &self,
        principal: &str,
        host: &str,
        op: AclOperation,
        rt: ResourceType,
        name: &str,
    ) -> Rule {
        if self.config.super_users.contains(principal) {
            return Rule::SuperUser;
        }
        let mut named = false;
        let mut allow = None;
        for b in self.applying(rt, name) {
            named = true;
            match matches(b, principal, host, op) {
                Some(PermissionType::Deny) => return Rule::MatchingAcl(b.clone()),
                Some(_) => allow = allow.or(Some(b)),
                None => {}
            }
        }
        match (allow, named) {
            (Some(b), _) => Rule::MatchingAcl(b.clone()),
            (None, true) => Rule::NoMatchingAcl,
            (None, false) if self.config.allow_everyone_if_no_acl_found => {
                Rule::NoAcl(Decision::Allowed)
            }
            (None, false) => Rule::NoAcl(Decision::Denied),
        }
    }

    /// The ACLs whose pattern covers the resource: its literal name, the literal wildcard, and
    /// every prefix of the name.
    fn applying<'a>(
        &'a self,
        rt: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> {
        let t = self.acls.get(&rt);
        let literal = t.into_iter().flat_map(move |t| {
            let exact = t.literal.get(name).into_iter().flatten();
            let star = (name != WILDCARD)
                .then(|| t.literal.get(WILDCARD))
                .flatten()
                .into_iter()
                .flatten();
            exact.chain(star)
        });
        let prefixed = t.into_iter().flat_map(move |t| {
            prefixes(name)
                .filter_map(move |p| t.prefixed.get(p))
                .flatten()
        });
        literal.chain(prefixed)
    }
}

/// Every non-empty prefix of `name`, whole characters only.
fn prefixes(name: &str) -> impl Iterator<Item = &str> {
    name.char_indices().map(|(i, c)| &name[..i + c.len_utf8()])
}

/// What `b` says about this principal, host and operation (Kafka's findResult): `None` when it
/// does not apply. An ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and one of
/// ALTER_CONFIGS allows DESCRIBE_CONFIGS; a DENY denies only its own operation (or ALL).
fn matches(
    b: &AclBinding,
    principal: &str,
    host: &str,
    op: AclOperation,
) -> Option<PermissionType> {
    use AclOperation as Op;
    if b.principal != principal && b.principal != WILDCARD_PRINCIPAL {
        return None;
    }
    if b.host != WILDCARD && b.host != host {
        return None;
    }
    let applies = b.operation == Op::All
        || b.operation == op
        || (b.permission == PermissionType::Allow
            && match op {
                Op::Describe => {
                    matches!(b.operation, Op::Read | Op::Write | Op::Delete | Op::Alter)
                }
                Op::DescribeConfigs => b.operation == Op::AlterConfigs,
                _ => false,
            });
    applies.then_some(b.permission)
}

#[cfg(test)]
mod tests {
    use super::*;
    use AclOperation as Op;

    const ALICE: &str = "User:alice";
    const BOB: &str = "User:bob";
    const HOST: &str = "10.0.0.5";

    fn acl(
        name: &str,
        pt: PatternType,
        who: &str,
        op: AclOperation,
        perm: PermissionType,
    ) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: name.into(),
                pattern_type: pt,
            },
            principal: who.into(),
            host: WILDCARD.into(),
            operation: op,
            permission: perm,
        }
    }

    fn allow(name: &str, pt: PatternType, who: &str, op: AclOperation) -> AclBinding {
        acl(name, pt, who, op, PermissionType::Allow)
    }

    fn deny(name: &str, pt: PatternType, who: &str, op: AclOperation) -> AclBinding {
        acl(name, pt, who, op, PermissionType::Deny)
    }

    fn authorizer(acls: Vec<AclBinding>) -> StandardAuthorizer {
        StandardAuthorizer::new(AuthorizerConfig::default(), acls)
    }

    fn topic(a: &StandardAuthorizer, who: &str, op: AclOperation, name: &str) -> Decision {
        a.authorize(who, HOST, op, ResourceType::Topic, name)
    }

    #[test]
    fn literal_prefixed_and_wildcard_patterns_each_grant_their_resources() {
        let a = authorizer(vec![
            allow("orders", PatternType::Literal, ALICE, Op::Read),
            allow("pay", PatternType::Prefixed, ALICE, Op::Write),
            allow(WILDCARD, PatternType::Literal, BOB, Op::Read),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Read, "orders"), Decision::Allowed);
        assert_eq!(topic(&a, ALICE, Op::Read, "orders2"), Decision::Denied);
        assert_eq!(topic(&a, ALICE, Op::Write, "payments"), Decision::Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "pa"), Decision::Denied);
        assert_eq!(topic(&a, BOB, Op::Read, "anything"), Decision::Allowed);
        assert_eq!(topic(&a, BOB, Op::Write, "anything"), Decision::Denied);
    }

    #[test]
    fn a_deny_wins_over_any_allow_wherever_it_comes_from() {
        let a = authorizer(vec![
            allow("orders", PatternType::Literal, ALICE, Op::All),
            deny("ord", PatternType::Prefixed, ALICE, Op::Write),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Read, "orders"), Decision::Allowed);
        assert_eq!(topic(&a, ALICE, Op::Write, "orders"), Decision::Denied);
        // A DENY for everyone, from the wildcard resource, also wins.
        let b = authorizer(vec![
            allow("orders", PatternType::Literal, ALICE, Op::Read),
            deny(WILDCARD, PatternType::Literal, WILDCARD_PRINCIPAL, Op::Read),
        ]);
        assert_eq!(topic(&b, ALICE, Op::Read, "orders"), Decision::Denied);
    }

    #[test]
    fn allows_imply_describe_but_denies_do_not() {
        let a = authorizer(vec![
            allow("w", PatternType::Literal, ALICE, Op::Write),
            allow("c", PatternType::Literal, ALICE, Op::AlterConfigs),
            allow("r", PatternType::Literal, ALICE, Op::Read),
            deny("r", PatternType::Literal, ALICE, Op::Write),
        ]);
        assert_eq!(topic(&a, ALICE, Op::Describe, "w"), Decision::Allowed);
        assert_eq!(
            topic(&a, ALICE, Op::DescribeConfigs, "c"),
            Decision::Allowed
        );
        assert_eq!(topic(&a, ALICE, Op::Describe, "c"), Decision::Denied);
        assert_eq!(topic(&a, ALICE, Op::Read, "w"), Decision::Denied);
        // DENY WRITE on r does not deny DESCRIBE, which READ implies.
        assert_eq!(topic(&a, ALICE, Op::Describe, "r"), Decision::Allowed);
    }

    #[test]
    fn a_resource_with_acls_is_never_open_to_everyone() {
        let config = AuthorizerConfig {
            allow_everyone_if_no_acl_found: true,
            ..AuthorizerConfig::default()
        };
        let a = StandardAuthorizer::new(
            config,
            vec![allow("secret", PatternType::Literal, ALICE, Op::Read)],
        );
        assert_eq!(
            topic(&a, BOB, Op::Read, "public"),
            Decision::Allowed,
            "no ACL"
        );
        assert_eq!(
            topic(&a, BOB, Op::Read, "secret"),
            Decision::Denied,
            "KAFKA-14435"
        );
        // Without the setting, a resource no ACL names is closed.
        let closed = authorizer(vec![]);
        assert_eq!(topic(&closed, BOB, Op::Read, "public"), Decision::Denied);
    }

    #[test]
    fn super_users_may_do_anything_and_hosts_narrow_an_acl() {
        let config = AuthorizerConfig {
            super_users: HashSet::from(["User:admin".into(), "User:operator".into()]),
            ..AuthorizerConfig::default()
        };
        let mut from_one_host = allow("t", PatternType::Literal, ALICE, Op::Read);
        from_one_host.host = "10.0.0.9".into();
        let a = StandardAuthorizer::new(
            config,
            vec![deny(
                WILDCARD,
                PatternType::Literal,
                WILDCARD_PRINCIPAL,
                Op::All,
            )],
        );
        assert_eq!(
            topic(&a, "User:operator", Op::Delete, "t"),
            Decision::Allowed
        );
        assert_eq!(topic(&a, ALICE, Op::Read, "t"), Decision::Denied);
        let b = authorizer(vec![from_one_host]);
        assert_eq!(
            topic(&b, ALICE, Op::Read, "t"),
            Decision::Denied,
            "another host"
        );
        assert_eq!(
            b.authorize(ALICE, "10.0.0.9", Op::Read, ResourceType::Topic, "t"),
            Decision::Allowed
        );
        // Another resource type is another section.
        assert_eq!(
            b.authorize(ALICE, "10.0.0.9", Op::Read, ResourceType::Group, "t"),
            Decision::Denied
        );
    }

    #[test]
    fn an_acl_given_twice_is_stored_once() {
        let grant = allow("t", PatternType::Prefixed, ALICE, Op::Read);
        let a = authorizer(vec![grant.clone(), grant.clone()]);
        assert_eq!(a.acls(&AclBindingFilter::any()), vec![grant], "stored once");
        assert_eq!(topic(&a, ALICE, Op::Read, "t1"), Decision::Allowed);
    }

    #[test]
    fn write_on_any_topic_is_an_allow_no_deny_covers() {
        use PatternType::{Literal, Prefixed};
        let any = |a: &StandardAuthorizer, who| {
            a.authorize_any(who, HOST, Op::Write, ResourceType::Topic)
        };
        let a = authorizer(vec![allow("orders", Literal, ALICE, Op::Write)]);
        assert_eq!(any(&a, ALICE), Decision::Allowed);
        assert_eq!(any(&a, BOB), Decision::Denied);
        let covered = authorizer(vec![
            allow("orders-eu", Literal, ALICE, Op::Write),
            deny("orders", Prefixed, ALICE, Op::Write),
        ]);
        assert_eq!(any(&covered, ALICE), Decision::Denied);
        let wildcard = authorizer(vec![
            allow("orders", Prefixed, ALICE, Op::Write),
            deny(WILDCARD, Literal, ALICE, Op::All),
        ]);
        assert_eq!(any(&wildcard, ALICE), Decision::Denied);
        let read_only = authorizer(vec![allow("orders", Literal, ALICE, Op::Read)]);
        assert_eq!(any(&read_only, ALICE), Decision::Denied);
    }
}
