//! The operator's scaling moves (`operator::placement` plans carried out through the admin
//! client's AlterPartitionReassignments) against a real multi-broker cluster: Apache Kafka
//! started by `bench/kafka/cluster start DIR 3`, and 3 evenkeel brokers (`evenkeel dev
//! --brokers 3`), each with EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP set to its bootstrap list. It builds
//! only with the `tier-kafka-cluster` feature (a plain `cargo test` leaves it out); `.ci/run`
//! starts both clusters and runs it against each.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use evenkeel::client::AdminClient;
use evenkeel::operator::kafka::{AdminConnector, ClientConnector, ClusterState, TopicAdmin};
use evenkeel::operator::placement::{plan_drain, plan_spread};

async fn wait_until<F, Fut>(what: &str, mut done: F) -> ClusterState
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<ClusterState>>,
{
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(s) = done().await {
            return s;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn replica_counts(state: &ClusterState, topic: &str) -> BTreeMap<i32, usize> {
    let mut c: BTreeMap<i32, usize> = state.brokers.iter().map(|b| (*b, 0)).collect();
    for p in state.partitions.iter().filter(|p| p.topic == topic) {
        for r in &p.replicas {
            *c.entry(*r).or_default() += 1;
        }
    }
    c
}

/// Moves done, ISR full, and `check` holds for the topic's partitions.
async fn settled(
    admin: &AdminClient,
    topic: &str,
    check: impl Fn(&ClusterState) -> bool,
) -> Option<ClusterState> {
    if admin.ongoing_reassignments().await.ok()? > 0 {
        return None;
    }
    let state = admin.cluster_state().await.ok()?;
    let parts: Vec<_> = state
        .partitions
        .iter()
        .filter(|p| p.topic == topic)
        .collect();
    // A topic just created may not be in the metadata yet: no partitions is not settled.
    let full = !parts.is_empty()
        && parts.iter().all(|p| {
            let mut isr = p.isr.clone();
            let mut replicas = p.replicas.clone();
            isr.sort();
            replicas.sort();
            isr == replicas
        });
    (full && check(&state)).then_some(state)
}

#[tokio::test]
async fn drain_then_spread_moves_replicas_on_a_real_cluster() {
    let Ok(bootstrap) = std::env::var("EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP") else {
        eprintln!(
            "skipped: set EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP (bench/kafka/cluster start DIR 3)"
        );
        return;
    };
    let admin = ClientConnector {
        timeout: Duration::from_secs(30),
    }
    .connect(&bootstrap, evenkeel::client::ClientSecurity::plaintext())
    .await
    .expect("connects to the Kafka cluster");
    let topic = format!("moves-{}", std::process::id());
    TopicAdmin::create_topic(&admin, &topic, 6, 2, &BTreeMap::new())
        .await
        .expect("creates the topic");
    let state = wait_until("the topic's replicas to be in sync", || {
        settled(&admin, &topic, |_| true)
    })
    .await;
    let brokers = state.brokers.clone();
    assert!(brokers.len() >= 3, "needs three brokers, found {brokers:?}");
    // The broker to drain is the highest one that holds replicas. A loaded machine can fence
    // a broker for a moment (missed heartbeats) just as the topic is created, and the placement
    // then leaves that broker out; the spread below puts replicas on every broker all the same.
    let counts = replica_counts(&state, &topic);
    let last = *brokers
        .iter()
        .filter(|b| counts.get(b).is_some_and(|n| *n > 0))
        .max()
        .expect("some broker holds replicas");
    let keep: Vec<i32> = brokers.iter().copied().filter(|b| *b != last).collect();

    // Drain the last broker, as before a scale-down.
    let parts: Vec<_> = state
        .partitions
        .iter()
        .filter(|p| p.topic == topic)
        .cloned()
        .collect();
    let moves = plan_drain(&parts, &keep).expect("a drain plan");
    assert!(!moves.is_empty());
    admin
        .reassign(&moves)
        .await
        .expect("Kafka accepts the moves");
    let drained = wait_until("broker to be drained", || {
        settled(&admin, &topic, |s| replica_counts(s, &topic)[&last] == 0)
    })
    .await;
    for m in &moves {
        let p = drained
            .partitions
            .iter()
            .find(|p| p.topic == m.topic && p.partition == m.partition)
            .unwrap();
        assert_eq!(
            p.replicas, m.replicas,
            "Kafka placed {}-{} as planned",
            m.topic, m.partition
        );
    }

    // Then spread onto it again, as after a scale-up.
    let parts: Vec<_> = drained
        .partitions
        .iter()
        .filter(|p| p.topic == topic)
        .cloned()
        .collect();
    let moves = plan_spread(&parts, &brokers);
    assert!(!moves.is_empty(), "an empty broker gets replicas");
    admin
        .reassign(&moves)
        .await
        .expect("Kafka accepts the moves");
    let spread = wait_until("replicas to spread", || {
        settled(&admin, &topic, |s| replica_counts(s, &topic)[&last] > 0)
    })
    .await;
    let counts = replica_counts(&spread, &topic);
    let (lo, hi) = (
        counts.values().min().unwrap(),
        counts.values().max().unwrap(),
    );
    assert!(hi - lo <= 1, "balanced within one replica: {counts:?}");

    TopicAdmin::delete_topic(&admin, &topic)
        .await
        .expect("deletes the topic");
}
