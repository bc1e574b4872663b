//! The ACL APIs: DescribeAcls answered from the ACLs of the published image, CreateAcls and
//! DeleteAcls forwarded to the active controller (which writes them into the metadata log), each
//! asked of the authorizer first, as Kafka's AclApis does.

use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::*;

use super::auth::{Action, Session};
use super::controller_channel::is_not_controller;
use super::{msg, Broker, Outcome};
use crate::protocol::errors;
use crate::security::acl::{AclBinding, AclOperation, UNKNOWN_FILTER};
use crate::security::wire;
use kafka_protocol::protocol::StrBytes;

/// Kafka's answer when no authorizer is configured.
const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

/// An error message, or none (the client prints its default) when empty.
fn message(text: &str) -> Option<StrBytes> {
    (!text.is_empty()).then(|| msg(text)).flatten()
}

/// Why `session` may not use the ACL APIs for `op` (DESCRIBE or ALTER on the cluster): no
/// authorizer is configured (SECURITY_DISABLED), or it lacks the right.
fn refusal(broker: &Broker, session: &Session, op: AclOperation) -> Option<(i16, &'static str)> {
    if broker.authorizer.is_none() {
        return Some((errors::SECURITY_DISABLED, NO_AUTHORIZER));
    }
    (!broker.authorize(session, Action::cluster(op)))
        .then_some((errors::CLUSTER_AUTHORIZATION_FAILED, ""))
}

/// DescribeAcls: the ACLs the filter matches, for a principal that may DESCRIBE the cluster.
pub fn describe_acls(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let refused = |code, text: &str| {
        DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(message(text))
    };
    if let Some((code, text)) = refusal(broker, session, AclOperation::Describe) {
        return refused(code, text);
    }
    let Some(decisions) = broker.acl_decisions() else {
        return refused(errors::SECURITY_DISABLED, NO_AUTHORIZER);
    };
    let filter = wire::describe_filter(&req);
    if filter.is_unknown() {
        return refused(errors::INVALID_REQUEST, UNKNOWN_FILTER);
    }
    DescribeAclsResponse::default()
        .with_resources(wire::describe_resources(&decisions.acls(&filter)))
}

/// CreateAcls, forwarded; answered once this broker's image holds the new ACLs.
pub fn create_acls(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: CreateAclsRequest,
) -> Outcome<CreateAclsResponse> {
    let n = req.creations.len();
    let all = move |code: i16, text: &str| {
        let r = AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(message(text));
        CreateAclsResponse::default().with_results(vec![r; n])
    };
    if let Some((code, text)) = refusal(broker, session, AclOperation::Alter) {
        return Outcome::Now(all(code, text));
    }
    let wanted: Vec<AclBinding> = req.creations.iter().map(wire::binding_of).collect();
    super::admin::forward(
        broker,
        version,
        req,
        |r| r.results.iter().any(|c| is_not_controller(c.error_code)),
        move |code| all(code, ""),
        move |broker, resp| async move {
            let created: Vec<&AclBinding> = wanted
                .iter()
                .zip(&resp.results)
                .filter(|(_, r)| r.error_code == errors::NONE)
                .map(|(b, _)| b)
                .collect();
            broker
                .wait_for_image(|img| {
                    let acls = img.security().acls();
                    created.iter().all(|b| acls.values().any(|a| a == *b))
                })
                .await;
            resp
        },
    )
}

/// DeleteAcls, forwarded; answered once this broker's image no longer holds what was removed.
pub fn delete_acls(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: DeleteAclsRequest,
) -> Outcome<DeleteAclsResponse> {
    let n = req.filters.len();
    let all = move |code: i16, text: &str| {
        let r = DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(message(text));
        DeleteAclsResponse::default().with_filter_results(vec![r; n])
    };
    if let Some((code, text)) = refusal(broker, session, AclOperation::Alter) {
        return Outcome::Now(all(code, text));
    }
    super::admin::forward(
        broker,
        version,
        req,
        |r| {
            r.filter_results
                .iter()
                .any(|f| is_not_controller(f.error_code))
        },
        move |code| all(code, ""),
        |broker, resp| async move {
            let removed: Vec<AclBinding> = resp
                .filter_results
                .iter()
                .flat_map(|f| f.matching_acls.iter().map(wire::binding_of_matching))
                .collect();
            broker
                .wait_for_image(|img| {
                    let acls = img.security().acls();
                    removed.iter().all(|b| !acls.values().any(|a| a == b))
                })
                .await;
            resp
        },
    )
}
