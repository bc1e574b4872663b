//! The consumer group protocol (KIP-848) against the real binary: librdkafka members with
//! `group.protocol=consumer` joining and leaving under a steady produce, a classic group's
//! offsets kept across the switch, and the heartbeat's refusals on the wire.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::Message;

/// Broker keys that let the protocol move in test time (Kafka's minimums are 5 s and 45 s).
const FAST: &[&str] = &[
    "group.consumer.min.heartbeat.interval.ms=100",
    "group.consumer.heartbeat.interval.ms=300",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.session.timeout.ms=6000",
];

fn member(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("group.protocol", "consumer")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap()
}

fn assigned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .map(|a| a.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// A member's loop: poll, commit each record before the next, until `stop`; returns the
/// (partition, offset) of every record it was given.
fn run_member(c: BaseConsumer, stop: Arc<AtomicBool>) -> Vec<Record> {
    let mut seen = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            seen.push((m.partition(), m.offset()));
            // A commit can be refused while the partition is being revoked; the record is
            // then read again by its next owner, which the test would count.
            let _ = c.commit_message(&m, CommitMode::Sync);
        }
    }
    drop(c);
    seen
}

/// A member's loop running on its own thread, and its stop switch.
type Member = (Arc<AtomicBool>, std::thread::JoinHandle<Vec<Record>>);

fn spawn_member(bootstrap: &str, group: &str, topic: &str) -> Member {
    let c = member(bootstrap, group);
    c.subscribe(&[topic]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    (stop, std::thread::spawn(move || run_member(c, s)))
}

/// Stops a member; what it was given.
async fn stop_member((stop, handle): Member) -> Vec<Record> {
    stop.store(true, Ordering::Relaxed);
    tokio::task::spawn_blocking(move || handle.join().unwrap())
        .await
        .unwrap()
}

async fn produce(bootstrap: &str, topic: &str, n: usize, pace: Duration) -> BTreeMap<i32, i64> {
    let p = common::producer(bootstrap, &[]);
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for i in 0..n {
        let v = format!("{i}");
        let d = p
            .send(
                FutureRecord::to(topic).key(&v).payload(&v),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        let end = ends.entry(d.partition).or_default();
        *end = (*end).max(d.offset + 1);
        tokio::time::sleep(pace).await;
    }
    ends
}

#[tokio::test(flavor = "multi_thread")]
async fn members_join_and_leave_during_a_steady_produce_and_every_record_is_consumed_once() {
    let b = common::BrokerProcess::start(FAST);
    common::create_topic(&b.bootstrap, "steady", 6, &[]).await;
    let producer = {
        let bootstrap = b.bootstrap.clone();
        tokio::spawn(
            async move { produce(&bootstrap, "steady", 1500, Duration::from_millis(6)).await },
        )
    };
    let a = spawn_member(&b.bootstrap, "kip848", "steady");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bm = spawn_member(&b.bootstrap, "kip848", "steady");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c = spawn_member(&b.bootstrap, "kip848", "steady");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // b leaves while records still flow; a and c take its partitions over.
    let seen_b = stop_member(bm).await;
    let ends = producer.await.unwrap();
    let total: i64 = ends.values().sum();
    until_all_committed(&b.bootstrap, "kip848", "steady", &ends).await;
    let seen_a = stop_member(a).await;
    let seen_c = stop_member(c).await;
    let (missing, twice) = missing_and_twice(&ends, &[&seen_a, &seen_b, &seen_c]);
    eprintln!(
        "records {total}: a {}, b {}, c {}; missing {}, read twice {}",
        seen_a.len(),
        seen_b.len(),
        seen_c.len(),
        missing.len(),
        twice.len()
    );
    assert!(missing.is_empty(), "records never consumed: {missing:?}");
    assert!(twice.is_empty(), "records consumed twice: {twice:?}");
    for (name, seen) in [("a", &seen_a), ("b", &seen_b), ("c", &seen_c)] {
        assert!(!seen.is_empty(), "member {name} consumed nothing");
    }
}

/// The group's committed offsets of `topic` summed over the partitions of `ends` (asked by
/// a client that does not join the group).
fn committed_total(bootstrap: &str, group: &str, topic: &str, ends: &BTreeMap<i32, i64>) -> i64 {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in ends.keys() {
        tpl.add_partition(topic, *p);
    }
    let Ok(committed) = c.committed_offsets(tpl, Duration::from_secs(10)) else {
        return 0;
    };
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => o,
            _ => 0,
        })
        .sum()
}

