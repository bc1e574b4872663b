//! A dynamic metadata quorum (KIP-853) on real processes: a first controller formatted alone
//! (`controller.quorum.bootstrap.servers` naming itself), two controllers that start as
//! non-voters and are added with AddRaftVoter (one through a broker, which forwards it), the
//! first voter then killed -9 and removed while the other two keep the quorum and a broker finds
//! them through the voters the metadata log names; and Kafka's refusals on the way: a duplicate
//! voter, an unknown voter, the last voter, a static quorum.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::cluster::{admin, until, Cluster};
use evenkeel::client::{ClientSecurity, Connection};
use evenkeel::protocol::errors;
use evenkeel::storage::{KafkaUuid, MetaProperties};
use kafka_protocol::messages::add_raft_voter_request::Listener;
use kafka_protocol::messages::{
    AddRaftVoterRequest, DescribeQuorumRequest, DescribeQuorumResponse, RemoveRaftVoterRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};

const WAIT: Duration = Duration::from_secs(60);

/// One request on a fresh connection to `addr`.
async fn connect(addr: &str) -> Connection {
    Connection::connect_with(addr, Duration::from_secs(20), &ClientSecurity::default())
        .await
        .unwrap_or_else(|e| panic!("cannot reach {addr}: {e}"))
}

fn add_voter(id: i32, dir: KafkaUuid, controller_port: u16) -> AddRaftVoterRequest {
    AddRaftVoterRequest::default()
        .with_cluster_id(None)
        .with_timeout_ms(20_000)
        .with_voter_id(id)
        .with_voter_directory_id(dir.into())
        .with_listeners(vec![Listener::default()
            .with_name(StrBytes::from_static_str("CONTROLLER"))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(controller_port)])
}

fn remove_voter(id: i32, dir: KafkaUuid) -> RemoveRaftVoterRequest {
    RemoveRaftVoterRequest::default()
        .with_cluster_id(None)
        .with_voter_id(id)
        .with_voter_directory_id(dir.into())
}

/// A voter change sent to `addr`: its error code and message.
async fn change<R: Request>(
    addr: &str,
    req: &R,
    answer: fn(R::Response) -> (i16, Option<StrBytes>),
) -> (i16, String) {
    let r = connect(addr)
        .await
        .call_at(req, 0)
        .await
        .expect("an answer");
    let (code, message) = answer(r);
    (code, message.map(|m| m.to_string()).unwrap_or_default())
}

async fn add(addr: &str, req: &AddRaftVoterRequest) -> (i16, String) {
    change(addr, req, |r| (r.error_code, r.error_message)).await
}

async fn remove(addr: &str, req: &RemoveRaftVoterRequest) -> (i16, String) {
    change(addr, req, |r| (r.error_code, r.error_message)).await
}

async fn describe(addr: &str) -> Option<DescribeQuorumResponse> {
    describe_at(addr, 2).await
}

/// DescribeQuorum at `version`, answered by the leader.
async fn describe_at(addr: &str, version: i16) -> Option<DescribeQuorumResponse> {
    let c = Connection::connect_with(addr, Duration::from_secs(5), &ClientSecurity::default())
        .await
        .ok()?;
    let r = c
        .call_at(&DescribeQuorumRequest::default(), version)
        .await
        .ok()?;
    let p = r.topics.first()?.partitions.first()?;
    (r.error_code == 0 && p.error_code == 0).then_some(r)
}

/// The voters the leader describes: `(id, directory id)`, and the endpoints of `Nodes`.
fn voters(r: &DescribeQuorumResponse) -> (BTreeSet<(i32, KafkaUuid)>, BTreeMap<i32, u16>) {
    let p = &r.topics[0].partitions[0];
    let ids = p
        .current_voters
        .iter()
        .map(|v| (v.replica_id.0, KafkaUuid::from(v.replica_directory_id)))
        .collect();
    let nodes = r
        .nodes
        .iter()
        .map(|n| (n.node_id.0, n.listeners[0].port))
        .collect();
    (ids, nodes)
}

/// Waits until the leader (asked through `addr`) describes exactly `want` as its voters.
async fn until_voters(addr: &str, want: &BTreeSet<(i32, KafkaUuid)>) -> DescribeQuorumResponse {
    until(&format!("the voters {want:?}"), WAIT, || async {
        describe(addr).await.filter(|r| voters(r).0 == *want)
    })
    .await
}

fn directory_id(c: &Cluster, id: usize) -> KafkaUuid {
    let meta = MetaProperties::read(&c.data.join(format!("broker-{id}")))
        .unwrap()
        .expect("formatted");
    meta.directory_id
}

