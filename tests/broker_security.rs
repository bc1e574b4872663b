//! SASL and ACLs on a 3-node cluster: each node has a PLAINTEXT listener (brokers, and the
//! ANONYMOUS super user that sets things up) and a SASL_PLAINTEXT listener with PLAIN and SCRAM,
//! and runs the StandardAuthorizer. Logins, refusals and authorization as Kafka answers them,
//! and credentials and ACLs that live in the metadata log across kill -9 of every node.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::cluster::{admin, until, Cluster};
use common::raw;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use evenkeel::protocol::errors;
use evenkeel::security::sasl::{ScramClient, ScramMechanism};

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
    user_alice=\"alice-secret\";";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The secured cluster, and each node's SASL address.
struct Secured {
    cluster: Cluster,
    sasl: Vec<String>,
}

fn start() -> Secured {
    let sasl_ports: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let jaas = format!("listener.name.sasl.plain.sasl.jaas.config={JAAS}");
    let overrides = [
        "listener.name.sasl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        jaas.as_str(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin;User:ANONYMOUS",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    ];
    let cluster = Cluster::start_with(3, &overrides, |id, ports| {
        Cluster::sasl_listeners(ports, sasl_ports[id - 1])
    });
    let sasl = sasl_ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    Secured { cluster, sasl }
}

fn handshake(c: &mut TcpStream, mechanism: &str) -> SaslHandshakeResponse {
    raw::call(
        c,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(s(mechanism)),
    )
}

fn authenticate(c: &mut TcpStream, bytes: Vec<u8>) -> SaslAuthenticateResponse {
    raw::call(
        c,
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes.into()),
    )
}

/// A PLAIN login: the connection and the broker's last answer.
fn plain_login(addr: &str, user: &str, password: &str) -> (TcpStream, SaslAuthenticateResponse) {
    let mut c = raw::connect(addr);
    assert_eq!(handshake(&mut c, "PLAIN").error_code, errors::NONE);
    let r = authenticate(&mut c, format!("\0{user}\0{password}").into_bytes());
    (c, r)
}

/// A SCRAM-SHA-512 login: the connection, or the broker's refusal.
fn scram_login(
    addr: &str,
    user: &str,
    password: &str,
) -> Result<TcpStream, SaslAuthenticateResponse> {
    let mut c = raw::connect(addr);
    assert_eq!(handshake(&mut c, "SCRAM-SHA-512").error_code, errors::NONE);
    let mut client = ScramClient::new(ScramMechanism::Sha512, user, password);
    let first = authenticate(&mut c, client.client_first().unwrap());
    if first.error_code != errors::NONE {
        return Err(first);
    }
    let last = authenticate(&mut c, client.server_first(&first.auth_bytes).unwrap());
    if last.error_code != errors::NONE {
        return Err(last);
    }
    client
        .server_final(&last.auth_bytes)
        .expect("the server proves it knows the key");
    Ok(c)
}

/// Metadata for `topics` (all when `None`) on an open connection.
fn metadata(c: &mut TcpStream, topics: Option<&[&str]>) -> MetadataResponse {
    let topics = topics.map(|ts| {
        ts.iter()
            .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(s(t)))))
            .collect()
    });
    raw::call(
        c,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(topics),
    )
}

fn acl(principal: &str, op: i8, topic: &str) -> AclCreation {
    AclCreation::default()
        .with_resource_type(2) // Topic
        .with_resource_name(s(topic))
        .with_resource_pattern_type(3) // LITERAL
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(3) // ALLOW
}

const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;

/// Creates ACLs as the ANONYMOUS super user on the PLAINTEXT listener.
fn create_acls(addr: &str, creations: Vec<AclCreation>) {
    let mut c = raw::connect(addr);
    let r: CreateAclsResponse = raw::call(
        &mut c,
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(creations),
    );
    for x in r.results {
        assert_eq!(x.error_code, errors::NONE, "{:?}", x.error_message);
    }
}

