//! Cluster part 1 on real broker processes: one metadata quorum, topics seen by every broker,
//! new leaders after kill -9, a new active controller, restarts, controlled shutdown, racks,
//! and nodes the cluster must refuse.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{admin, create_assigned, eventually, Cluster};
use evenkeel::client::{AdminClient, TopicDescription};

const T: Duration = Duration::from_secs(10);

/// The topic as broker `addr` describes it (None while it does not know it).
async fn describe(addr: String, topic: &str) -> Option<TopicDescription> {
    let a = AdminClient::connect(&addr, T).await.ok()?;
    a.describe_topics(Some(&[topic.to_string()]))
        .await
        .ok()?
        .into_iter()
        .next()
}

async fn create(addr: &str, topic: &str, partitions: i32, rf: i16) {
    let a = admin(addr).await;
    a.create_topic(topic, partitions, rf, &BTreeMap::new())
        .await
        .unwrap_or_else(|e| panic!("create {topic} through {addr}: {e}"));
}

#[tokio::test]
async fn a_topic_created_through_any_broker_appears_on_every_broker() {
    let c = Cluster::start(3, &[]);
    create(&c.addr(2), "everywhere", 6, 3).await;
    let mut seen = Vec::new();
    for id in 1..=3 {
        let t = eventually(T, || describe(c.addr(id), "everywhere"))
            .await
            .unwrap_or_else(|| panic!("broker {id} never saw the topic"));
        assert_eq!(t.partitions.len(), 6);
        for p in &t.partitions {
            assert_eq!(p.replicas.len(), 3, "{p:?}");
            assert_eq!(p.isr.len(), 3, "{p:?}");
            assert_eq!(
                p.leader, p.replicas[0],
                "the first replica leads a new partition"
            );
        }
        seen.push(t);
    }
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "brokers disagree: {seen:?}"
    );
    // Leaders are spread: every broker leads two of the six partitions.
    let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
    for p in &seen[0].partitions {
        *leaders.entry(p.leader).or_default() += 1;
    }
    assert_eq!(
        leaders.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{leaders:?}"
    );
    let cluster = admin(&c.addr(3)).await.describe_cluster().await.unwrap();
    assert_eq!(cluster.brokers.len(), 3);
}

/// The broker leading partition 0 of `topic`, asked of `addr`.
async fn leader_of(addr: String, topic: &str) -> Option<i32> {
    describe(addr, topic)
        .await?
        .partitions
        .first()
        .map(|p| p.leader)
}

#[tokio::test]
async fn a_killed_leader_is_replaced_within_the_session_timeout_and_rejoins_on_restart() {
    let mut c = Cluster::start(3, &[]);
    // The leader is a broker that is not the active controller: killing the controller also
    // costs a quorum election, after which the new controller starts every session afresh
    // (as Kafka's does), and that case is metadata_changes_go_on_after_the_active_controller_is_killed.
    let controller = admin(&c.addr(1))
        .await
        .describe_cluster()
        .await
        .unwrap()
        .controller_id;
    let others: Vec<i32> = (1..=3).filter(|&n| n != controller).collect();
    let assignment = vec![vec![others[0], others[1], controller]];
    create_assigned(&c, "failover", assignment, &[]).await;
    let leader = eventually(T, || leader_of(c.addr(1), "failover"))
        .await
        .unwrap();
    assert_eq!(leader, others[0], "the first replica leads");
    let other = others[1] as usize;
    c.kill(leader as usize);
    let killed = Instant::now();
    let new_leader = eventually(Duration::from_secs(20), || async {
        let l = leader_of(c.addr(other), "failover").await?;
        (l >= 0 && l != leader).then_some(l)
    })
    .await
    .expect("no new leader");
    let took = killed.elapsed();
    eprintln!("a new leader {took:?} after the kill");
    assert!(
        took <= Duration::from_secs(9 + 2),
        "a new leader took {took:?} (broker.session.timeout.ms 9 s + 2 s)"
    );
    let t = describe(c.addr(other), "failover").await.unwrap();
    assert!(
        !t.partitions[0].isr.contains(&leader),
        "the killed broker left the ISR: {t:?}"
    );
    let fenced = admin(&c.addr(other))
        .await
        .describe_cluster()
        .await
        .unwrap();
    assert!(
        !fenced.brokers.iter().any(|b| b.id == leader),
        "a fenced broker is listed"
    );
    // Restarted, it catches up with the metadata and is unfenced.
    c.restart(leader as usize);
    let back = eventually(Duration::from_secs(30), || async {
        let d = admin(&c.addr(leader as usize))
            .await
            .describe_cluster()
            .await
            .ok()?;
        d.brokers.iter().any(|b| b.id == leader).then_some(d)
    })
    .await
    .expect("the restarted broker was not unfenced");
    assert_eq!(back.brokers.len(), 3);
    assert_eq!(
        leader_of(c.addr(leader as usize), "failover").await,
        Some(new_leader),
        "the restarted broker sees the leader the others see"
    );
}

