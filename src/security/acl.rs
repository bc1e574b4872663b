//! Kafka's ACL vocabulary: resource types, operations, pattern and permission types with their
//! wire codes, an ACL binding (a resource pattern and an access-control entry), and the filters
//! DescribeAcls and DeleteAcls match bindings with.

use std::fmt;

/// The wildcard resource name of a LITERAL pattern, and the wildcard host.
pub const WILDCARD: &str = "*";

/// The principal that stands for every user (`User:*`).
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Declares a Kafka enum with its wire codes and names; an unknown code reads as `Unknown`.
macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($variant,)*
        }

        impl $name {
            /// The code on the wire.
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)*
                }
            }

            /// The value of a wire code; `Unknown` for a code Kafka does not define.
            pub fn from_code(code: i8) -> $name {
                match code {
                    $($code => $name::$variant,)*
                    _ => $name::Unknown,
                }
            }

            /// The value Kafka's tools write (`Topic`, `PREFIXED`, `Read`, ...), any case.
            pub fn parse(text: &str) -> Option<$name> {
                [$($name::$variant,)*]
                    .into_iter()
                    .find(|v| v.to_string().eq_ignore_ascii_case(text.trim()))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $($name::$variant => $text,)*
                })
            }
        }
    };
}

kafka_enum! {
    /// What an ACL is about (Kafka's ResourceType).
    ResourceType {
        Unknown = 0, "Unknown";
        Any = 1, "Any";
        Topic = 2, "Topic";
        Group = 3, "Group";
        Cluster = 4, "Cluster";
        TransactionalId = 5, "TransactionalId";
        DelegationToken = 6, "DelegationToken";
        User = 7, "User";
    }
}

kafka_enum! {
    /// What a request does to a resource (Kafka's AclOperation).
    AclOperation {
        Unknown = 0, "Unknown";
        Any = 1, "Any";
        All = 2, "All";
        Read = 3, "Read";
        Write = 4, "Write";
        Create = 5, "Create";
        Delete = 6, "Delete";
        Alter = 7, "Alter";
        Describe = 8, "Describe";
        ClusterAction = 9, "ClusterAction";
        DescribeConfigs = 10, "DescribeConfigs";
        AlterConfigs = 11, "AlterConfigs";
        IdempotentWrite = 12, "IdempotentWrite";
        CreateTokens = 13, "CreateTokens";
        DescribeTokens = 14, "DescribeTokens";
        TwoPhaseCommit = 15, "TwoPhaseCommit";
    }
}

kafka_enum! {
    /// How an ACL's resource name matches (Kafka's PatternType). MATCH and ANY occur only in
    /// filters.
    PatternType {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        Match = 2, "MATCH";
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
}

kafka_enum! {
    /// Whether an ACL allows or denies (Kafka's AclPermissionType).
    PermissionType {
        Unknown = 0, "Unknown";
        Any = 1, "Any";
        Deny = 2, "Deny";
        Allow = 3, "Allow";
    }
}

/// A resource pattern: a type and a name, LITERAL (exactly the name, or every resource for
/// `*`) or PREFIXED (every resource whose name starts with it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

/// One ACL (Kafka's AclBinding): who may or may not do what from where, on a pattern.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    /// `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// A client address, or `*` for any.
    pub host: String,
    pub operation: AclOperation,
    pub permission: PermissionType,
}

/// Why an ACL cannot be stored (Kafka's CreateAcls answers INVALID_REQUEST with these).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAcl {
    #[error("Invalid resourceType {0}")]
    ResourceType(ResourceType),
    #[error("Invalid patternType {0}")]
    PatternType(PatternType),
    #[error("Invalid operation {0}")]
    Operation(AclOperation),
    #[error("Invalid permissionType {0}")]
    Permission(PermissionType),
    #[error(
        "Could not parse principal from `{0}` (no colon is present separating the principal \
         type from the principal name)"
    )]
    Principal(String),
    #[error("Resource name should not be empty")]
    EmptyName,
    #[error("The only valid name for the CLUSTER resource is kafka-cluster")]
    ClusterName,
}

