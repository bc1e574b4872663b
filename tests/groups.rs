//! Consumer groups through librdkafka against the real binary: assignment, rebalances on
//! failure, committed offsets across a restart, auto.offset.reset, cooperative-sticky, scale.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::protocol::Decodable;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};

fn consumer(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().unwrap()
}

fn assigned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .map(|a| a.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// Polls every consumer until `done` holds or the time runs out; returns the records seen.
fn poll_until(
    consumers: &[&BaseConsumer],
    timeout: Duration,
    mut done: impl FnMut(&[&BaseConsumer], usize) -> bool,
) -> Vec<(usize, i32, i64, Vec<u8>)> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        for (i, c) in consumers.iter().enumerate() {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(20)) {
                seen.push((
                    i,
                    m.partition(),
                    m.offset(),
                    m.payload().unwrap_or_default().to_vec(),
                ));
            }
        }
        if done(consumers, seen.len()) {
            break;
        }
    }
    seen
}

/// Closes members in parallel: a member closing alone would wait in its group's rebalance for
/// the others to rejoin (up to max.poll.interval.ms), as it would against Kafka.
fn close_all(consumers: Vec<BaseConsumer>) {
    std::thread::scope(|s| {
        for c in consumers {
            s.spawn(move || drop(c));
        }
    });
}

async fn produce(bootstrap: &str, topic: &str, from: usize, n: usize) {
    let p = common::producer(bootstrap, &[]);
    for i in from..from + n {
        let v = format!("{i}");
        p.send(
            FutureRecord::to(topic).key(&v).payload(&v),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn three_consumers_on_two_partitions_leave_exactly_one_idle() {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "two", 2, &[]).await;
    let cs: Vec<BaseConsumer> = (0..3)
        .map(|_| consumer(&b.bootstrap, "trio", &[]))
        .collect();
    for c in &cs {
        c.subscribe(&["two"]).unwrap();
    }
    let refs: Vec<&BaseConsumer> = cs.iter().collect();
    poll_until(&refs, Duration::from_secs(30), |cs, _| {
        cs.iter().map(|c| assigned(c).len()).sum::<usize>() == 2
            && cs.iter().filter(|c| assigned(c).is_empty()).count() == 1
    });
    let sizes: Vec<usize> = cs.iter().map(|c| assigned(c).len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 2, "{sizes:?}");
    assert_eq!(sizes.iter().filter(|s| **s == 0).count(), 1, "{sizes:?}");
    close_all(cs);
}

const CHILD_TEST: &str = "a_killed_member_s_partitions_move_and_no_record_is_lost";

/// Child process: a group member that commits after every record and prints it.
fn run_member_child(bootstrap: &str, group: &str, topic: &str) {
    use std::io::Write;
    let c = consumer(bootstrap, group, &[]);
    c.subscribe(&[topic]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            c.commit_message(&m, CommitMode::Sync).unwrap();
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "REC {}",
                std::str::from_utf8(m.payload().unwrap()).unwrap()
            )
            .unwrap();
            out.flush().unwrap();
        }
        let n = assigned(&c).len();
        println!("ASSIGNED {n}");
    }
}

