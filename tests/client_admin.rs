//! Our admin client (`evenkeel::client`) against the real evenkeel binary; with
//! EVENKEEL_CLIENT_KAFKA_BOOTSTRAP=host:port the same scenarios run against that broker instead.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use evenkeel::client::{
    AdminClient, AlterConfigOp, AlterOpType, ClientError, ConfigEntry, ConfigSource,
    TopicDescription,
};

const TIMEOUT: Duration = Duration::from_secs(15);

/// A broker to talk to: the one named by EVENKEEL_CLIENT_KAFKA_BOOTSTRAP, or a fresh evenkeel.
struct Target {
    bootstrap: String,
    _broker: Option<common::BrokerProcess>,
}

fn target() -> Target {
    match std::env::var("EVENKEEL_CLIENT_KAFKA_BOOTSTRAP") {
        Ok(b) if !b.is_empty() => Target {
            bootstrap: b,
            _broker: None,
        },
        _ => {
            let b = common::BrokerProcess::start(&[]);
            Target {
                bootstrap: b.bootstrap.clone(),
                _broker: Some(b),
            }
        }
    }
}

async fn admin(t: &Target) -> AdminClient {
    AdminClient::connect(&t.bootstrap, TIMEOUT)
        .await
        .expect("connect")
}

/// A topic name no other test (or earlier run against a shared broker) uses.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn configs(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Polls describe_topics until `done` holds for the topic's description (None: absent);
/// metadata reaches the brokers shortly after the controller commits it.
async fn wait_topic(
    a: &AdminClient,
    name: &str,
    done: impl Fn(Option<&TopicDescription>) -> bool,
) -> Option<TopicDescription> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = a
            .describe_topics(Some(&[name.to_string()]))
            .await
            .expect("describe_topics");
        let t = found.into_iter().find(|t| t.name == name);
        if done(t.as_ref()) || Instant::now() > deadline {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn has_leaders(t: Option<&TopicDescription>, partitions: usize) -> bool {
    t.is_some_and(|t| {
        t.partitions.len() == partitions && t.partitions.iter().all(|p| p.leader >= 0)
    })
}

fn kafka_error(e: &ClientError) -> (&'static str, &'static str, Option<&str>) {
    match e {
        ClientError::Kafka {
            api, name, message, ..
        } => (*api, *name, message.as_deref()),
        other => panic!("expected a Kafka error, got {other:?}"),
    }
}

/// The API and Kafka error name of a `Kafka` error.
fn api_and_name(e: &ClientError) -> (&'static str, &'static str) {
    let (api, name, _) = kafka_error(e);
    (api, name)
}

fn entry<'a>(entries: &'a [ConfigEntry], name: &str) -> &'a ConfigEntry {
    entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} not described: {entries:?}"))
}