impl AclBinding {
    /// Checks a binding a CreateAcls request asks to store, as Kafka's controller and
    /// CreateAcls handler do (each refusal is INVALID_REQUEST with this message).
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        use AclOperation as Op;
        let p = &self.pattern;
        if matches!(p.resource_type, ResourceType::Unknown | ResourceType::Any) {
            return Err(InvalidAcl::ResourceType(p.resource_type));
        }
        if !matches!(p.pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return Err(InvalidAcl::PatternType(p.pattern_type));
        }
        if matches!(self.operation, Op::Unknown | Op::Any) {
            return Err(InvalidAcl::Operation(self.operation));
        }
        if !matches!(
            self.permission,
            PermissionType::Allow | PermissionType::Deny
        ) {
            return Err(InvalidAcl::Permission(self.permission));
        }
        if p.name.is_empty() {
            return Err(InvalidAcl::EmptyName);
        }
        if !self.principal.contains(':') {
            return Err(InvalidAcl::Principal(self.principal.clone()));
        }
        if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
            return Err(InvalidAcl::ClusterName);
        }
        Ok(())
    }
}

/// Kafka's words for a filter with an UNKNOWN element.
pub const UNKNOWN_FILTER: &str = "The AclBindingFilter must not contain UNKNOWN elements.";

/// The one name of the cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// Which bindings DescribeAcls names or DeleteAcls removes (Kafka's AclBindingFilter): `None`
/// matches any name, principal or host; ANY matches any type, pattern, operation or permission;
/// a MATCH pattern takes every pattern that would apply to the named resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission: PermissionType,
}

