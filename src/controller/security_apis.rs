//! The controller's side of the security and tenancy admin APIs brokers forward: CreateAcls,
//! DeleteAcls, AlterUserScramCredentials and AlterClientQuotas, answered with what the active
//! controller committed.

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::*;

use super::apis::{msg, ControllerNode};
use super::client_quotas::QuotaAlteration;
use super::scram::ScramChange;
use super::ControllerError;
use crate::protocol::client_quotas;
use crate::protocol::str_bytes as s;
use crate::security::wire;

/// A whole request refused (no active controller here, a failed commit): every item gets it.
fn refused_all<T>(n: usize, e: &ControllerError, item: impl Fn(&ControllerError) -> T) -> Vec<T> {
    (0..n).map(|_| item(e)).collect()
}

impl ControllerNode {
    pub(super) async fn create_acls(&self, r: CreateAclsRequest) -> CreateAclsResponse {
        let bindings = r.creations.iter().map(wire::binding_of).collect::<Vec<_>>();
        let result = |e: &ControllerError| {
            AclCreationResult::default()
                .with_error_code(e.code)
                .with_error_message(msg(e.message.clone()))
        };
        let results = match self.controller.create_acls(bindings.clone()).await {
            Ok(each) => each
                .iter()
                .map(|r| {
                    r.as_ref()
                        .map_or_else(result, |_| AclCreationResult::default())
                })
                .collect(),
            Err(e) => refused_all(bindings.len(), &e, result),
        };
        CreateAclsResponse::default().with_results(results)
    }

    pub(super) async fn delete_acls(&self, r: DeleteAclsRequest) -> DeleteAclsResponse {
        let filters = r
            .filters
            .iter()
            .map(wire::delete_filter)
            .collect::<Vec<_>>();
        let result = |e: &ControllerError| {
            DeleteAclsFilterResult::default()
                .with_error_code(e.code)
                .with_error_message(msg(e.message.clone()))
        };
        let results = match self.controller.delete_acls(filters.clone()).await {
            Ok(each) => each
                .iter()
                .map(|r| match r {
                    Ok(removed) => DeleteAclsFilterResult::default()
                        .with_matching_acls(removed.iter().map(wire::matching_acl).collect()),
                    Err(e) => result(e),
                })
                .collect(),
            Err(e) => refused_all(filters.len(), &e, result),
        };
        DeleteAclsResponse::default().with_filter_results(results)
    }

    pub(super) async fn alter_scram_credentials(
        &self,
        r: AlterUserScramCredentialsRequest,
    ) -> AlterUserScramCredentialsResponse {
        let mut changes: Vec<ScramChange> = r
            .deletions
            .iter()
            .map(|d| ScramChange::Delete {
                user: d.name.to_string(),
                mechanism: d.mechanism,
            })
            .collect();
        changes.extend(r.upsertions.iter().map(|u| ScramChange::Upsert {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        }));
        let users = wire::scram_users(&r);
        let result = |user: &str, e: Option<&ControllerError>| {
            AlterUserScramCredentialsResult::default()
                .with_user(s(user.to_string()))
                .with_error_code(e.map_or(0, |e| e.code))
                .with_error_message(e.and_then(|e| msg(e.message.clone())))
        };
        let results = match self.controller.alter_scram_credentials(changes).await {
            Ok(each) => each
                .iter()
                .map(|(user, r)| result(user, r.as_ref().err()))
                .collect(),
            Err(e) => users.iter().map(|u| result(u, Some(&e))).collect(),
        };
        AlterUserScramCredentialsResponse::default().with_results(results)
    }

    pub(super) async fn alter_client_quotas(
        &self,
        r: AlterClientQuotasRequest,
    ) -> AlterClientQuotasResponse {
        let alterations: Vec<QuotaAlteration> = r
            .entries
            .iter()
            .map(|e| {
                let (entity, ops) = client_quotas::alteration(e);
                QuotaAlteration { entity, ops }
            })
            .collect();
        let results = match self
            .controller
            .alter_client_quotas(alterations, r.validate_only)
            .await
        {
            Ok(each) => each,
            Err(e) => refused_all(r.entries.len(), &e, |e| Err(e.clone())),
        };
        let entries = r
            .entries
            .iter()
            .zip(results)
            .map(|(e, result)| match result {
                Ok(()) => client_quotas::answer(e, 0, None),
                Err(err) => client_quotas::answer(e, err.code, msg(err.message)),
            })
            .collect();
        AlterClientQuotasResponse::default().with_entries(entries)
    }
}
