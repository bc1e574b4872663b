//! Replacing a CA's key (Strimzi's `force-replace`) in three steps, each rolled through the
//! brokers before the next, so that nobody is ever shown a certificate it does not trust:
//!
//! 1. **Trust**: a new key is made (kept as `ca-next.key` in the key Secret); `ca.crt` holds the
//!    old certificate and the new one; the old key still signs. The brokers roll and trust both.
//! 2. **Sign**: the new key becomes `ca.key` and signs; every certificate the CA issued is
//!    issued again; `ca.crt` still holds both. The brokers roll and present the new ones.
//! 3. **Finish**: `ca.crt` holds the new certificate only. The brokers roll and trust only it.
//!
//! Where a replacement stands is read from the Secrets themselves (a next key waiting: step 1;
//! two certificates and no next key: step 2), and the certificate Secret records the step its
//! generation was raised for (`REPLACEMENT`), so an operator that stops between two writes
//! finishes the step on its next pass instead of skipping a roll.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::{
    secret_text, store_ca_cert, subject_cn, Ca, CaKind, CertError, CA_KEY, CA_PASSWORD, FORCE_RENEW,
};
use crate::operator::crd::KafkaCluster;
use crate::operator::crd::{AuthenticationType, KafkaUser};
use crate::operator::kafka::AdminConnector;
use crate::operator::resources::{self, Names};
use crate::operator::user::USER_CERT;
use crate::operator::{Context, Error};

/// Annotation a user puts on a `*-ca-cert` Secret to replace that CA's key (Strimzi's
/// `force-replace`); the operator removes it when the replacement starts.
pub const FORCE_REPLACE: &str = "kafka.evenkeel.dev/force-replace";
/// Annotation of a `*-ca-cert` Secret during a key replacement: the step its generation was
/// raised for (`trust-new-key`, then `sign-with-new-key`).
pub const REPLACEMENT: &str = "kafka.evenkeel.dev/ca-key-replacement";
/// Key of the new CA key in a `*-ca` Secret while the old one still signs (step 1).
pub const NEXT_KEY: &str = "ca-next.key";

/// A step of a key replacement that ends in a roll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Both certificates trusted, the old key signs.
    Trusting,
    /// Both certificates trusted, the new key signs.
    Signing,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Trusting => "trust-new-key",
            Phase::Signing => "sign-with-new-key",
        }
    }

    fn parse(s: &str) -> Option<Phase> {
        [Phase::Trusting, Phase::Signing]
            .into_iter()
            .find(|p| p.as_str() == s)
    }

    /// The phase the Secrets' contents are in: a next key waiting is step 1; more than one
    /// trusted certificate without one is step 2; neither: no replacement.
    fn of(ca: &Ca, next_key: Option<&str>) -> Option<Phase> {
        if next_key.is_some() {
            Some(Phase::Trusting)
        } else if ca.trusted().len() > 1 {
            Some(Phase::Signing)
        } else {
            None
        }
    }
}

/// What a pass does about a CA's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Make the new key (then `Trust`).
    Start,
    /// Trust the new key's certificate beside the old one; raise the generation (step 1).
    Trust,
    /// The brokers trust both: the new key signs from now (then `RecordSigning`).
    Sign,
    /// Raise the generation for step 2 (the keys are swapped already).
    RecordSigning,
    /// The brokers present the new certificates: trust only the new one; raise the generation.
    Finish,
    /// A roll is under way: nothing to do until it ends.
    Wait,
}

/// The next step, from the phase the Secrets are in, the step the generation was last raised
/// for (`recorded`), whether a user asked for a replacement, whether the next key's certificate
/// is among the trusted ones and whether the brokers have rolled to the current generation.
/// `None`: no replacement going on or asked for.
pub fn next_step(
    phase: Option<Phase>,
    recorded: Option<Phase>,
    asked: bool,
    next_trusted: bool,
    rolled: bool,
) -> Option<Step> {
    Some(match phase {
        None if asked => Step::Start,
        None => return None,
        Some(Phase::Trusting) if !next_trusted || recorded != Some(Phase::Trusting) => Step::Trust,
        Some(Phase::Signing) if recorded != Some(Phase::Signing) => Step::RecordSigning,
        Some(_) if !rolled => Step::Wait,
        Some(Phase::Trusting) => Step::Sign,
        Some(Phase::Signing) => Step::Finish,
    })
}

/// The brokers' pods as a replacement waits on them: whether every one was made from the
/// template of a given CA generation and is ready.
#[derive(Debug, Clone, Default)]
pub struct Rollout {
    /// Each pod not being deleted: its annotations and whether it is ready.
    pods: Vec<(BTreeMap<String, String>, bool)>,
    replicas: i32,
}

