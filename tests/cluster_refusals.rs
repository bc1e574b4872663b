//! What a cluster refuses, each with Kafka's error and nothing changed: a reassignment naming
//! an unknown broker, a preferred election whose preferred replica is down, a replication factor
//! above the live brokers, a second node with a live node's id, a node of another cluster, a
//! quorum message from another cluster; and the unclean election a topic may allow.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use evenkeel::client::{AdminClient, ClientError, Reassignment};
use evenkeel::protocol::errors;

const T: Duration = Duration::from_secs(10);

async fn admin(addr: &str) -> AdminClient {
    AdminClient::connect(addr, T).await.unwrap()
}

async fn partition0(addr: &str, topic: &str) -> evenkeel::client::PartitionInfo {
    let t = admin(addr)
        .await
        .describe_topics(Some(&[topic.to_string()]))
        .await
        .unwrap();
    t[0].partitions[0].clone()
}

/// How long a killed broker's leaderships may take to move: a controller election when it was
/// the active controller, then its whole session (`broker.session.timeout.ms`, 9 s) before it
/// is fenced, then the new leader reaching node 1's image — 8 to 12 s on a quiet machine, and
/// CI runs these five clusters side by side on two cores.
const MOVE_DEADLINE: Duration = Duration::from_secs(60);

