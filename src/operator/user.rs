//! The KafkaUser reconciler: the user's credentials in a Secret of its name (a generated SCRAM
//! password, or a certificate the clients CA signs), its SCRAM credential and ACLs in Kafka kept
//! as the spec says, and both removed from Kafka through a finalizer when the KafkaUser goes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::Event as Finalizer;
use kube::{Resource, ResourceExt};
use rand::distributions::{Alphanumeric, DistString};
use serde_json::json;

use super::certs::{self, CA_CERT};
use super::crd::{AuthenticationType, KafkaCluster, KafkaUser, KafkaUserStatus, USER_FINALIZER};
use super::kafka::{AdminConnector, AdminError, UserAdmin};
use super::resources::Names;
use super::status::{self, set_condition};
use super::{Context, Error, FIELD_MANAGER};
use crate::security::acl::AclBinding;
use crate::security::sasl::ScramMechanism;

/// The Secret key of a SCRAM user's password.
pub const PASSWORD: &str = "password";
/// The Secret key of a ready `sasl.jaas.config` line for a SCRAM user.
pub const JAAS_CONFIG: &str = "sasl.jaas.config";
/// The Secret keys of a certificate user's certificate and key.
pub const USER_CERT: &str = "user.crt";
pub const USER_KEY: &str = "user.key";
/// Length of a generated password (alphanumeric: about 190 bits).
const PASSWORD_LEN: usize = 32;
/// How long a user certificate is valid.
const USER_CERT_DAYS: i64 = 365;

/// The user's credential as the reconciler hands it to Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A SCRAM-SHA-512 password; `fresh` when it was just generated, so that any credential
    /// Kafka holds for the user is stale.
    Scram { password: String, fresh: bool },
    /// A certificate, or no credential at all: nothing to store in Kafka.
    None,
}

/// Makes Kafka's view of `ku` match its spec: the SCRAM credential (set when fresh or missing,
/// removed when the user no longer logs in with SCRAM) and, when the spec has an authorization,
/// exactly its ACLs. `previous` is the username an earlier pass managed; when it differs
/// (the authentication type changed), that user's credentials and ACLs are removed first.
/// Returns one (reason, note) per change, for events.
pub async fn sync_user<A: UserAdmin>(
    admin: &A,
    ku: &KafkaUser,
    credential: &Credential,
    previous: Option<&str>,
) -> Result<Vec<(String, String)>, AdminError> {
    let username = ku.username();
    let mut actions = Vec::new();
    if let Some(prev) = previous.filter(|p| *p != username) {
        forget_user(admin, prev).await?;
        actions.push((
            "UsernameChanged".into(),
            format!("removed the credentials and ACLs of {prev}, now {username}"),
        ));
    }
    if let Some(action) = sync_credential(admin, &username, credential).await? {
        actions.push(action);
    }
    if let Some(desired) = ku.acl_bindings() {
        if let Some(action) = sync_acls(admin, &ku.principal(), &desired).await? {
            actions.push(action);
        }
    }
    Ok(actions)
}

async fn sync_credential<A: UserAdmin>(
    admin: &A,
    username: &str,
    credential: &Credential,
) -> Result<Option<(String, String)>, AdminError> {
    let have = admin.scram_mechanisms(username).await?;
    match credential {
        Credential::Scram { password, fresh } => {
            if !fresh && have.contains(&ScramMechanism::Sha512) {
                return Ok(None);
            }
            admin
                .set_scram_password(username, ScramMechanism::Sha512, password)
                .await?;
            Ok(Some((
                "CredentialSet".into(),
                format!("set the SCRAM-SHA-512 credential of {username}"),
            )))
        }
        Credential::None if have.is_empty() => Ok(None),
        Credential::None => {
            admin.delete_scram(username, &have).await?;
            Ok(Some((
                "CredentialRemoved".into(),
                format!("removed the SCRAM credentials of {username}"),
            )))
        }
    }
}

/// Creates the ACLs of `principal` that `desired` adds and deletes those it lacks.
async fn sync_acls<A: UserAdmin>(
    admin: &A,
    principal: &str,
    desired: &[AclBinding],
) -> Result<Option<(String, String)>, AdminError> {
    let current = admin.acls_of(principal).await?;
    let add: Vec<AclBinding> = desired
        .iter()
        .filter(|b| !current.contains(b))
        .cloned()
        .collect();
    let remove: Vec<AclBinding> = current
        .iter()
        .filter(|b| !desired.contains(b))
        .cloned()
        .collect();
    if add.is_empty() && remove.is_empty() {
        return Ok(None);
    }
    admin.create_acls(&add).await?;
    admin.delete_acls(&remove).await?;
    Ok(Some((
        "AclsChanged".into(),
        format!(
            "ACLs of {principal}: {} added, {} removed",
            add.len(),
            remove.len()
        ),
    )))
}

/// Removes every SCRAM credential and every ACL of `username`.
pub async fn forget_user<A: UserAdmin>(admin: &A, username: &str) -> Result<(), AdminError> {
    let have = admin.scram_mechanisms(username).await?;
    admin.delete_scram(username, &have).await?;
    let acls = admin.acls_of(&format!("User:{username}")).await?;
    admin.delete_acls(&acls).await
}