#[tokio::test]
async fn a_killed_member_s_partitions_move_and_no_record_is_lost() {
    if let Ok(args) = std::env::var("EVENKEEL_GROUP_CHILD") {
        let parts: Vec<&str> = args.split(',').collect();
        run_member_child(parts[0], parts[1], parts[2]);
        return;
    }
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::{Arc, Mutex};
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "fail", 4, &[]).await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(
            "EVENKEEL_GROUP_CHILD",
            format!("{},failing,fail", b.bootstrap),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child_seen = Arc::new(Mutex::new(Vec::<usize>::new()));
    let child_assigned = Arc::new(Mutex::new(0usize));
    {
        let (seen, asg) = (child_seen.clone(), child_assigned.clone());
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(v) = line.strip_prefix("REC ") {
                    seen.lock().unwrap().push(v.parse().unwrap());
                } else if let Some(n) = line.strip_prefix("ASSIGNED ") {
                    *asg.lock().unwrap() = n.parse().unwrap();
                }
            }
        });
    }
    let me = consumer(&b.bootstrap, "failing", &[]);
    me.subscribe(&["fail"]).unwrap();
    let mut mine: Vec<usize> = Vec::new();
    let mut poll_me = |timeout: Duration, until: &dyn Fn(&BaseConsumer) -> bool| {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(Ok(m)) = me.poll(Duration::from_millis(20)) {
                me.commit_message(&m, CommitMode::Sync).unwrap();
                mine.push(
                    std::str::from_utf8(m.payload().unwrap())
                        .unwrap()
                        .parse()
                        .unwrap(),
                );
            }
            if until(&me) {
                return true;
            }
        }
        false
    };
    let split = poll_me(Duration::from_secs(30), &|c| {
        assigned(c).len() == 2 && *child_assigned.lock().unwrap() == 2
    });
    assert!(split, "the two members never split the four partitions");
    produce(&b.bootstrap, "fail", 0, 200).await;
    poll_me(Duration::from_secs(10), &|_| false);
    let before_kill = child_seen.lock().unwrap().len();
    assert!(before_kill > 0, "the child member consumed nothing");
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = Instant::now();
    produce(&b.bootstrap, "fail", 200, 200).await;
    let moved = poll_me(Duration::from_secs(30), &|c| assigned(c).len() == 4);
    let took = killed_at.elapsed();
    assert!(moved, "the killed member's partitions did not move");
    assert!(
        took < Duration::from_secs(6 + 10),
        "rebalance took {took:?}"
    );
    poll_me(Duration::from_secs(5), &|_| false);
    let mut all: BTreeMap<usize, usize> = BTreeMap::new();
    for v in mine.iter().chain(child_seen.lock().unwrap().iter()) {
        *all.entry(*v).or_default() += 1;
    }
    let missing: Vec<usize> = (0..400).filter(|v| !all.contains_key(v)).collect();
    assert!(missing.is_empty(), "lost records: {missing:?}");
    // At least once: only what the child had not committed may come twice.
    let twice = all.values().filter(|n| **n > 1).count();
    assert!(twice <= 4, "{twice} records were seen twice");
}

#[tokio::test]
async fn committed_offsets_survive_a_broker_restart_and_new_groups_follow_auto_offset_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let mut b = common::BrokerProcess::start_on(tmp.path(), port, &[]);
    common::create_topic(&b.bootstrap, "resume", 1, &[]).await;
    produce(&b.bootstrap, "resume", 0, 100).await;
    {
        let c = consumer(&b.bootstrap, "resumers", &[]);
        c.subscribe(&["resume"]).unwrap();
        let seen = poll_until(&[&c], Duration::from_secs(30), |_, n| n >= 100);
        assert!(seen.len() >= 60, "only {} records", seen.len());
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("resume", 0, Offset::Offset(60))
            .unwrap();
        c.commit(&tpl, CommitMode::Sync).unwrap();
    }
    assert!(b.stop());
    let b = common::BrokerProcess::start_on(tmp.path(), port, &[]);
    let c = consumer(&b.bootstrap, "resumers", &[]);
    c.subscribe(&["resume"]).unwrap();
    let seen = poll_until(&[&c], Duration::from_secs(30), |_, n| n >= 40);
    // Nothing more arrives.
    let extra = poll_until(&[&c], Duration::from_secs(1), |_, _| false);
    assert!(extra.is_empty());
    assert_eq!(
        seen.first().map(|r| r.2),
        Some(60),
        "resumed at the committed offset"
    );
    assert_eq!(seen.len(), 40);
    // Lag as an admin client computes it: log end offset − committed offset.
    let committed = c
        .committed(Duration::from_secs(5))
        .unwrap()
        .find_partition("resume", 0)
        .unwrap()
        .offset();
    let (_, high) = c
        .fetch_watermarks("resume", 0, Duration::from_secs(5))
        .unwrap();
    assert_eq!((committed, high), (Offset::Offset(60), 100));
    // A new group with earliest starts at 0; one with latest sees only new records.
    let early = consumer(&b.bootstrap, "fresh-early", &[]);
    early.subscribe(&["resume"]).unwrap();
    let e = poll_until(&[&early], Duration::from_secs(20), |_, n| n > 0);
    assert_eq!(e.first().map(|r| r.2), Some(0));
    let late = consumer(
        &b.bootstrap,
        "fresh-late",
        &[("auto.offset.reset", "latest")],
    );
    late.subscribe(&["resume"]).unwrap();
    let before = poll_until(&[&late], Duration::from_secs(20), |cs, _| {
        assigned(cs[0]).len() == 1
    });
    let before_more = poll_until(&[&late], Duration::from_secs(2), |_, _| false);
    assert!(
        before.is_empty() && before_more.is_empty(),
        "latest must skip old records"
    );
    produce(&b.bootstrap, "resume", 100, 5).await;
    let l = poll_until(&[&late], Duration::from_secs(10), |_, n| n >= 5);
    let offsets: Vec<i64> = l.iter().map(|r| r.2).collect();
    assert_eq!(offsets, vec![100, 101, 102, 103, 104]);
}

