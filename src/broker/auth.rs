//! Who a request comes from and what they may do: a connection's session (its principal, the
//! client's address, the listener) and the broker's authorizer, Kafka's StandardAuthorizer over
//! the ACLs of the metadata image this broker has published.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::auth::AuthorizerSettings;
use crate::metadata::image::MetadataImage;
use crate::security::acl::{AclBinding, AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::authorizer::{AuthorizerConfig, Decision, StandardAuthorizer};
use crate::storage::KafkaUuid;

/// One connection's identity, as every request on it is authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `User:alice`, or `User:ANONYMOUS`.
    pub principal: String,
    /// The client's address as ACL hosts name it (`10.0.0.7`).
    pub client_host: String,
    pub peer: Option<SocketAddr>,
    /// The listener the connection came in on: answers name other brokers' endpoints on it.
    pub listener: String,
}

impl Session {
    pub fn new(principal: impl Into<String>, peer: Option<SocketAddr>, listener: &str) -> Session {
        Session {
            principal: principal.into(),
            client_host: peer
                .map(|p| p.ip().to_canonical().to_string())
                .unwrap_or_default(),
            peer,
            listener: listener.to_string(),
        }
    }
}

type AclTable = Arc<BTreeMap<KafkaUuid, AclBinding>>;

/// The StandardAuthorizer over the published image's ACLs, rebuilt when they change.
pub struct Authorizer {
    config: AuthorizerConfig,
    current: Mutex<(AclTable, Arc<StandardAuthorizer>)>,
}

impl Authorizer {
    pub fn new(settings: &AuthorizerSettings) -> Authorizer {
        let config = AuthorizerConfig {
            super_users: settings.super_users.iter().cloned().collect(),
            allow_everyone_if_no_acl_found: settings.allow_everyone_if_no_acl_found,
        };
        let empty = Arc::new(StandardAuthorizer::new(config.clone(), []));
        Authorizer {
            config,
            current: Mutex::new((AclTable::default(), empty)),
        }
    }

    /// The decisions over `img`'s ACLs (the same ones as last time when they did not change).
    pub fn over(&self, img: &MetadataImage) -> Arc<StandardAuthorizer> {
        let acls = img.security().acls();
        let mut cur = self.current.lock();
        if !Arc::ptr_eq(&cur.0, acls) {
            let built = StandardAuthorizer::new(self.config.clone(), acls.values().cloned());
            *cur = (acls.clone(), Arc::new(built));
        }
        cur.1.clone()
    }
}

/// One question to the authorizer.
pub struct Action<'a> {
    pub op: AclOperation,
    pub resource_type: ResourceType,
    pub name: &'a str,
}

impl<'a> Action<'a> {
    pub fn topic(op: AclOperation, name: &'a str) -> Self {
        Action {
            op,
            resource_type: ResourceType::Topic,
            name,
        }
    }

    pub fn group(op: AclOperation, name: &'a str) -> Self {
        Action {
            op,
            resource_type: ResourceType::Group,
            name,
        }
    }

    pub fn cluster(op: AclOperation) -> Self {
        Action {
            op,
            resource_type: ResourceType::Cluster,
            name: CLUSTER_NAME,
        }
    }
}

/// Asks `authorizer` (none: everything is allowed) whether `session` may do `action`.
pub fn allowed(
    authorizer: Option<&StandardAuthorizer>,
    session: &Session,
    action: Action<'_>,
) -> bool {
    let Some(a) = authorizer else {
        return true;
    };
    a.authorize(
        &session.principal,
        &session.client_host,
        action.op,
        action.resource_type,
        action.name,
    ) == Decision::Allowed
}

impl super::Broker {
    /// The decisions over the published image's ACLs; `None` without an authorizer.
    pub(crate) fn acl_decisions(&self) -> Option<Arc<StandardAuthorizer>> {
        let a = self.authorizer.as_ref()?;
        let img = self.published.borrow().clone();
        let decisions = a.over(&img);
        self.metrics
            .acls_total
            .set(img.security().acls().len() as i64);
        Some(decisions)
    }

    /// Whether `session` may do `action` (always, without an authorizer), counted in the
    /// authorizer metrics.
    pub(crate) fn authorize(&self, session: &Session, action: Action<'_>) -> bool {
        let Some(decisions) = self.acl_decisions() else {
            return true;
        };
        let ok = allowed(Some(&decisions), session, action);
        self.count_decision(ok);
        ok
    }

    /// Counts one decision in the authorizer metrics.
    pub(crate) fn count_decision(&self, allowed: bool) {
        if allowed {
            self.metrics.authorization_allowed.inc();
        } else {
            self.metrics.authorization_denied.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::MetadataRecord;
    use crate::security::acl::{PatternType, PermissionType, ResourcePattern};

    fn grant(img: &mut MetadataImage, principal: &str, op: AclOperation, topic: &str) {
        let acl = AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: topic.into(),
                pattern_type: PatternType::Literal,
            },
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: PermissionType::Allow,
        };
        let offset = img.last_offset + 1;
        img.apply(
            &MetadataRecord::AccessControlEntry {
                id: KafkaUuid::random(),
                acl,
            },
            offset,
        );
    }

    #[test]
    fn decisions_follow_the_acls_of_the_image_given() {
        let a = Authorizer::new(&AuthorizerSettings {
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: false,
        });
        let alice = Session::new("User:alice", "10.0.0.7:5000".parse().ok(), "SASL");
        let mut img = MetadataImage::empty();
        let write = || Action::topic(AclOperation::Write, "orders");
        assert!(!allowed(Some(&a.over(&img)), &alice, write()));
        let before = a.over(&img);
        grant(&mut img, "User:alice", AclOperation::Write, "orders");
        assert!(allowed(Some(&a.over(&img)), &alice, write()));
        assert!(!Arc::ptr_eq(&before, &a.over(&img)), "rebuilt for new ACLs");
        assert!(
            Arc::ptr_eq(&a.over(&img), &a.over(&img)),
            "kept while they stay"
        );
        let admin = Session::new("User:admin", None, "SASL");
        assert!(allowed(
            Some(&a.over(&img)),
            &admin,
            Action::cluster(AclOperation::Alter)
        ));
        assert!(allowed(None, &alice, Action::cluster(AclOperation::Alter)));
    }
}