/// Waits (up to a minute) until the group has committed every record of `ends`.
async fn until_all_committed(bootstrap: &str, group: &str, topic: &str, ends: &BTreeMap<i32, i64>) {
    let total: i64 = ends.values().sum();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (b, g, t, e) = (
            bootstrap.to_string(),
            group.to_string(),
            topic.to_string(),
            ends.clone(),
        );
        let done = tokio::task::spawn_blocking(move || committed_total(&b, &g, &t, &e))
            .await
            .unwrap();
        if done == total {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the group committed {done} of {total} records within a minute"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A record by partition and offset.
type Record = (i32, i64);

/// The records of `ends` no member was given, and those given more than once.
fn missing_and_twice(
    ends: &BTreeMap<i32, i64>,
    seen: &[&Vec<(i32, i64)>],
) -> (Vec<Record>, Vec<Record>) {
    let mut count: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for r in seen.iter().flat_map(|s| s.iter()) {
        *count.entry(*r).or_default() += 1;
    }
    let missing = ends
        .iter()
        .flat_map(|(p, end)| (0..*end).map(move |o| (*p, o)))
        .filter(|r| !count.contains_key(r))
        .collect();
    let twice = count
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(r, _)| r)
        .collect();
    (missing, twice)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_goes_on_when_its_coordinator_is_killed_mid_rebalance() {
    use common::cluster::{create_assigned, partition, until, Cluster};
    let mut c = Cluster::start(3, FAST);
    let replicas = vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2], vec![1, 2, 3]];
    create_assigned(&c, "moving", replicas, &[("min.insync.replicas", "2")]).await;
    let bootstrap = c.bootstrap();
    let producer = {
        let b = bootstrap.clone();
        tokio::spawn(async move { produce(&b, "moving", 1200, Duration::from_millis(8)).await })
    };
    let a = spawn_member(&bootstrap, "failover", "moving");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let offsets_partition =
        evenkeel::broker::group::metadata_manager::partition_for_group("failover", 50);
    let coordinator = partition(&c.addr(1), "__consumer_offsets", offsets_partition)
        .await
        .unwrap();
    // A member that joins and leaves moves the group epoch twice more.
    let mut s = common::raw::connect(&c.addr(coordinator.leader as usize));
    let probe =
        |epoch| join("probe", epoch).with_group_id(GroupId(StrBytes::from_static_str("failover")));
    let joined: ConsumerGroupHeartbeatResponse =
        common::raw::call(&mut s, ApiKey::ConsumerGroupHeartbeat, 1, &probe(0));
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let left: ConsumerGroupHeartbeatResponse = common::raw::call(
        &mut s,
        ApiKey::ConsumerGroupHeartbeat,
        1,
        &probe(-1).with_topic_partitions(None),
    );
    assert_eq!(left.error_code, 0);
    // b joins: a is asked to give partitions up, and the coordinator dies meanwhile.
    let bm = spawn_member(&bootstrap, "failover", "moving");
    let at = c.addr(coordinator.leader as usize);
    let before = until("the group reconciling", Duration::from_secs(10), || async {
        let d = describe_group(&at, "failover");
        (d.members.len() == 2 && d.group_state.as_str() != "Stable").then_some(d)
    })
    .await;
    assert!(before.group_epoch >= 4, "{before:?}");
    c.kill(coordinator.leader as usize);
    let alive = if coordinator.leader == 1 { 2 } else { 1 };
    let successor = until("a new coordinator", Duration::from_secs(30), || async {
        let p = partition(&c.addr(alive), "__consumer_offsets", offsets_partition).await?;
        (p.leader >= 0 && p.leader != coordinator.leader).then_some(p.leader)
    })
    .await;
    // The new coordinator read the group back: its epoch did not start over, its members
    // are there.
    let after = until(
        "the group on the new coordinator",
        Duration::from_secs(30),
        || async {
            let d = describe_group(&c.addr(successor as usize), "failover");
            (d.error_code == 0).then_some(d)
        },
    )
    .await;
    assert!(
        after.group_epoch >= before.group_epoch,
        "{before:?} then {after:?}"
    );
    assert!(!after.members.is_empty(), "{after:?}");
    let ends = producer.await.unwrap();
    let live = c.live_bootstrap();
    until_all_committed(&live, "failover", "moving", &ends).await;
    let seen_a = stop_member(a).await;
    let seen_b = stop_member(bm).await;
    let (missing, twice) = missing_and_twice(&ends, &[&seen_a, &seen_b]);
    eprintln!(
        "records {}: a {}, b {}; missing {}, read twice {}",
        ends.values().sum::<i64>(),
        seen_a.len(),
        seen_b.len(),
        missing.len(),
        twice.len()
    );
    assert!(missing.is_empty(), "records never consumed: {missing:?}");
    assert!(twice.is_empty(), "records consumed twice: {twice:?}");
    assert!(
        !seen_a.is_empty() && !seen_b.is_empty(),
        "both members consumed"
    );
}

