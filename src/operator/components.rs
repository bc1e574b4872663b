//! Who the operator's own clients of a secured cluster are to Kafka — the operator, the
//! rebalancer sidecar and the producer proxy, each known by its certificate from the cluster CA —
//! and the ACLs that let the sidecar and the proxy do their work and nothing more.
//!
//! The brokers and the operator are super users: the operator holds the CAs' keys and could
//! issue itself any identity, so ACLs would not narrow what it can do. The sidecar may describe
//! topics and alter the cluster (elect leaders, reassign partitions); the proxy may write to and
//! describe topics, and write idempotently — unless it has basic auth, when its HTTP users'
//! own logins and ACLs decide.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::certs::{self, Ca, Issued, BROKER_VALIDITY_DAYS, CA_CERT, RENEWAL_DAYS};
use super::crd::KafkaCluster;
use super::kafka::{AdminError, UserAdmin};
use super::resources::{self, Names, TLS_DIR};
use super::user::sync_acls;
use crate::client::ClientSecurity;
use crate::security::acl::{
    AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern, ResourceType,
    CLUSTER_NAME, WILDCARD,
};

/// Common name of the operator's client certificates (one per cluster CA).
pub const OPERATOR_CN: &str = "evenkeel-operator";

/// Kafka client keys for mutual TLS with a PEM keystore at `keystore` and the cluster CA (as
/// mounted in the cluster's pods) as the truststore: what the sidecar and the proxy connect with.
pub fn client_properties(keystore: &str) -> Vec<(String, String)> {
    [
        ("security.protocol", "SSL".to_string()),
        ("ssl.keystore.type", "PEM".into()),
        ("ssl.keystore.location", keystore.into()),
        ("ssl.truststore.type", "PEM".into()),
        (
            "ssl.truststore.location",
            format!("{TLS_DIR}/cluster-ca/{CA_CERT}"),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The operator's client identities, one per cluster CA, made on first use: a certificate the
/// CA signs for `OPERATOR_CN`, kept in memory only (a restarted operator makes new ones) and
/// made again `RENEWAL_DAYS` before it expires.
#[derive(Default)]
pub struct Identities {
    by_ca: Mutex<BTreeMap<String, Identity>>,
}

struct Identity {
    cert_pem: String,
    security: ClientSecurity,
}

impl Identities {
    /// How the operator connects to the internal listener of the cluster `ca` signs for.
    pub fn operator(&self, ca: &Ca) -> Result<ClientSecurity, IdentityError> {
        let mut by_ca = self.by_ca.lock().unwrap_or_else(|p| p.into_inner());
        let trusted = ca.trusted_pem();
        if let Some(id) = by_ca.get(&trusted) {
            if !certs::expires_within(&id.cert_pem, RENEWAL_DAYS) {
                return Ok(id.security.clone());
            }
        }
        let issued = ca.sign(OPERATOR_CN, &[], BROKER_VALIDITY_DAYS)?;
        let security = operator_security(ca, &issued)?;
        let id = Identity {
            cert_pem: issued.cert_pem,
            security: security.clone(),
        };
        by_ca.insert(trusted, id);
        Ok(security)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Certificate(#[from] certs::CertError),
    #[error("the operator's TLS client: {0}")]
    Client(String),
}

/// `issued` (the operator's certificate from `ca`) as a TLS client that trusts only `ca`'s
/// certificates (both while its key is replaced).
fn operator_security(ca: &Ca, issued: &Issued) -> Result<ClientSecurity, IdentityError> {
    let props: BTreeMap<String, String> = [
        ("security.protocol", "SSL".to_string()),
        ("ssl.keystore.type", "PEM".into()),
        ("ssl.keystore.certificate.chain", issued.cert_pem.clone()),
        ("ssl.keystore.key", issued.key_pem.clone()),
        ("ssl.truststore.type", "PEM".into()),
        ("ssl.truststore.certificates", ca.trusted_pem()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    ClientSecurity::from_properties(&props).map_err(|e| IdentityError::Client(e.to_string()))
}

/// The rebalancer sidecar's principal.
pub fn rebalancer_principal(names: &Names) -> String {
    certs::principal(&names.rebalancer())
}

/// The producer proxy's principal.
pub fn proxy_principal(names: &Names) -> String {
    certs::principal(&names.proxy())
}

/// What the sidecar calls: Metadata and DescribeCluster (DESCRIBE on topics and the cluster),
/// ListPartitionReassignments and DescribeQuorum (DESCRIBE on the cluster, implied by ALTER),
/// ElectLeaders and AlterPartitionReassignments (ALTER on the cluster).
pub fn rebalancer_acls(names: &Names) -> Vec<AclBinding> {
    grants(
        &rebalancer_principal(names),
        &[
            (cluster(), AclOperation::Alter),
            (cluster(), AclOperation::Describe),
            (every_topic(), AclOperation::Describe),
        ],
    )
}

/// What the proxy's producer calls: Metadata (DESCRIBE on topics), Produce (WRITE on topics),
/// InitProducerId (IDEMPOTENT_WRITE on the cluster).
pub fn proxy_acls(names: &Names) -> Vec<AclBinding> {
    grants(
        &proxy_principal(names),
        &[
            (every_topic(), AclOperation::Write),
            (every_topic(), AclOperation::Describe),
            (cluster(), AclOperation::IdempotentWrite),
        ],
    )
}

/// ALLOW ACLs of `principal` from any host, sorted.
fn grants(principal: &str, operations: &[(ResourcePattern, AclOperation)]) -> Vec<AclBinding> {
    let mut acls: Vec<AclBinding> = operations
        .iter()
        .map(|(pattern, op)| allow(principal, pattern.clone(), *op))
        .collect();
    acls.sort();
    acls
}

fn allow(principal: &str, pattern: ResourcePattern, operation: AclOperation) -> AclBinding {
    AclBinding {
        pattern,
        principal: principal.to_string(),
        host: WILDCARD.into(),
        operation,
        permission: PermissionType::Allow,
    }
}

fn cluster() -> ResourcePattern {
    ResourcePattern {
        resource_type: ResourceType::Cluster,
        name: CLUSTER_NAME.into(),
        pattern_type: PatternType::Literal,
    }
}

fn every_topic() -> ResourcePattern {
    ResourcePattern {
        resource_type: ResourceType::Topic,
        name: WILDCARD.into(),
        pattern_type: PatternType::Literal,
    }
}

/// Whether the proxy's producer logs in with its certificate: a proxy without basic auth (with
/// it, every produce goes through the login of its HTTP user, and the certificate's principal
/// needs nothing).
fn proxy_by_certificate(kc: &KafkaCluster) -> bool {
    resources::wants_proxy(kc) && matches!(resources::proxy_login_listener(kc), Ok(None))
}

/// What `sync_component_acls` changed (one note per principal whose ACLs changed), and the
/// error that stopped it, if one did: the notes of what was done before it are kept.
#[derive(Debug, Default)]
pub struct AclSync {
    pub notes: Vec<String>,
    pub error: Option<AdminError>,
}

/// Makes the sidecar's and the proxy's ACLs what the spec asks for: theirs while they are
/// enabled, none once they are not. Only under `spec.authorization` (without it the brokers
/// have no authorizer).
pub async fn sync_component_acls<A: UserAdmin>(admin: &A, kc: &KafkaCluster) -> AclSync {
    let mut out = AclSync::default();
    if kc.spec.authorization.is_none() {
        return out;
    }
    let names = match Names::of(kc) {
        Ok(n) => n,
        Err(e) => {
            out.error = Some(AdminError::transport(e.to_string()));
            return out;
        }
    };
    let wanted = |on: bool, acls: Vec<AclBinding>| if on { acls } else { Vec::new() };
    let components = [
        (
            rebalancer_principal(&names),
            wanted(kc.spec.rebalancer.enabled, rebalancer_acls(&names)),
        ),
        (
            proxy_principal(&names),
            wanted(proxy_by_certificate(kc), proxy_acls(&names)),
        ),
    ];
    for (principal, desired) in components {
        match sync_acls(admin, &principal, &desired).await {
            Ok(Some((_, note))) => out.notes.push(note),
            Ok(None) => {}
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_identity_is_made_once_per_ca() {
        let ids = Identities::default();
        let a = Ca::generate("a").unwrap();
        let b = Ca::generate("b").unwrap();
        ids.operator(&a).unwrap();
        let first = ids.by_ca.lock().unwrap()[&a.cert_pem].cert_pem.clone();
        ids.operator(&a).unwrap();
        assert_eq!(
            ids.by_ca.lock().unwrap()[&a.cert_pem].cert_pem,
            first,
            "made again"
        );
        ids.operator(&b).unwrap();
        assert_eq!(ids.by_ca.lock().unwrap().len(), 2);
        // One about to expire is made again.
        let short = a.sign(OPERATOR_CN, &[], RENEWAL_DAYS - 1).unwrap();
        ids.by_ca
            .lock()
            .unwrap()
            .get_mut(&a.cert_pem)
            .unwrap()
            .cert_pem = short.cert_pem;
        ids.operator(&a).unwrap();
        let renewed = ids.by_ca.lock().unwrap()[&a.cert_pem].cert_pem.clone();
        assert!(
            !certs::expires_within(&renewed, RENEWAL_DAYS),
            "not renewed"
        );
    }

    #[test]
    fn each_component_is_allowed_only_its_own_operations() {
        let names = Names {
            cluster: "main".into(),
            namespace: "ns".into(),
        };
        let ops = |acls: &[AclBinding], principal: &str| {
            acls.iter()
                .inspect(|b| assert_eq!(b.principal, principal))
                .map(|b| (b.pattern.resource_type, b.pattern.name.clone(), b.operation))
                .collect::<Vec<_>>()
        };
        let sidecar = ops(
            &rebalancer_acls(&names),
            "User:CN=main-rebalancer,O=evenkeel.dev",
        );
        assert!(sidecar.contains(&(
            ResourceType::Cluster,
            CLUSTER_NAME.into(),
            AclOperation::Alter
        )));
        assert!(!sidecar.iter().any(|(_, _, op)| *op == AclOperation::Write));
        let proxy = ops(&proxy_acls(&names), "User:CN=main-proxy,O=evenkeel.dev");
        assert!(proxy.contains(&(ResourceType::Topic, "*".into(), AclOperation::Write)));
        assert!(!proxy.iter().any(|(_, _, op)| *op == AclOperation::Alter));
    }
}