#[tokio::test]
async fn created_topic_is_described_with_partitions_leader_isr_and_id() {
    let t = target();
    let a = admin(&t).await;
    let name = unique("described");
    let id = a
        .create_topic(&name, 3, 1, &configs(&[("retention.ms", "3600000")]))
        .await
        .expect("create_topic");
    assert!(!id.is_nil());
    let d = wait_topic(&a, &name, |t| has_leaders(t, 3))
        .await
        .expect("topic described");
    assert_eq!(d.topic_id, id);
    assert!(!d.internal);
    assert_eq!(
        d.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    for p in &d.partitions {
        assert!(p.leader >= 0, "{p:?}");
        assert_eq!(p.replicas, [p.leader], "{p:?}");
        assert_eq!(p.isr, [p.leader], "{p:?}");
    }
    // All topics includes it; a missing name is simply absent.
    let all = a.describe_topics(None).await.unwrap();
    assert!(all.iter().any(|t| t.name == name));
    let missing = unique("missing");
    let some = a
        .describe_topics(Some(&[name.clone(), missing.clone()]))
        .await
        .unwrap();
    assert_eq!(
        some.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        [name.as_str()]
    );
    a.delete_topic(&name).await.unwrap();
}

#[tokio::test]
async fn create_existing_topic_is_topic_already_exists() {
    let t = target();
    let a = admin(&t).await;
    let name = unique("twice");
    a.create_topic(&name, 1, 1, &BTreeMap::new()).await.unwrap();
    let e = a
        .create_topic(&name, 1, 1, &BTreeMap::new())
        .await
        .unwrap_err();
    let (api, kafka_name, _) = kafka_error(&e);
    assert_eq!((api, kafka_name), ("CreateTopics", "TOPIC_ALREADY_EXISTS"));
    assert_eq!(e.code(), Some(36));
    a.delete_topic(&name).await.unwrap();
}

#[tokio::test]
async fn partitions_grow_and_a_decrease_is_invalid_partitions() {
    let t = target();
    let a = admin(&t).await;
    let name = unique("grow");
    a.create_topic(&name, 3, 1, &BTreeMap::new()).await.unwrap();
    wait_topic(&a, &name, |t| has_leaders(t, 3)).await;
    a.create_partitions(&name, 5).await.expect("grow 3 -> 5");
    let d = wait_topic(&a, &name, |t| has_leaders(t, 5)).await.unwrap();
    assert_eq!(d.partitions.len(), 5);
    let e = a.create_partitions(&name, 4).await.unwrap_err();
    let (api, kafka_name, message) = kafka_error(&e);
    assert_eq!(
        (api, kafka_name),
        ("CreatePartitions", "INVALID_PARTITIONS")
    );
    let message = message.expect("the broker's message");
    assert!(message.contains('5') && message.contains('4'), "{message}");
    a.delete_topic(&name).await.unwrap();
}

#[tokio::test]
async fn topic_configs_show_sources_and_incremental_changes() {
    let t = target();
    let a = admin(&t).await;
    let name = unique("configs");
    a.create_topic(&name, 1, 1, &configs(&[("retention.ms", "3600000")]))
        .await
        .unwrap();
    wait_topic(&a, &name, |t| has_leaders(t, 1)).await;

    let before = a.describe_topic_configs(&name).await.unwrap();
    let retention = entry(&before, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("3600000"));
    assert_eq!(retention.source, ConfigSource::DynamicTopic);
    assert!(!retention.read_only);
    assert_ne!(
        entry(&before, "segment.bytes").source,
        ConfigSource::DynamicTopic
    );

    a.alter_topic_configs(
        &name,
        &[
            AlterConfigOp {
                name: "segment.bytes".into(),
                op: AlterOpType::Set,
                value: Some("16777216".into()),
            },
            AlterConfigOp {
                name: "retention.ms".into(),
                op: AlterOpType::Delete,
                value: None,
            },
        ],
    )
    .await
    .expect("alter");

    let after = a.describe_topic_configs(&name).await.unwrap();
    let segment = entry(&after, "segment.bytes");
    assert_eq!(segment.value.as_deref(), Some("16777216"));
    assert_eq!(segment.source, ConfigSource::DynamicTopic);
    let retention = entry(&after, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("604800000"), "the default");
    assert!(
        matches!(
            retention.source,
            ConfigSource::Default | ConfigSource::StaticBroker
        ),
        "{retention:?}"
    );

    // A bad value is INVALID_CONFIG with the broker's words; a missing topic is unknown.
    let e = a
        .alter_topic_configs(
            &name,
            &[AlterConfigOp {
                name: "retention.ms".into(),
                op: AlterOpType::Set,
                value: Some("soon".into()),
            }],
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_and_name(&e),
        ("IncrementalAlterConfigs", "INVALID_CONFIG")
    );
    // A key named twice, or a SET without a value, is INVALID_REQUEST and changes nothing.
    let set = |value: Option<&str>| AlterConfigOp {
        name: "retention.ms".into(),
        op: AlterOpType::Set,
        value: value.map(str::to_string),
    };
    for (ops, says) in [
        (
            vec![set(Some("1000")), set(Some("2000"))],
            "duplicate config keys",
        ),
        (
            vec![set(None)],
            "Null value not supported for : retention.ms",
        ),
    ] {
        let e = a.alter_topic_configs(&name, &ops).await.unwrap_err();
        let (_, kafka_name, message) = kafka_error(&e);
        assert_eq!(kafka_name, "INVALID_REQUEST");
        assert!(message.unwrap_or_default().contains(says), "{e}");
    }
    let unchanged = a.describe_topic_configs(&name).await.unwrap();
    assert_eq!(
        entry(&unchanged, "retention.ms").value.as_deref(),
        Some("604800000")
    );
    let e = a
        .describe_topic_configs(&unique("missing"))
        .await
        .unwrap_err();
    assert_eq!(
        api_and_name(&e),
        ("DescribeConfigs", "UNKNOWN_TOPIC_OR_PARTITION")
    );
    a.delete_topic(&name).await.unwrap();
}

#[tokio::test]
async fn describe_cluster_shows_one_broker_and_a_cluster_id() {
    let t = target();
    let a = admin(&t).await;
    let c = a.describe_cluster().await.unwrap();
    assert!(!c.cluster_id.is_empty());
    assert_eq!(c.brokers.len(), 1, "{c:?}");
    let b = &c.brokers[0];
    assert_eq!(format!("{}:{}", b.host, b.port), t.bootstrap);
    assert_eq!(c.controller_id, b.id);
}

#[tokio::test]
async fn deleted_topic_is_no_longer_described() {
    let t = target();
    let a = admin(&t).await;
    let name = unique("deleted");
    a.create_topic(&name, 2, 1, &BTreeMap::new()).await.unwrap();
    wait_topic(&a, &name, |t| has_leaders(t, 2)).await;
    a.delete_topic(&name).await.expect("delete");
    assert!(wait_topic(&a, &name, |t| t.is_none()).await.is_none());
    let all = a.describe_topics(None).await.unwrap();
    assert!(!all.iter().any(|t| t.name == name));
    let e = a.delete_topic(&name).await.unwrap_err();
    assert_eq!(
        api_and_name(&e),
        ("DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION")
    );
}

#[tokio::test]
async fn connect_to_a_closed_port_is_no_broker_not_a_panic() {
    let port = common::free_port();
    let e = AdminClient::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::NoBroker(_)), "{e:?}");
    assert!(e.to_string().contains(&port.to_string()), "{e}");
}

