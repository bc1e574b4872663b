//! The KafkaUser reconciler: the user's credentials in a Secret of its name (a generated SCRAM
//! password, or a certificate the clients CA signs), its SCRAM credential and ACLs in Kafka kept
//! as the spec says, and both removed from Kafka through a finalizer when the KafkaUser goes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::Event as Finalizer;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::certs::{self, CA_CERT};
use super::crd::{
    AuthenticationType, KafkaCluster, KafkaUser, KafkaUserStatus, SecretKeyRef, USER_FINALIZER,
};
use super::kafka::{AdminConnector, AdminError, UserAdmin};
use super::resources::Names;
use super::status::{self, set_condition};
use super::{Context, Error, FIELD_MANAGER};
use crate::protocol::errors;
use crate::security::acl::AclBinding;
use crate::security::sasl::ScramMechanism;

/// The Secret key of a SCRAM user's password.
pub const PASSWORD: &str = "password";
/// The Secret key of a ready `sasl.jaas.config` line for a SCRAM user.
pub const JAAS_CONFIG: &str = "sasl.jaas.config";
/// The Secret keys of a certificate user's certificate and key.
pub const USER_CERT: &str = "user.crt";
pub const USER_KEY: &str = "user.key";
/// The Secret keys of a certificate user's PKCS#12 keystore (key, certificate and CA, as Java
/// clients load it) and of the keystore's password, as Strimzi names them.
pub const USER_P12: &str = "user.p12";
pub const USER_PASSWORD: &str = "user.password";
/// How long a user certificate is valid.
const USER_CERT_DAYS: i64 = 365;

/// The user's credential as the reconciler hands it to Kafka.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// The SCRAM-SHA-512 password of the user's Secret; `confirmed` when Kafka was last given
    /// this very password (the Secret records its digest), so it need not be set again while
    /// Kafka still has a credential.
    Scram { password: String, confirmed: bool },
    /// A certificate, or no credential at all: nothing to store in Kafka.
    None,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Scram { confirmed, .. } => f
                .debug_struct("Scram")
                .field("confirmed", confirmed)
                .finish_non_exhaustive(),
            Credential::None => f.write_str("None"),
        }
    }
}