impl Rollout {
    /// The rollout of `replicas` brokers from their pods.
    pub fn of(pods: &[Pod], replicas: i32) -> Rollout {
        let pods = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                let annotations = p.metadata.annotations.clone().unwrap_or_default();
                (annotations, resources::pod_ready(p))
            })
            .collect();
        Rollout { pods, replicas }
    }

    /// Whether all `replicas` brokers run a template whose `annotation` is `generation` and are
    /// ready, and no pod of another generation is left.
    pub fn rolled_to(&self, annotation: &str, generation: u64) -> bool {
        let want = generation.to_string();
        let current = |(a, ready): &(BTreeMap<String, String>, bool)| {
            *ready && a.get(annotation) == Some(&want)
        };
        self.pods.len() >= self.replicas.max(1) as usize && self.pods.iter().all(current)
    }
}

/// Whether every certificate KafkaUser of the cluster holds a certificate (`user.crt` in its
/// Secret) that `ca`'s signing key signed. A user whose Secret is not there yet counts as not.
pub async fn users_signed_by<C: AdminConnector>(
    ctx: &Context<C>,
    api: &Api<Secret>,
    names: &Names,
    ca: &Ca,
) -> Result<bool, Error> {
    let users: Api<KafkaUser> = Api::namespaced(ctx.client.clone(), &names.namespace);
    for user in users.list(&ListParams::default()).await? {
        let tls = user
            .spec
            .authentication
            .as_ref()
            .is_some_and(|a| a.type_ == AuthenticationType::Tls);
        if user.spec.cluster_ref != names.cluster || !tls {
            continue;
        }
        let Some(secret) = api.get_opt(&user.name_any()).await? else {
            return Ok(false);
        };
        let current = secret_text(&secret)
            .get(USER_CERT)
            .is_some_and(|c| super::signed_by(c, &ca.cert_pem));
        if !current {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A CA as its two Secrets hold it.
pub struct Stored<'a> {
    pub kind: CaKind,
    pub cert: &'a Secret,
    pub key: &'a Secret,
    pub cert_name: &'a str,
    pub key_name: &'a str,
    pub ca: &'a Ca,
    pub generation: u64,
}

impl Stored<'_> {
    fn next_key(&self) -> Option<String> {
        secret_text(self.key).remove(NEXT_KEY)
    }

    fn annotation(&self, name: &str) -> Option<&String> {
        self.cert.metadata.annotations.as_ref()?.get(name)
    }

    fn password(&self) -> Option<String> {
        secret_text(self.cert).remove(CA_PASSWORD)
    }
}

/// Carries a key replacement one step on, when one is asked for or going on: returns the CA
/// that signs and is trusted after the step and the generation the brokers must roll to; `None`
/// when there is no replacement (the CA's renewal then applies). `rolled` says whether the
/// brokers run the stored generation.
pub async fn advance<C: AdminConnector>(
    ctx: &Context<C>,
    api: &Api<Secret>,
    kc: &KafkaCluster,
    stored: Stored<'_>,
    rolled: bool,
) -> Result<Option<(Ca, u64)>, Error> {
    let next_key = stored.next_key();
    let phase = Phase::of(stored.ca, next_key.as_deref());
    let recorded = stored.annotation(REPLACEMENT).and_then(|p| Phase::parse(p));
    let asked = stored.annotation(FORCE_REPLACE).is_some();
    let next_trusted = next_key
        .as_deref()
        .is_some_and(|k| next_certificate(stored.ca, k).is_some());
    let Some(step) = next_step(phase, recorded, asked, next_trusted, rolled) else {
        return Ok(None);
    };
    let out = match step {
        Step::Wait => (stored.ca.clone(), stored.generation),
        Step::Start => {
            // The key alone: `trust` certifies it, as it would after a stop right here.
            let key = rcgen::KeyPair::generate()
                .map_err(|source| CertError::Generate {
                    what: format!("the new key of {}", stored.key_name),
                    source,
                })?
                .serialize_pem();
            patch_key(api, stored.key_name, NEXT_KEY, Some(&key)).await?;
            trust(ctx, api, kc, &stored, &key).await?
        }
        Step::Trust => {
            let key = next_key.unwrap_or_default();
            trust(ctx, api, kc, &stored, &key).await?
        }
        Step::Sign => {
            let key = next_key.unwrap_or_default();
            let signing = Ca::from_pem(&stored.ca.trusted_pem(), key.clone(), stored.cert_name)?;
            // The new key first, then the next key gone: a stop in between leaves both keys
            // stored and the next pass does this step again.
            patch_key(api, stored.key_name, CA_KEY, Some(&key)).await?;
            patch_key(api, stored.key_name, NEXT_KEY, None).await?;
            record(ctx, api, kc, &stored, &signing, Some(Phase::Signing)).await?
        }
        Step::RecordSigning => {
            record(ctx, api, kc, &stored, stored.ca, Some(Phase::Signing)).await?
        }
        Step::Finish => {
            let mut only = stored.ca.clone();
            only.trusted.truncate(1);
            record(ctx, api, kc, &stored, &only, None).await?
        }
    };
    Ok(Some(out))
}

/// The trusted certificate of `key_pem`, if one is.
fn next_certificate(ca: &Ca, key_pem: &str) -> Option<String> {
    let key = rcgen::KeyPair::from_pem(key_pem).ok()?;
    ca.trusted()
        .iter()
        .find(|c| super::key_matches(c, &key))
        .cloned()
}

/// The common name of the CA that replaces one named `cn`: `<name> v<n>`, one more than the
/// old one's (`<name>` counts as v0). Two trusted certificates never share a subject: OpenSSL
/// (librdkafka, kafka-python) picks a trust anchor by subject alone when a certificate does not
/// name its issuer's key, and would not try the other.
fn next_subject(cn: &str) -> String {
    let (base, version) = match cn.rsplit_once(" v") {
        Some((base, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            (base, v.parse::<u64>().unwrap_or(0))
        }
        _ => (cn, 0),
    };
    format!("{base} v{}", version + 1)
}

/// Step 1: the next key's certificate (made now unless trusted already) is trusted beside the
/// CA's, which still signs.
async fn trust<C: AdminConnector>(
    ctx: &Context<C>,
    api: &Api<Secret>,
    kc: &KafkaCluster,
    stored: &Stored<'_>,
    next_key: &str,
) -> Result<(Ca, u64), Error> {
    let both = match next_certificate(stored.ca, next_key) {
        Some(_) => stored.ca.clone(),
        None => {
            let cn = subject_cn(&stored.ca.cert_pem).map_err(|reason| CertError::Stored {
                secret: stored.cert_name.to_string(),
                reason,
            })?;
            let cn = next_subject(&cn);
            let cert = Ca::certify(&cn, next_key).map_err(|source| CertError::Generate {
                what: format!("the new certificate of CA {cn}"),
                source,
            })?;
            let mut both = stored.ca.clone();
            both.trusted.push(cert);
            both
        }
    };
    record(ctx, api, kc, stored, &both, Some(Phase::Trusting)).await
}

/// Stores `ca`'s trusted certificates with the next generation, recording `phase` (none: the
/// replacement is over) and dropping `FORCE_REPLACE`; says so in an event.
async fn record<C: AdminConnector>(
    ctx: &Context<C>,
    api: &Api<Secret>,
    kc: &KafkaCluster,
    stored: &Stored<'_>,
    ca: &Ca,
    phase: Option<Phase>,
) -> Result<(Ca, u64), Error> {
    let next = stored.generation + 1;
    // A renewal asked for meanwhile is moot: the new certificate is new.
    let annotations = serde_json::json!({
        REPLACEMENT: phase.map(Phase::as_str),
        FORCE_REPLACE: null,
        FORCE_RENEW: null,
    });
    store_ca_cert(
        api,
        stored.cert_name,
        ca,
        stored.password(),
        Some((next, annotations)),
    )
    .await?;
    let name = stored.cert_name;
    let (reason, note) = match phase {
        Some(Phase::Trusting) => (
            "CaKeyReplacing",
            format!(
                "replacing the key of {name}, step 1 of 3: its new certificate is trusted beside \
                 the old one (generation {next}); the brokers roll to load both"
            ),
        ),
        Some(Phase::Signing) => (
            "CaKeyReplacing",
            format!(
                "replacing the key of {name}, step 2 of 3: the new key signs and the certificates \
                 are issued again (generation {next}); the brokers roll to present them"
            ),
        ),
        None => (
            "CaKeyReplaced",
            format!(
                "replaced the key of {name}: only the new certificate is trusted (generation \
                 {next}); the brokers roll to drop the old one"
            ),
        ),
    };
    ctx.event(kc, EventType::Normal, reason, &note).await;
    tracing::info!(ca = ?stored.kind, generation = next, "{note}");
    Ok((ca.clone(), next))
}

/// Sets (or with `None` removes) entry `key` of the key Secret `name`.
async fn patch_key(
    api: &Api<Secret>,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), Error> {
    let value = value.map(|v| ByteString(v.as_bytes().to_vec()));
    let patch = serde_json::json!({"data": {key: value}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests;
