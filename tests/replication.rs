//! ISR replication on real broker processes: followers copy the leader's log, acks=all waits for
//! the ISR, a committed record outlives its leader, lagging followers leave the ISR and rejoin,
//! min.insync.replicas refuses writes it cannot cover, and replicas converge on identical logs.

mod common;

use std::time::Duration;

use common::cluster::{
    admin, create_assigned, partition, produce, producer, read_partition, until, Cluster,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};

const T: Duration = Duration::from_secs(20);

async fn produce_n(p: &FutureProducer, topic: &str, from: usize, n: usize) -> Vec<i64> {
    produce(p, topic, (from..from + n).map(|i| format!("v{i}"))).await
}

#[tokio::test]
async fn an_acked_record_outlives_its_leader_and_the_old_leader_catches_up() {
    let mut c = Cluster::start(3, &[]);
    create_assigned(
        &c,
        "durable",
        vec![vec![1, 2, 3]],
        &[("min.insync.replicas", "2")],
    )
    .await;
    let p = producer(&c.bootstrap(), "all");
    let offsets = produce_n(&p, "durable", 0, 200).await;
    assert_eq!(offsets, (0..200).collect::<Vec<i64>>());
    // Every follower has it: the ISR is whole and the followers' lag is 0.
    let full = until("an ISR of 3", T, || async {
        let p = partition(&c.addr(2), "durable", 0).await?;
        (p.isr.len() == 3).then_some(p)
    })
    .await;
    assert_eq!(full.leader, 1);
    c.kill(1);
    let killed = std::time::Instant::now();
    // Broker 1 may also be the active controller: then a quorum election comes first, and the
    // new controller gives every broker a fresh session (broker.session.timeout.ms, 9 s) before
    // it fences broker 1. How fast that goes is tests/cluster.rs's subject, not this test's.
    let after = until("a new leader", Duration::from_secs(40), || async {
        let p = partition(&c.addr(2), "durable", 0).await?;
        (p.leader == 2 || p.leader == 3).then_some(p)
    })
    .await;
    eprintln!("a new leader {:?} after the kill", killed.elapsed());
    assert!(!after.isr.contains(&1), "{after:?}");
    let seen = read_partition(&c.live_bootstrap(), "durable", 200, &[]);
    let want: Vec<(i64, String)> = (0..200).map(|i| (i, format!("v{i}"))).collect();
    assert_eq!(
        seen, want,
        "the new leader serves every acked record, in order"
    );
    // Writes go on at the new leader, and the old one rejoins the ISR once it caught up.
    let p2 = producer(&c.live_bootstrap(), "all");
    let more = produce_n(&p2, "durable", 200, 50).await;
    assert_eq!(more, (200..250).collect::<Vec<i64>>());
    c.restart(1);
    until(
        "broker 1 back in the ISR",
        Duration::from_secs(30),
        || async {
            let p = partition(&c.addr(2), "durable", 0).await?;
            (p.isr.len() == 3).then_some(())
        },
    )
    .await;
    let seen = read_partition(&c.bootstrap(), "durable", 250, &[]);
    assert_eq!(seen.len(), 250);
}

#[tokio::test]
async fn acks_all_is_refused_below_min_insync_replicas_until_the_isr_recovers() {
    let mut c = Cluster::start(3, &["replica.lag.time.max.ms=3000"]);
    create_assigned(
        &c,
        "guarded",
        vec![vec![1, 2, 3]],
        &[("min.insync.replicas", "3")],
    )
    .await;
    let p = producer(&c.bootstrap(), "all");
    produce_n(&p, "guarded", 0, 10).await;
    // A follower that stops fetching leaves the ISR after replica.lag.time.max.ms (the
    // controller would fence it only after broker.session.timeout.ms).
    c.sigstop(3);
    until("an ISR without broker 3", T, || async {
        let p = partition(&c.addr(1), "guarded", 0).await?;
        (!p.isr.contains(&3)).then_some(())
    })
    .await;
    let refused = p
        .send(
            FutureRecord::<(), _>::to("guarded")
                .partition(0)
                .payload("no"),
            Duration::from_secs(10),
        )
        .await;
    match refused {
        Err((KafkaError::MessageProduction(code), _)) => assert!(
            matches!(
                code,
                RDKafkaErrorCode::NotEnoughReplicas
                    | RDKafkaErrorCode::NotEnoughReplicasAfterAppend
            ),
            "{code:?}"
        ),
        other => panic!("acks=all with ISR 2 < min.insync.replicas 3 gave {other:?}"),
    }
    // acks=1 still works: only the leader is needed.
    let one = producer(&c.bootstrap(), "1");
    produce_n(&one, "guarded", 10, 5).await;
    c.sigcont(3);
    until("broker 3 back in the ISR", T, || async {
        let p = partition(&c.addr(1), "guarded", 0).await?;
        (p.isr.len() == 3).then_some(())
    })
    .await;
    let ok = produce_n(&p, "guarded", 15, 1).await;
    assert_eq!(ok, vec![15], "the refused record took no offset");
}