/// How many ACLs node `addr` holds (asked on its PLAINTEXT listener), or `None` when it
/// cannot answer now.
fn acl_count(addr: &str) -> Option<usize> {
    let mut c = TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let r: DescribeAclsResponse = raw::call(
        &mut c,
        ApiKey::DescribeAcls,
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1) // ANY
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(1) // ANY
            .with_operation(1)
            .with_permission_type(1),
    );
    (r.error_code == errors::NONE).then(|| r.resources.iter().map(|x| x.acls.len()).sum())
}

/// Waits until every node holds `n` ACLs: a broker learns the controller's commit a moment
/// after the one that forwarded the request (with Kafka as with evenkeel).
async fn until_every_node_holds(cluster: &Cluster, n: usize) {
    for id in 1..=cluster.nodes.len() {
        let addr = cluster.addr(id);
        until(
            &format!("{n} ACLs on node {id}"),
            Duration::from_secs(30),
            || {
                let addr = addr.clone();
                async move { (acl_count(&addr)? == n).then_some(()) }
            },
        )
        .await;
    }
}

/// Sets `user`'s SCRAM-SHA-512 password as the ANONYMOUS super user.
fn set_scram_password(addr: &str, user: &str, password: &str) {
    let salt = b"a salt of sixteen".to_vec();
    let salted = ScramMechanism::Sha512.salted_password(password, &salt, 4096);
    let mut c = raw::connect(addr);
    let r: AlterUserScramCredentialsResponse = raw::call(
        &mut c,
        ApiKey::AlterUserScramCredentials,
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(s(user))
                .with_mechanism(2)
                .with_iterations(4096)
                .with_salt(salt.into())
                .with_salted_password(salted.into()),
        ]),
    );
    assert_eq!(r.results.len(), 1);
    assert_eq!(
        r.results[0].error_code,
        errors::NONE,
        "{:?}",
        r.results[0].error_message
    );
}