impl AclBindingFilter {
    /// A filter that matches every binding.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter {
            resource_type: ResourceType::Any,
            name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission: PermissionType::Any,
        }
    }

    /// A filter that matches `b` and nothing else.
    pub fn exactly(b: &AclBinding) -> AclBindingFilter {
        AclBindingFilter {
            resource_type: b.pattern.resource_type,
            name: Some(b.pattern.name.clone()),
            pattern_type: b.pattern.pattern_type,
            principal: Some(b.principal.clone()),
            host: Some(b.host.clone()),
            operation: b.operation,
            permission: b.permission,
        }
    }

    /// Whether the filter names an UNKNOWN element (Kafka refuses it with INVALID_REQUEST and
    /// `UNKNOWN_FILTER`).
    pub fn is_unknown(&self) -> bool {
        self.resource_type == ResourceType::Unknown
            || self.pattern_type == PatternType::Unknown
            || self.operation == AclOperation::Unknown
            || self.permission == PermissionType::Unknown
    }

    pub fn matches(&self, b: &AclBinding) -> bool {
        self.matches_pattern(&b.pattern)
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == AclOperation::Any || self.operation == b.operation)
            && (self.permission == PermissionType::Any || self.permission == b.permission)
    }

    /// Kafka's ResourcePatternFilter.matches.
    fn matches_pattern(&self, p: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != p.resource_type {
            return false;
        }
        let any_or_match = matches!(self.pattern_type, PatternType::Any | PatternType::Match);
        if !any_or_match && self.pattern_type != p.pattern_type {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == p.pattern_type {
            return *name == p.name;
        }
        // MATCH: the patterns that apply to the resource `name`.
        match p.pattern_type {
            PatternType::Literal => *name == p.name || p.name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&p.name),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(rt: ResourceType, name: &str, pt: PatternType) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: rt,
                name: name.into(),
                pattern_type: pt,
            },
            principal: "User:alice".into(),
            host: WILDCARD.into(),
            operation: AclOperation::Read,
            permission: PermissionType::Allow,
        }
    }

    #[test]
    fn codes_and_names_are_kafkas() {
        assert_eq!(AclOperation::DescribeConfigs.code(), 10);
        assert_eq!(AclOperation::from_code(12), AclOperation::IdempotentWrite);
        assert_eq!(AclOperation::from_code(99), AclOperation::Unknown);
        assert_eq!(ResourceType::from_code(5), ResourceType::TransactionalId);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(PermissionType::from_code(3), PermissionType::Allow);
        assert_eq!(ResourceType::parse("topic"), Some(ResourceType::Topic));
        assert_eq!(PatternType::parse("prefixed"), Some(PatternType::Prefixed));
        assert_eq!(
            AclOperation::parse("IDEMPOTENTWRITE"),
            Some(AclOperation::IdempotentWrite)
        );
        assert_eq!(AclOperation::parse("fly"), None);
    }

    #[test]
    fn a_match_filter_takes_the_literal_wildcard_and_prefixed_patterns_of_a_name() {
        let exact = binding(ResourceType::Topic, "orders", PatternType::Literal);
        let star = binding(ResourceType::Topic, WILDCARD, PatternType::Literal);
        let prefix = binding(ResourceType::Topic, "ord", PatternType::Prefixed);
        let other = binding(ResourceType::Topic, "payments", PatternType::Literal);
        let group = binding(ResourceType::Group, "orders", PatternType::Literal);
        let f = AclBindingFilter {
            resource_type: ResourceType::Topic,
            name: Some("orders".into()),
            pattern_type: PatternType::Match,
            ..AclBindingFilter::any()
        };
        let hits: Vec<bool> = [&exact, &star, &prefix, &other, &group]
            .iter()
            .map(|b| f.matches(b))
            .collect();
        assert_eq!(hits, [true, true, true, false, false]);
        // ANY with a name: only that exact name, of any pattern type.
        let any = AclBindingFilter {
            pattern_type: PatternType::Any,
            ..f.clone()
        };
        assert!(any.matches(&exact) && !any.matches(&star) && !any.matches(&prefix));
        // A specific pattern type: that type and that name.
        let lit = AclBindingFilter {
            pattern_type: PatternType::Prefixed,
            name: Some("ord".into()),
            ..f
        };
        assert!(lit.matches(&prefix) && !lit.matches(&exact));
    }

    #[test]
    fn entry_fields_filter_by_principal_host_operation_and_permission() {
        let b = binding(ResourceType::Topic, "t", PatternType::Literal);
        let mut f = AclBindingFilter::any();
        assert!(f.matches(&b));
        f.principal = Some("User:bob".into());
        assert!(!f.matches(&b));
        f.principal = Some("User:alice".into());
        f.operation = AclOperation::Write;
        assert!(!f.matches(&b));
        f.operation = AclOperation::Read;
        f.permission = PermissionType::Deny;
        assert!(!f.matches(&b));
        f.permission = PermissionType::Allow;
        f.host = Some("10.0.0.1".into());
        assert!(!f.matches(&b));
    }

    #[test]
    fn bindings_kafka_refuses_are_refused_with_its_reason() {
        let ok = binding(ResourceType::Topic, "t", PatternType::Literal);
        assert_eq!(ok.validate(), Ok(()));
        let mut b = ok.clone();
        b.pattern.pattern_type = PatternType::Match;
        assert_eq!(
            b.validate(),
            Err(InvalidAcl::PatternType(PatternType::Match))
        );
        let mut b = ok.clone();
        b.operation = AclOperation::Any;
        assert_eq!(b.validate(), Err(InvalidAcl::Operation(AclOperation::Any)));
        let mut b = ok.clone();
        b.principal = "alice".into();
        assert!(matches!(b.validate(), Err(InvalidAcl::Principal(_))));
        let mut b = ok.clone();
        b.pattern.resource_type = ResourceType::Cluster;
        assert_eq!(b.validate(), Err(InvalidAcl::ClusterName));
        b.pattern.name = CLUSTER_NAME.into();
        assert_eq!(b.validate(), Ok(()));
    }
}
