//! Kafka's ScramControlManager: which records AlterUserScramCredentials writes. Each user is
//! answered once: a user named twice in one request, an unknown mechanism, an iteration count
//! out of Kafka's bounds or a deletion of a credential that does not exist is refused alone.

use std::collections::HashMap;

use crate::metadata::image::MetadataImage;
use crate::metadata::records::{MetadataRecord, ScramCredentialRecord};
use crate::protocol::errors;
use crate::security::sasl::{ScramCredential, ScramMechanism};

use super::ControllerError;

/// One change a request asks for.
pub enum ScramChange {
    Delete {
        user: String,
        mechanism: i8,
    },
    Upsert {
        user: String,
        mechanism: i8,
        iterations: i32,
        salt: Vec<u8>,
        salted_password: Vec<u8>,
    },
}

impl ScramChange {
    pub fn user(&self) -> &str {
        match self {
            ScramChange::Delete { user, .. } | ScramChange::Upsert { user, .. } => user,
        }
    }
}

/// Each user's result, in the order users first appear.
pub type UserResults = Vec<(String, Result<(), ControllerError>)>;

/// The records, and each user's result.
pub fn alter_credentials(
    img: &MetadataImage,
    changes: &[ScramChange],
) -> (Vec<MetadataRecord>, UserResults) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for c in changes {
        *seen.entry(c.user()).or_default() += 1;
    }
    let mut records = Vec::new();
    let mut results: Vec<(String, Result<(), ControllerError>)> = Vec::new();
    for c in changes {
        let user = c.user();
        if results.iter().any(|(u, _)| u == user) {
            continue;
        }
        let result = if seen[user] > 1 {
            Err(ControllerError::new(
                errors::DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            ))
        } else {
            record_of(img, c).map(|r| records.push(r))
        };
        results.push((user.to_string(), result));
    }
    (records, results)
}

/// The record of one change, or why it is refused.
fn record_of(img: &MetadataImage, c: &ScramChange) -> Result<MetadataRecord, ControllerError> {
    let unknown = || {
        ControllerError::new(
            errors::UNSUPPORTED_SASL_MECHANISM,
            "Unknown SCRAM mechanism",
        )
    };
    match c {
        ScramChange::Delete { user, mechanism } => {
            ScramMechanism::from_type_code(*mechanism).ok_or_else(unknown)?;
            if img.security().scram_credential(user, *mechanism).is_none() {
                return Err(ControllerError::new(
                    errors::RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                ));
            }
            Ok(MetadataRecord::RemoveUserScramCredential {
                name: user.clone(),
                mechanism: *mechanism,
            })
        }
        ScramChange::Upsert {
            user,
            mechanism,
            iterations,
            salt,
            salted_password,
        } => {
            let m = ScramMechanism::from_type_code(*mechanism).ok_or_else(unknown)?;
            let unacceptable =
                |text: String| ControllerError::new(errors::UNACCEPTABLE_CREDENTIAL, text);
            if user.is_empty() {
                return Err(unacceptable("Username must not be empty".into()));
            }
            if salt.is_empty() || salted_password.is_empty() {
                return Err(unacceptable(
                    "Salt and salted password must not be empty".into(),
                ));
            }
            let c = ScramCredential::from_salted_password(m, salt, salted_password, *iterations)
                .map_err(|e| unacceptable(e.to_string()))?;
            Ok(MetadataRecord::UserScramCredential(
                ScramCredentialRecord::new(user, m, c),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(user: &str, mechanism: i8, iterations: i32) -> ScramChange {
        ScramChange::Upsert {
            user: user.into(),
            mechanism,
            iterations,
            salt: b"salt".to_vec(),
            salted_password: vec![7; 64],
        }
    }

    fn codes(results: &[(String, Result<(), ControllerError>)]) -> Vec<(String, i16)> {
        results
            .iter()
            .map(|(u, r)| (u.clone(), r.as_ref().map_or_else(|e| e.code, |_| 0)))
            .collect()
    }

    #[test]
    fn each_user_is_answered_once_and_refused_alone() {
        let img = MetadataImage::empty();
        let (recs, results) = alter_credentials(
            &img,
            &[
                upsert("alice", 2, 8192),
                upsert("bob", 2, 100),
                upsert("carol", 9, 8192),
                upsert("dave", 1, 4096),
                ScramChange::Delete {
                    user: "dave".into(),
                    mechanism: 2,
                },
                ScramChange::Delete {
                    user: "erin".into(),
                    mechanism: 2,
                },
            ],
        );
        assert_eq!(
            codes(&results),
            vec![
                ("alice".into(), 0),
                ("bob".into(), errors::UNACCEPTABLE_CREDENTIAL),
                ("carol".into(), errors::UNSUPPORTED_SASL_MECHANISM),
                ("dave".into(), errors::DUPLICATE_RESOURCE),
                ("erin".into(), errors::RESOURCE_NOT_FOUND),
            ]
        );
        assert_eq!(recs.len(), 1);
        let MetadataRecord::UserScramCredential(c) = &recs[0] else {
            panic!("{recs:?}");
        };
        assert_eq!(
            (c.name.as_str(), c.mechanism, c.iterations),
            ("alice", 2, 8192)
        );
        assert_eq!(c.stored_key.len(), 64, "SHA-512 keys");
    }

    #[test]
    fn a_stored_credential_can_be_deleted() {
        let mut img = MetadataImage::empty();
        let (recs, _) = alter_credentials(&img, &[upsert("alice", 1, 4096)]);
        img.apply(&recs[0], 0);
        let (recs, results) = alter_credentials(
            &img,
            &[ScramChange::Delete {
                user: "alice".into(),
                mechanism: 1,
            }],
        );
        assert_eq!(codes(&results), vec![("alice".into(), 0)]);
        img.apply(&recs[0], 1);
        assert!(img.security().scram_credential("alice", 1).is_none());
    }
}