#[tokio::test]
async fn cooperative_sticky_keeps_partitions_and_never_assigns_one_twice() {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "coop", 6, &[]).await;
    let strategy = [("partition.assignment.strategy", "cooperative-sticky")];
    let a = consumer(&b.bootstrap, "coop-group", &strategy);
    a.subscribe(&["coop"]).unwrap();
    poll_until(&[&a], Duration::from_secs(20), |cs, _| {
        assigned(cs[0]).len() == 6
    });
    let before = assigned(&a);
    assert_eq!(before.len(), 6);
    let b2 = consumer(&b.bootstrap, "coop-group", &strategy);
    b2.subscribe(&["coop"]).unwrap();
    poll_until(&[&a, &b2], Duration::from_secs(30), |cs, _| {
        assigned(cs[0]).len() == 3 && assigned(cs[1]).len() == 3
    });
    let (pa, pb) = (assigned(&a), assigned(&b2));
    assert_eq!((pa.len(), pb.len()), (3, 3));
    // Sticky: the first member kept partitions it had; nothing is owned twice.
    assert!(pa.is_subset(&before));
    assert!(pa.is_disjoint(&pb));
    assert!(matches!(
        a.rebalance_protocol(),
        rdkafka::consumer::RebalanceProtocol::Cooperative
    ));
    close_all(vec![a, b2]);
}

#[tokio::test]
async fn a_hundred_members_on_two_hundred_partitions_get_two_each() {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "wide-group", 200, &[]).await;
    let cs: Vec<BaseConsumer> = (0..100)
        .map(|_| consumer(&b.bootstrap, "hundred", &[("session.timeout.ms", "30000")]))
        .collect();
    for c in &cs {
        c.subscribe(&["wide-group"]).unwrap();
    }
    let refs: Vec<&BaseConsumer> = cs.iter().collect();
    poll_until(&refs, Duration::from_secs(120), |cs, _| {
        cs.iter().all(|c| assigned(c).len() == 2)
    });
    let sizes: BTreeMap<usize, usize> = cs.iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(assigned(c).len()).or_default() += 1;
        m
    });
    assert_eq!(
        sizes,
        BTreeMap::from([(2, 100)]),
        "members by number of partitions"
    );
    drop(refs);
    close_all(cs);
}

