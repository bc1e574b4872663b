//! ACL bindings and filters to and from Kafka's CreateAcls, DescribeAcls and DeleteAcls
//! messages, and the users of AlterUserScramCredentials, so the broker and the controller read
//! and answer them the same way.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::DeleteAclsMatchingAcl;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{AlterUserScramCredentialsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;

use super::acl::{
    AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The binding a CreateAcls creation asks for.
pub fn binding_of(c: &AclCreation) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_code(c.resource_type),
            name: c.resource_name.to_string(),
            pattern_type: PatternType::from_code(c.resource_pattern_type),
        },
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: AclOperation::from_code(c.operation),
        permission: PermissionType::from_code(c.permission_type),
    }
}

/// The creation that asks for `b` (the broker forwards CreateAcls in this form).
pub fn creation_of(b: &AclBinding) -> AclCreation {
    AclCreation::default()
        .with_resource_type(b.pattern.resource_type.code())
        .with_resource_name(s(&b.pattern.name))
        .with_resource_pattern_type(b.pattern.pattern_type.code())
        .with_principal(s(&b.principal))
        .with_host(s(&b.host))
        .with_operation(b.operation.code())
        .with_permission_type(b.permission.code())
}

/// A DeleteAcls filter.
pub fn delete_filter(f: &DeleteAclsFilter) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: ResourceType::from_code(f.resource_type_filter),
        name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
        pattern_type: PatternType::from_code(f.pattern_type_filter),
        principal: f.principal_filter.as_ref().map(|n| n.to_string()),
        host: f.host_filter.as_ref().map(|n| n.to_string()),
        operation: AclOperation::from_code(f.operation),
        permission: PermissionType::from_code(f.permission_type),
    }
}

/// A DescribeAcls request's filter.
pub fn describe_filter(r: &DescribeAclsRequest) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: ResourceType::from_code(r.resource_type_filter),
        name: r.resource_name_filter.as_ref().map(|n| n.to_string()),
        pattern_type: PatternType::from_code(r.pattern_type_filter),
        principal: r.principal_filter.as_ref().map(|n| n.to_string()),
        host: r.host_filter.as_ref().map(|n| n.to_string()),
        operation: AclOperation::from_code(r.operation),
        permission: PermissionType::from_code(r.permission_type),
    }
}

/// One ACL as DeleteAcls reports it removed.
pub fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(b.pattern.resource_type.code())
        .with_resource_name(s(&b.pattern.name))
        .with_pattern_type(b.pattern.pattern_type.code())
        .with_principal(s(&b.principal))
        .with_host(s(&b.host))
        .with_operation(b.operation.code())
        .with_permission_type(b.permission.code())
}

/// The ACL a controller reported removed, read back.
pub fn binding_of_matching(m: &DeleteAclsMatchingAcl) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_code(m.resource_type),
            name: m.resource_name.to_string(),
            pattern_type: PatternType::from_code(m.pattern_type),
        },
        principal: m.principal.to_string(),
        host: m.host.to_string(),
        operation: AclOperation::from_code(m.operation),
        permission: PermissionType::from_code(m.permission_type),
    }
}

/// Each name once, in the order of its first appearance.
pub fn unique_names(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// The users an AlterUserScramCredentials request names, each once (deletions first), in the
/// order its per-user results are answered.
pub fn scram_users(req: &AlterUserScramCredentialsRequest) -> Vec<String> {
    unique_names(
        req.deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(req.upsertions.iter().map(|u| u.name.to_string())),
    )
}

/// DescribeAcls' answer: the bindings grouped by resource pattern (they come sorted, so each
/// pattern's bindings are together).
pub fn describe_resources(bindings: &[AclBinding]) -> Vec<DescribeAclsResource> {
    let mut out: Vec<DescribeAclsResource> = Vec::new();
    let mut last: Option<&ResourcePattern> = None;
    for b in bindings {
        let entry = AclDescription::default()
            .with_principal(s(&b.principal))
            .with_host(s(&b.host))
            .with_operation(b.operation.code())
            .with_permission_type(b.permission.code());
        match out.last_mut() {
            Some(r) if last == Some(&b.pattern) => r.acls.push(entry),
            _ => out.push(
                DescribeAclsResource::default()
                    .with_resource_type(b.pattern.resource_type.code())
                    .with_resource_name(s(&b.pattern.name))
                    .with_pattern_type(b.pattern.pattern_type.code())
                    .with_acls(vec![entry]),
            ),
        }
        last = Some(&b.pattern);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(name: &str, op: AclOperation) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: name.into(),
                pattern_type: PatternType::Prefixed,
            },
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission: PermissionType::Allow,
        }
    }

    #[test]
    fn a_binding_survives_the_wire_both_ways() {
        let b = binding("orders", AclOperation::Write);
        assert_eq!(binding_of(&creation_of(&b)), b);
        assert_eq!(binding_of_matching(&matching_acl(&b)), b);
    }

    #[test]
    fn names_are_kept_once_in_their_first_order() {
        let names = ["b", "a", "b", "c", "a"].map(String::from);
        assert_eq!(unique_names(names), vec!["b", "a", "c"]);
    }

    #[test]
    fn described_bindings_are_grouped_by_pattern() {
        let mut all = vec![
            binding("a", AclOperation::Read),
            binding("b", AclOperation::Read),
            binding("a", AclOperation::Write),
        ];
        all.sort();
        let r = describe_resources(&all);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].resource_name.as_str(), "a");
        assert_eq!(r[0].acls.len(), 2);
        assert_eq!(r[1].acls.len(), 1);
    }
}
