//! The KafkaUser custom resource, Strimzi's shape: how a user authenticates (SCRAM-SHA-512 or a
//! client certificate) and its simple-authorization ACLs, with the status the operator reports.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;
use crate::security::acl::{
    AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern, ResourceType,
    CLUSTER_NAME, WILDCARD,
};

/// Finalizer that makes a KafkaUser's deletion remove its credentials and ACLs from Kafka first.
pub const USER_FINALIZER: &str = "kafka.evenkeel.dev/user";

/// A user of a KafkaCluster in the same namespace: its credentials (in a Secret of the same
/// name) and its ACLs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kafka.evenkeel.dev",
    version = "v1alpha1",
    kind = "KafkaUser",
    plural = "kafkausers",
    shortname = "ku",
    namespaced,
    cel,
    status = "KafkaUserStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterRef"}"#,
    printcolumn = r#"{"name":"Authentication","type":"string","jsonPath":".spec.authentication.type"}"#,
    printcolumn = r#"{"name":"Authorization","type":"string","jsonPath":".spec.authorization.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Username","type":"string","jsonPath":".status.username","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserSpec {
    /// Name of the KafkaCluster (same namespace) the user belongs to.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable"))]
    pub cluster_ref: String,
    /// How the user logs in. None: the user has no credentials (ACLs only, e.g. for a principal
    /// another mechanism authenticates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<UserAuthentication>,
    /// The user's ACLs. None: the operator leaves the user's ACLs alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<UserAuthorization>,
}

/// `spec.authentication`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.type == 'scram-sha-512' || !has(self.password)").message(PASSWORD_NEEDS_SCRAM),
)]
pub struct UserAuthentication {
    /// `scram-sha-512`: a generated password (Secret key `password`, and `sasl.jaas.config`);
    /// `tls`: a certificate the clients CA signs, subject `CN=<name>` (`user.crt`, `user.key`).
    #[serde(rename = "type")]
    pub type_: super::AuthenticationType,
    /// `scram-sha-512` only: the password to use instead of a generated one, from a key of
    /// another Secret in the namespace. The user's own Secret gets a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<UserPassword>,
}

/// Why a KafkaUser with a password and another authentication type is refused.
pub const PASSWORD_NEEDS_SCRAM: &str = "authentication.password is only for type scram-sha-512";

/// `spec.authentication.password`: `{valueFrom: {secretKeyRef: {name, key}}}`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UserPassword {
    pub value_from: PasswordSource,
}

/// Where a given password lives.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PasswordSource {
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the KafkaUser's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretKeyRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// `spec.authorization`: `{type: simple, acls: [...]}`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct UserAuthorization {
    /// `simple`: Kafka's ACLs.
    #[serde(rename = "type")]
    pub type_: super::AuthorizationType,
    /// The user's ACLs; any other ACL of the user's principal is removed.
    #[serde(default)]
    pub acls: Vec<AclRule>,
}

/// One ACL rule of a user, Strimzi's shape.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct AclRule {
    pub resource: AclRuleResource,
    /// Kafka's operations: Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// AlterConfigs, DescribeConfigs, IdempotentWrite, All.
    #[schemars(length(min = 1))]
    pub operations: Vec<AclRuleOperation>,
    /// The client address the rule applies to; `*` (the default) for any.
    #[serde(default = "any_host")]
    pub host: String,
    /// `allow` (the default) or `deny`; a deny wins over any allow.
    #[serde(rename = "type", default)]
    pub type_: AclRuleType,
}

fn any_host() -> String {
    WILDCARD.to_string()
}

