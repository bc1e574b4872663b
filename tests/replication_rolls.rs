//! The sequence a rolling restart makes, on real broker processes: each broker in turn stopped
//! with SIGTERM (controlled shutdown: its leaderships move away at a new leader epoch), started
//! again, then preferred leader elections that move leadership back (another epoch) — once with
//! no record written in between, so epochs start and end without a batch, once with a producer
//! running; the log holds records before the first roll. After every step every replica must be
//! back in the ISR, stay there past `replica.lag.time.max.ms`, and no follower may fetch faster
//! than its long polls explain.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{admin, Cluster};
use evenkeel::client::PartitionInfo;
use rdkafka::producer::{FutureProducer, FutureRecord};

const TOPIC: &str = "rolled";
const PARTITIONS: i32 = 12;
/// The brokers' `replica.lag.time.max.ms`: short, so a follower that stops making progress
/// while counted in the ISR is dropped from it within the settle window.
const LAG_MS: u64 = 3000;
/// Follower fetches a broker may receive per second while nothing is produced. Each of its two
/// followers has one fetcher that long-polls `replica.fetch.wait.max.ms` (500 ms): about four a
/// second in all. A follower spinning on an answer that changes nothing sends thousands.
const IDLE_FETCHES_PER_SEC: f64 = 40.0;

/// Every partition of the topic, as the first live broker that answers describes it.
async fn partitions(c: &mut Cluster) -> Option<Vec<PartitionInfo>> {
    for id in 1..=c.nodes.len() {
        if !c.is_running(id) {
            continue;
        }
        let Ok(a) =
            evenkeel::client::AdminClient::connect(&c.addr(id), Duration::from_secs(5)).await
        else {
            continue;
        };
        if let Ok(t) = a.describe_topics(Some(&[TOPIC.to_string()])).await {
            if let Some(t) = t.into_iter().next() {
                return Some(t.partitions);
            }
        }
    }
    None
}

fn out_of_isr(ps: &[PartitionInfo]) -> Vec<String> {
    ps.iter()
        .filter(|p| p.isr.len() != p.replicas.len() || p.leader < 0)
        .map(|p| {
            format!(
                "{TOPIC}-{} ISR {:?} of {:?}",
                p.partition, p.isr, p.replicas
            )
        })
        .collect()
}

