//! Replication under faults on real broker processes: a leader cut off from its followers (by a
//! relay on the replication listener), an unclean election, a reassignment that moves data,
//! a group whose coordinator dies, and consumers reading from the replica in their rack.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use evenkeel::client::{AdminClient, AlterConfigOp, AlterOpType, PartitionInfo, Reassignment};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

const T: Duration = Duration::from_secs(20);

async fn admin(addr: &str) -> AdminClient {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match AdminClient::connect(addr, T).await {
            Ok(a) => return a,
            Err(e) if Instant::now() > deadline => panic!("cannot reach {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn partition(addr: &str, topic: &str, p: i32) -> Option<PartitionInfo> {
    let a = AdminClient::connect(addr, T).await.ok()?;
    let t = a
        .describe_topics(Some(&[topic.to_string()]))
        .await
        .ok()?
        .into_iter()
        .next()?;
    t.partitions.into_iter().find(|x| x.partition == p)
}

async fn until<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn producer(bootstrap: &str, acks: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", acks)
        .set("linger.ms", "2")
        .set("message.timeout.ms", "20000")
        .set("retries", "0")
        .set("enable.idempotence", "false")
        .create()
        .unwrap()
}

async fn produce(
    p: &FutureProducer,
    topic: &str,
    values: impl IntoIterator<Item = String>,
) -> Vec<i64> {
    let mut out = Vec::new();
    for v in values {
        let d = p
            .send(
                FutureRecord::<(), _>::to(topic).partition(0).payload(&v),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("{v} not acked: {e}"));
        out.push(d.offset);
    }
    out
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn read_partition(
    bootstrap: &str,
    topic: &str,
    expect: usize,
    extra: &[(&str, &str)],
) -> Vec<String> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", "faults-reader")
        .set("enable.auto.commit", "false");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let c: BaseConsumer = cfg.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < expect && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    out
}

async fn create(c: &Cluster, topic: &str, assignment: Vec<Vec<i32>>, configs: &[(&str, &str)]) {
    let configs: BTreeMap<String, String> = configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    admin(&c.addr(1))
        .await
        .create_topic_with_assignment(topic, &assignment, &configs)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_leader_cut_off_from_its_followers_refuses_acks_all_until_the_link_heals() {
    let c = Cluster::start_relayed(3, &["replica.lag.time.max.ms=3000"]);
    create(
        &c,
        "cut",
        vec![vec![1, 2, 3]],
        &[("min.insync.replicas", "2")],
    )
    .await;
    let p = producer(&c.addr(1), "all");
    produce(&p, "cut", values("before", 50)).await;
    // Followers reach broker 1's replication listener only through its relay.
    c.relays[0].cut();
    until("the leader alone in the ISR", T, || async {
        let p = partition(&c.addr(1), "cut", 0).await?;
        (p.isr == vec![1]).then_some(())
    })
    .await;
    let refused = p
        .send(
            FutureRecord::<(), _>::to("cut")
                .partition(0)
                .payload("refused"),
            Duration::from_secs(10),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err((
                KafkaError::MessageProduction(RDKafkaErrorCode::NotEnoughReplicas),
                _
            ))
        ),
        "{refused:?}"
    );
    c.relays[0].heal();
    until("the ISR whole again", Duration::from_secs(30), || async {
        let p = partition(&c.addr(1), "cut", 0).await?;
        (p.isr.len() == 3).then_some(())
    })
    .await;
    let after = produce(&p, "cut", values("after", 10)).await;
    assert_eq!(
        after,
        (50..60).collect::<Vec<i64>>(),
        "the refused record took no offset"
    );
    let mut want = values("before", 50);
    want.extend(values("after", 10));
    assert_eq!(read_partition(&c.bootstrap(), "cut", 60, &[]), want);
}

#[tokio::test]
async fn an_offline_partition_waits_for_its_isr_until_unclean_election_is_allowed() {
    let mut c = Cluster::start_relayed(3, &["replica.lag.time.max.ms=2000"]);
    create(&c, "unclean", vec![vec![1, 2, 3]], &[]).await;
    let all = producer(&c.addr(1), "all");
    produce(&all, "unclean", values("shared", 10)).await;
    // The followers fall out of the ISR; then records only the leader has.
    c.relays[0].cut();
    until("the leader alone in the ISR", T, || async {
        let p = partition(&c.addr(1), "unclean", 0).await?;
        (p.isr == vec![1]).then_some(())
    })
    .await;
    produce(
        &producer(&c.addr(1), "1"),
        "unclean",
        values("only-on-1-", 5),
    )
    .await;
    c.kill(1);
    c.relays[0].heal();
    // The only ISR member is gone: no leader, and none for as long as unclean election is off.
    until("the partition offline", T, || async {
        let p = partition(&c.addr(2), "unclean", 0).await?;
        (p.leader == -1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = partition(&c.addr(2), "unclean", 0).await.unwrap();
    assert_eq!((p.leader, p.isr.clone()), (-1, vec![1]), "{p:?}");
    admin(&c.addr(2))
        .await
        .alter_topic_configs(
            "unclean",
            &[AlterConfigOp {
                name: "unclean.leader.election.enable".into(),
                op: AlterOpType::Set,
                value: Some("true".into()),
            }],
        )
        .await
        .unwrap();
    let elected = until("an unclean leader", T, || async {
        let p = partition(&c.addr(2), "unclean", 0).await?;
        (p.leader == 2 || p.leader == 3).then_some(p)
    })
    .await;
    // The new leader starts alone in the ISR (the other survivor may have rejoined since).
    assert!(
        elected.isr.contains(&elected.leader) && !elected.isr.contains(&1),
        "{elected:?}"
    );
    assert_eq!(
        read_partition(&c.addr(elected.leader as usize), "unclean", 10, &[]),
        values("shared", 10)
    );
    // Broker 1 comes back as a follower and truncates what only it had, saying so.
    c.restart(1);
    until("broker 1's truncation in its log", T, || async {
        c.log(1).contains("truncating").then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_reassignment_copies_the_data_then_drops_the_old_replica() {
    let c = Cluster::start(3, &[]);
    create(&c, "moving", vec![vec![1]], &[]).await;
    produce(&producer(&c.bootstrap(), "all"), "moving", values("m", 300)).await;
    let a = admin(&c.addr(1)).await;
    a.alter_partition_reassignments(&[Reassignment {
        topic: "moving".into(),
        partition: 0,
        replicas: Some(vec![2, 3]),
    }])
    .await
    .unwrap();
    let done = until(
        "the reassignment to complete",
        Duration::from_secs(30),
        || async {
            let p = partition(&c.addr(1), "moving", 0).await?;
            (p.replicas == vec![2, 3] && p.isr.len() == 2).then_some(p)
        },
    )
    .await;
    assert!(done.leader == 2 || done.leader == 3, "{done:?}");
    assert!(a.list_partition_reassignments().await.unwrap().is_empty());
    assert_eq!(
        read_partition(&c.bootstrap(), "moving", 300, &[]),
        values("m", 300)
    );
    let old = c.data.join("broker-1").join("moving-0");
    until("broker 1 to delete its replica", T, || async {
        (!old.exists()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_group_resumes_at_its_committed_offsets_on_a_new_coordinator() {
    let mut c = Cluster::start(3, &[]);
    create(&c, "work", vec![vec![1, 2, 3]], &[]).await;
    produce(&producer(&c.bootstrap(), "all"), "work", values("w", 20)).await;
    let consumer = |bootstrap: &str| -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "resumer")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap()
    };
    let first = consumer(&c.bootstrap());
    first.subscribe(&["work"]).unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < 12 && Instant::now() < deadline {
        if let Some(Ok(_)) = first.poll(Duration::from_millis(200)) {
            got += 1;
        }
    }
    assert_eq!(got, 12);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("work", 0, Offset::Offset(12))
        .unwrap();
    first.commit(&tpl, CommitMode::Sync).unwrap();
    drop(first);
    // The coordinator is the leader of the group's __consumer_offsets partition.
    let offsets_partition = evenkeel::broker::group::api::partition_for_group("resumer", 50);
    let coordinator = partition(&c.addr(1), "__consumer_offsets", offsets_partition)
        .await
        .unwrap();
    assert_eq!(coordinator.isr.len(), 3, "{coordinator:?}");
    c.kill(coordinator.leader as usize);
    until("a new coordinator", Duration::from_secs(30), || async {
        let alive = if coordinator.leader == 1 { 2 } else { 1 };
        let p = partition(&c.addr(alive), "__consumer_offsets", offsets_partition).await?;
        (p.leader >= 0 && p.leader != coordinator.leader).then_some(())
    })
    .await;
    let second = consumer(&c.live_bootstrap());
    let committed = second
        .committed_offsets(
            {
                let mut t = TopicPartitionList::new();
                t.add_partition("work", 0);
                t
            },
            Duration::from_secs(30),
        )
        .unwrap();
    let at = committed.find_partition("work", 0).unwrap().offset();
    assert_eq!(
        at,
        Offset::Offset(12),
        "the new coordinator has the committed offset"
    );
}

#[tokio::test]
async fn a_consumer_reads_from_the_replica_in_its_rack() {
    let racks = ["a", "b", "c"];
    let c = Cluster::start_with(
        3,
        &["replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"],
        |id, _| vec![("broker.rack".to_string(), racks[id - 1].to_string())],
    );
    create(&c, "nearby", vec![vec![1, 2, 3]], &[]).await;
    produce(&producer(&c.bootstrap(), "all"), "nearby", values("n", 100)).await;
    let before = c
        .metric_where(
            3,
            "kafka_network_requestmetrics_requests_total",
            "request=\"FetchConsumer\"",
        )
        .unwrap_or(0.0);
    let got = read_partition(&c.bootstrap(), "nearby", 100, &[("client.rack", "c")]);
    assert_eq!(got, values("n", 100));
    let after = c
        .metric_where(
            3,
            "kafka_network_requestmetrics_requests_total",
            "request=\"FetchConsumer\"",
        )
        .unwrap_or(0.0);
    assert!(
        after > before,
        "broker 3 (rack c) served none of the consumer's fetches ({before} -> {after})"
    );
}
