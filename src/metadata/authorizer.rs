//! The StandardAuthorizer over a metadata image's ACLs, kept in step with the images a node
//! publishes: the broker's, and the controller listener's when it is SSL.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::image::MetadataImage;
use crate::config::auth::AuthorizerSettings;
use crate::security::acl::AclBinding;
use crate::security::authorizer::{AuthorizerConfig, StandardAuthorizer};
use crate::storage::KafkaUuid;

type AclTable = Arc<BTreeMap<KafkaUuid, AclBinding>>;

/// The StandardAuthorizer over the published image's ACLs: rebuilt when a published image
/// brings other ACLs (the metadata publisher's work), read by every request.
pub struct Authorizer {
    config: AuthorizerConfig,
    current: RwLock<(AclTable, Arc<StandardAuthorizer>)>,
}

impl Authorizer {
    pub fn new(settings: &AuthorizerSettings) -> Authorizer {
        let config = AuthorizerConfig::from(settings);
        let empty = Arc::new(StandardAuthorizer::new(config.clone(), []));
        Authorizer {
            config,
            current: RwLock::new((AclTable::default(), empty)),
        }
    }

    /// Follows `img`'s ACLs; nothing to do when they are the ones it holds. Returns how many
    /// ACLs it now holds.
    pub fn publish(&self, img: &MetadataImage) -> usize {
        let acls = img.security().acls();
        if !Arc::ptr_eq(&self.current.read().0, acls) {
            let built = StandardAuthorizer::new(self.config.clone(), acls.values().cloned());
            *self.current.write() = (acls.clone(), Arc::new(built));
        }
        acls.len()
    }

    /// The decisions over the ACLs last published.
    pub fn current(&self) -> Arc<StandardAuthorizer> {
        self.current.read().1.clone()
    }
}