#[tokio::test]
async fn a_leader_that_lost_its_uncommitted_tail_truncates_to_the_new_leader() {
    let mut c = Cluster::start(3, &[]);
    create_assigned(&c, "diverge", vec![vec![1, 2, 3]], &[]).await;
    let all = producer(&c.bootstrap(), "all");
    produce_n(&all, "diverge", 0, 20).await;
    // Freeze both followers and write to the leader alone: these records are not committed.
    // (Wait out replica.fetch.wait.max.ms first: a fetch parked at the leader would otherwise
    // carry the records into the frozen follower's socket.)
    c.sigstop(2);
    c.sigstop(3);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let one = producer(&c.addr(1), "1");
    let tail = produce_n(&one, "diverge", 1000, 5).await;
    assert_eq!(tail, (20..25).collect::<Vec<i64>>());
    c.kill(1);
    c.sigcont(2);
    c.sigcont(3);
    let after = until("a new leader", Duration::from_secs(30), || async {
        let p = partition(&c.addr(2), "diverge", 0).await?;
        (p.leader == 2 || p.leader == 3).then_some(p)
    })
    .await;
    // The new leader writes its own records at offsets 20..: the old tail is gone.
    let p = producer(&c.addr(after.leader as usize), "all");
    let fresh = produce_n(&p, "diverge", 2000, 10).await;
    assert_eq!(fresh, (20..30).collect::<Vec<i64>>());
    c.restart(1);
    until(
        "broker 1 back in the ISR",
        Duration::from_secs(30),
        || async {
            let p = partition(&c.addr(2), "diverge", 0).await?;
            (p.isr.len() == 3).then_some(())
        },
    )
    .await;
    // Broker 1 truncated its tail and now holds what the others hold: make it the leader
    // and read everything from it.
    admin(&c.addr(2))
        .await
        .elect_leaders(true, Some(&[("diverge".to_string(), 0)]))
        .await
        .unwrap();
    until("broker 1 leading again", T, || async {
        let p = partition(&c.addr(2), "diverge", 0).await?;
        (p.leader == 1).then_some(())
    })
    .await;
    let seen = read_partition(&c.addr(1), "diverge", 30, &[]);
    let mut want: Vec<(i64, String)> = (0..20).map(|i| (i, format!("v{i}"))).collect();
    want.extend(
        (2000..2010)
            .enumerate()
            .map(|(i, v)| (20 + i as i64, format!("v{v}"))),
    );
    assert_eq!(seen, want, "no offset holds a record of the lost tail");
}

#[tokio::test]
async fn a_new_partition_is_fetched_at_once_not_after_another_partitions_long_poll() {
    // Followers park a fetch of an idle partition at the leader for replica.fetch.wait.max.ms
    // (20 s here). A partition created meanwhile must not wait for that fetch to end (nor, if a
    // follower asks before the leader has applied the new topic, for replica.fetch.backoff.ms)
    // before its first fetch: the first acks=all write to it waits for both followers.
    let c = Cluster::start(
        3,
        &[
            "replica.fetch.wait.max.ms=20000",
            "replica.fetch.backoff.ms=20000",
        ],
    );
    create_assigned(&c, "idle", vec![vec![1, 2, 3]], &[]).await;
    let p = producer(&c.bootstrap(), "all");
    produce_n(&p, "idle", 0, 1).await;
    for round in 0..3 {
        // The followers' next fetch of "idle" is now parked at the leader.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let topic = format!("fresh{round}");
        create_assigned(&c, &topic, vec![vec![1, 2, 3]], &[]).await;
        let started = std::time::Instant::now();
        assert_eq!(produce_n(&p, &topic, 0, 1).await, vec![0]);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "the first acks=all write to {topic} took {took:?}: its followers waited for a fetch of another partition"
        );
    }
}
