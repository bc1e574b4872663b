//! ISR replication on real broker processes: followers copy the leader's log, acks=all waits for
//! the ISR, a committed record outlives its leader, lagging followers leave the ISR and rejoin,
//! min.insync.replicas refuses writes it cannot cover, and replicas converge on identical logs.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use evenkeel::client::{AdminClient, PartitionInfo};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

const T: Duration = Duration::from_secs(20);

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

async fn partition0(addr: &str, topic: &str) -> Option<PartitionInfo> {
    let a = AdminClient::connect(addr, T).await.ok()?;
    let t = a
        .describe_topics(Some(&[topic.to_string()]))
        .await
        .ok()?
        .into_iter()
        .next()?;
    t.partitions.into_iter().next()
}

async fn until<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn producer(bootstrap: &str, acks: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", acks)
        .set("linger.ms", "2")
        .set("message.timeout.ms", "30000")
        .set("retries", "0")
        .set("enable.idempotence", "false")
        .create()
        .unwrap()
}

/// Every record of partition 0 from the start, as (offset, value).
fn read_all(bootstrap: &str, topic: &str, expect: usize) -> Vec<(i64, String)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "replication-test")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < expect && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            out.push((m.offset(), v));
        }
    }
    out
}

async fn produce_n(p: &FutureProducer, topic: &str, from: usize, n: usize) -> Vec<i64> {
    let mut offsets = Vec::new();
    for i in from..from + n {
        let v = format!("v{i}");
        let d = p
            .send(
                FutureRecord::<(), _>::to(topic).partition(0).payload(&v),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("record {i} not acked: {e}"));
        offsets.push(d.offset);
    }
    offsets
}

async fn create(c: &Cluster, topic: &str, replicas: Vec<i32>, configs: &[(&str, &str)]) {
    let configs: BTreeMap<String, String> = configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    admin(&c.addr(1))
        .await
        .create_topic_with_assignment(topic, &[replicas], &configs)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_acked_record_outlives_its_leader_and_the_old_leader_catches_up() {
    let mut c = Cluster::start(3, &[]);
    create(
        &c,
        "durable",
        vec![1, 2, 3],
        &[("min.insync.replicas", "2")],
    )
    .await;
    let p = producer(&c.bootstrap(), "all");
    let offsets = produce_n(&p, "durable", 0, 200).await;
    assert_eq!(offsets, (0..200).collect::<Vec<i64>>());
    // Every follower has it: the ISR is whole and the followers' lag is 0.
    let full = until("an ISR of 3", T, || async {
        let p = partition0(&c.addr(2), "durable").await?;
        (p.isr.len() == 3).then_some(p)
    })
    .await;
    assert_eq!(full.leader, 1);
    c.kill(1);
    let after = until("a new leader", T, || async {
        let p = partition0(&c.addr(2), "durable").await?;
        (p.leader == 2 || p.leader == 3).then_some(p)
    })
    .await;
    assert!(!after.isr.contains(&1), "{after:?}");
    let seen = read_all(&c.live_bootstrap(), "durable", 200);
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
            let p = partition0(&c.addr(2), "durable").await?;
            (p.isr.len() == 3).then_some(())
        },
    )
    .await;
    let seen = read_all(&c.bootstrap(), "durable", 250);
    assert_eq!(seen.len(), 250);
}

#[tokio::test]
async fn acks_all_is_refused_below_min_insync_replicas_until_the_isr_recovers() {
    let mut c = Cluster::start(3, &["replica.lag.time.max.ms=3000"]);
    create(
        &c,
        "guarded",
        vec![1, 2, 3],
        &[("min.insync.replicas", "3")],
    )
    .await;
    let p = producer(&c.bootstrap(), "all");
    produce_n(&p, "guarded", 0, 10).await;
    // A follower that stops fetching leaves the ISR after replica.lag.time.max.ms (the
    // controller would fence it only after broker.session.timeout.ms).
    c.sigstop(3);
    until("an ISR without broker 3", T, || async {
        let p = partition0(&c.addr(1), "guarded").await?;
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
        let p = partition0(&c.addr(1), "guarded").await?;
        (p.isr.len() == 3).then_some(())
    })
    .await;
    let ok = produce_n(&p, "guarded", 15, 1).await;
    assert_eq!(ok, vec![15], "the refused record took no offset");
}

#[tokio::test]
async fn a_leader_that_lost_its_uncommitted_tail_truncates_to_the_new_leader() {
    let mut c = Cluster::start(3, &[]);
    create(&c, "diverge", vec![1, 2, 3], &[]).await;
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
        let p = partition0(&c.addr(2), "diverge").await?;
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
            let p = partition0(&c.addr(2), "diverge").await?;
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
        let p = partition0(&c.addr(2), "diverge").await?;
        (p.leader == 1).then_some(())
    })
    .await;
    let seen = read_all(&c.addr(1), "diverge", 30);
    let mut want: Vec<(i64, String)> = (0..20).map(|i| (i, format!("v{i}"))).collect();
    want.extend(
        (2000..2010)
            .enumerate()
            .map(|(i, v)| (20 + i as i64, format!("v{v}"))),
    );
    assert_eq!(seen, want, "no offset holds a record of the lost tail");
}