#[tokio::test]
async fn metadata_changes_go_on_after_the_active_controller_is_killed() {
    let mut c = Cluster::start(3, &[]);
    let first = admin(&c.addr(1))
        .await
        .describe_cluster()
        .await
        .unwrap()
        .controller_id;
    assert!(
        (1..=3).contains(&first),
        "DescribeCluster names the active controller: {first}"
    );
    c.kill(first as usize);
    let other = if first == 1 { 2 } else { 1 };
    // Forwarded to whichever controller wins the next election.
    create(&c.addr(other), "after-failover", 2, 2).await;
    let next = eventually(T, || async {
        let id = admin(&c.addr(other))
            .await
            .describe_cluster()
            .await
            .ok()?
            .controller_id;
        (id >= 0 && id != first).then_some(id)
    })
    .await
    .expect("no new active controller");
    assert_ne!(next, first);
    for id in (1..=3).filter(|i| *i != first as usize) {
        let t = eventually(T, || describe(c.addr(id), "after-failover")).await;
        assert!(t.is_some(), "broker {id} never saw the topic");
    }
}

#[tokio::test]
async fn sigterm_moves_leadership_away_before_the_broker_exits() {
    let mut c = Cluster::start(3, &[]);
    create(&c.addr(1), "moving", 6, 3).await;
    let before = eventually(T, || describe(c.addr(1), "moving"))
        .await
        .unwrap();
    assert!(before.partitions.iter().any(|p| p.leader == 3));
    assert!(c.stop(3), "broker 3 did not stop cleanly");
    // Right after it exited, nothing is led by it and nothing is leaderless.
    let after = describe(c.addr(1), "moving").await.unwrap();
    for p in &after.partitions {
        assert!(p.leader != 3 && p.leader >= 0, "{p:?}");
        assert!(!p.isr.contains(&3), "{p:?}");
    }
}

#[tokio::test]
async fn replicas_are_placed_across_three_racks() {
    let racks = ["a", "b", "c", "a"];
    let c = Cluster::start_with(4, &[], |id, _| {
        vec![("broker.rack".to_string(), racks[id - 1].to_string())]
    });
    create(&c.addr(4), "racked", 12, 3).await;
    let t = eventually(T, || describe(c.addr(1), "racked"))
        .await
        .unwrap();
    let cluster = admin(&c.addr(1)).await.describe_cluster().await.unwrap();
    let rack_of = |id: i32| {
        cluster
            .brokers
            .iter()
            .find(|b| b.id == id)
            .and_then(|b| b.rack.clone())
            .unwrap()
    };
    for p in &t.partitions {
        let mut r: Vec<String> = p.replicas.iter().map(|b| rack_of(*b)).collect();
        r.sort();
        r.dedup();
        assert_eq!(r.len(), 3, "partition {} on racks {r:?}", p.partition);
    }
}

/// Reorders partition 0's replicas so that `first` is preferred, keeping the same set (the ISR
/// does not change, and the leader stays where it is).
async fn prefer(addr: &str, topic: &str, replicas: Vec<i32>) {
    let a = admin(addr).await;
    a.alter_partition_reassignments(&[evenkeel::client::Reassignment {
        topic: topic.into(),
        partition: 0,
        replicas: Some(replicas),
    }])
    .await
    .unwrap();
}

#[tokio::test]
async fn the_controller_moves_leadership_back_to_the_preferred_replica() {
    let c = Cluster::start(
        3,
        &[
            "leader.imbalance.check.interval.seconds=2",
            "auto.leader.rebalance.enable=true",
        ],
    );
    let a = admin(&c.addr(1)).await;
    a.create_topic_with_assignment("rebalanced", &[vec![1, 2, 3]], &BTreeMap::new())
        .await
        .unwrap();
    prefer(&c.addr(1), "rebalanced", vec![2, 1, 3]).await;
    let moved = eventually(Duration::from_secs(15), || async {
        let p = describe(c.addr(3), "rebalanced").await?.partitions[0].clone();
        (p.replicas == vec![2, 1, 3] && p.leader == 2).then_some(p)
    })
    .await;
    assert!(
        moved.is_some(),
        "the leader did not move to the preferred replica: {:?}",
        describe(c.addr(3), "rebalanced").await
    );
}