/// Node 1: broker and the quorum's first voter; 2 and 3: controllers that wait to be added;
/// 4: a broker that knows only node 1's controller. The controllers' log directories say so as
/// `evenkeel format` writes them: node 1 with itself as the initial voter (`--standalone`), 2
/// and 3 with none (`--no-initial-controllers`).
fn dynamic_cluster() -> Cluster {
    use evenkeel::metadata::initial_voters::{self, InitialVoter};
    // Nodes are configured in order: node 1's port is known by the time the others need it.
    let first_controller = std::cell::Cell::new(0);
    let per_node = |id: usize, ports: &evenkeel::dev::NodePorts| {
        if id == 1 {
            first_controller.set(ports.controller);
        }
        let bootstrap = format!("127.0.0.1:{}", first_controller.get());
        let mut props = vec![
            ("controller.quorum.voters".to_string(), String::new()),
            ("controller.quorum.bootstrap.servers".to_string(), bootstrap),
        ];
        match id {
            1 => props.push(("process.roles".into(), "broker,controller".into())),
            2 | 3 => props.extend([
                ("process.roles".to_string(), "controller".to_string()),
                (
                    "listeners".to_string(),
                    format!("CONTROLLER://127.0.0.1:{}", ports.controller),
                ),
                ("advertised.listeners".to_string(), String::new()),
            ]),
            _ => props.push(("process.roles".into(), "broker".into())),
        }
        props
    };
    let prepare = |dir: &std::path::Path| {
        let voters = match dir.file_name().and_then(|n| n.to_str()) {
            Some("broker-1") => vec![InitialVoter {
                id: 1,
                host: "127.0.0.1".into(),
                port: first_controller.get(),
                directory_id: MetaProperties::read(dir).unwrap().unwrap().directory_id,
            }],
            Some("broker-2" | "broker-3") => Vec::new(),
            _ => return,
        };
        initial_voters::write(dir, &voters).unwrap();
    };
    Cluster::start_prepared(
        4,
        &["offsets.topic.replication.factor=1"],
        per_node,
        prepare,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controllers_are_added_and_removed_while_the_quorum_serves() {
    let mut c = dynamic_cluster();
    let (broker1, broker4) = (c.addr(1), c.addr(4));
    let ctrl: Vec<u16> = c.nodes.iter().map(|n| n.ports.controller).collect();
    let ctrl1 = format!("127.0.0.1:{}", ctrl[0]);
    let dirs: Vec<KafkaUuid> = (1..=4).map(|id| directory_id(&c, id)).collect();
    let key = |id: usize| (id as i32, dirs[id - 1]);

    // The first voter alone, with its directory id.
    let first = until_voters(&broker4, &[key(1)].into()).await;
    assert_eq!(first.topics[0].partitions[0].leader_id.0, 1);

    // Node 2 added through broker 4 (forwarded to the active controller), node 3 directly.
    let (code, msg) = add(&broker4, &add_voter(2, dirs[1], ctrl[1])).await;
    assert_eq!(code, errors::NONE, "adding node 2: {msg}");
    let (code, msg) = add(&ctrl1, &add_voter(3, dirs[2], ctrl[2])).await;
    assert_eq!(
        code,
        errors::NONE,
        "adding node 3: {msg}\n{}",
        c.log_tails(30)
    );
    let all: BTreeSet<_> = [key(1), key(2), key(3)].into();
    let three = until_voters(&broker4, &all).await;
    let (_, nodes) = voters(&three);
    // Kafka 3.x's tools ask with v1, which has no directory ids.
    let v1 = describe_at(&broker4, 1).await.expect("DescribeQuorum v1");
    assert_eq!(v1.topics[0].partitions[0].current_voters.len(), 3);
    assert_eq!(
        nodes.get(&2),
        Some(&ctrl[1]),
        "node 2's endpoint: {nodes:?}"
    );
    assert_eq!(
        nodes.get(&3),
        Some(&ctrl[2]),
        "node 3's endpoint: {nodes:?}"
    );

    // Kafka's refusals: a voter already there, a voter that is not, a change that names no
    // directory.
    let (code, msg) = add(&ctrl1, &add_voter(2, dirs[1], ctrl[1])).await;
    assert_eq!(code, errors::DUPLICATE_VOTER, "{msg}");
    assert!(msg.contains("already part of the set of voters"), "{msg}");
    let (code, msg) = remove(&ctrl1, &remove_voter(4, dirs[3])).await;
    assert_eq!(code, errors::VOTER_NOT_FOUND, "{msg}");
    let (code, _) = remove(&ctrl1, &remove_voter(2, KafkaUuid::ZERO)).await;
    assert_eq!(code, errors::INVALID_REQUEST);

    // The added voters follow the log: a topic made now is known to them once they lead.
    let a = admin(&broker1).await;
    a.create_topic("before", 1, 2, &BTreeMap::new())
        .await
        .expect("a topic on the three-voter quorum");

    // An added voter killed -9 comes back a voter: its log holds the membership that made it
    // one.
    c.kill(3);
    c.spawn(3);
    c.wait(3);

    // The leader, node 1, removes itself from three voters: it leaves the membership and steps
    // down, and nodes 2 and 3 elect a leader of their own. Broker 4, told only of node 1's
    // controller, finds it among the voters its metadata log names, also once node 1 is gone.
    let (code, msg) = remove(&broker4, &remove_voter(1, dirs[0])).await;
    assert_eq!(
        code,
        errors::NONE,
        "the leader, node 1, removing itself: {msg}"
    );
    let two: BTreeSet<_> = [key(2), key(3)].into();
    until(
        "nodes 2 and 3 voting, one of them leading",
        WAIT,
        || async {
            describe(&broker4).await.filter(|r| {
                voters(r).0 == two && [2, 3].contains(&r.topics[0].partitions[0].leader_id.0)
            })
        },
    )
    .await;
    c.kill(1);
    let a4 = admin(&broker4).await;
    until(
        "a topic created through broker 4 after node 1 left and died",
        WAIT,
        || async { a4.create_topic("after", 1, 1, &BTreeMap::new()).await.ok() },
    )
    .await;

    // Now the leader of two removes itself; the other leads alone.
    let leader = describe(&broker4).await.expect("a leader").topics[0].partitions[0]
        .leader_id
        .0;
    let other = if leader == 2 { 3 } else { 2 };
    let (code, msg) = remove(&broker4, &remove_voter(leader, dirs[leader as usize - 1])).await;
    assert_eq!(
        code,
        errors::NONE,
        "the leader, node {leader}, removing itself: {msg}"
    );
    let alone = until_voters(&broker4, &[key(other as usize)].into()).await;
    assert_eq!(alone.topics[0].partitions[0].leader_id.0, other);

    // It can be added again, catching up from where it left; removed again (not leading now),
    // it stays a learner, listed among the observers, and keeps the log.
    let port = ctrl[leader as usize - 1];
    let back = add_voter(leader, dirs[leader as usize - 1], port);
    let (code, msg) = add(&broker4, &back).await;
    assert_eq!(code, errors::NONE, "adding node {leader} back: {msg}");
    until_voters(&broker4, &two).await;
    let (code, msg) = remove(&broker4, &remove_voter(leader, dirs[leader as usize - 1])).await;
    assert_eq!(code, errors::NONE, "removing node {leader} again: {msg}");
    until_voters(&broker4, &[key(other as usize)].into()).await;
    a4.create_topic("later", 1, 1, &BTreeMap::new())
        .await
        .expect("a topic on the quorum of one");
    until(
        "the removed voter caught up as an observer",
        WAIT,
        || async {
            describe(&broker4).await.filter(|r| {
                let p = &r.topics[0].partitions[0];
                p.observers
                    .iter()
                    .any(|o| o.replica_id.0 == leader && o.log_end_offset >= p.high_watermark)
            })
        },
    )
    .await;

    // The last voter stays.
    let (code, msg) = remove(&broker4, &remove_voter(other, dirs[other as usize - 1])).await;
    assert_eq!(code, errors::VOTER_NOT_FOUND, "{msg}");
    assert!(msg.starts_with("Cannot remove voter"), "{msg}");
    until("a topic created on the quorum of one", WAIT, || async {
        a4.create_topic("last", 1, 1, &BTreeMap::new()).await.ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_quorum_refuses_voter_changes() {
    let c = Cluster::start(1, &[]);
    let broker = c.addr(1);
    until("the quorum", WAIT, || describe(&broker)).await;
    let (code, msg) = add(&broker, &add_voter(2, KafkaUuid::random(), 1)).await;
    assert_eq!(code, errors::UNSUPPORTED_VERSION, "{msg}");
    assert!(msg.contains("kraft.version feature is 0"), "{msg}");
    let dir = directory_id(&c, 1);
    let (code, msg) = remove(&broker, &remove_voter(1, dir)).await;
    assert_eq!(code, errors::UNSUPPORTED_VERSION, "{msg}");
}