/// The `sasl.jaas.config` a client of this user sets.
pub fn jaas_config(username: &str, password: &str) -> String {
    format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"{username}\" password=\"{password}\";"
    )
}

/// Reconciles one KafkaUser (controller entry point), in a span naming it with a trace id.
#[tracing::instrument(skip_all, fields(
    namespace = ku.metadata.namespace.as_deref().unwrap_or(""),
    name = ku.metadata.name.as_deref().unwrap_or(""),
    trace_id = %super::trace_id(),
))]
pub async fn reconcile<C: AdminConnector>(
    ku: Arc<KafkaUser>,
    ctx: Arc<Context<C>>,
) -> Result<Action, Error> {
    let pass_ctx = ctx.clone();
    super::finalized(&ctx, ku, USER_FINALIZER, |api, event| async move {
        match event {
            Finalizer::Apply(ku) => apply(&ku, &pass_ctx, &api).await,
            Finalizer::Cleanup(ku) => cleanup(&ku, &pass_ctx).await,
        }
    })
    .await
}

/// Outcome of one pass, written to status.
struct Outcome {
    ready: bool,
    reason: String,
    message: String,
    /// Set once the user is in Kafka under this name.
    username: Option<String>,
    secret: Option<String>,
    requeue: Duration,
}

impl Outcome {
    fn not_ready(reason: &str, message: String, requeue: Duration) -> Outcome {
        Outcome {
            ready: false,
            reason: reason.into(),
            message,
            username: None,
            secret: None,
            requeue,
        }
    }
}

async fn apply<C: AdminConnector>(
    ku: &KafkaUser,
    ctx: &Context<C>,
    api: &Api<KafkaUser>,
) -> Result<Action, Error> {
    let outcome = decide(ku, ctx).await?;
    if !outcome.ready {
        ctx.event(ku, EventType::Warning, &outcome.reason, &outcome.message)
            .await;
    }
    write_status(ku, &outcome, api).await?;
    Ok(Action::requeue(outcome.requeue))
}

async fn decide<C: AdminConnector>(ku: &KafkaUser, ctx: &Context<C>) -> Result<Outcome, Error> {
    let ns = ku.namespace().unwrap_or_default();
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cluster) = clusters.get_opt(&ku.spec.cluster_ref).await? else {
        return Ok(Outcome::not_ready(
            "ClusterNotFound",
            format!(
                "KafkaCluster {} not found in namespace {ns}",
                ku.spec.cluster_ref
            ),
            Duration::from_secs(30),
        ));
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let credential = match ku.spec.authentication.as_ref().map(|a| a.type_) {
        Some(AuthenticationType::ScramSha512) => ensure_password(ku, &secrets).await?,
        Some(AuthenticationType::Tls) => {
            if !ensure_certificate(ku, &cluster, &secrets).await? {
                return Ok(Outcome::not_ready(
                    "ClientsCaNotFound",
                    format!(
                        "KafkaCluster {} has no clients CA yet: a user with authentication \
                         type tls needs a cluster with a TLS listener",
                        ku.spec.cluster_ref
                    ),
                    Duration::from_secs(30),
                ));
            }
            Credential::None
        }
        None => Credential::None,
    };
    let admin = match ctx.connector.connect(&ctx.bootstrap_of(&cluster)?).await {
        Ok(a) => a,
        Err(e) => {
            return Ok(Outcome::not_ready(
                &e.reason(),
                e.message,
                Duration::from_secs(30),
            ))
        }
    };
    let previous = ku.status.as_ref().and_then(|s| s.username.as_deref());
    Ok(match sync_user(&admin, ku, &credential, previous).await {
        Ok(actions) => {
            for (reason, note) in &actions {
                ctx.event(ku, EventType::Normal, reason, note).await;
            }
            Outcome {
                ready: true,
                reason: "UserReady".into(),
                message: format!("user {} matches the spec", ku.username()),
                username: Some(ku.username()),
                secret: ku.spec.authentication.as_ref().map(|_| ku.name_any()),
                requeue: ctx.resync,
            }
        }
        Err(e) => Outcome::not_ready(&e.reason(), e.message.clone(), Duration::from_secs(60)),
    })
}

/// The user's Secret, owned by the KafkaUser (so it goes with it), with `entries`.
fn user_secret(ku: &KafkaUser, entries: BTreeMap<String, String>) -> Result<Secret, Error> {
    let owner = ku
        .controller_owner_ref(&())
        .ok_or(Error::Missing("metadata.uid"))?;
    let mut s = Secret::default();
    s.metadata.name = Some(ku.name_any());
    s.metadata.namespace = ku.namespace();
    s.metadata.owner_references = Some(vec![owner]);
    s.metadata.labels = Some(BTreeMap::from([
        (
            super::crd::CLUSTER_LABEL.to_string(),
            ku.spec.cluster_ref.clone(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            FIELD_MANAGER.to_string(),
        ),
        (
            "kafka.evenkeel.dev/kind".to_string(),
            "KafkaUser".to_string(),
        ),
    ]));
    certs::set_entries(&mut s, entries);
    Ok(s)
}

async fn apply_secret(api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &pp, &Patch::Apply(secret)).await?;
    Ok(())
}

