use serde_json::json;

use super::*;
use crate::operator::testing::FakeKafka;
use crate::security::acl::{AclOperation, PermissionType, ResourceType};

fn user(name: &str, spec: serde_json::Value) -> KafkaUser {
    KafkaUser::new(name, serde_json::from_value(spec).unwrap())
}

fn scram_writer(name: &str, topic: &str) -> KafkaUser {
    user(
        name,
        json!({
            "clusterRef": "main",
            "authentication": {"type": "scram-sha-512"},
            "authorization": {"type": "simple", "acls": [
                {"resource": {"type": "topic", "name": topic}, "operations": ["Write", "Describe"]}
            ]}
        }),
    )
}

/// A password Kafka has not been given yet (new, or changed in the Secret).
fn fresh(password: &str) -> Credential {
    Credential::Scram {
        password: password.into(),
        confirmed: false,
    }
}

/// The password Kafka was last given.
fn confirmed(password: &str) -> Credential {
    Credential::Scram {
        password: password.into(),
        confirmed: true,
    }
}

#[tokio::test]
async fn a_new_scram_user_gets_its_credential_and_exactly_its_acls() {
    let kafka = FakeKafka::default();
    let ku = scram_writer("alice", "orders");
    let actions = sync_user(&kafka, &ku, &fresh("pw1"), None).await.unwrap();
    let reasons: Vec<&str> = actions.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(reasons, ["CredentialSet", "AclsChanged"]);
    assert_eq!(
        *kafka.scram.lock().unwrap(),
        [(
            "alice".to_string(),
            ScramMechanism::Sha512,
            "pw1".to_string()
        )]
    );
    let acls = kafka.acls.lock().unwrap().clone();
    assert_eq!(acls.len(), 2);
    assert!(acls.iter().all(|a| a.principal == "User:alice"
        && a.pattern.resource_type == ResourceType::Topic
        && a.pattern.name == "orders"
        && a.permission == PermissionType::Allow));

    // A second pass with the same stored password changes nothing.
    let same = confirmed("pw1");
    let before = kafka.log().len();
    assert!(sync_user(&kafka, &ku, &same, Some("alice"))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(kafka.log().len(), before, "{:?}", kafka.log());
}

#[tokio::test]
async fn acls_added_behind_the_operators_back_are_removed_and_spec_changes_applied() {
    let kafka = FakeKafka::default();
    let ku = scram_writer("alice", "orders");
    sync_user(&kafka, &ku, &fresh("pw"), None).await.unwrap();
    // Someone grants alice Read on another topic by hand; the spec moves her to "payments".
    let mut extra = kafka.acls.lock().unwrap()[0].clone();
    extra.pattern.name = "secret".into();
    extra.operation = AclOperation::Read;
    kafka.acls.lock().unwrap().push(extra);
    let moved = scram_writer("alice", "payments");
    let stored = confirmed("pw");
    sync_user(&kafka, &moved, &stored, Some("alice"))
        .await
        .unwrap();
    let mut names: Vec<String> = kafka
        .acls
        .lock()
        .unwrap()
        .iter()
        .map(|a| format!("{}:{}", a.pattern.name, a.operation))
        .collect();
    names.sort();
    assert_eq!(names, ["payments:Describe", "payments:Write"]);
}

#[tokio::test]
async fn a_missing_credential_is_set_again_and_a_fresh_password_replaces_it() {
    let kafka = FakeKafka::default();
    let ku = scram_writer("alice", "orders");
    let stored = confirmed("pw");
    // Confirmed, but Kafka has no credential (deleted by hand): it is set again.
    sync_user(&kafka, &ku, &stored, Some("alice"))
        .await
        .unwrap();
    assert_eq!(kafka.scram.lock().unwrap().len(), 1);
    // A password Kafka was not given (the Secret was made again, or edited) replaces it.
    sync_user(&kafka, &ku, &fresh("pw2"), Some("alice"))
        .await
        .unwrap();
    assert_eq!(kafka.scram.lock().unwrap()[0].2, "pw2");
}

#[tokio::test]
async fn switching_to_a_certificate_removes_the_scram_users_credential_and_acls() {
    let kafka = FakeKafka::default();
    let ku = scram_writer("alice", "orders");
    sync_user(&kafka, &ku, &fresh("pw"), None).await.unwrap();
    let mut tls = ku.clone();
    tls.spec.authentication = serde_json::from_value(json!({"type": "tls"})).unwrap();
    let actions = sync_user(&kafka, &tls, &Credential::None, Some("alice"))
        .await
        .unwrap();
    assert_eq!(actions[0].0, "UsernameChanged");
    assert!(kafka.scram.lock().unwrap().is_empty());
    let acls = kafka.acls.lock().unwrap().clone();
    assert_eq!(acls.len(), 2);
    assert!(
        acls.iter().all(|a| a.principal == "User:CN=alice"),
        "{acls:?}"
    );
}

#[tokio::test]
async fn a_user_without_authorization_keeps_the_acls_it_has() {
    let kafka = FakeKafka::default();
    sync_user(&kafka, &scram_writer("alice", "orders"), &fresh("pw"), None)
        .await
        .unwrap();
    let no_authz = user(
        "alice",
        json!({"clusterRef": "main", "authentication": {"type": "scram-sha-512"}}),
    );
    let stored = confirmed("pw");
    sync_user(&kafka, &no_authz, &stored, Some("alice"))
        .await
        .unwrap();
    assert_eq!(kafka.acls.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn forgetting_a_user_removes_its_credentials_and_acls_and_nobody_elses() {
    let kafka = FakeKafka::default();
    sync_user(&kafka, &scram_writer("alice", "orders"), &fresh("a"), None)
        .await
        .unwrap();
    sync_user(&kafka, &scram_writer("bob", "orders"), &fresh("b"), None)
        .await
        .unwrap();
    forget_user(&kafka, "alice", true).await.unwrap();
    let scram = kafka.scram.lock().unwrap().clone();
    assert_eq!(scram.len(), 1);
    assert_eq!(scram[0].0, "bob");
    let acls = kafka.acls.lock().unwrap().clone();
    assert_eq!(acls.len(), 2);
    assert!(acls.iter().all(|a| a.principal == "User:bob"));
}

#[test]
fn the_jaas_line_is_the_one_kafka_documents_for_scram() {
    assert_eq!(
        jaas_config("alice", "s3cret"),
        "org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"alice\" password=\"s3cret\";"
    );
    // A given password with a quote or backslash cannot end the value early.
    assert_eq!(
        jaas_config("alice", "a\"b\\c"),
        "org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"alice\" password=\"a\\\"b\\\\c\";"
    );
}

#[tokio::test]
async fn a_second_mechanisms_credential_is_removed_as_a_password_nobody_can_read() {
    let kafka = FakeKafka::default();
    let ku = scram_writer("alice", "orders");
    sync_user(&kafka, &ku, &fresh("pw"), None).await.unwrap();
    kafka
        .scram
        .lock()
        .unwrap()
        .push(("alice".into(), ScramMechanism::Sha256, "by hand".into()));
    let actions = sync_user(&kafka, &ku, &confirmed("pw"), Some("alice"))
        .await
        .unwrap();
    assert_eq!(actions[0].0, "CredentialRemoved");
    let scram = kafka.scram.lock().unwrap().clone();
    assert_eq!(
        scram,
        [(
            "alice".to_string(),
            ScramMechanism::Sha512,
            "pw".to_string()
        )]
    );
}

#[tokio::test]
async fn a_user_of_a_cluster_without_an_authorizer_can_still_be_forgotten() {
    let kafka = FakeKafka::default();
    sync_user(&kafka, &scram_writer("alice", "orders"), &fresh("pw"), None)
        .await
        .unwrap();
    *kafka.acls_disabled.lock().unwrap() = true;
    forget_user(&kafka, "alice", true).await.unwrap();
    assert!(kafka.scram.lock().unwrap().is_empty());
}

#[tokio::test]
async fn forgetting_without_acls_leaves_the_principals_acls() {
    let kafka = FakeKafka::default();
    sync_user(&kafka, &scram_writer("alice", "orders"), &fresh("pw"), None)
        .await
        .unwrap();
    forget_user(&kafka, "alice", false).await.unwrap();
    assert!(kafka.scram.lock().unwrap().is_empty());
    assert_eq!(kafka.acls.lock().unwrap().len(), 2);
}

#[test]
fn a_credentials_debug_form_hides_the_password() {
    let shown = format!("{:?}", fresh("s3cret"));
    assert!(!shown.contains("s3cret"), "{shown}");
}