/// Waits until every replica of every partition is in the ISR.
async fn wait_full_isr(c: &mut Cluster, step: &str) {
    let deadline = Instant::now() + Duration::from_millis(LAG_MS * 10);
    loop {
        let ps = partitions(c).await;
        match &ps {
            Some(ps) if out_of_isr(ps).is_empty() => return,
            _ if Instant::now() > deadline => panic!(
                "{step}: replicas out of the ISR: {:?}\n{}",
                ps.as_deref().map(out_of_isr),
                c.log_tails(30)
            ),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Replica fetch requests the brokers' fetchers have sent, all together.
fn fetches_sent(c: &Cluster) -> f64 {
    (1..=c.nodes.len())
        .filter_map(|id| c.metric(id, "kafka_server_fetcherstats_requests_total"))
        .sum()
}

/// FetchFollower requests each broker has received, and the ISR shrinks its leaders made.
fn fetch_and_shrink_counts(c: &Cluster) -> (Vec<f64>, f64) {
    let fetches = (1..=c.nodes.len())
        .map(|id| {
            c.metric_where(
                id,
                "kafka_network_requestmetrics_requests_total",
                "request=\"FetchFollower\"",
            )
            .unwrap_or(0.0)
        })
        .collect();
    let shrinks = (1..=c.nodes.len())
        .filter_map(|id| c.metric(id, "kafka_server_replicamanager_isrshrinks_total"))
        .sum();
    (fetches, shrinks)
}

/// After a step: every replica back in the ISR, and still there once a lag time has passed
/// with nothing produced (a follower that is counted in the ISR but makes no progress is
/// dropped by then), with every broker's follower fetch rate bounded. Returns the largest rate.
async fn settle(c: &mut Cluster, step: &str) -> f64 {
    wait_full_isr(c, step).await;
    let (before, shrinks_before) = fetch_and_shrink_counts(c);
    let sent_before = fetches_sent(c);
    let start = Instant::now();
    // The window the invariant is about, not a wait for a condition.
    tokio::time::sleep(Duration::from_millis(LAG_MS * 3 / 2)).await;
    let (after, shrinks_after) = fetch_and_shrink_counts(c);
    let sent = fetches_sent(c) - sent_before;
    let received: f64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    // The followers' own count agrees with the leaders' (a fetch or two in flight at each end).
    assert!(
        (sent - received).abs() <= 6.0 + received * 0.1,
        "{step}: fetchers counted {sent} fetches sent, leaders {received} received"
    );
    let secs = start.elapsed().as_secs_f64();
    let rates: Vec<f64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| (a - b).max(0.0) / secs)
        .collect();
    let max = rates.iter().copied().fold(0.0, f64::max);
    println!("{step}: follower fetches/s received per broker {rates:.1?}");
    let ps = partitions(c).await.unwrap_or_default();
    assert!(
        out_of_isr(&ps).is_empty() && shrinks_after == shrinks_before,
        "{step}: a replica left the ISR while nothing was produced ({} shrinks): {:?}\n{}",
        shrinks_after - shrinks_before,
        out_of_isr(&ps),
        c.log_tails(30)
    );
    assert!(
        max <= IDLE_FETCHES_PER_SEC,
        "{step}: a broker received {max:.0} follower fetches/s with nothing produced (bound \
         {IDLE_FETCHES_PER_SEC}): a follower spins\n{}",
        c.log_tails(30)
    );
    max
}

/// Preferred elections for every partition, through a live broker.
async fn elect_preferred(c: &mut Cluster) {
    let addr = c.live_bootstrap();
    let first = addr.split(',').next().unwrap_or_default().to_string();
    let results = admin(&first)
        .await
        .elect_leaders(true, None)
        .await
        .expect("ElectLeaders");
    assert!(!results.is_empty(), "no partition answered");
}

/// Sends records to every partition while `flowing` is set; keeps what was acknowledged.
struct Flow {
    flowing: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeMap<String, (i32, i64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Flow {
    fn start(bootstrap: &str, prefix: &'static str) -> Flow {
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "60000")
            .create()
            .expect("producer");
        let flowing = Arc::new(AtomicBool::new(true));
        let acked = Arc::new(Mutex::new(BTreeMap::new()));
        let (f, a) = (flowing.clone(), acked.clone());
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            while f.load(Ordering::Acquire) {
                let value = format!("{prefix}-{n}");
                let part = (n % PARTITIONS as u64) as i32;
                n += 1;
                let r = producer
                    .send(
                        FutureRecord::<(), _>::to(TOPIC)
                            .partition(part)
                            .payload(&value),
                        Duration::from_secs(60),
                    )
                    .await;
                if let Ok(d) = r {
                    a.lock().unwrap().insert(value, (d.partition, d.offset));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Flow {
            flowing,
            acked,
            task,
        }
    }

    /// Stops sending; returns every acknowledged record.
    async fn stop(self) -> BTreeMap<String, (i32, i64)> {
        self.flowing.store(false, Ordering::Release);
        let _ = self.task.await;
        let acked = self.acked.lock().unwrap().clone();
        acked
    }
}

/// Every record of every partition, by value.
fn read_everything(bootstrap: &str) -> BTreeMap<String, (i32, i64)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "rolls-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, rdkafka::Offset::Beginning)
            .expect("partition");
    }
    c.assign(&tpl).expect("assign");
    let mut out = BTreeMap::new();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(5) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            out.insert(v, (m.partition(), m.offset()));
            quiet_since = Instant::now();
        }
    }
    out
}

/// One roll: each broker in turn stopped with SIGTERM and started again, every partition back
/// in the ISR, then preferred elections; `settle` after each step.
async fn roll(c: &mut Cluster, label: &str) -> f64 {
    let mut largest: f64 = 0.0;
    for id in 1..=c.nodes.len() {
        assert!(c.stop(id), "{label}: broker {id} stops cleanly");
        c.restart(id);
        largest = largest.max(settle(c, &format!("{label}: broker {id} restarted")).await);
        elect_preferred(c).await;
        largest = largest.max(settle(c, &format!("{label}: preferred elections after {id}")).await);
    }
    largest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolls_and_preferred_elections_leave_every_replica_in_the_isr_without_spinning_fetches() {
    let lag = format!("replica.lag.time.max.ms={LAG_MS}");
    let mut c = Cluster::start(
        3,
        &[
            &lag,
            "auto.leader.rebalance.enable=false",
            "min.insync.replicas=2",
        ],
    );
    admin(&c.addr(1))
        .await
        .create_topic(TOPIC, PARTITIONS, 3, &BTreeMap::new())
        .await
        .expect("create the topic");
    let start = Instant::now();
    // Records in every partition first: over an empty log, an epoch that no replica has
    // written reads the same on both sides and nothing diverges.
    let flow = Flow::start(&c.bootstrap(), "before");
    let mut acked = BTreeMap::new();
    while acked.len() < 10 * PARTITIONS as usize {
        tokio::time::sleep(Duration::from_millis(50)).await;
        acked = flow.acked.lock().unwrap().clone();
    }
    acked.extend(flow.stop().await);
    // Leader epochs that begin and end with no record written in them.
    let quiet = roll(&mut c, "roll without records").await;
    // The same with a producer running through the stops, restarts and elections (paused for
    // each settle window, which measures an idle cluster).
    let mut busy: f64 = 0.0;
    for id in 1..=3 {
        let flow = Flow::start(&c.bootstrap(), "rolled");
        assert!(c.stop(id), "broker {id} stops cleanly under load");
        c.restart(id);
        elect_preferred(&mut c).await;
        acked.extend(flow.stop().await);
        busy = busy.max(settle(&mut c, &format!("roll with records: broker {id}")).await);
    }
    assert!(!acked.is_empty(), "the producer had records acknowledged");
    let read = read_everything(&c.bootstrap());
    let lost: Vec<&String> = acked.keys().filter(|v| !read.contains_key(*v)).collect();
    println!(
        "rolls: {} records acked, {} read, {} lost; largest follower fetch rate {quiet:.1}/s \
         (quiet roll), {busy:.1}/s (roll with records); {:.0} s",
        acked.len(),
        read.len(),
        lost.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        lost.is_empty(),
        "acknowledged records lost: {:?}",
        &lost[..lost.len().min(10)]
    );
    for (v, at) in &acked {
        assert_eq!(
            read.get(v),
            Some(at),
            "{v} is where its acknowledgement said"
        );
    }
}