/// The user's password: the one its Secret holds, or a new one written to the Secret first (so
/// a password Kafka accepts is never one nobody can read).
async fn ensure_password(ku: &KafkaUser, api: &Api<Secret>) -> Result<Credential, Error> {
    let username = ku.username();
    let existing = api
        .get_opt(&ku.name_any())
        .await?
        .map(|s| certs::secret_text(&s))
        .unwrap_or_default();
    if let Some(password) = existing.get(PASSWORD).filter(|p| !p.is_empty()) {
        let jaas = jaas_config(&username, password);
        if existing.get(JAAS_CONFIG) != Some(&jaas) {
            let entries = password_entries(&username, password);
            apply_secret(api, &user_secret(ku, entries)?).await?;
        }
        return Ok(Credential::Scram {
            password: password.clone(),
            fresh: false,
        });
    }
    let password = Alphanumeric.sample_string(&mut rand::thread_rng(), PASSWORD_LEN);
    apply_secret(
        api,
        &user_secret(ku, password_entries(&username, &password))?,
    )
    .await?;
    Ok(Credential::Scram {
        password,
        fresh: true,
    })
}

fn password_entries(username: &str, password: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (PASSWORD.to_string(), password.to_string()),
        (JAAS_CONFIG.to_string(), jaas_config(username, password)),
    ])
}

/// The user's certificate: kept while the clients CA that signed it is the cluster's and it
/// has more than `RENEWAL_DAYS` to live, else issued anew (subject `CN=<name>`). False when the cluster has no clients CA.
async fn ensure_certificate(
    ku: &KafkaUser,
    cluster: &KafkaCluster,
    api: &Api<Secret>,
) -> Result<bool, Error> {
    let names = Names::of(cluster)?;
    let Some(ca) = certs::clients_ca(api, &names).await? else {
        return Ok(false);
    };
    let existing = api
        .get_opt(&ku.name_any())
        .await?
        .map(|s| certs::secret_text(&s))
        .unwrap_or_default();
    let current = existing.get(USER_CERT).is_some_and(|c| {
        existing.get(CA_CERT) == Some(&ca.cert_pem)
            && certs::signed_by(c, &ca.cert_pem)
            && !certs::expires_within(c, certs::RENEWAL_DAYS)
    }) && existing.contains_key(USER_KEY);
    if current {
        return Ok(true);
    }
    let issued = ca.sign_user(&ku.name_any(), USER_CERT_DAYS)?;
    let entries = BTreeMap::from([
        (CA_CERT.to_string(), ca.cert_pem.clone()),
        (USER_CERT.to_string(), issued.cert_pem),
        (USER_KEY.to_string(), issued.key_pem),
    ]);
    apply_secret(api, &user_secret(ku, entries)?).await?;
    Ok(true)
}

async fn write_status(ku: &KafkaUser, o: &Outcome, api: &Api<KafkaUser>) -> Result<(), Error> {
    let now = status::now_rfc3339();
    let generation = ku.metadata.generation;
    let mut st: KafkaUserStatus = ku.status.clone().unwrap_or_default();
    set_condition(
        &mut st.conditions,
        status::READY,
        o.ready,
        &o.reason,
        o.message.clone(),
        generation,
        &now,
    );
    st.observed_generation = generation;
    if let Some(u) = &o.username {
        st.username = Some(u.clone());
        st.secret = o.secret.clone();
    }
    if ku.status.as_ref() == Some(&st) {
        return Ok(());
    }
    api.patch_status(
        &ku.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": st })),
    )
    .await?;
    Ok(())
}

/// The finalizer's pass: the user's credentials and ACLs leave Kafka (its Secret goes with the
/// KafkaUser, its owner). With the cluster gone there is nothing to remove.
async fn cleanup<C: AdminConnector>(ku: &KafkaUser, ctx: &Context<C>) -> Result<Action, Error> {
    let ns = ku.namespace().unwrap_or_default();
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = match clusters.get_opt(&ku.spec.cluster_ref).await? {
        Some(c) if c.metadata.deletion_timestamp.is_none() => c,
        _ => return Ok(Action::await_change()),
    };
    let admin = ctx
        .connector
        .connect(&ctx.bootstrap_of(&cluster)?)
        .await
        .map_err(Error::Kafka)?;
    let mut names = vec![ku.username()];
    if let Some(prev) = ku.status.as_ref().and_then(|s| s.username.clone()) {
        if !names.contains(&prev) {
            names.push(prev);
        }
    }
    for name in &names {
        forget_user(&admin, name).await.map_err(Error::Kafka)?;
    }
    let note = format!("removed the credentials and ACLs of {}", names.join(", "));
    ctx.event(ku, EventType::Normal, "Deleted", &note).await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests;