#[tokio::test]
async fn a_classic_group_switched_to_the_consumer_protocol_keeps_its_offsets() {
    let b = common::BrokerProcess::start(FAST);
    common::create_topic(&b.bootstrap, "switch", 1, &[]).await;
    produce(&b.bootstrap, "switch", 10, Duration::ZERO).await;
    let classic: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("group.id", "switching")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    classic.subscribe(&["switch"]).unwrap();
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while read < 4 && Instant::now() < deadline {
        if let Some(Ok(m)) = classic.poll(Duration::from_millis(100)) {
            read += 1;
            classic.commit_message(&m, CommitMode::Sync).unwrap();
        }
    }
    assert_eq!(read, 4);
    drop(classic);
    let c = member(&b.bootstrap, "switching");
    c.subscribe(&["switch"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            break m.offset();
        }
        assert!(
            Instant::now() < deadline,
            "no record for the consumer-protocol member"
        );
    };
    assert_eq!(
        first, 4,
        "the consumer protocol member starts at the classic commit"
    );
    assert_eq!(assigned(&c), BTreeSet::from([0]));
    let g = describe_group(&b.bootstrap, "switching");
    assert_eq!(g.error_code, 0);
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_type, 1);
    let parts = &g.members[0].assignment.topic_partitions;
    assert_eq!(parts[0].topic_name.0.as_str(), "switch");
    assert_eq!(parts[0].partitions, vec![0]);
}

/// ConsumerGroupDescribe of one group, asked of `addr`.
fn describe_group(addr: &str, group: &str) -> consumer_group_describe_response::DescribedGroup {
    let mut s = common::raw::connect(addr);
    let req = ConsumerGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_string(group.into()))]);
    let mut d: ConsumerGroupDescribeResponse =
        common::raw::call(&mut s, ApiKey::ConsumerGroupDescribe, 1, &req);
    d.groups.remove(0)
}

fn join(member: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("wire")))
        .with_member_id(StrBytes::from_string(member.into()))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("w"))]))
        .with_topic_partitions(Some(Vec::<TopicPartitions>::new()))
}

