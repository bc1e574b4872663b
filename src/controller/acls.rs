//! Kafka's AclControlManager: which records CreateAcls and DeleteAcls write. A new ACL gets a
//! fresh id unless an equal one is stored; a delete filter removes every stored ACL it matches.

use std::collections::HashSet;

use crate::metadata::image::MetadataImage;
use crate::metadata::records::MetadataRecord;
use crate::protocol::errors;
use crate::security::acl::{AclBinding, AclBindingFilter, UNKNOWN_FILTER};
use crate::storage::KafkaUuid;

use super::ControllerError;

/// CreateAcls: one result per binding, in order, and the records of the new ones.
pub fn create_acls(
    img: &MetadataImage,
    bindings: &[AclBinding],
) -> (Vec<MetadataRecord>, Vec<Result<(), ControllerError>>) {
    let existing: HashSet<&AclBinding> = img.security().acls().values().collect();
    let mut added: HashSet<&AclBinding> = HashSet::new();
    let mut records = Vec::new();
    let results = bindings
        .iter()
        .map(|b| {
            b.validate()
                .map_err(|e| ControllerError::new(errors::INVALID_REQUEST, e.to_string()))?;
            if !existing.contains(b) && added.insert(b) {
                records.push(MetadataRecord::AccessControlEntry {
                    id: KafkaUuid::random(),
                    acl: b.clone(),
                });
            }
            Ok(())
        })
        .collect();
    (records, results)
}

/// DeleteAcls: for each filter, the ACLs it removes (an ACL two filters match is removed, and
/// reported, once), and the records.
pub fn delete_acls(
    img: &MetadataImage,
    filters: &[AclBindingFilter],
) -> (
    Vec<MetadataRecord>,
    Vec<Result<Vec<AclBinding>, ControllerError>>,
) {
    let mut removed: HashSet<KafkaUuid> = HashSet::new();
    let mut records = Vec::new();
    let results = filters
        .iter()
        .map(|f| {
            validate_filter(f)?;
            let mut matched = Vec::new();
            for (id, acl) in img.security().acls().iter() {
                if f.matches(acl) && removed.insert(*id) {
                    records.push(MetadataRecord::RemoveAccessControlEntry { id: *id });
                    matched.push(acl.clone());
                }
            }
            Ok(matched)
        })
        .collect();
    (records, results)
}

/// A filter with an UNKNOWN element is refused, as Kafka refuses it.
fn validate_filter(f: &AclBindingFilter) -> Result<(), ControllerError> {
    if f.is_unknown() {
        return Err(ControllerError::new(
            errors::INVALID_REQUEST,
            UNKNOWN_FILTER,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::{
        AclOperation, PatternType, PermissionType, ResourcePattern, ResourceType,
    };

    fn acl(name: &str, pattern_type: PatternType, op: AclOperation) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: name.into(),
                pattern_type,
            },
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission: PermissionType::Allow,
        }
    }

    fn image_with(records: &[MetadataRecord]) -> MetadataImage {
        let mut img = MetadataImage::empty();
        for (i, r) in records.iter().enumerate() {
            img.apply(r, i as i64);
        }
        img
    }

    #[test]
    fn a_new_acl_is_written_once_and_a_stored_one_not_again() {
        let read = acl("orders", PatternType::Literal, AclOperation::Read);
        let (recs, results) = create_acls(&MetadataImage::empty(), &[read.clone(), read.clone()]);
        assert_eq!(results, vec![Ok(()), Ok(())]);
        assert_eq!(
            recs.len(),
            1,
            "the same ACL twice in one request is one record"
        );
        let img = image_with(&recs);
        let (again, results) = create_acls(&img, std::slice::from_ref(&read));
        assert!(again.is_empty());
        assert_eq!(results, vec![Ok(())]);
    }

    #[test]
    fn an_invalid_acl_is_refused_alone() {
        let good = acl("orders", PatternType::Literal, AclOperation::Read);
        let bad = acl("", PatternType::Literal, AclOperation::Read);
        let any = acl("x", PatternType::Literal, AclOperation::Any);
        let (recs, results) = create_acls(&MetadataImage::empty(), &[bad, good, any]);
        assert_eq!(recs.len(), 1);
        let codes: Vec<i16> = results
            .iter()
            .map(|r| r.as_ref().map_or_else(|e| e.code, |_| 0))
            .collect();
        assert_eq!(
            codes,
            vec![errors::INVALID_REQUEST, 0, errors::INVALID_REQUEST]
        );
        let msg = results[0].as_ref().unwrap_err().message.clone();
        assert_eq!(msg, "Resource name should not be empty");
    }

    #[test]
    fn a_delete_filter_removes_what_it_matches_once() {
        let (recs, _) = create_acls(
            &MetadataImage::empty(),
            &[
                acl("orders", PatternType::Literal, AclOperation::Read),
                acl("orders", PatternType::Literal, AclOperation::Write),
                acl("ord", PatternType::Prefixed, AclOperation::Read),
                acl("payments", PatternType::Literal, AclOperation::Read),
            ],
        );
        let img = image_with(&recs);
        let mut reads = AclBindingFilter::any();
        reads.operation = AclOperation::Read;
        let mut orders = AclBindingFilter::any();
        orders.name = Some("orders".into());
        orders.pattern_type = PatternType::Match;
        let (removes, results) = delete_acls(&img, &[orders, reads]);
        let first = results[0].as_ref().unwrap();
        let second = results[1].as_ref().unwrap();
        // MATCH takes the literal ACLs of "orders" and the prefix "ord" that covers it.
        assert_eq!(first.len(), 3, "{first:?}");
        assert_eq!(
            second.len(),
            1,
            "only payments is left for the second: {second:?}"
        );
        assert_eq!(second[0].pattern.name, "payments");
        assert_eq!(removes.len(), 4);
        let after = image_with(&[recs, removes].concat());
        assert!(after.security().acls().is_empty());
    }

    #[test]
    fn an_unknown_filter_is_refused() {
        let mut f = AclBindingFilter::any();
        f.operation = AclOperation::Unknown;
        let (recs, results) = delete_acls(&MetadataImage::empty(), &[f]);
        assert!(recs.is_empty());
        assert_eq!(
            results[0].as_ref().unwrap_err().code,
            errors::INVALID_REQUEST
        );
    }
}