#[tokio::test]
async fn without_auto_rebalance_the_leader_stays_where_it_is() {
    let c = Cluster::start(
        3,
        &[
            "leader.imbalance.check.interval.seconds=1",
            "auto.leader.rebalance.enable=false",
        ],
    );
    let a = admin(&c.addr(1)).await;
    a.create_topic_with_assignment("unbalanced", &[vec![1, 2, 3]], &BTreeMap::new())
        .await
        .unwrap();
    prefer(&c.addr(1), "unbalanced", vec![2, 1, 3]).await;
    let reordered = eventually(T, || async {
        let p = describe(c.addr(3), "unbalanced").await?.partitions[0].clone();
        (p.replicas == vec![2, 1, 3]).then_some(p)
    })
    .await
    .expect("the reorder did not apply");
    assert_eq!(reordered.leader, 1);
    // Three check intervals later the leader has not moved.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = describe(c.addr(3), "unbalanced").await.unwrap().partitions[0].clone();
    assert_eq!(p.leader, 1, "{p:?}");
}

/// Whether anything accepts connections on `addr`.
fn listening(addr: &str) -> bool {
    std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_millis(500)).is_ok()
}

#[tokio::test]
async fn dev_runs_three_brokers_and_ctrl_c_stops_them_all() {
    use std::io::{BufRead, BufReader};
    let data = tempfile::tempdir().unwrap();
    let mut dev = std::process::Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["dev", "--brokers", "3", "--port", "0", "--data"])
        .arg(data.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = dev.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (rtx, rrx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("evenkeel dev: 3 brokers ready on ") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
            if line.trim_start().starts_with("rebalancer:") {
                let url = line.split("http://").nth(1).unwrap_or("").to_string();
                let _ = rtx.send(url);
            }
        }
    });
    let bootstrap = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("no ready line from evenkeel dev");
    // dev runs a rebalancer beside its brokers: its first round found them balanced.
    let rebalancer = rrx
        .recv_timeout(Duration::from_secs(30))
        .expect("no rebalancer line from evenkeel dev");
    let port: u16 = rebalancer
        .split('/')
        .next()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("the rebalancer's metrics address");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, page) = common::http_get(port, "/metrics");
        if page.contains("evenkeel_rebalancer_rounds_total{outcome=\"balanced\"}") {
            assert!(
                page.contains("evenkeel_rebalancer_metrics_unknown{broker=\"3\"} 0"),
                "{page}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no balanced round:\n{page}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let addrs: Vec<String> = bootstrap.split(',').map(String::from).collect();
    assert_eq!(addrs.len(), 3, "{bootstrap}");
    let cluster = admin(&bootstrap).await.describe_cluster().await.unwrap();
    assert_eq!(cluster.brokers.len(), 3);
    create(&addrs[2], "dev-topic", 3, 3).await;
    // One quorum: every node formatted with the cluster id dev prints.
    let ids: Vec<String> = (1..=3)
        .map(|i| {
            let meta = data.path().join(format!("broker-{i}/meta.properties"));
            let text = std::fs::read_to_string(meta).unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix("cluster.id=").map(String::from))
                .unwrap()
        })
        .collect();
    assert!(ids.iter().all(|id| *id == cluster.cluster_id), "{ids:?}");
    // Ctrl-C: every broker stops cleanly, then dev exits 0.
    let _ = std::process::Command::new("kill")
        .args(["-INT", &dev.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = dev.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "evenkeel dev did not stop");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "evenkeel dev exited with {status}");
    for a in &addrs {
        assert!(!listening(a), "a broker still listens on {a}");
    }
}

/// `GET path` on a loopback port: the status, or None while nothing listens there.
fn http_status(port: u16, path: &str) -> Option<u16> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    Some(common::http_get(port, path).0)
}