/// Kafka's errors for bad group requests over the wire, and the group stays usable after them.
#[tokio::test]
async fn bad_group_requests_get_kafkas_errors_and_the_group_stays_healthy() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "bad", 1, &[]).await;
    let mut s = common::raw::connect(&b.bootstrap);
    let join = |group: &str, member: &str, ptype: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.into())))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(StrBytes::from_string(member.into()))
            .with_protocol_type(StrBytes::from_string(ptype.into()))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 0]))])
    };
    // INVALID_GROUP_ID
    let r: JoinGroupResponse =
        common::raw::call(&mut s, ApiKey::JoinGroup, 9, &join("", "", "consumer"));
    assert_eq!(r.error_code, 24);
    // MEMBER_ID_REQUIRED, then a real join.
    let r: JoinGroupResponse =
        common::raw::call(&mut s, ApiKey::JoinGroup, 9, &join("bg", "", "consumer"));
    assert_eq!(r.error_code, 79);
    let member = r.member_id.to_string();
    let r: JoinGroupResponse = common::raw::call(
        &mut s,
        ApiKey::JoinGroup,
        9,
        &join("bg", &member, "consumer"),
    );
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    // INCONSISTENT_GROUP_PROTOCOL: another protocol type.
    let mut s2 = common::raw::connect(&b.bootstrap);
    let r: JoinGroupResponse =
        common::raw::call(&mut s2, ApiKey::JoinGroup, 9, &join("bg", "", "connect"));
    assert_eq!(r.error_code, 23);
    // ILLEGAL_GENERATION on a stale heartbeat; UNKNOWN_MEMBER_ID for a stranger.
    let hb = |generation: i32, m: &str| {
        HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("bg")))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(m.into()))
    };
    let r: HeartbeatResponse = common::raw::call(&mut s, ApiKey::Heartbeat, 4, &hb(0, &member));
    assert_eq!(r.error_code, 22);
    let r: HeartbeatResponse = common::raw::call(&mut s, ApiKey::Heartbeat, 4, &hb(1, "stranger"));
    assert_eq!(r.error_code, 25);
    // UNKNOWN_MEMBER_ID on a commit from a non-member.
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("bg")))
        .with_generation_id_or_member_epoch(1)
        .with_member_id(StrBytes::from_static_str("stranger"))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("bad")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(5)])]);
    let r: OffsetCommitResponse = common::raw::call(&mut s, ApiKey::OffsetCommit, 8, &commit);
    assert_eq!(r.topics[0].partitions[0].error_code, 25);
    // REBALANCE_IN_PROGRESS: a second member joins; the first one's heartbeat is told to rejoin.
    let r: JoinGroupResponse =
        common::raw::call(&mut s2, ApiKey::JoinGroup, 9, &join("bg", "", "consumer"));
    let second = r.member_id.to_string();
    common::raw::send(
        &mut s2,
        ApiKey::JoinGroup,
        9,
        8,
        &join("bg", &second, "consumer"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let r: HeartbeatResponse = common::raw::call(&mut s, ApiKey::Heartbeat, 4, &hb(1, &member));
    assert_eq!(r.error_code, 27);
    // Both rejoin and the group completes generation 2: it is healthy.
    let r: JoinGroupResponse = common::raw::call(
        &mut s,
        ApiKey::JoinGroup,
        9,
        &join("bg", &member, "consumer"),
    );
    assert_eq!((r.error_code, r.generation_id), (0, 2));
    let mut frame = common::raw::read_frame(&mut s2).expect("the second member's join answer");
    let _ = kafka_protocol::messages::ResponseHeader::decode(&mut frame, 1).unwrap();
    let r2 = JoinGroupResponse::decode(&mut frame, 9).unwrap();
    assert_eq!((r2.error_code, r2.generation_id), (0, 2));
    assert_eq!(r.leader, r2.leader);
}

#[tokio::test]
async fn groups_are_listed_described_and_deleted() {
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, GroupId, OffsetDeleteRequest, OffsetDeleteResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    use rdkafka::admin::{AdminClient, AdminOptions};
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "desc", 2, &[]).await;
    produce(&b.bootstrap, "desc", 0, 10).await;
    let c = consumer(&b.bootstrap, "described", &[("client.id", "describer")]);
    c.subscribe(&["desc"]).unwrap();
    poll_until(&[&c], Duration::from_secs(20), |cs, n| {
        assigned(cs[0]).len() == 2 && n >= 10
    });
    c.commit_consumer_state(CommitMode::Sync).unwrap();
    let list = c
        .fetch_group_list(Some("described"), Duration::from_secs(5))
        .unwrap();
    let g = &list.groups()[0];
    assert_eq!(
        (g.name(), g.state(), g.protocol_type()),
        ("described", "Stable", "consumer")
    );
    assert_eq!(g.members().len(), 1);
    assert_eq!(g.members()[0].client_id(), "describer");
    assert!(g.members()[0].client_host().starts_with("/127.0.0.1"));
    // OffsetDelete is refused while the group consumes the topic.
    let od = OffsetDeleteRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("described")))
        .with_topics(vec![OffsetDeleteRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("desc")))
            .with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0)
            ])]);
    let mut s = common::raw::connect(&b.bootstrap);
    let r: OffsetDeleteResponse = common::raw::call(&mut s, ApiKey::OffsetDelete, 0, &od);
    assert_eq!(
        r.topics[0].partitions[0].error_code, 86,
        "GROUP_SUBSCRIBED_TO_TOPIC"
    );
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .create()
        .unwrap();
    let r = admin
        .delete_groups(&["described"], &AdminOptions::new())
        .await
        .unwrap();
    assert!(
        r[0].is_err(),
        "a group with members cannot be deleted: {r:?}"
    );
    drop(c);
    let r: OffsetDeleteResponse = common::raw::call(&mut s, ApiKey::OffsetDelete, 0, &od);
    assert_eq!((r.error_code, r.topics[0].partitions[0].error_code), (0, 0));
    let r = admin
        .delete_groups(&["described"], &AdminOptions::new())
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    let r = admin
        .delete_groups(&["described"], &AdminOptions::new())
        .await
        .unwrap();
    assert!(r[0].is_err(), "deleting twice: GROUP_ID_NOT_FOUND");
}

/// Raw group requests for one coordinator connection.
mod wire {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use std::net::TcpStream;

    use super::common::raw;

    fn s(v: &str) -> StrBytes {
        StrBytes::from_string(v.into())
    }

