//! Replication under faults on real broker processes: a leader cut off from its followers (by a
//! relay on the replication listener), an unclean election, a reassignment that moves data,
//! a group whose coordinator dies, and consumers reading from the replica in their rack.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{
    admin, create_assigned, partition, produce, producer, read_partition, until, values, Cluster,
};
use evenkeel::client::{AlterConfigOp, AlterOpType, Reassignment};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

const T: Duration = Duration::from_secs(20);

/// How long a partition may take to go offline after its only ISR member is killed: a broker
/// session timeout, after a controller failover, on a loaded machine.
const OFFLINE: Duration = Duration::from_secs(45);

/// The values of partition 0 from its start (see `read_partition`).
fn read_values(bootstrap: &str, topic: &str, expect: usize, extra: &[(&str, &str)]) -> Vec<String> {
    read_partition(bootstrap, topic, expect, extra)
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

#[tokio::test]
async fn a_leader_cut_off_from_its_followers_refuses_acks_all_until_the_link_heals() {
    let c = Cluster::start_relayed(3, &["replica.lag.time.max.ms=3000"]);
    create_assigned(
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
    assert_eq!(read_values(&c.bootstrap(), "cut", 60, &[]), want);
}

#[tokio::test]
async fn an_offline_partition_waits_for_its_isr_until_unclean_election_is_allowed() {
    let mut c = Cluster::start_relayed(3, &["replica.lag.time.max.ms=2000"]);
    create_assigned(&c, "unclean", vec![vec![1, 2, 3]], &[]).await;
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
    // The controller takes it offline only once broker 1's session has expired (9 s without a
    // heartbeat), counted afresh by a new controller when broker 1 was the active one: 11 s on
    // a quiet machine, and over 20 s once on CI's loaded one.
    until("the partition offline", OFFLINE, || async {
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
        read_values(&c.addr(elected.leader as usize), "unclean", 10, &[]),
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
    create_assigned(&c, "moving", vec![vec![1]], &[]).await;
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
        read_values(&c.bootstrap(), "moving", 300, &[]),
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
    create_assigned(&c, "work", vec![vec![1, 2, 3]], &[]).await;
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
    let offsets_partition =
        evenkeel::broker::group::metadata_manager::partition_for_group("resumer", 50);
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
    create_assigned(&c, "nearby", vec![vec![1, 2, 3]], &[]).await;
    produce(&producer(&c.bootstrap(), "all"), "nearby", values("n", 100)).await;
    let before = c
        .metric_where(
            3,
            "kafka_network_requestmetrics_requests_total",
            "request=\"FetchConsumer\"",
        )
        .unwrap_or(0.0);
    let got = read_values(&c.bootstrap(), "nearby", 100, &[("client.rack", "c")]);
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
