//! The validation test (ducktape's ProduceConsumeValidate): three brokers, a topic with
//! replication factor 3 and min.insync.replicas 2, an idempotent acks=all librdkafka producer
//! running throughout, and rounds of faults: kill -9 of a partition leader (sometimes of the
//! active controller) and a restart, SIGSTOP of a broker for longer than
//! replica.lag.time.max.ms and SIGCONT, or a roll's step (SIGTERM, a controlled shutdown; a
//! restart; preferred leader elections). After each round every replica is back in the ISR
//! within a bound, and the largest follower fetch rate is printed and bounded. At the end
//! every acknowledged record is consumed, in order per partition, and none twice.
//!
//! `EVENKEEL_VALIDATION_ROUNDS` sets the number of rounds (default 10); `scripts/validate`
//! runs 100.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use evenkeel::client::AdminClient;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

const TOPIC: &str = "validated";
const PARTITIONS: i32 = 3;
/// Faster failure detection than Kafka's defaults, so rounds take seconds.
const OVERRIDES: [&str; 3] = [
    "broker.session.timeout.ms=4000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=3000",
];
const LAG: Duration = Duration::from_millis(3000);

fn rounds() -> usize {
    common::env_count("EVENKEEL_VALIDATION_ROUNDS", 10)
}

/// What the producer was told, per partition: acknowledged (offset, value) in send order.
#[derive(Default)]
struct Acked {
    by_partition: BTreeMap<i32, Vec<(i64, u64)>>,
    failed: usize,
}

async fn produce_until(bootstrap: String, stop: Arc<AtomicBool>, acked: Arc<Mutex<Acked>>) -> u64 {
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "300000")
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    let mut n: u64 = 0;
    let mut answers = Vec::new();
    while !stop.load(Ordering::Acquire) {
        for _ in 0..50 {
            let value = n.to_string();
            let key = format!("k{}", n % 97);
            match p.send_result(FutureRecord::to(TOPIC).key(&key).payload(&value)) {
                Ok(delivery) => {
                    let acked = acked.clone();
                    answers.push(tokio::spawn(async move {
                        let answer = delivery.await;
                        let mut a = acked.lock().unwrap();
                        match answer {
                            Ok(Ok(d)) => a
                                .by_partition
                                .entry(d.partition)
                                .or_default()
                                .push((d.offset, n)),
                            _ => a.failed += 1,
                        }
                    }));
                }
                Err(_) => acked.lock().unwrap().failed += 1,
            }
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for a in answers {
        let _ = a.await;
    }
    n
}

fn read_everything(bootstrap: &str, expect: usize) -> BTreeMap<i32, Vec<(i64, u64)>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "validator")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out: BTreeMap<i32, Vec<(i64, u64)>> = BTreeMap::new();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < expect && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let v: u64 = std::str::from_utf8(m.payload().unwrap_or_default())
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(u64::MAX);
            out.entry(m.partition()).or_default().push((m.offset(), v));
            got += 1;
        }
    }
    out
}

async fn leaders(addr: &str) -> Option<HashMap<i32, (i32, usize)>> {
    let a = AdminClient::connect(addr, Duration::from_secs(10))
        .await
        .ok()?;
    let t = a
        .describe_topics(Some(&[TOPIC.to_string()]))
        .await
        .ok()?
        .into_iter()
        .next()?;
    Some(
        t.partitions
            .iter()
            .map(|p| (p.partition, (p.leader, p.isr.len())))
            .collect(),
    )
}

/// How long after a fault is healed every replica must be back in the ISR: the restarted or
/// thawed broker registers again (a session timeout when it was fenced), catches up and is
/// taken back by each leader. A follower that cannot make progress never gets back.
const BACK_IN_ISR: Duration = Duration::from_secs(10);

/// Fetches per second one broker's replica fetchers may send, over a window with the producer
/// running (each acknowledged batch wakes the followers' long polls). A follower spinning on an
/// answer that changes nothing sends thousands.
const FOLLOWER_FETCHES_PER_SEC: f64 = 1500.0;

/// Replica fetch requests node `id` has sent (0 when it cannot be scraped).
fn fetches_sent(c: &Cluster, id: usize) -> f64 {
    c.metric(id, "kafka_server_fetcherstats_requests_total")
        .unwrap_or(0.0)
}

/// The largest rate at which one broker's fetchers sent fetches, over a one-second window.
async fn largest_follower_fetch_rate(c: &mut Cluster) -> f64 {
    let ids: Vec<usize> = (1..=c.nodes.len()).filter(|id| c.is_running(*id)).collect();
    let before: Vec<f64> = ids.iter().map(|id| fetches_sent(c, *id)).collect();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let secs = start.elapsed().as_secs_f64();
    ids.iter()
        .zip(before)
        .map(|(id, b)| (fetches_sent(c, *id) - b).max(0.0) / secs)
        .fold(0.0, f64::max)
}

/// Preferred leader elections for every partition (what the controller runs after a roll).
async fn elect_preferred(c: &mut Cluster) {
    let bootstrap = c.live_bootstrap();
    if let Ok(a) = AdminClient::connect(&bootstrap, Duration::from_secs(10)).await {
        let _ = a.elect_leaders(true, None).await;
    }
}