/// What an ACL rule is about.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.type == 'cluster' ? !has(self.name) : has(self.name)").message("resource.name is required, except for type cluster (which has none)"),
)]
#[serde(rename_all = "camelCase")]
pub struct AclRuleResource {
    /// `topic`, `group`, `transactionalId` or `cluster`.
    #[serde(rename = "type")]
    pub type_: AclResourceType,
    /// The resource's name, `*` for all of them; none for `cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249))]
    pub name: Option<String>,
    /// `literal` (the default): exactly the name; `prefix`: every name that starts with it.
    #[serde(default)]
    pub pattern_type: AclPatternType,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AclResourceType {
    Topic,
    Group,
    TransactionalId,
    Cluster,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum AclPatternType {
    #[default]
    Literal,
    Prefix,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum AclRuleType {
    #[default]
    Allow,
    Deny,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclRuleOperation {
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    AlterConfigs,
    DescribeConfigs,
    IdempotentWrite,
    All,
}

impl AclRuleOperation {
    fn kafka(self) -> AclOperation {
        match self {
            AclRuleOperation::Read => AclOperation::Read,
            AclRuleOperation::Write => AclOperation::Write,
            AclRuleOperation::Create => AclOperation::Create,
            AclRuleOperation::Delete => AclOperation::Delete,
            AclRuleOperation::Alter => AclOperation::Alter,
            AclRuleOperation::Describe => AclOperation::Describe,
            AclRuleOperation::ClusterAction => AclOperation::ClusterAction,
            AclRuleOperation::AlterConfigs => AclOperation::AlterConfigs,
            AclRuleOperation::DescribeConfigs => AclOperation::DescribeConfigs,
            AclRuleOperation::IdempotentWrite => AclOperation::IdempotentWrite,
            AclRuleOperation::All => AclOperation::All,
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The user's name in Kafka: `<name>` for SCRAM, `CN=<name>` for a certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The Secret with the user's credentials. Always written (null without one), so that the
    /// status merge patch clears it when the user stops having credentials.
    #[serde(default)]
    pub secret: Option<String>,
}

impl KafkaUser {
    /// The user's name in Kafka: `CN=<name>` when it logs in with a certificate (the principal
    /// Kafka's default `ssl.principal.mapping.rules` give it), else `<name>`.
    pub fn username(&self) -> String {
        let name = self.metadata.name.clone().unwrap_or_default();
        match self.spec.authentication.as_ref().map(|a| a.type_) {
            Some(super::AuthenticationType::Tls) => format!("CN={name}"),
            _ => name,
        }
    }

    /// `User:<username>`, the principal its ACLs name.
    pub fn principal(&self) -> String {
        format!("User:{}", self.username())
    }

    /// The ACL bindings `spec.authorization` asks for, one per rule and operation, each once
    /// and sorted. `None` when the spec leaves the user's ACLs alone.
    pub fn acl_bindings(&self) -> Option<Vec<AclBinding>> {
        let authz = self.spec.authorization.as_ref()?;
        let principal = self.principal();
        let mut out: Vec<AclBinding> = authz
            .acls
            .iter()
            .flat_map(|rule| {
                let pattern = rule.resource.pattern();
                let principal = principal.clone();
                rule.operations.iter().map(move |op| AclBinding {
                    pattern: pattern.clone(),
                    principal: principal.clone(),
                    host: rule.host.clone(),
                    operation: op.kafka(),
                    permission: match rule.type_ {
                        AclRuleType::Allow => PermissionType::Allow,
                        AclRuleType::Deny => PermissionType::Deny,
                    },
                })
            })
            .collect();
        out.sort();
        out.dedup();
        Some(out)
    }
}

impl AclRuleResource {
    fn pattern(&self) -> ResourcePattern {
        let (resource_type, name) = match self.type_ {
            AclResourceType::Topic => (ResourceType::Topic, self.name.clone()),
            AclResourceType::Group => (ResourceType::Group, self.name.clone()),
            AclResourceType::TransactionalId => (ResourceType::TransactionalId, self.name.clone()),
            AclResourceType::Cluster => (ResourceType::Cluster, Some(CLUSTER_NAME.to_string())),
        };
        ResourcePattern {
            resource_type,
            name: name.unwrap_or_default(),
            pattern_type: match self.pattern_type {
                AclPatternType::Literal => PatternType::Literal,
                AclPatternType::Prefix => PatternType::Prefixed,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(auth: Option<&str>, acls: serde_json::Value) -> KafkaUser {
        let mut spec = serde_json::json!({"clusterRef": "main", "authorization": {"type": "simple", "acls": acls}});
        if let Some(a) = auth {
            spec["authentication"] = serde_json::json!({ "type": a });
        }
        KafkaUser::new("alice", serde_json::from_value(spec).unwrap())
    }

    #[test]
    fn a_certificate_user_is_named_by_its_common_name() {
        assert_eq!(
            user(Some("tls"), serde_json::json!([])).principal(),
            "User:CN=alice"
        );
        assert_eq!(
            user(Some("scram-sha-512"), serde_json::json!([])).principal(),
            "User:alice"
        );
    }

    #[test]
    fn each_rule_and_operation_becomes_one_binding_with_kafkas_names() {
        let u = user(
            Some("scram-sha-512"),
            serde_json::json!([
                {"resource": {"type": "topic", "name": "orders"}, "operations": ["Write", "Describe"]},
                {"resource": {"type": "group", "name": "app-", "patternType": "prefix"}, "operations": ["Read"], "type": "deny", "host": "10.0.0.1"},
                {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]},
                {"resource": {"type": "topic", "name": "orders"}, "operations": ["Write"]}
            ]),
        );
        let b = u.acl_bindings().unwrap();
        assert_eq!(b.len(), 4, "{b:?}");
        let topic: Vec<_> = b
            .iter()
            .filter(|b| b.pattern.resource_type == ResourceType::Topic)
            .map(|b| {
                (
                    b.pattern.name.as_str(),
                    b.operation,
                    b.permission,
                    b.host.as_str(),
                )
            })
            .collect();
        assert_eq!(
            topic,
            [
                ("orders", AclOperation::Write, PermissionType::Allow, "*"),
                ("orders", AclOperation::Describe, PermissionType::Allow, "*"),
            ]
        );
        let group = b
            .iter()
            .find(|b| b.pattern.resource_type == ResourceType::Group)
            .unwrap();
        assert_eq!(group.pattern.pattern_type, PatternType::Prefixed);
        assert_eq!(group.permission, PermissionType::Deny);
        assert_eq!(group.host, "10.0.0.1");
        let cluster = b
            .iter()
            .find(|b| b.pattern.resource_type == ResourceType::Cluster)
            .unwrap();
        assert_eq!(cluster.pattern.name, CLUSTER_NAME);
        assert!(b
            .iter()
            .all(|b| b.principal == "User:alice" && b.validate().is_ok()));
    }

    #[test]
    fn no_authorization_leaves_acls_alone() {
        let mut u = user(None, serde_json::json!([]));
        assert_eq!(u.acl_bindings(), Some(vec![]));
        u.spec.authorization = None;
        assert_eq!(u.acl_bindings(), None);
    }
}
