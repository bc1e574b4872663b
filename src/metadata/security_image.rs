//! The security part of the metadata image: the ACLs (by the id their record gave them) and the
//! users' SCRAM credentials (by user and mechanism), as the metadata log builds them. Shared
//! between image copies, so an image whose ACLs did not change is told apart by one pointer.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::records::{MetadataRecord, ScramCredentialRecord};
use crate::security::acl::AclBinding;
use crate::storage::KafkaUuid;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityImage {
    acls: Arc<BTreeMap<KafkaUuid, AclBinding>>,
    /// By `(user, mechanism type)`.
    scram: Arc<BTreeMap<(String, i8), ScramCredentialRecord>>,
}

impl SecurityImage {
    /// Applies an ACL or SCRAM record; whether it was one.
    pub fn apply(&mut self, rec: &MetadataRecord) -> bool {
        match rec {
            MetadataRecord::AccessControlEntry { id, acl } => {
                Arc::make_mut(&mut self.acls).insert(*id, acl.clone());
            }
            MetadataRecord::RemoveAccessControlEntry { id } => {
                if self.acls.contains_key(id) {
                    Arc::make_mut(&mut self.acls).remove(id);
                }
            }
            MetadataRecord::UserScramCredential(c) => {
                Arc::make_mut(&mut self.scram).insert((c.name.clone(), c.mechanism), c.clone());
            }
            MetadataRecord::RemoveUserScramCredential { name, mechanism } => {
                let key = (name.clone(), *mechanism);
                if self.scram.contains_key(&key) {
                    Arc::make_mut(&mut self.scram).remove(&key);
                }
            }
            _ => return false,
        }
        true
    }

    /// Every ACL with its id.
    pub fn acls(&self) -> &Arc<BTreeMap<KafkaUuid, AclBinding>> {
        &self.acls
    }

    /// The credential of `user` for a mechanism (Kafka's type: 1 SHA-256, 2 SHA-512).
    pub fn scram_credential(&self, user: &str, mechanism: i8) -> Option<&ScramCredentialRecord> {
        self.scram.get(&(user.to_string(), mechanism))
    }

    /// Every SCRAM credential, by user then mechanism.
    pub fn scram_credentials(&self) -> impl Iterator<Item = &ScramCredentialRecord> {
        self.scram.values()
    }

    /// The records that rebuild this part of the image, for a snapshot.
    pub fn to_records(&self, out: &mut Vec<MetadataRecord>) {
        for c in self.scram.values() {
            out.push(MetadataRecord::UserScramCredential(c.clone()));
        }
        for (id, acl) in self.acls.iter() {
            out.push(MetadataRecord::AccessControlEntry {
                id: *id,
                acl: acl.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::{
        AclOperation, PatternType, PermissionType, ResourcePattern, ResourceType,
    };

    fn acl(name: &str) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: name.into(),
                pattern_type: PatternType::Literal,
            },
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: PermissionType::Allow,
        }
    }

    fn credential(name: &str, mechanism: i8) -> ScramCredentialRecord {
        ScramCredentialRecord {
            name: name.into(),
            mechanism,
            salt: vec![1],
            stored_key: vec![2],
            server_key: vec![3],
            iterations: 4096,
        }
    }

    #[test]
    fn acls_and_credentials_come_and_go_with_their_records() {
        let mut img = SecurityImage::default();
        let (a, b) = (KafkaUuid::random(), KafkaUuid::random());
        for rec in [
            MetadataRecord::AccessControlEntry {
                id: a,
                acl: acl("x"),
            },
            MetadataRecord::AccessControlEntry {
                id: b,
                acl: acl("y"),
            },
            MetadataRecord::RemoveAccessControlEntry { id: a },
            MetadataRecord::UserScramCredential(credential("alice", 1)),
            MetadataRecord::UserScramCredential(credential("alice", 2)),
            MetadataRecord::RemoveUserScramCredential {
                name: "alice".into(),
                mechanism: 1,
            },
        ] {
            assert!(img.apply(&rec));
        }
        assert_eq!(img.acls().keys().collect::<Vec<_>>(), vec![&b]);
        assert!(img.scram_credential("alice", 1).is_none());
        assert_eq!(
            img.scram_credential("alice", 2),
            Some(&credential("alice", 2))
        );
        assert!(!img.apply(&MetadataRecord::NoOp));
    }

    #[test]
    fn a_snapshot_of_the_security_image_rebuilds_it() {
        let mut img = SecurityImage::default();
        img.apply(&MetadataRecord::AccessControlEntry {
            id: KafkaUuid::random(),
            acl: acl("x"),
        });
        img.apply(&MetadataRecord::UserScramCredential(credential("bob", 2)));
        let mut records = Vec::new();
        img.to_records(&mut records);
        let mut rebuilt = SecurityImage::default();
        for r in &records {
            rebuilt.apply(r);
        }
        assert_eq!(rebuilt, img);
    }

    #[test]
    fn an_unchanged_image_shares_its_acls() {
        let mut img = SecurityImage::default();
        img.apply(&MetadataRecord::AccessControlEntry {
            id: KafkaUuid::random(),
            acl: acl("x"),
        });
        let mut copy = img.clone();
        copy.apply(&MetadataRecord::UserScramCredential(credential("bob", 2)));
        assert!(Arc::ptr_eq(copy.acls(), img.acls()));
        copy.apply(&MetadataRecord::RemoveAccessControlEntry {
            id: KafkaUuid::random(),
        });
        assert!(
            Arc::ptr_eq(copy.acls(), img.acls()),
            "removing an unknown id changes nothing"
        );
    }
}