/// A broker's `/readyz` turns ready only once the controller has registered and unfenced it
/// (Kafka's RUNNING), not when its listener starts: a pod that answers ready before it can
/// lead or follow anything lets a roll move on and a Service send it clients too early.
#[tokio::test]
async fn readyz_answers_ready_only_once_the_broker_is_registered() {
    let metrics = common::free_port();
    let mut c = Cluster::start_with(3, &[], |id, _| {
        if id == 3 {
            vec![(
                "evenkeel.metrics.address".into(),
                format!("127.0.0.1:{metrics}"),
            )]
        } else {
            Vec::new()
        }
    });
    assert_eq!(http_status(metrics, "/readyz"), Some(200), "registered");
    // Node 3 comes back alone: no quorum, so nobody can register it.
    for id in 1..=3 {
        c.kill(id);
    }
    c.spawn(3);
    eventually(Duration::from_secs(30), || async {
        (http_status(metrics, "/healthz") == Some(200)).then_some(())
    })
    .await
    .expect("node 3 serves /healthz while it waits for the quorum");
    assert_eq!(
        http_status(metrics, "/readyz"),
        Some(503),
        "listening, but not registered: not ready"
    );
    // A second voter makes a quorum; node 3 registers and turns ready.
    c.spawn(1);
    eventually(Duration::from_secs(60), || async {
        (http_status(metrics, "/readyz") == Some(200)).then_some(())
    })
    .await
    .expect("node 3 turns ready once registered");
    c.wait(1);
    c.wait(3);
}

/// `evenkeel perf produce` against `bootstrap`, with a short delivery timeout.
fn perf_produce(bootstrap: &str, topic: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args([
            "perf",
            "produce",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
        ])
        .args([
            "--partitions",
            "3",
            "--num-records",
            "200",
            "--record-size",
            "100",
        ])
        .args(extra)
        .args(["--producer-props", "acks=all", "message.timeout.ms=5000"])
        .output()
        .expect("run evenkeel perf produce")
}

/// The kind e2e's producer step: a topic `perf produce` creates takes the cluster's
/// `default.replication.factor`, so acks=all works under `min.insync.replicas` 2; a topic it is
/// told to make with one replica fails every record, and the run ends non-zero with the count
/// and the first record's error in its last line.
#[tokio::test]
async fn perf_produce_creates_its_topic_with_the_brokers_default_replication_factor() {
    let c = Cluster::start(
        3,
        &["default.replication.factor=3", "min.insync.replicas=2"],
    );
    let out = perf_produce(&c.bootstrap(), "perf-default-rf", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("200 records sent"), "{stdout}");
    let t = describe(c.addr(2), "perf-default-rf")
        .await
        .expect("the topic");
    assert!(t.partitions.iter().all(|p| p.replicas.len() == 3), "{t:?}");

    let out = perf_produce(
        &c.bootstrap(),
        "perf-rf-one",
        &["--replication-factor", "1"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "acks=all with one replica under min ISR 2"
    );
    let last = stderr.lines().last().unwrap_or_default();
    // librdkafka retries NOT_ENOUGH_REPLICAS until the delivery timeout, and reports that.
    assert!(
        last.contains("200 records failed; the first: ") && last.contains("timed out"),
        "the last line says what failed and why: {stderr}"
    );
}

/// A cluster of one (`evenkeel dev --brokers 1`: no controller listener configured, its quorum
/// on an ephemeral port) prints where its controller listener is, and DescribeCluster and
/// DescribeQuorum there name that address, so `--bootstrap-controller` tools can follow it (they
/// named port 0 before).
#[test]
fn a_cluster_of_one_names_its_bound_controller_listener() {
    use common::raw;
    use kafka_protocol::messages::{
        ApiKey, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
        DescribeQuorumResponse,
    };
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args([
            "dev",
            "--brokers",
            "1",
            "--port",
            "0",
            "--no-proxy",
            "--data",
        ])
        .arg(data.path())
        .args(["--override", "evenkeel.metrics.address=127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _guard = Kill(child);
    let controller = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            Some(
                l.split("controller listener on ")
                    .nth(1)?
                    .trim()
                    .to_string(),
            )
        })
        .expect("a controller listener line");
    let port: i32 = controller.rsplit(':').next().unwrap().parse().unwrap();
    assert_ne!(port, 0);
    let mut s = std::net::TcpStream::connect(&controller).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let r: DescribeClusterResponse = raw::call(
        &mut s,
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default().with_endpoint_type(2),
    );
    assert_eq!(r.error_code, 0);
    assert_eq!(r.brokers.len(), 1);
    assert_eq!(
        (r.brokers[0].host.as_str(), r.brokers[0].port),
        ("127.0.0.1", port)
    );
    let q: DescribeQuorumResponse = raw::call(
        &mut s,
        ApiKey::DescribeQuorum,
        2,
        &DescribeQuorumRequest::default(),
    );
    let listener = &q.nodes[0].listeners[0];
    assert_eq!(listener.port as i32, port, "{q:?}");
}
