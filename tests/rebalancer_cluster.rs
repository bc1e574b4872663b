//! The rebalancer against a 3-broker cluster started outside the test: Apache Kafka
//! (`bench/kafka/cluster start DIR 3 leader.imbalance.check.interval.seconds=10`, no metrics
//! exporter, so it balances from the layout alone) or 3 evenkeel brokers, named by
//! EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP. A topic of 300 partitions with broker 1 first in 80 % of
//! them is evened out with the optimal number of leadership changes, and the controller's
//! automatic preferred-leader elections keep it so. Builds only with `tier-kafka-cluster`;
//! `.ci/run` runs it against both.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::rebalancer::{leaders, optimal_moves, skewed_assignment, RebalancerProcess};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broker_leading_most_partitions_is_evened_out_optimally_and_stays_so() {
    let Ok(bootstrap) = std::env::var("EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP") else {
        eprintln!(
            "skipped: set EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP (bench/kafka/cluster start DIR 3)"
        );
        return;
    };
    let hold = Duration::from_secs(
        std::env::var("EVENKEEL_REBALANCE_HOLD_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300),
    );
    let a = evenkeel::client::AdminClient::connect(&bootstrap, Duration::from_secs(30))
        .await
        .expect("connects to the cluster");
    let ids: Vec<i32> = a
        .describe_cluster()
        .await
        .unwrap()
        .brokers
        .iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(ids, vec![1, 2, 3], "a 3-broker cluster with ids 1..3");
    // Leave out what other tests created: count only this topic's partitions.
    let topic = format!("skewed-{}", std::process::id());
    let assignment = skewed_assignment(300, 3, 0.8);
    a.create_topic_with_assignment(&topic, &assignment, &BTreeMap::new())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = a
            .describe_topics(Some(std::slice::from_ref(&topic)))
            .await
            .unwrap_or_default();
        let settled = t.first().is_some_and(|t| {
            t.partitions.len() == 300
                && t.partitions.iter().all(|p| {
                    let want = &assignment[p.partition as usize];
                    p.leader == want[0] && p.isr.len() == want.len()
                })
        });
        if settled {
            break;
        }
        assert!(Instant::now() < deadline, "the topic did not settle");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Other topics in the cluster count for the rebalancer too.
    let (before, leaders_before) = leaders(&a, &ids).await;
    let (optimum, lower, upper) = optimal_moves(&before, 1.1);
    assert!(optimum > 100, "{before:?}");
    let first = bootstrap.split(',').next().unwrap();
    let r = RebalancerProcess::start(
        first,
        &["--interval", "5s", "--no-metrics", "--mute", "30m"],
    );
    r.wait_for("the rebalancer to act", Duration::from_secs(60), |r| {
        r.rounds("acted") >= 1.0
    });
    let rounds: f64 = [
        "balanced",
        "muted",
        "skipped",
        "stood_down",
        "failed",
        "acted",
    ]
    .iter()
    .map(|o| r.rounds(o))
    .sum();
    assert!(rounds <= 2.0, "acted in round {rounds}:\n{}", r.log());
    let (after, leaders_after) = leaders(&a, &ids).await;
    assert!(
        after.values().all(|c| (lower..=upper).contains(c)),
        "{after:?} not within [{lower}, {upper}]"
    );
    let made = leaders_before
        .iter()
        .filter(|(tp, l)| leaders_after.get(*tp) != Some(l))
        .count();
    assert_eq!(made, optimum, "leadership changes vs the optimum");
    assert_eq!(
        r.metric("evenkeel_rebalancer_moves_made_total", ""),
        optimum as f64
    );
    let end = Instant::now() + hold;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (_, now) = leaders(&a, &ids).await;
        let moved = leaders_after
            .iter()
            .filter(|(tp, l)| now.get(*tp) != Some(l))
            .count();
        assert_eq!(moved, 0, "the controller moved leadership back");
    }
    let _ = a.delete_topic(&topic).await;
}