fn alice_producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("security.protocol", "sasl_plaintext")
        .set("sasl.mechanism", "PLAIN")
        .set("sasl.username", "alice")
        .set("sasl.password", "alice-secret")
        .set("acks", "all")
        .set("message.timeout.ms", "15000")
        .set("enable.idempotence", "false")
        .create()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_logins_are_checked_and_refusals_close_the_connection() {
    let sec = start();
    let addr = sec.sasl[0].clone();

    // PLAIN: the right password opens the session; Metadata then answers with the SASL
    // listener's endpoints.
    let (mut c, ok) = plain_login(&addr, "alice", "alice-secret");
    assert_eq!(ok.error_code, errors::NONE, "{:?}", ok.error_message);
    let md = metadata(&mut c, None);
    let ports: Vec<i32> = md.brokers.iter().map(|b| b.port).collect();
    for p in &ports {
        assert!(
            sec.sasl.iter().any(|a| a.ends_with(&format!(":{p}"))),
            "{ports:?}"
        );
    }

    // A wrong password: SASL_AUTHENTICATION_FAILED with Kafka's words, then the broker closes.
    let (mut bad, refused) = plain_login(&addr, "alice", "wrong");
    assert_eq!(refused.error_code, errors::SASL_AUTHENTICATION_FAILED);
    assert_eq!(
        refused.error_message.as_deref(),
        Some("Authentication failed: Invalid username or password")
    );
    assert!(raw::is_closed(&mut bad));

    // A mechanism the listener does not enable: the enabled list, then closed.
    let mut c2 = raw::connect(&addr);
    let h = handshake(&mut c2, "GSSAPI");
    assert_eq!(h.error_code, errors::UNSUPPORTED_SASL_MECHANISM);
    let enabled: Vec<&str> = h.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(enabled, vec!["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert!(raw::is_closed(&mut c2));

    // Any request but ApiVersions before authentication closes the connection unanswered.
    let mut early = raw::connect(&addr);
    raw::send(
        &mut early,
        ApiKey::Metadata,
        12,
        1,
        &MetadataRequest::default(),
    );
    assert!(raw::read_frame(&mut early).is_none());

    // Before the login a frame may be at most sasl.server.max.receive.size (512 KiB).
    let mut big = raw::connect(&addr);
    std::io::Write::write_all(&mut big, &600_000i32.to_be_bytes()).unwrap();
    assert!(raw::is_closed(&mut big));

    // SCRAM-SHA-512 against a credential set with AlterUserScramCredentials.
    let plain = sec.cluster.addr(1);
    let unknown = scram_login(&addr, "carol", "carol-secret").unwrap_err();
    set_scram_password(&plain, "carol", "carol-secret");
    let wrong = scram_login(&addr, "carol", "not-it").unwrap_err();
    assert_eq!(wrong.error_code, errors::SASL_AUTHENTICATION_FAILED);
    assert_eq!(
        unknown.error_message, wrong.error_message,
        "an unknown user reads the same as a wrong password"
    );
    let mut carol = until("carol's login on node 3", Duration::from_secs(30), || {
        let addr = sec.sasl[2].clone();
        async move { scram_login(&addr, "carol", "carol-secret").ok() }
    })
    .await;
    assert!(!metadata(&mut carol, None).brokers.is_empty());

    // The broker went on serving through the refusals, and counted them.
    let (_c3, again) = plain_login(&addr, "admin", "admin-secret");
    assert_eq!(again.error_code, errors::NONE);
    let failures = sec.cluster.metric_where(
        1,
        "kafka_server_socket_server_metrics_failed_authentication_total",
        "listener=\"SASL\"",
    );
    assert!(failures.unwrap_or(0.0) >= 3.0, "{failures:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_without_write_is_refused_and_writes_nothing() {
    let sec = start();
    let plain = sec.cluster.addr(1);
    admin(&plain)
        .await
        .create_topic("orders", 1, 3, &Default::default())
        .await
        .unwrap();
    admin(&plain)
        .await
        .create_topic("secret", 1, 3, &Default::default())
        .await
        .unwrap();

    // No ACL: alice's produce fails with TOPIC_AUTHORIZATION_FAILED.
    let p = alice_producer(&sec.sasl.join(","));
    let refused = p
        .send(
            FutureRecord::<(), _>::to("orders")
                .partition(0)
                .payload("nope"),
            Duration::from_secs(15),
        )
        .await;
    let (e, _) = refused.expect_err("no WRITE on orders");
    assert!(
        e.to_string().contains("authoriz"),
        "expected a topic authorization error, got {e}"
    );
    // Metadata as alice names neither topic (no DESCRIBE); asked by name, each is refused.
    let (mut c, _) = plain_login(&sec.sasl[1], "alice", "alice-secret");
    let all = metadata(&mut c, None);
    assert!(all.topics.is_empty(), "{:?}", all.topics);
    let named = metadata(&mut c, Some(&["secret", "no-such-topic"]));
    for t in &named.topics {
        assert_eq!(t.error_code, errors::TOPIC_AUTHORIZATION_FAILED, "{t:?}");
        assert!(t.partitions.is_empty());
    }

    // WRITE (which implies DESCRIBE) on orders: the produce goes through, and only orders
    // shows in alice's Metadata. (A new producer: librdkafka keeps a topic's authorization
    // error until its next metadata refresh, with Kafka as with evenkeel.)
    create_acls(&plain, vec![acl("User:alice", WRITE, "orders")]);
    until_every_node_holds(&sec.cluster, 1).await;
    let p = alice_producer(&sec.sasl.join(","));
    let d = p
        .send(
            FutureRecord::<(), _>::to("orders")
                .partition(0)
                .payload("yes"),
            Duration::from_secs(15),
        )
        .await
        .expect("WRITE granted");
    assert_eq!(d.offset, 0, "the refused record was not written");
    let names: Vec<String> = metadata(&mut c, None)
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    assert_eq!(names, vec!["orders"]);

    // A consumer fetch without READ is refused per partition; with READ it reads.
    let fetch = |c: &mut TcpStream| -> i16 {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        let r: FetchResponse = raw::call(
            c,
            ApiKey::Fetch,
            12,
            &FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(s("orders")))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_partition_max_bytes(1 << 20)])]),
        );
        r.responses[0].partitions[0].error_code
    };
    let leader = until("a leader of orders", Duration::from_secs(20), || {
        let plain = plain.clone();
        async move {
            common::cluster::partition(&plain, "orders", 0)
                .await
                .and_then(|p| (p.leader >= 1).then_some(p.leader as usize))
        }
    })
    .await;
    let (mut at_leader, _) = plain_login(&sec.sasl[leader - 1], "alice", "alice-secret");
    assert_eq!(fetch(&mut at_leader), errors::TOPIC_AUTHORIZATION_FAILED);
    create_acls(&plain, vec![acl("User:alice", READ, "orders")]);
    until_every_node_holds(&sec.cluster, 2).await;
    assert_eq!(fetch(&mut at_leader), errors::NONE);
    let denied = sec.cluster.metric(
        leader,
        "kafka_server_authorizer_metrics_authorization_denied_total",
    );
    assert!(denied.unwrap_or(0.0) >= 1.0, "{denied:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_and_credentials_survive_kill_9_of_every_node() {
    let mut sec = start();
    let plain = sec.cluster.addr(1);
    create_acls(
        &plain,
        vec![
            acl("User:alice", DESCRIBE, "ledger"),
            acl("User:dave", READ, "ledger"),
        ],
    );
    set_scram_password(&plain, "dave", "dave-secret");
    for id in 1..=3 {
        sec.cluster.kill(id);
    }
    for id in 1..=3 {
        sec.cluster.spawn(id);
    }
    for id in 1..=3 {
        sec.cluster.wait(id);
    }
    // Every node learns them back from the metadata log, whichever controller leads now.
    until_every_node_holds(&sec.cluster, 2).await;
    for id in 1..=3 {
        until(
            &format!("dave's login on node {id}"),
            Duration::from_secs(30),
            || {
                let addr = sec.sasl[id - 1].clone();
                async move { scram_login(&addr, "dave", "dave-secret").ok() }
            },
        )
        .await;
    }
}