#[tokio::test]
async fn bootstrap_falls_through_to_a_live_broker() {
    let t = target();
    let dead = common::free_port();
    let a = AdminClient::connect(&format!("127.0.0.1:{dead},{}", t.bootstrap), TIMEOUT)
        .await
        .expect("second address is live");
    assert_eq!(a.describe_cluster().await.unwrap().brokers.len(), 1);
}

#[tokio::test]
async fn client_recovers_after_the_broker_restarts() {
    let mut b = common::BrokerProcess::start(&[]);
    let port: u16 = b
        .bootstrap
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("bootstrap port");
    let a = AdminClient::connect(&b.bootstrap, TIMEOUT).await.unwrap();
    let before = unique("before");
    a.create_topic(&before, 1, 1, &BTreeMap::new())
        .await
        .unwrap();
    assert!(b.stop(), "clean shutdown");
    let _tmp = b.take_tempdir();
    let _b2 = common::BrokerProcess::start_on(&b.data, port, &[]);
    // The old connection is dead; the write goes out again on a fresh one.
    let after = unique("after");
    a.create_topic(&after, 1, 1, &BTreeMap::new())
        .await
        .expect("create after restart");
    let names: Vec<String> = a
        .describe_topics(None)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        names.contains(&before) && names.contains(&after),
        "{names:?}"
    );
}

/// The operator's user calls over the wire: a SCRAM credential set, described and removed, and
/// ACLs created, described by principal and deleted by exact filter, against a broker with the
/// StandardAuthorizer (ANONYMOUS a super user, as on a secured cluster's internal listener).
#[tokio::test]
async fn scram_credentials_and_acls_round_trip() {
    use evenkeel::security::acl::{
        AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourcePattern,
        ResourceType,
    };
    use evenkeel::security::sasl::ScramMechanism;
    let b = common::BrokerProcess::start(&[
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS",
    ]);
    let a = AdminClient::connect(&b.bootstrap, TIMEOUT).await.unwrap();
    assert!(a
        .describe_scram_mechanisms("alice")
        .await
        .unwrap()
        .is_empty());
    a.upsert_scram_credential("alice", ScramMechanism::Sha512, "pw")
        .await
        .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while a.describe_scram_mechanisms("alice").await.unwrap() != [ScramMechanism::Sha512] {
        assert!(Instant::now() < deadline, "the credential never showed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let acl = AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::Topic,
            name: "orders".into(),
            pattern_type: PatternType::Literal,
        },
        principal: "User:alice".into(),
        host: "*".into(),
        operation: AclOperation::Write,
        permission: PermissionType::Allow,
    };
    a.create_acls(std::slice::from_ref(&acl)).await.unwrap();
    let alice = AclBindingFilter {
        principal: Some("User:alice".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(
        a.describe_acls(&alice).await.unwrap(),
        std::slice::from_ref(&acl)
    );
    let removed = a
        .delete_acls(&[AclBindingFilter::exactly(&acl)])
        .await
        .unwrap();
    assert_eq!(removed, [acl]);
    a.delete_scram_credentials("alice", &[ScramMechanism::Sha512])
        .await
        .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while !a
        .describe_scram_mechanisms("alice")
        .await
        .unwrap()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the credential never went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Removing what is already gone is not an error.
    a.delete_scram_credentials("alice", &[ScramMechanism::Sha512])
        .await
        .unwrap();
}