    /// The coordinator's node id, or the error code while there is none.
    pub fn find_coordinator(bootstrap: &str, group: &str) -> Result<i32, i16> {
        let mut c = raw::connect(bootstrap);
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s(group)]);
        let r: FindCoordinatorResponse = raw::call(&mut c, ApiKey::FindCoordinator, 4, &req);
        let found = &r.coordinators[0];
        match found.error_code {
            0 => Ok(found.node_id.0),
            code => Err(code),
        }
    }

    /// A JoinGroup through MEMBER_ID_REQUIRED: (error, generation, member id).
    pub fn join(c: &mut TcpStream, group: &str, member: &str) -> (i16, i32, String) {
        let req = |member: &str| {
            JoinGroupRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_session_timeout_ms(30_000)
                .with_rebalance_timeout_ms(30_000)
                .with_member_id(s(member))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 0]))])
        };
        let mut r: JoinGroupResponse = raw::call(c, ApiKey::JoinGroup, 9, &req(member));
        if r.error_code == 79 {
            let id = r.member_id.to_string();
            r = raw::call(c, ApiKey::JoinGroup, 9, &req(&id));
        }
        (r.error_code, r.generation_id, r.member_id.to_string())
    }

    /// The leader's SyncGroup, assigning `assignment` to itself: (error, assignment).
    pub fn sync(
        c: &mut TcpStream,
        group: &str,
        generation: i32,
        member: &str,
        assignment: &'static [u8],
    ) -> (i16, Vec<u8>) {
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(s(member))
                .with_assignment(bytes::Bytes::from_static(assignment))]);
        let r: SyncGroupResponse = raw::call(c, ApiKey::SyncGroup, 5, &req);
        (r.error_code, r.assignment.to_vec())
    }

    /// Commits `offset` for partition 0 of `topic`; the partition's error code.
    pub fn commit(
        c: &mut TcpStream,
        group: &str,
        generation: i32,
        member: &str,
        topic: &str,
        offset: i64,
    ) -> i16 {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])]);
        let r: OffsetCommitResponse = raw::call(c, ApiKey::OffsetCommit, 8, &req);
        r.topics[0].partitions[0].error_code
    }
}

/// A group's writes count once `min.insync.replicas` have them, as an acks=all produce does:
/// with a follower of `__consumer_offsets` stopped, an offset commit and a generation's
/// assignment are refused (COORDINATOR_NOT_AVAILABLE) instead of answered and then lost with
/// the coordinator; once the follower is back, the same requests succeed.
#[tokio::test]
async fn group_writes_wait_for_min_insync_replicas_like_acks_all_produces() {
    use common::cluster::{partition, until, Cluster};
    const NOT_AVAILABLE: i16 = 15;
    let mut c = Cluster::start(
        3,
        &[
            "offsets.topic.replication.factor=3",
            "offsets.topic.num.partitions=1",
            "min.insync.replicas=3",
            "replica.lag.time.max.ms=2000",
        ],
    );
    let bootstrap = c.bootstrap();
    common::create_topic(&bootstrap, "commits", 1, &[]).await;
    let first = c.addr(1);
    let coordinator = until("a coordinator for g", Duration::from_secs(60), || {
        let first = first.clone();
        async move { wire::find_coordinator(&first, "g").ok() }
    })
    .await;
    let addr = c.addr(coordinator as usize);
    until(
        "all 3 replicas of __consumer_offsets in its ISR",
        Duration::from_secs(60),
        || async {
            let p = partition(&addr, "__consumer_offsets", 0).await?;
            (p.isr.len() == 3).then_some(())
        },
    )
    .await;
    let mut s = common::raw::connect(&addr);
    let (code, generation, member) = wire::join(&mut s, "g", "");
    assert_eq!((code, generation), (0, 1));
    // A follower stops: the next writes wait for it until the ISR drops it, and then the ISR
    // is below min.insync.replicas.
    let follower = (1..=3).find(|b| *b != coordinator).unwrap();
    c.sigstop(follower as usize);
    let code = wire::commit(&mut s, "standalone", -1, "", "commits", 5);
    assert_eq!(
        code, NOT_AVAILABLE,
        "the commit was answered though it was not replicated"
    );
    let (code, assignment) = wire::sync(&mut s, "g", generation, &member, b"mine");
    assert_eq!(
        (code, assignment.len()),
        (NOT_AVAILABLE, 0),
        "the assignment was answered though it was not replicated"
    );
    c.sigcont(follower as usize);
    until(
        "the follower back in the ISR",
        Duration::from_secs(60),
        || async {
            let p = partition(&addr, "__consumer_offsets", 0).await?;
            (p.isr.len() == 3).then_some(())
        },
    )
    .await;
    let (code, generation, member) = wire::join(&mut s, "g", &member);
    assert_eq!(
        (code, generation),
        (0, 2),
        "the group rebalanced after the failed sync"
    );
    assert_eq!(
        wire::sync(&mut s, "g", generation, &member, b"mine"),
        (0, b"mine".to_vec())
    );
    assert_eq!(wire::commit(&mut s, "standalone", -1, "", "commits", 5), 0);
}