/// The error of each request alice (authenticated, no ACL at all) sends, by the API's name.
fn refusals(c: &mut TcpStream) -> Vec<(&'static str, i16, i16)> {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let topic = || TopicName(s("orders"));
    let group = || GroupId(s("payments"));
    let topic_auth = errors::TOPIC_AUTHORIZATION_FAILED;
    let cluster_auth = errors::CLUSTER_AUTHORIZATION_FAILED;
    let group_auth = errors::GROUP_AUTHORIZATION_FAILED;
    let mut out = Vec::new();
    let r: CreateTopicsResponse = raw::call(
        c,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s("new-one")))
            .with_num_partitions(1)
            .with_replication_factor(1)]),
    );
    out.push(("CreateTopics", r.topics[0].error_code, topic_auth));
    let r: DeleteTopicsResponse = raw::call(
        c,
        ApiKey::DeleteTopics,
        5,
        &DeleteTopicsRequest::default().with_topic_names(vec![topic()]),
    );
    out.push(("DeleteTopics", r.responses[0].error_code, topic_auth));
    let r: CreatePartitionsResponse = raw::call(
        c,
        ApiKey::CreatePartitions,
        3,
        &CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(topic())
            .with_count(5)
            .with_assignments(None)]),
    );
    out.push(("CreatePartitions", r.results[0].error_code, topic_auth));
    let r: DeleteRecordsResponse = raw::call(
        c,
        ApiKey::DeleteRecords,
        2,
        &DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
            .with_name(topic())
            .with_partitions(vec![DeleteRecordsPartition::default().with_offset(1)])]),
    );
    out.push((
        "DeleteRecords",
        r.topics[0].partitions[0].error_code,
        topic_auth,
    ));
    let r: ListOffsetsResponse = raw::call(
        c,
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic())
                .with_partitions(vec![
                    ListOffsetsPartition::default().with_timestamp(-1)
                ])]),
    );
    out.push((
        "ListOffsets",
        r.topics[0].partitions[0].error_code,
        topic_auth,
    ));
    let r: DescribeConfigsResponse = raw::call(
        c,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("orders"))
                .with_configuration_keys(None),
            DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("1"))
                .with_configuration_keys(None),
        ]),
    );
    out.push(("DescribeConfigs topic", r.results[0].error_code, topic_auth));
    out.push((
        "DescribeConfigs broker",
        r.results[1].error_code,
        cluster_auth,
    ));
    let r: ElectLeadersResponse = raw::call(
        c,
        ApiKey::ElectLeaders,
        2,
        &ElectLeadersRequest::default().with_topic_partitions(None),
    );
    out.push(("ElectLeaders", r.error_code, cluster_auth));
    let r: CreateAclsResponse = raw::call(
        c,
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(vec![acl("User:alice", WRITE, "orders")]),
    );
    out.push(("CreateAcls", r.results[0].error_code, cluster_auth));
    let r: DescribeAclsResponse = raw::call(
        c,
        ApiKey::DescribeAcls,
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1)
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None),
    );
    out.push(("DescribeAcls", r.error_code, cluster_auth));
    // DESCRIBE on the cluster, else the error and no directory at all.
    let r: DescribeLogDirsResponse = raw::call(
        c,
        ApiKey::DescribeLogDirs,
        4,
        &DescribeLogDirsRequest::default().with_topics(None),
    );
    let named = if r.results.is_empty() {
        r.error_code
    } else {
        -2
    };
    out.push(("DescribeLogDirs", named, cluster_auth));
    // ALTER on the cluster: the top-level error, before the controller hears of it.
    let r: UpdateFeaturesResponse = raw::call(
        c,
        ApiKey::UpdateFeatures,
        2,
        &UpdateFeaturesRequest::default().with_feature_updates(vec![
            kafka_protocol::messages::update_features_request::FeatureUpdateKey::default()
                .with_feature(s("metadata.version"))
                .with_max_version_level(27)
                .with_upgrade_type(1),
        ]),
    );
    out.push(("UpdateFeatures", r.error_code, cluster_auth));
    let r: AlterUserScramCredentialsResponse = raw::call(c, ApiKey::AlterUserScramCredentials, 0, &AlterUserScramCredentialsRequest::default()
        .with_deletions(vec![kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion::default().with_name(s("admin")).with_mechanism(2)]));
    out.push((
        "AlterUserScramCredentials",
        r.results[0].error_code,
        cluster_auth,
    ));
    // ALTER_CONFIGS on the cluster, each entry refused before the controller hears of it.
    use kafka_protocol::messages::alter_client_quotas_request as quotas;
    let r: AlterClientQuotasResponse = raw::call(
        c,
        ApiKey::AlterClientQuotas,
        1,
        &AlterClientQuotasRequest::default().with_entries(vec![quotas::EntryData::default()
            .with_entity(vec![quotas::EntityData::default()
                .with_entity_type(s("client-id"))
                .with_entity_name(Some(s("app")))])
            .with_ops(vec![quotas::OpData::default()
                .with_key(s("producer_byte_rate"))
                .with_value(1024.0)])]),
    );
    out.push(("AlterClientQuotas", r.entries[0].error_code, cluster_auth));
    let r: InitProducerIdResponse = raw::call(
        c,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    );
    out.push(("InitProducerId", r.error_code, cluster_auth));
    let r: FindCoordinatorResponse = raw::call(
        c,
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default().with_coordinator_keys(vec![s("payments")]),
    );
    out.push(("FindCoordinator", r.coordinators[0].error_code, group_auth));
    let r: JoinGroupResponse = raw::call(
        c,
        ApiKey::JoinGroup,
        9,
        &JoinGroupRequest::default()
            .with_group_id(group())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer")),
    );
    out.push(("JoinGroup", r.error_code, group_auth));
    let r: OffsetFetchResponse = raw::call(
        c,
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(group())
            .with_topics(None),
    );
    out.push(("OffsetFetch", r.error_code, group_auth));
    let r: DescribeGroupsResponse = raw::call(
        c,
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![group()]),
    );
    out.push(("DescribeGroups", r.groups[0].error_code, group_auth));
    let r: DeleteGroupsResponse = raw::call(
        c,
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![group()]),
    );
    out.push(("DeleteGroups", r.results[0].error_code, group_auth));
    let r: ConsumerGroupHeartbeatResponse = raw::call(
        c,
        ApiKey::ConsumerGroupHeartbeat,
        1,
        &ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group())
            .with_member_id(s("m"))
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![topic()]))
            .with_topic_partitions(Some(Vec::new())),
    );
    out.push(("ConsumerGroupHeartbeat", r.error_code, group_auth));
    let r: ConsumerGroupDescribeResponse = raw::call(
        c,
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![group()]),
    );
    out.push(("ConsumerGroupDescribe", r.groups[0].error_code, group_auth));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_refuses_a_principal_without_the_right() {
    let sec = start();
    let plain = sec.cluster.addr(1);
    admin(&plain)
        .await
        .create_topic("orders", 1, 3, &Default::default())
        .await
        .unwrap();
    let (mut c, _) = plain_login(&sec.sasl[0], "alice", "alice-secret");
    let wrong: Vec<String> = refusals(&mut c)
        .into_iter()
        .filter(|(_, got, want)| got != want)
        .map(|(api, got, want)| {
            format!(
                "{api}: {} instead of {}",
                errors::error_name(got),
                errors::error_name(want)
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Nothing changed: the topic is there with its one partition and no ACL was stored.
    let t = common::cluster::partition(&plain, "orders", 0).await;
    assert!(t.is_some());
    assert!(common::cluster::partition(&plain, "orders", 1)
        .await
        .is_none());
    assert_eq!(acl_count(&plain), Some(0));
    // CREATE without DESCRIBE: Metadata does not auto-create a topic it would then hide.
    const CREATE: i8 = 5;
    create_acls(&plain, vec![acl("User:alice", CREATE, "made-by-alice")]);
    until_every_node_holds(&sec.cluster, 1).await;
    let asked: MetadataResponse = raw::call(
        &mut c,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(s("made-by-alice"))))
            ]))
            .with_allow_auto_topic_creation(true),
    );
    assert_eq!(
        asked.topics[0].error_code,
        errors::TOPIC_AUTHORIZATION_FAILED
    );
    assert!(common::cluster::partition(&plain, "made-by-alice", 0)
        .await
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_session_ends_unless_the_client_logs_in_again() {
    let jaas = format!("listener.name.sasl.plain.sasl.jaas.config={JAAS}");
    let sasl_port = common::free_port();
    let overrides = [
        "listener.name.sasl.sasl.enabled.mechanisms=PLAIN",
        jaas.as_str(),
        "connections.max.reauth.ms=1500",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    ];
    let _cluster = Cluster::start_with(1, &overrides, |_, ports| {
        Cluster::sasl_listeners(ports, sasl_port)
    });
    let addr = format!("127.0.0.1:{sasl_port}");
    let start = std::time::Instant::now();
    let (mut lapsed, ok) = plain_login(&addr, "alice", "alice-secret");
    assert_eq!(ok.session_lifetime_ms, 1500);
    let (mut renewed, _) = plain_login(&addr, "alice", "alice-secret");
    // One client logs in again before its session ends; the other does not. Both keep asking.
    let mut renewed_at = std::time::Instant::now();
    let closed_after = loop {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the session never ended"
        );
        raw::send(
            &mut lapsed,
            ApiKey::Metadata,
            12,
            1,
            &MetadataRequest::default(),
        );
        if raw::read_frame(&mut lapsed).is_none() {
            break start.elapsed();
        }
        if renewed_at.elapsed() > Duration::from_millis(700) {
            assert_eq!(handshake(&mut renewed, "PLAIN").error_code, errors::NONE);
            let again = authenticate(&mut renewed, b"\0alice\0alice-secret".to_vec());
            assert_eq!(again.error_code, errors::NONE);
            renewed_at = std::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        closed_after >= Duration::from_millis(1500),
        "{closed_after:?}"
    );
    let md = metadata(&mut renewed, None);
    assert!(
        !md.brokers.is_empty(),
        "the client that logged in again is still served"
    );
}
