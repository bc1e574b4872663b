//! Cluster part 1 on real broker processes: one metadata quorum, topics seen by every broker,
//! new leaders after kill -9, a new active controller, restarts, controlled shutdown, racks,
//! and nodes the cluster must refuse.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use evenkeel::client::{AdminClient, TopicDescription};

const T: Duration = Duration::from_secs(10);

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

/// The topic as broker `addr` describes it (None while it does not know it).
async fn describe(addr: String, topic: &str) -> Option<TopicDescription> {
    let a = AdminClient::connect(&addr, T).await.ok()?;
    a.describe_topics(Some(&[topic.to_string()]))
        .await
        .ok()?
        .into_iter()
        .next()
}

/// Polls `check` until it returns Some or `within` passes.
async fn eventually<T, F, Fut>(within: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    create(&c.addr(1), "failover", 1, 3).await;
    let leader = eventually(T, || leader_of(c.addr(1), "failover"))
        .await
        .unwrap();
    let other = if leader == 1 { 2 } else { 1 };
    c.kill(leader as usize);
    let killed = Instant::now();
    let new_leader = eventually(Duration::from_secs(20), || async {
        let l = leader_of(c.addr(other), "failover").await?;
        (l >= 0 && l != leader).then_some(l)
    })
    .await
    .expect("no new leader");
    let took = killed.elapsed();
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
    let c = Cluster::start_with(4, &[], |id| {
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