/// Waits until every partition has a leader and a full ISR; returns how long that took.
async fn settle(c: &mut Cluster) -> Duration {
    let start = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let bootstrap = c.live_bootstrap();
        let first = bootstrap.split(',').next().unwrap_or_default().to_string();
        if let Some(l) = leaders(&first).await {
            if l.len() == PARTITIONS as usize
                && l.values().all(|(leader, isr)| *leader >= 0 && *isr == 3)
            {
                return start.elapsed();
            }
        }
        assert!(Instant::now() < deadline, "the cluster did not settle");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn active_controller(c: &mut Cluster) -> Option<i32> {
    let bootstrap = c.live_bootstrap();
    let a = AdminClient::connect(&bootstrap, Duration::from_secs(10))
        .await
        .ok()?;
    Some(a.describe_quorum().await.ok()?.leader_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_record_survives_kills_and_freezes() {
    let mut c = Cluster::start(3, &OVERRIDES);
    let admin = AdminClient::connect(&c.addr(1), Duration::from_secs(10))
        .await
        .unwrap();
    admin
        .create_topic(
            TOPIC,
            PARTITIONS,
            3,
            &BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]),
        )
        .await
        .unwrap();
    settle(&mut c).await;
    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce_until(c.bootstrap(), stop.clone(), acked.clone()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let n = rounds();
    let mut done = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut fastest_fetching: f64 = 0.0;
    for round in 0..n {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let l = leaders(&c.live_bootstrap())
            .await
            .expect("partition leaders");
        let target = match rng.gen_range(0..4) {
            // Sometimes the active controller (combined nodes: it is a broker too).
            0 => active_controller(&mut c).await.unwrap_or(1),
            _ => l
                .get(&rng.gen_range(0..PARTITIONS))
                .map_or(1, |x| x.0.max(1)),
        } as usize;
        let fault = rng.gen_range(0..100);
        if fault < 30 {
            c.sigstop(target);
            tokio::time::sleep(LAG + Duration::from_millis(1500)).await;
            c.sigcont(target);
            done.push(format!("{round}: SIGSTOP {target}"));
        } else if fault < 60 {
            // A roll's step: controlled shutdown, restart, leadership back to the preferred
            // replicas (epochs that may begin and end with no record written in them).
            assert!(c.stop(target), "broker {target} stops cleanly on SIGTERM");
            tokio::time::sleep(Duration::from_millis(rng.gen_range(200..2000))).await;
            c.restart(target);
            settle(&mut c).await;
            elect_preferred(&mut c).await;
            done.push(format!("{round}: roll {target}"));
        } else {
            c.kill(target);
            tokio::time::sleep(Duration::from_millis(rng.gen_range(200..3000))).await;
            c.restart(target);
            done.push(format!("{round}: kill -9 {target}"));
        }
        let back = settle(&mut c).await;
        let rate = largest_follower_fetch_rate(&mut c).await;
        eprintln!(
            "validation round {round}: every replica back in the ISR after {} ms; largest \
             follower fetch rate {rate:.0}/s",
            back.as_millis()
        );
        assert!(
            back <= BACK_IN_ISR,
            "round {round}: replicas took {back:?} to get back into the ISR\n{}",
            c.log_tails(30)
        );
        assert!(
            rate <= FOLLOWER_FETCHES_PER_SEC,
            "round {round}: a broker's fetchers sent {rate:.0} fetches/s: a follower spins\n{}",
            c.log_tails(30)
        );
        slowest = slowest.max(back);
        fastest_fetching = fastest_fetching.max(rate);
    }
    stop.store(true, Ordering::Release);
    let sent = producer.await.unwrap();
    let a = acked.lock().unwrap();
    let acked_total: usize = a.by_partition.values().map(Vec::len).sum();
    let seen = read_everything(&c.bootstrap(), acked_total);
    let mut lost = 0;
    let mut duplicated = 0;
    for (p, records) in &a.by_partition {
        let got = seen.get(p).cloned().unwrap_or_default();
        let values: Vec<u64> = got.iter().map(|(_, v)| *v).collect();
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for v in &values {
            *counts.entry(*v).or_default() += 1;
        }
        duplicated += counts
            .values()
            .filter(|n| **n > 1)
            .map(|n| n - 1)
            .sum::<usize>();
        for (offset, v) in records {
            match got.iter().find(|(o, _)| o == offset) {
                Some((_, found)) if found == v => {}
                _ => lost += 1,
            }
        }
        // In order: offsets strictly increase and the acked values appear in send order.
        assert!(
            got.windows(2).all(|w| w[0].0 < w[1].0),
            "partition {p} out of order"
        );
        let mut order: Vec<u64> = records.iter().map(|(_, v)| *v).collect();
        order.sort_unstable();
        let pos: Vec<usize> = order
            .iter()
            .filter_map(|v| values.iter().position(|x| x == v))
            .collect();
        assert!(
            pos.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: acked values out of send order"
        );
    }
    eprintln!(
        "validation: {n} rounds ({}), {sent} sent, {acked_total} acked, {} failed, {lost} lost, {duplicated} duplicated; slowest return to the ISR {} ms, largest follower fetch rate {fastest_fetching:.0}/s",
        done.join(", "),
        a.failed,
        slowest.as_millis()
    );
    assert!(acked_total > 0, "nothing was acknowledged");
    assert_eq!(lost, 0, "acknowledged records lost");
    assert_eq!(duplicated, 0, "records consumed twice");
}
