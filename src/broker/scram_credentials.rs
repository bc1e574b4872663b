//! The SCRAM credential APIs: DescribeUserScramCredentials answered from the published image
//! (mechanisms and iterations, never keys), AlterUserScramCredentials forwarded to the active
//! controller, each for a principal the authorizer lets DESCRIBE or ALTER the cluster.

use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;

use super::auth::{Action, Session};
use super::controller_channel::is_not_controller;
use super::{msg, Broker, Outcome};
use crate::metadata::image::MetadataImage;
use crate::protocol::errors;
use crate::protocol::str_bytes as s;
use crate::security::acl::AclOperation;
use crate::security::wire;

/// DescribeUserScramCredentials: the users asked for (every user with a credential when none
/// are named), each with its mechanisms and iterations, or RESOURCE_NOT_FOUND.
pub fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !broker.authorize(session, Action::cluster(AclOperation::Describe)) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
    }
    let img = broker.image();
    let users = match &req.users {
        Some(named) if !named.is_empty() => {
            wire::unique_names(named.iter().map(|u| u.name.to_string()))
        }
        _ => wire::unique_names(img.security().scram_credentials().map(|c| c.name.clone())),
    };
    let results = users.iter().map(|u| describe_user(&img, u)).collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

fn describe_user(img: &MetadataImage, user: &str) -> DescribeUserScramCredentialsResult {
    let infos: Vec<CredentialInfo> = img
        .security()
        .scram_credentials()
        .filter(|c| c.name == user)
        .map(|c| {
            CredentialInfo::default()
                .with_mechanism(c.mechanism)
                .with_iterations(c.iterations)
        })
        .collect();
    let base = DescribeUserScramCredentialsResult::default().with_user(s(user.to_string()));
    if infos.is_empty() {
        return base
            .with_error_code(errors::RESOURCE_NOT_FOUND)
            .with_error_message(msg(format!(
                "Attempt to describe a user credential that does not exist: {user}"
            )));
    }
    base.with_credential_infos(infos)
}

/// AlterUserScramCredentials, forwarded; answered once this broker's image shows the change.
pub fn alter(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: AlterUserScramCredentialsRequest,
) -> Outcome<AlterUserScramCredentialsResponse> {
    let users = wire::scram_users(&req);
    let all = move |code: i16| {
        let results = users
            .iter()
            .map(|u| {
                AlterUserScramCredentialsResult::default()
                    .with_user(s(u.clone()))
                    .with_error_code(code)
            })
            .collect();
        AlterUserScramCredentialsResponse::default().with_results(results)
    };
    if !broker.authorize(session, Action::cluster(AclOperation::Alter)) {
        return Outcome::Now(all(errors::CLUSTER_AUTHORIZATION_FAILED));
    }
    let upserts: Vec<(String, i8, i32)> = req
        .upsertions
        .iter()
        .map(|u| (u.name.to_string(), u.mechanism, u.iterations))
        .collect();
    super::admin::forward(
        broker,
        version,
        req,
        |r| r.results.iter().any(|u| is_not_controller(u.error_code)),
        all,
        move |broker, resp| async move {
            let done: Vec<&(String, i8, i32)> = upserts
                .iter()
                .filter(|(u, _, _)| {
                    resp.results
                        .iter()
                        .any(|r| r.user.as_str() == u && r.error_code == errors::NONE)
                })
                .collect();
            broker
                .wait_for_image(|img| {
                    done.iter().all(|(u, m, i)| {
                        img.security()
                            .scram_credential(u, *m)
                            .is_some_and(|c| c.iterations == *i)
                    })
                })
                .await;
            resp
        },
    )
}
