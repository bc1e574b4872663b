//! The operator's rolling-restart gate against a real 3-broker evenkeel: the cluster state it
//! reads through the admin client (ISR and min.insync.replicas per partition) lets a broker
//! restart while every ISR has room above min.insync.replicas, and stops the roll while a
//! follower is out of the ISR, for every broker still in it.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use evenkeel::operator::cluster::{can_restart, next_roll_step, PodView, RollStep};
use evenkeel::operator::kafka::{AdminConnector, ClientConnector, ClusterState, TopicAdmin};

async fn state_when(
    admin: &evenkeel::client::AdminClient,
    ok: impl Fn(&ClusterState) -> bool,
) -> ClusterState {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = admin.cluster_state().await {
            if ok(&s) {
                return s;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the cluster did not reach the state"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn isr_of(s: &ClusterState, topic: &str) -> Vec<i32> {
    s.partitions
        .iter()
        .find(|p| p.topic == topic)
        .map(|p| p.isr.clone())
        .unwrap_or_default()
}

/// Pods 0-3 as the roll sees them (ordinal 0 stands for a pod the test has no broker for, so
/// that the ordinals the roll expects are all there), `stale` ones running an old template.
fn pods(stale: &[i32]) -> Vec<PodView> {
    (0..=3)
        .map(|i| PodView {
            name: format!("kafka-{i}"),
            ordinal: i,
            ready: true,
            stale: stale.contains(&i),
            terminating: false,
            waiting: None,
        })
        .collect()
}

#[tokio::test]
async fn the_roll_waits_while_a_partition_is_at_min_insync_replicas() {
    let mut c = Cluster::start(3, &["replica.lag.time.max.ms=3000"]);
    let admin = ClientConnector {
        timeout: Duration::from_secs(20),
    }
    .connect(
        &c.bootstrap(),
        evenkeel::client::ClientSecurity::plaintext(),
    )
    .await
    .unwrap();
    let configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
    TopicAdmin::create_topic(&admin, "gated", 1, 3, &configs)
        .await
        .unwrap();
    let healthy = state_when(&admin, |s| isr_of(s, "gated").len() == 3).await;
    for b in 1..=3 {
        assert!(can_restart(b, &healthy).is_ok(), "broker {b}");
    }
    // A follower drops out of the ISR: the two left are at min.insync.replicas.
    let p = healthy
        .partitions
        .iter()
        .find(|p| p.topic == "gated")
        .unwrap();
    let follower = p.replicas.iter().copied().find(|r| *r != p.leader).unwrap();
    c.sigstop(follower as usize);
    let degraded = state_when(&admin, |s| isr_of(s, "gated").len() == 2).await;
    for b in isr_of(&degraded, "gated") {
        let refused = can_restart(b, &degraded).unwrap_err();
        assert!(refused.contains("min.insync.replicas=2"), "{refused}");
    }
    assert!(can_restart(follower, &degraded).is_ok());
    // The roll as a whole waits for the partition to catch up rather than restart anyone.
    let others: Vec<i32> = (1..=3).filter(|b| *b != follower).collect();
    assert!(
        matches!(
            next_roll_step(&pods(&others), 4, Some(&degraded)),
            RollStep::Wait(_)
        ),
        "{:?}",
        next_roll_step(&pods(&others), 4, Some(&degraded))
    );
    c.sigcont(follower as usize);
    let back = state_when(&admin, |s| isr_of(s, "gated").len() == 3).await;
    assert!(matches!(
        next_roll_step(&pods(&others), 4, Some(&back)),
        RollStep::Restart(_)
    ));
}