/// Makes Kafka's view of `ku` match its spec: the SCRAM credential (set unless confirmed and
/// present; other mechanisms' credentials removed; all removed when the user no longer logs in
/// with SCRAM) and, when the spec has an authorization, exactly its ACLs. `previous` is the
/// username an earlier pass managed; when it differs (the authentication type changed), that
/// user's credentials (and, with an authorization, ACLs) are removed first. Returns one
/// (reason, note) per change, for events.
pub async fn sync_user<A: UserAdmin>(
    admin: &A,
    ku: &KafkaUser,
    credential: &Credential,
    previous: Option<&str>,
) -> Result<Vec<(String, String)>, AdminError> {
    let username = ku.username();
    let mut actions = Vec::new();
    if let Some(prev) = previous.filter(|p| *p != username) {
        forget_user(admin, prev, ku.spec.authorization.is_some()).await?;
        actions.push((
            "UsernameChanged".into(),
            format!("removed the credentials of {prev}, now {username}"),
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
    let (keep, set) = match credential {
        Credential::Scram {
            password,
            confirmed,
        } => {
            let present = have.contains(&ScramMechanism::Sha512);
            let set = (!confirmed || !present).then_some(password.as_str());
            (Some(ScramMechanism::Sha512), set)
        }
        Credential::None => (None, None),
    };
    // A credential of another mechanism would be a second password nobody can read.
    let extra: Vec<ScramMechanism> = have.into_iter().filter(|m| Some(*m) != keep).collect();
    if !extra.is_empty() {
        admin.delete_scram(username, &extra).await?;
    }
    if let Some(password) = set {
        admin
            .set_scram_password(username, ScramMechanism::Sha512, password)
            .await?;
    }
    Ok(match (set, extra.is_empty()) {
        (Some(_), _) => Some((
            "CredentialSet".into(),
            format!("set the SCRAM-SHA-512 credential of {username}"),
        )),
        (None, false) => Some((
            "CredentialRemoved".into(),
            format!("removed the other SCRAM credentials of {username}"),
        )),
        (None, true) => None,
    })
}

/// Creates the ACLs of `principal` that `desired` adds and deletes those it lacks.
pub(super) async fn sync_acls<A: UserAdmin>(
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

/// Removes every SCRAM credential of `username` and, with `acls`, every ACL of its principal
/// (a cluster without an authorizer has none: SECURITY_DISABLED is not an error here).
pub async fn forget_user<A: UserAdmin>(
    admin: &A,
    username: &str,
    acls: bool,
) -> Result<(), AdminError> {
    let have = admin.scram_mechanisms(username).await?;
    admin.delete_scram(username, &have).await?;
    if !acls {
        return Ok(());
    }
    match admin.acls_of(&format!("User:{username}")).await {
        Ok(acls) => admin.delete_acls(&acls).await,
        Err(e) if e.code == Some(errors::SECURITY_DISABLED) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The `sasl.jaas.config` a client of this user sets (a given password may hold quotes or
/// backslashes: they are escaped as Kafka's JAAS parser reads them).
pub fn jaas_config(username: &str, password: &str) -> String {
    use crate::config::auth::jaas_quote;
    format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username={} password={};",
        jaas_quote(username),
        jaas_quote(password)
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
    let credential = match credentials(ku, &cluster, &secrets).await? {
        Ok(c) => c,
        Err(not_ready) => return Ok(not_ready),
    };
    let admin = match ctx.connect(&cluster).await {
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
    let actions = match sync_user(&admin, ku, &credential, previous).await {
        Ok(actions) => actions,
        Err(e) => {
            let requeue = Duration::from_secs(60);
            return Ok(Outcome::not_ready(&e.reason(), e.message.clone(), requeue));
        }
    };
    if let Credential::Scram {
        password,
        confirmed: false,
    } = &credential
    {
        confirm_password(ku, &secrets, password).await?;
    }
    for (reason, note) in &actions {
        ctx.event(ku, EventType::Normal, reason, note).await;
    }
    Ok(Outcome {
        ready: true,
        reason: "UserReady".into(),
        message: format!("user {} matches the spec", ku.username()),
        username: Some(ku.username()),
        secret: ku.spec.authentication.as_ref().map(|_| ku.name_any()),
        requeue: ctx.resync,
    })
}

/// The user's credential from its Secret (made or completed first), or why the user cannot be
/// ready: a Secret of its name that another owner holds, or a `tls` user of a cluster without
/// a clients CA.
async fn credentials(
    ku: &KafkaUser,
    cluster: &KafkaCluster,
    secrets: &Api<Secret>,
) -> Result<Result<Credential, Outcome>, Error> {
    let Some(authentication) = &ku.spec.authentication else {
        return Ok(Ok(Credential::None));
    };
    let existing = match own_secret(ku, secrets).await? {
        Ok(existing) => existing,
        Err(owner) => {
            let message = format!(
                "Secret {} exists and is not this KafkaUser's ({owner}): the operator does not \
                 take it over; delete or rename it",
                ku.name_any()
            );
            let requeue = Duration::from_secs(60);
            return Ok(Err(Outcome::not_ready("SecretConflict", message, requeue)));
        }
    };
    match authentication.type_ {
        AuthenticationType::ScramSha512 => {
            let given = match &authentication.password {
                None => None,
                Some(p) => match given_password(&p.value_from.secret_key_ref, secrets).await? {
                    Ok(given) => Some(given),
                    Err(message) => {
                        let requeue = Duration::from_secs(30);
                        let outcome = Outcome::not_ready("PasswordNotFound", message, requeue);
                        return Ok(Err(outcome));
                    }
                },
            };
            Ok(Ok(ensure_password(ku, secrets, existing, given).await?))
        }
        AuthenticationType::Tls => {
            if ensure_certificate(ku, cluster, secrets, existing).await? {
                return Ok(Ok(Credential::None));
            }
            let message = format!(
                "KafkaCluster {} has no clients CA yet: a user with authentication type tls \
                 needs a cluster with a TLS listener",
                ku.spec.cluster_ref
            );
            let requeue = Duration::from_secs(30);
            Ok(Err(Outcome::not_ready(
                "ClientsCaNotFound",
                message,
                requeue,
            )))
        }
    }
}

/// The text entries and annotations of the user's Secret (empty when there is none yet), or,
/// when a Secret of that name is not controlled by this KafkaUser, who controls it.
async fn own_secret(ku: &KafkaUser, api: &Api<Secret>) -> Result<Result<Stored, String>, Error> {
    let Some(secret) = api.get_opt(&ku.name_any()).await? else {
        return Ok(Ok(Stored::default()));
    };
    let uid = ku.metadata.uid.as_deref();
    let controller = secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    match controller {
        Some(r) if Some(r.uid.as_str()) == uid => Ok(Ok(Stored {
            entries: certs::secret_text(&secret),
            keys: secret
                .data
                .iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect(),
            annotations: secret.metadata.annotations.clone().unwrap_or_default(),
        })),
        Some(r) => Ok(Err(format!("controlled by {} {}", r.kind, r.name))),
        None => Ok(Err("made by someone else".to_string())),
    }
}

/// What the user's Secret holds.
#[derive(Default)]
struct Stored {
    /// The entries that are text.
    entries: BTreeMap<String, String>,
    /// Every entry's key, binary ones (the keystore) included.
    keys: BTreeSet<String>,
    annotations: BTreeMap<String, String>,
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
    s.metadata.labels = Some(super::resources::user_labels(&ku.spec.cluster_ref));
    certs::set_entries(&mut s, entries);
    Ok(s)
}

async fn apply_secret(api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &pp, &Patch::Apply(secret)).await?;
    Ok(())
}

/// The annotation on a SCRAM user's Secret with the SHA-256 of the password Kafka was last
/// given (as protected as the password itself, beside it).
pub const PASSWORD_SET_ANNOTATION: &str = "kafka.evenkeel.dev/password-set";

fn password_digest(password: &str) -> String {
    use sha2::{Digest, Sha256};
    crate::security::hex(&Sha256::digest(password.as_bytes()))
}

/// The password `spec.authentication.password` names, or why there is none: the Secret or its
/// key is missing, or the value is empty.
async fn given_password(
    from: &SecretKeyRef,
    api: &Api<Secret>,
) -> Result<Result<String, String>, Error> {
    let Some(secret) = api.get_opt(&from.name).await? else {
        return Ok(Err(format!(
            "Secret {} with the user's password does not exist",
            from.name
        )));
    };
    let has_key = secret
        .data
        .as_ref()
        .is_some_and(|d| d.contains_key(&from.key))
        || secret
            .string_data
            .as_ref()
            .is_some_and(|d| d.contains_key(&from.key));
    match certs::secret_text(&secret).remove(&from.key) {
        Some(p) if !p.is_empty() => Ok(Ok(p)),
        None if has_key => Ok(Err(format!(
            "key {} of Secret {} is not UTF-8 text",
            from.key, from.name
        ))),
        Some(_) => Ok(Err(format!(
            "key {} of Secret {} is empty: a password is needed",
            from.key, from.name
        ))),
        None => Ok(Err(format!(
            "Secret {} has no key {} with the user's password",
            from.name, from.key
        ))),
    }
}

/// The user's password: `given` (from `spec.authentication.password`), else the one its
/// Secret holds (also one a person put there), else a new one. A password the Secret does not
/// hold yet is written to it first, so that Kafka is never given a password nobody can read.
/// It is `confirmed` when the Secret records that Kafka was given this very password.
async fn ensure_password(
    ku: &KafkaUser,
    api: &Api<Secret>,
    existing: Stored,
    given: Option<String>,
) -> Result<Credential, Error> {
    let username = ku.username();
    let kept = existing.entries.get(PASSWORD).filter(|p| !p.is_empty());
    if let Some(password) = given.as_ref().or(kept) {
        let entries = password_entries(&username, password);
        if entries
            .iter()
            .any(|(k, v)| existing.entries.get(k) != Some(v))
        {
            apply_secret(api, &user_secret(ku, entries)?).await?;
        }
        let set = existing.annotations.get(PASSWORD_SET_ANNOTATION);
        return Ok(Credential::Scram {
            password: password.clone(),
            confirmed: set == Some(&password_digest(password)),
        });
    }
    let password = certs::new_password();
    apply_secret(
        api,
        &user_secret(ku, password_entries(&username, &password))?,
    )
    .await?;
    Ok(Credential::Scram {
        password,
        confirmed: false,
    })
}

/// Records on the user's Secret that Kafka now has `password`.
async fn confirm_password(ku: &KafkaUser, api: &Api<Secret>, password: &str) -> Result<(), Error> {
    let patch =
        json!({"metadata": {"annotations": {PASSWORD_SET_ANNOTATION: password_digest(password)}}});
    api.patch(
        &ku.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

fn password_entries(username: &str, password: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (PASSWORD.to_string(), password.to_string()),
        (JAAS_CONFIG.to_string(), jaas_config(username, password)),
    ])
}

/// The user's certificate: kept while the clients CA that signed it is the cluster's and it
/// has more than `RENEWAL_DAYS` to live, else issued anew (subject `CN=<name>`). False when
/// the cluster has no clients CA.
async fn ensure_certificate(
    ku: &KafkaUser,
    cluster: &KafkaCluster,
    api: &Api<Secret>,
    existing: Stored,
) -> Result<bool, Error> {
    let names = Names::of(cluster)?;
    let Some(ca) = certs::stored_ca_of(api, &names, certs::CaKind::Clients).await? else {
        return Ok(false);
    };
    let stored = &existing.entries;
    let current = match (stored.get(USER_CERT), stored.get(USER_KEY)) {
        (Some(cert), Some(key))
            if stored.get(CA_CERT) == Some(&ca.cert_pem)
                && certs::signed_by(cert, &ca.cert_pem)
                && !certs::expires_within(cert, certs::RENEWAL_DAYS) =>
        {
            Some(certs::Issued {
                cert_pem: cert.clone(),
                key_pem: key.clone(),
            })
        }
        _ => None,
    };
    let has_keystore = existing.keys.contains(USER_P12) && stored.contains_key(USER_PASSWORD);
    if current.is_some() && has_keystore {
        return Ok(true);
    }
    // A Secret from before the keystore keeps its certificate and gains the keystore.
    let issued = match current {
        Some(issued) => issued,
        None => ca.sign_user(&ku.name_any(), USER_CERT_DAYS)?,
    };
    // The keystore's password stays the one clients were given, when there is one.
    let password = stored
        .get(USER_PASSWORD)
        .cloned()
        .unwrap_or_else(certs::new_password);
    let p12 = certs::pkcs12(&issued, &ca.cert_pem, &ku.name_any(), &password)?;
    let entries = BTreeMap::from([
        (CA_CERT.to_string(), ca.cert_pem.clone()),
        (USER_CERT.to_string(), issued.cert_pem),
        (USER_KEY.to_string(), issued.key_pem),
        (USER_PASSWORD.to_string(), password),
    ]);
    let mut secret = user_secret(ku, entries)?;
    certs::set_binary_entry(&mut secret, USER_P12, p12);
    apply_secret(api, &secret).await?;
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
    let admin = ctx.connect(&cluster).await.map_err(Error::Kafka)?;
    let mut names = vec![ku.username()];
    if let Some(prev) = ku.status.as_ref().and_then(|s| s.username.clone()) {
        if !names.contains(&prev) {
            names.push(prev);
        }
    }
    for name in &names {
        let acls = ku.spec.authorization.is_some();
        forget_user(&admin, name, acls)
            .await
            .map_err(Error::Kafka)?;
    }
    let note = format!("removed the credentials and ACLs of {}", names.join(", "));
    ctx.event(ku, EventType::Normal, "Deleted", &note).await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests;