#[tokio::test]
async fn heartbeats_are_refused_with_kafkas_errors() {
    let b = common::BrokerProcess::start(FAST);
    common::create_topic(&b.bootstrap, "w", 2, &[]).await;
    let mut s = common::raw::connect(&b.bootstrap);
    let mut call =
        |req: &ConsumerGroupHeartbeatRequest, v: i16| -> ConsumerGroupHeartbeatResponse {
            common::raw::call(&mut s, ApiKey::ConsumerGroupHeartbeat, v, req)
        };
    let joined = call(&join("m1", 0), 1);
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    assert_eq!(joined.member_epoch, 1);
    assert_eq!(joined.heartbeat_interval_ms, 300);
    let parts: Vec<i32> = joined.assignment.unwrap().topic_partitions[0]
        .partitions
        .clone();
    assert_eq!(parts, vec![0, 1]);

    let ahead = call(
        &join("m1", 0)
            .with_member_epoch(7)
            .with_topic_partitions(None),
        1,
    );
    assert_eq!(ahead.error_code, 110, "FENCED_MEMBER_EPOCH");
    assert!(ahead
        .error_message
        .unwrap()
        .contains("greater member epoch (7)"));
    let stranger = call(
        &join("nobody", 0)
            .with_member_epoch(3)
            .with_topic_partitions(None),
        1,
    );
    assert_eq!(stranger.error_code, 25, "UNKNOWN_MEMBER_ID");
    let no_id = call(&join("", 0), 1);
    assert_eq!(no_id.error_code, 42, "INVALID_REQUEST");
    assert_eq!(
        no_id.error_message.unwrap().as_str(),
        "MemberId can't be empty."
    );
    // v0: the coordinator names a joining member.
    let named = call(&join("", 0), 0);
    assert_eq!(named.error_code, 0);
    assert!(!named.member_id.unwrap().is_empty());
    let assignor = call(
        &join("m2", 0).with_server_assignor(Some(StrBytes::from_static_str("sticky"))),
        1,
    );
    assert_eq!(assignor.error_code, 112, "UNSUPPORTED_ASSIGNOR");
    assert_eq!(
        assignor.error_message.unwrap().as_str(),
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
    );
    let regex = join("m3", 0)
        .with_subscribed_topic_names(None)
        .with_subscribed_topic_regex(Some(StrBytes::from_static_str("w(")));
    let bad = call(&regex, 1);
    assert_eq!(bad.error_code, 128, "INVALID_REGULAR_EXPRESSION");
    assert!(bad
        .error_message
        .unwrap()
        .starts_with("SubscribedTopicRegex `w(` is not a valid"));
    let first = call(&join("m4", 0).with_rebalance_timeout_ms(-1), 1);
    assert_eq!(first.error_code, 42);
    assert_eq!(
        first.error_message.unwrap().as_str(),
        "RebalanceTimeoutMs must be provided in first request."
    );
    let left = call(
        &join("m1", 0)
            .with_member_epoch(-1)
            .with_topic_partitions(None),
        1,
    );
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
}

#[tokio::test]
async fn a_regex_subscription_follows_the_topics_it_matches() {
    let b = common::BrokerProcess::start(FAST);
    common::create_topic(&b.bootstrap, "metrics-a", 2, &[]).await;
    common::create_topic(&b.bootstrap, "logs", 1, &[]).await;
    let mut s = common::raw::connect(&b.bootstrap);
    let mut call = |req: &ConsumerGroupHeartbeatRequest| -> ConsumerGroupHeartbeatResponse {
        common::raw::call(&mut s, ApiKey::ConsumerGroupHeartbeat, 1, req)
    };
    let regex = join("r1", 0)
        .with_group_id(GroupId(StrBytes::from_static_str("by-regex")))
        .with_subscribed_topic_names(None)
        .with_subscribed_topic_regex(Some(StrBytes::from_static_str("metrics-.*")));
    let joined = call(&regex);
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let count = |r: &ConsumerGroupHeartbeatResponse| -> usize {
        let a = r.assignment.as_ref().expect("an assignment");
        a.topic_partitions.iter().map(|t| t.partitions.len()).sum()
    };
    assert_eq!(count(&joined), 2, "metrics-a's two partitions, not logs");
    // A topic created later that the regex matches joins the subscription on a heartbeat
    // that does not repeat the regex.
    common::create_topic(&b.bootstrap, "metrics-b", 3, &[]).await;
    let owned: Vec<TopicPartitions> = joined
        .assignment
        .unwrap()
        .topic_partitions
        .into_iter()
        .map(|t| {
            TopicPartitions::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions)
        })
        .collect();
    let beat = join("r1", joined.member_epoch)
        .with_group_id(GroupId(StrBytes::from_static_str("by-regex")))
        .with_subscribed_topic_names(None)
        .with_rebalance_timeout_ms(-1)
        .with_topic_partitions(Some(owned));
    let grown = call(&beat);
    assert_eq!(grown.error_code, 0, "{:?}", grown.error_message);
    assert!(grown.member_epoch > joined.member_epoch);
    assert_eq!(count(&grown), 5, "metrics-a and metrics-b");
}
