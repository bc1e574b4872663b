//! Who a request comes from and what they may do: a connection's session (its principal, the
//! client's address, the listener) and the broker's questions to its authorizer (Kafka's
//! StandardAuthorizer over the ACLs of the metadata image this broker has published).

use std::net::SocketAddr;
use std::sync::Arc;

pub use crate::metadata::authorizer::Authorizer;
use crate::metadata::image::MetadataImage;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::authorizer::{Decision, StandardAuthorizer};

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
    /// How long the connection stays muted after the response it is answering now (a client
    /// quota's throttle time, in ms); the connection takes it once the response is written.
    mute_ms: Mute,
}

/// A connection's pending mute (ms). Not part of what a session is: clones start unmuted and
/// comparisons ignore it.
#[derive(Debug, Default)]
struct Mute(std::sync::atomic::AtomicU64);

impl Clone for Mute {
    fn clone(&self) -> Self {
        Mute::default()
    }
}

impl PartialEq for Mute {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Mute {}

impl Session {
    pub fn new(principal: impl Into<String>, peer: Option<SocketAddr>, listener: &str) -> Session {
        Session {
            principal: principal.into(),
            client_host: peer
                .map(|p| p.ip().to_canonical().to_string())
                .unwrap_or_default(),
            peer,
            listener: listener.to_string(),
            mute_ms: Default::default(),
        }
    }

    /// Mutes the connection for `d` after its current response (the longest asked for wins).
    pub fn mute_after_response(&self, d: std::time::Duration) {
        let ms = d.as_millis().min(u64::MAX as u128) as u64;
        self.mute_ms
            .0
            .fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long to stay muted now that the response is written; resets it.
    pub fn take_mute(&self) -> std::time::Duration {
        let ms = self.mute_ms.0.swap(0, std::sync::atomic::Ordering::Relaxed);
        std::time::Duration::from_millis(ms)
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

/// Whether `decisions` let `session` do `action`.
fn allowed(decisions: &StandardAuthorizer, session: &Session, action: Action<'_>) -> bool {
    decisions.authorize(
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
        self.authorizer.as_ref().map(Authorizer::current)
    }

    /// Brings the authorizer in line with an image about to be published.
    pub(crate) fn publish_acls(&self, img: &MetadataImage) {
        if let Some(a) = &self.authorizer {
            self.metrics.acls_total.set(a.publish(img) as i64);
        }
    }

    /// Whether `session` may do `action` (always, without an authorizer), counted in the
    /// authorizer metrics.
    pub(crate) fn authorize(&self, session: &Session, action: Action<'_>) -> bool {
        let Some(decisions) = self.acl_decisions() else {
            return true;
        };
        let ok = allowed(&decisions, session, action);
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
    use crate::config::auth::AuthorizerSettings;
    use crate::metadata::records::MetadataRecord;
    use crate::security::acl::{AclBinding, PatternType, PermissionType, ResourcePattern};
    use crate::storage::KafkaUuid;

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
    fn decisions_follow_the_acls_published() {
        let a = Authorizer::new(&AuthorizerSettings {
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: false,
        });
        let alice = Session::new("User:alice", "10.0.0.7:5000".parse().ok(), "SASL");
        let mut img = MetadataImage::empty();
        let write = || Action::topic(AclOperation::Write, "orders");
        assert_eq!(a.publish(&img), 0);
        assert!(!allowed(&a.current(), &alice, write()));
        let before = a.current();
        grant(&mut img, "User:alice", AclOperation::Write, "orders");
        assert!(
            !allowed(&a.current(), &alice, write()),
            "not before it is published"
        );
        assert_eq!(a.publish(&img), 1);
        assert!(allowed(&a.current(), &alice, write()));
        assert!(!Arc::ptr_eq(&before, &a.current()), "rebuilt for new ACLs");
        let now = a.current();
        a.publish(&img);
        assert!(Arc::ptr_eq(&now, &a.current()), "kept while they stay");
        let admin = Session::new("User:admin", None, "SASL");
        assert!(allowed(
            &a.current(),
            &admin,
            Action::cluster(AclOperation::Alter)
        ));
    }
}
