//! The admin calls for users and ACLs: SCRAM credentials (Describe/AlterUserScramCredentials)
//! and ACL bindings (Describe/Create/DeleteAcls), as `kafka-configs` and `kafka-acls` send them.

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
};

use super::{check, AdminClient, PerResourceErrors};
use crate::client::ClientError;
use crate::protocol::{errors, str_bytes};
use crate::security::acl::{
    AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use crate::security::sasl::scram::random_nonce;
use crate::security::sasl::ScramMechanism;
use crate::security::wire;

impl AdminClient {
    /// The SCRAM mechanisms `user` has a credential for (none when the user has none).
    pub async fn describe_scram_mechanisms(
        &self,
        user: &str,
    ) -> Result<Vec<ScramMechanism>, ClientError> {
        let req = DescribeUserScramCredentialsRequest::default()
            .with_users(Some(vec![UserName::default().with_name(str_bytes(user))]));
        let resp = self.any_call(&req).await?;
        check(
            "DescribeUserScramCredentials",
            resp.error_code,
            resp.error_message,
        )?;
        let Some(result) = resp.results.into_iter().find(|r| r.user.as_str() == user) else {
            return Ok(Vec::new());
        };
        if result.error_code == errors::RESOURCE_NOT_FOUND {
            return Ok(Vec::new());
        }
        check(
            "DescribeUserScramCredentials",
            result.error_code,
            result.error_message,
        )?;
        Ok(result
            .credential_infos
            .iter()
            .filter_map(|c| ScramMechanism::from_type_code(c.mechanism))
            .collect())
    }

    /// Sets `user`'s `mechanism` credential to `password`: salted here with a fresh salt and
    /// Kafka's default 4096 iterations, as `kafka-configs --add-config 'SCRAM-SHA-512=[…]'` does.
    pub async fn upsert_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
    ) -> Result<(), ClientError> {
        let salt = random_nonce().into_bytes();
        let iterations = ScramMechanism::DEFAULT_ITERATIONS;
        let salted = mechanism.salted_password(password, &salt, iterations);
        let req = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(str_bytes(user))
                .with_mechanism(mechanism.type_code())
                .with_iterations(iterations)
                .with_salt(salt.into())
                .with_salted_password(salted.into()),
        ]);
        self.alter_scram(user, &req).await
    }

    /// Removes `user`'s credentials for `mechanisms`; one that is already gone is not an error.
    pub async fn delete_scram_credentials(
        &self,
        user: &str,
        mechanisms: &[ScramMechanism],
    ) -> Result<(), ClientError> {
        if mechanisms.is_empty() {
            return Ok(());
        }
        let deletions = mechanisms
            .iter()
            .map(|m| {
                ScramCredentialDeletion::default()
                    .with_name(str_bytes(user))
                    .with_mechanism(m.type_code())
            })
            .collect();
        let req = AlterUserScramCredentialsRequest::default().with_deletions(deletions);
        match self.alter_scram(user, &req).await {
            Err(e) if e.code() == Some(errors::RESOURCE_NOT_FOUND) => Ok(()),
            other => other,
        }
    }

    async fn alter_scram(
        &self,
        user: &str,
        req: &AlterUserScramCredentialsRequest,
    ) -> Result<(), ClientError> {
        let resp = self.controller_call(req).await?;
        let result = resp
            .results
            .into_iter()
            .find(|r| r.user.as_str() == user)
            .ok_or_else(|| super::missing("AlterUserScramCredentials", user))?;
        check(
            "AlterUserScramCredentials",
            result.error_code,
            result.error_message,
        )
    }

    /// Every ACL binding `filter` matches.
    pub async fn describe_acls(
        &self,
        filter: &AclBindingFilter,
    ) -> Result<Vec<AclBinding>, ClientError> {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(filter.resource_type.code())
            .with_resource_name_filter(filter.name.as_deref().map(str_bytes))
            .with_pattern_type_filter(filter.pattern_type.code())
            .with_principal_filter(filter.principal.as_deref().map(str_bytes))
            .with_host_filter(filter.host.as_deref().map(str_bytes))
            .with_operation(filter.operation.code())
            .with_permission_type(filter.permission.code());
        let resp = self.any_call(&req).await?;
        check("DescribeAcls", resp.error_code, resp.error_message)?;
        let mut out = Vec::new();
        for r in resp.resources {
            let pattern = ResourcePattern {
                resource_type: ResourceType::from_code(r.resource_type),
                name: r.resource_name.to_string(),
                pattern_type: PatternType::from_code(r.pattern_type),
            };
            out.extend(r.acls.into_iter().map(|a| AclBinding {
                pattern: pattern.clone(),
                principal: a.principal.to_string(),
                host: a.host.to_string(),
                operation: AclOperation::from_code(a.operation),
                permission: PermissionType::from_code(a.permission_type),
            }));
        }
        Ok(out)
    }

    /// Stores `bindings` (CreateAcls); the first refused one is the error.
    pub async fn create_acls(&self, bindings: &[AclBinding]) -> Result<(), ClientError> {
        if bindings.is_empty() {
            return Ok(());
        }
        let req = CreateAclsRequest::default()
            .with_creations(bindings.iter().map(wire::creation_of).collect());
        let resp = self.controller_call(&req).await?;
        for r in resp.results {
            check("CreateAcls", r.error_code, r.error_message)?;
        }
        Ok(())
    }

    /// Removes every binding that one of `filters` matches (DeleteAcls); returns those removed.
    pub async fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<AclBinding>, ClientError> {
        if filters.is_empty() {
            return Ok(Vec::new());
        }
        let req =
            DeleteAclsRequest::default().with_filters(filters.iter().map(delete_filter).collect());
        let resp = self.controller_call(&req).await?;
        let mut removed = Vec::new();
        for r in resp.filter_results {
            check("DeleteAcls", r.error_code, r.error_message)?;
            removed.extend(r.matching_acls.iter().map(wire::binding_of_matching));
        }
        Ok(removed)
    }
}

fn delete_filter(f: &AclBindingFilter) -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_type_filter(f.resource_type.code())
        .with_resource_name_filter(f.name.as_deref().map(str_bytes))
        .with_pattern_type_filter(f.pattern_type.code())
        .with_principal_filter(f.principal.as_deref().map(str_bytes))
        .with_host_filter(f.host.as_deref().map(str_bytes))
        .with_operation(f.operation.code())
        .with_permission_type(f.permission.code())
}

impl PerResourceErrors for kafka_protocol::messages::AlterUserScramCredentialsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        self.results.iter().map(|r| r.error_code)
    }
}

impl PerResourceErrors for kafka_protocol::messages::CreateAclsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        self.results.iter().map(|r| r.error_code)
    }
}

impl PerResourceErrors for kafka_protocol::messages::DeleteAclsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        self.filter_results.iter().map(|r| r.error_code)
    }
}