/// Waits until node 1 reports partition 0 of `topic` led by anyone but `not`; on time-out the
/// nodes' logs say why.
async fn wait_leader_not(c: &Cluster, topic: &str, not: i32) -> evenkeel::client::PartitionInfo {
    let deadline = Instant::now() + MOVE_DEADLINE;
    loop {
        let p = partition0(&c.addr(1), topic).await;
        if p.leader != not {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "the leader never moved off {not}; the end of each node's log:\n{}",
            c.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn code(e: &ClientError) -> Option<i16> {
    e.code()
}

#[tokio::test]
async fn bad_cluster_requests_get_kafkas_errors_and_change_nothing() {
    let mut c = Cluster::start(3, &[]);
    let a = admin(&c.addr(1)).await;
    a.create_topic_with_assignment("pinned", &[vec![3, 1, 2]], &BTreeMap::new())
        .await
        .unwrap();
    // A reassignment naming a broker that does not exist.
    let e = a
        .alter_partition_reassignments(&[Reassignment {
            topic: "pinned".into(),
            partition: 0,
            replicas: Some(vec![1, 9]),
        }])
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(errors::INVALID_REPLICA_ASSIGNMENT), "{e}");
    assert!(e.to_string().contains("broker 9"), "{e}");
    assert!(a.list_partition_reassignments().await.unwrap().is_empty());
    assert_eq!(
        partition0(&c.addr(1), "pinned").await.replicas,
        vec![3, 1, 2]
    );
    // A preferred election whose preferred leader (3) is down.
    c.kill(3);
    let moved = wait_leader_not(&c, "pinned", 3).await;
    let r = a
        .elect_leaders(true, Some(&[("pinned".to_string(), 0)]))
        .await
        .unwrap();
    assert_eq!(
        r,
        vec![(
            "pinned".to_string(),
            0,
            errors::PREFERRED_LEADER_NOT_AVAILABLE
        )]
    );
    assert_eq!(partition0(&c.addr(1), "pinned").await.leader, moved.leader);
    // A replication factor above the live brokers (3 is fenced by now).
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match a.create_topic("too-wide", 1, 3, &BTreeMap::new()).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "RF 3 was accepted with a broker down"
                );
                a.delete_topic("too-wide").await.unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert_eq!(code(&e), Some(errors::INVALID_REPLICATION_FACTOR), "{e}");
    assert!(
        a.describe_topics(Some(&["too-wide".to_string()]))
            .await
            .unwrap()
            .is_empty(),
        "nothing was created"
    );
}

/// Starts a broker-only node `id` in a fresh directory formatted for `cluster_id`, pointed at
/// the cluster's quorum; returns its exit status and the last line it printed on stderr.
fn extra_node(c: &Cluster, id: usize, cluster_id: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    evenkeel::broker::format_log_dir(&data, cluster_id, id as i32).unwrap();
    let voters = (1..=3)
        .map(|v| format!("{v}@127.0.0.1:{}", c.nodes[v - 1].ports.controller))
        .collect::<Vec<_>>()
        .join(",");
    let port = common::free_port();
    let props = format!(
        "node.id={id}\nprocess.roles=broker\ncontroller.quorum.voters={voters}\n\
         listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
         log.dirs={}\nevenkeel.metrics.address=127.0.0.1:0\n\
         initial.broker.registration.timeout.ms=4000\n",
        data.display()
    );
    let config = dir.path().join("server.properties");
    std::fs::write(&config, props).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .arg("broker")
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("node {id} did not give up");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let last = err.lines().last().unwrap_or("").to_string();
    (status.success(), last)
}

#[tokio::test]
async fn a_second_node_with_a_live_nodes_id_is_refused() {
    let c = Cluster::start(3, &[]);
    let (ok, last) = extra_node(&c, 2, &c.cluster_id);
    assert!(!ok);
    assert!(
        last.starts_with("evenkeel: ") && last.contains("DUPLICATE_BROKER_REGISTRATION"),
        "{last}"
    );
    // The real node 2 is still there.
    let d = admin(&c.addr(1)).await.describe_cluster().await.unwrap();
    assert!(d
        .brokers
        .iter()
        .any(|b| b.id == 2 && b.port == c.nodes[1].ports.client as i32));
}

#[tokio::test]
async fn a_node_formatted_for_another_cluster_refuses_to_start_in_one_line() {
    let c = Cluster::start(3, &[]);
    let other = evenkeel::broker::random_cluster_id();
    let (ok, last) = extra_node(&c, 4, &other);
    assert!(!ok);
    assert!(
        last.starts_with("evenkeel: ") && last.contains("another cluster"),
        "{last}"
    );
    let d = admin(&c.addr(1)).await.describe_cluster().await.unwrap();
    assert!(!d.brokers.iter().any(|b| b.id == 4), "{d:?}");
}

#[tokio::test]
async fn a_quorum_message_from_another_cluster_is_refused() {
    let c = Cluster::start(3, &[]);
    let before = admin(&c.addr(1)).await.describe_quorum().await.unwrap();
    // A vote for node 7 in a far later term: it would depose the leader if it were heard.
    let vote = openraft::raft::VoteRequest::new(
        openraft::Vote::new(before.leader_epoch as u64 + 100, 7),
        None,
    );
    let frame =
        evenkeel::controller::raft::network::vote_request_frame("NotOurClusterIdAAAAAAA", 7, &vote);
    let target = c.nodes[(before.leader_id - 1) as usize].ports.controller;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", target)).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(&frame).unwrap();
    let mut size = [0u8; 4];
    s.read_exact(&mut size).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body).unwrap();
    let code = i16::from_be_bytes([body[4], body[5]]);
    assert_eq!(code, errors::INCONSISTENT_CLUSTER_ID);
    assert_eq!(
        &body[6..],
        c.cluster_id.as_bytes(),
        "the answer names our cluster"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = admin(&c.addr(1)).await.describe_quorum().await.unwrap();
    assert_eq!(
        (after.leader_id, after.leader_epoch),
        (before.leader_id, before.leader_epoch)
    );
}

/// Kills the ISR of a partition one broker after the other (a broker-only node, then a voter,
/// so the quorum keeps two of three voters) and brings back the one that left first: without
/// unclean election the partition stays offline; with it, that broker leads alone.
#[tokio::test]
async fn an_out_of_sync_replica_leads_only_where_unclean_election_is_enabled() {
    let mut c = Cluster::start(4, &[]);
    let a = admin(&c.addr(1)).await;
    a.create_topic_with_assignment("clean", &[vec![4, 3]], &BTreeMap::new())
        .await
        .unwrap();
    let mut unclean = BTreeMap::new();
    unclean.insert(
        "unclean.leader.election.enable".to_string(),
        "true".to_string(),
    );
    a.create_topic_with_assignment("unclean", &[vec![4, 3]], &unclean)
        .await
        .unwrap();
    c.kill(4);
    wait_leader_not(&c, "clean", 4).await;
    wait_leader_not(&c, "unclean", 4).await;
    c.kill(3);
    let offline = wait_leader_not(&c, "clean", 3).await;
    assert_eq!(
        (offline.leader, offline.isr.clone()),
        (-1, vec![3]),
        "the last ISR member stays"
    );
    c.restart(4);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let p = partition0(&c.addr(1), "unclean").await;
        if p.leader == 4 {
            assert_eq!(p.isr, vec![4]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "unclean election did not happen: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let p = partition0(&c.addr(1), "clean").await;
    assert_eq!(
        (p.leader, p.isr),
        (-1, vec![3]),
        "no unclean election without the config"
    );
}
