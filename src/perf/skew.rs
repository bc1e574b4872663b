//! `evenkeel perf skew`: the leader-concentration incident end to end. One broker leads most
//! partitions of a topic that wide consumers fetch while a producer writes; the figures are
//! taken, the rebalancer evens leadership out, and the same load is measured again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::kafka::{self, PerfError, ProduceReport};
use crate::client::AdminClient;
use crate::rebalancer::detect::Signals;
use crate::rebalancer::scrape::{self, Page};
use crate::rebalancer::{plan, MetricsSource, Rebalancer, RebalancerConfig};

#[derive(Debug, Clone)]
pub struct SkewOptions {
    pub bootstrap: String,
    /// Each broker's metrics URL, by broker id.
    pub metrics: BTreeMap<i32, String>,
    pub topic: String,
    pub partitions: usize,
    /// The share of partitions whose preferred leader is the first broker.
    pub share: f64,
    pub fetchers: usize,
    /// Records per second, and seconds per phase.
    pub rate: f64,
    pub seconds: u64,
    pub record_size: usize,
    /// The rebalancer's interval.
    pub interval: Duration,
    /// A rebalancer already runs beside the brokers (the sidecar on Kubernetes): wait for it to
    /// even leadership out instead of starting one here.
    pub external_rebalancer: bool,
}

/// One broker during one phase.
#[derive(Debug, Clone, Default)]
pub struct BrokerFigures {
    pub leaders: usize,
    pub signals: Signals,
}

/// One phase: the producer's figures and each broker's.
#[derive(Debug, Clone)]
pub struct Phase {
    pub produce: ProduceReport,
    pub brokers: BTreeMap<i32, BrokerFigures>,
}

#[derive(Debug, Clone)]
pub struct SkewReport {
    /// Not measured with an external rebalancer, which may act before a phase could end.
    pub skewed: Option<Phase>,
    pub balanced: Phase,
    /// From the rebalancer's start to every broker within the band.
    pub seconds_to_balance: f64,
    pub leadership_changes: usize,
}

/// Seed 003's shape: replica lists over `brokers` (ids in order), replication factor 3 or
/// fewer, with the first broker first (so preferred leader) in `share` of them and the rest
/// rotating over the others.
pub fn skewed_assignment(partitions: usize, brokers: &[i32], share: f64) -> Vec<Vec<i32>> {
    let hot = (partitions as f64 * share).round() as usize;
    let rf = brokers.len().min(3);
    (0..partitions)
        .map(|i| {
            let first = if i < hot || brokers.len() < 2 {
                brokers[0]
            } else {
                brokers[1 + i % (brokers.len() - 1)]
            };
            let others: Vec<i32> = brokers.iter().copied().filter(|b| *b != first).collect();
            let mut r = vec![first];
            r.extend((0..rf - 1).map(|j| others[(i + j) % others.len()]));
            r
        })
        .collect()
}

fn setup(e: impl std::fmt::Display) -> PerfError {
    PerfError::Setup(e.to_string())
}

/// Runs both phases and the rebalancing between them.
pub fn run(o: &SkewOptions, progress: &mut dyn FnMut(String)) -> Result<SkewReport, PerfError> {
    let rt = tokio::runtime::Runtime::new().map_err(setup)?;
    let admin = rt
        .block_on(AdminClient::connect(&o.bootstrap, Duration::from_secs(30)))
        .map_err(setup)?;
    let brokers: Vec<i32> = rt
        .block_on(admin.describe_cluster())
        .map_err(setup)?
        .brokers
        .iter()
        .map(|b| b.id)
        .collect();
    if brokers.len() < 2 {
        return Err(setup("the cluster has one broker: nothing to balance"));
    }
    let assignment = skewed_assignment(o.partitions, &brokers, o.share);
    progress(format!(
        "creating {} with {} partitions, broker {} first in {:.0} % of them ...",
        o.topic,
        o.partitions,
        brokers[0],
        o.share * 100.0
    ));
    rt.block_on(admin.create_topic_with_assignment(&o.topic, &assignment, &BTreeMap::new()))
        .map_err(setup)?;
    // A rebalancer that already runs may move leaders as soon as the topic exists.
    let exact = !o.external_rebalancer;
    rt.block_on(wait_for_leaders(&admin, &o.topic, &assignment, exact))?;
    let skewed = if o.external_rebalancer {
        None
    } else {
        progress("warming up (3 s of the producer alone) ...".into());
        kafka::produce(&producer(o, 3), &mut |_| {})?;
        progress("phase 1: skewed leadership under wide fetches and produce load ...".into());
        Some(phase(&rt, &admin, o)?)
    };
    let before = rt.block_on(leaders(&admin))?;
    let started = Instant::now();
    let (handle, load) = if o.external_rebalancer {
        progress(format!(
            "waiting for the brokers' own rebalancer, under wide fetches (throughout) and the producer (its first {} s) ...",
            o.seconds
        ));
        (None, Some(Load::start(o)?))
    } else {
        progress("starting the rebalancer ...".into());
        (Some(rt.block_on(start_rebalancer(o))?), None)
    };
    let total: usize = before.values().filter(|l| **l >= 0).count();
    let band = plan::band(total, brokers.len(), 1.1);
    let after = rt.block_on(wait_for_band(&admin, &brokers, band));
    if let Some(load) = load {
        load.stop()?;
    }
    let after = after?;
    let seconds_to_balance = started.elapsed().as_secs_f64();
    let leadership_changes = before
        .iter()
        .filter(|(tp, l)| after.get(*tp) != Some(l))
        .count();
    drop(handle);
    progress(format!(
        "balanced after {seconds_to_balance:.1} s with {leadership_changes} leadership changes; phase 2: the same load ..."
    ));
    let balanced = phase(&rt, &admin, o)?;
    Ok(SkewReport {
        skewed,
        balanced,
        seconds_to_balance,
        leadership_changes,
    })
}

/// Wide fetchers and a producer running while an external rebalancer acts: the fetchers until
/// stopped, the producer for the options' seconds.
struct Load {
    stop: Arc<AtomicBool>,
    fetchers: Vec<std::thread::JoinHandle<()>>,
    producer: std::thread::JoinHandle<Result<ProduceReport, PerfError>>,
}

impl Load {
    fn start(o: &SkewOptions) -> Result<Load, PerfError> {
        let stop = Arc::new(AtomicBool::new(false));
        let fetchers =
            kafka::start_wide_fetchers(&wide(o), stop.clone(), Arc::new(AtomicU64::new(0)))?;
        let options = producer(o, o.seconds);
        let producer = std::thread::spawn(move || kafka::produce(&options, &mut |_| {}));
        Ok(Load {
            stop,
            fetchers,
            producer,
        })
    }

    /// Stops the fetchers and waits for the producer; its error, if it failed.
    fn stop(self) -> Result<(), PerfError> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.fetchers {
            let _ = h.join();
        }
        match self.producer.join() {
            Ok(report) => report.map(|_| ()),
            Err(_) => Err(setup("the producer thread panicked")),
        }
    }
}

fn wide(o: &SkewOptions) -> kafka::WideFetchOptions {
    kafka::WideFetchOptions {
        bootstrap: o.bootstrap.clone(),
        topic: o.topic.clone(),
        partitions: o.partitions as i32,
        fetchers: o.fetchers,
    }
}

async fn start_rebalancer(
    o: &SkewOptions,
) -> Result<crate::rebalancer::RebalancerHandle, PerfError> {
    let mut config = RebalancerConfig::new(&o.bootstrap);
    config.metrics = MetricsSource::Urls(o.metrics.clone());
    config.interval = o.interval;
    let r = Rebalancer::connect(config).await.map_err(setup)?;
    r.spawn("127.0.0.1:0").await.map_err(setup)
}

/// Waits until every partition of `topic` has its full ISR and a leader: the preferred one
/// (first of its replicas) when `exact`, any otherwise.
async fn wait_for_leaders(
    admin: &AdminClient,
    topic: &str,
    assignment: &[Vec<i32>],
    exact: bool,
) -> Result<(), PerfError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = admin
            .describe_topics(Some(&[topic.to_string()]))
            .await
            .map_err(setup)?;
        let ready = t.first().is_some_and(|t| {
            t.partitions.len() == assignment.len()
                && t.partitions.iter().all(|p| {
                    let want = &assignment[p.partition as usize];
                    let leader_ok = if exact {
                        p.leader == want[0]
                    } else {
                        p.leader >= 0
                    };
                    leader_ok && p.isr.len() == want.len()
                })
        });
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(setup("the topic's leaders did not settle within 120 s"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every partition's leader.
async fn leaders(admin: &AdminClient) -> Result<BTreeMap<(String, i32), i32>, PerfError> {
    let topics = admin.describe_topics(None).await.map_err(setup)?;
    Ok(topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name;
            t.partitions
                .into_iter()
                .map(move |p| ((name.clone(), p.partition), p.leader))
        })
        .collect())
}

fn counts(leaders: &BTreeMap<(String, i32), i32>, brokers: &[i32]) -> BTreeMap<i32, usize> {
    let mut c: BTreeMap<i32, usize> = brokers.iter().map(|b| (*b, 0)).collect();
    for l in leaders.values() {
        if let Some(n) = c.get_mut(l) {
            *n += 1;
        }
    }
    c
}

async fn wait_for_band(
    admin: &AdminClient,
    brokers: &[i32],
    band: plan::Band,
) -> Result<BTreeMap<(String, i32), i32>, PerfError> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let now = leaders(admin).await?;
        let c = counts(&now, brokers);
        if c.values().all(|n| (band.lower..=band.upper).contains(n)) {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return Err(setup(format!(
                "leadership not within [{}, {}] after 600 s: {c:?}",
                band.lower, band.upper
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Wide fetchers over every partition plus the producer for `seconds`, with each broker's
/// metrics read just before and just after the producer runs.
fn phase(
    rt: &tokio::runtime::Runtime,
    admin: &AdminClient,
    o: &SkewOptions,
) -> Result<Phase, PerfError> {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = kafka::start_wide_fetchers(&wide(o), stop.clone(), Arc::new(AtomicU64::new(0)))?;
    std::thread::sleep(Duration::from_secs(3));
    let before = rt.block_on(pages(&o.metrics));
    let produce = kafka::produce(&producer(o, o.seconds), &mut |_| {});
    let after = rt.block_on(pages(&o.metrics));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let produce = produce?;
    let ids: Vec<i32> = o.metrics.keys().copied().collect();
    let led = counts(&rt.block_on(leaders(admin))?, &ids);
    let brokers = ids
        .iter()
        .map(|b| {
            let signals = after
                .get(b)
                .map(|p| Signals::read(p, before.get(b)))
                .unwrap_or_default();
            let leaders = led.get(b).copied().unwrap_or(0);
            (*b, BrokerFigures { leaders, signals })
        })
        .collect();
    Ok(Phase { produce, brokers })
}

/// The producer of a phase: acks=all at the options' rate for `seconds`, round robin over the
/// partitions.
fn producer(o: &SkewOptions, seconds: u64) -> kafka::ProduceOptions {
    kafka::ProduceOptions {
        bootstrap: o.bootstrap.clone(),
        topic: o.topic.clone(),
        num_records: (o.rate * seconds as f64) as u64,
        record_size: o.record_size,
        throughput: o.rate,
        props: vec![
            ("acks".into(), "all".into()),
            ("linger.ms".into(), "5".into()),
        ],
        round_robin: Some(o.partitions as i32),
        stop: None,
    }
}

async fn pages(urls: &BTreeMap<i32, String>) -> BTreeMap<i32, Page> {
    let mut out = BTreeMap::new();
    for (b, url) in urls {
        if let Ok(p) = scrape::page(url, Duration::from_secs(5)).await {
            out.insert(*b, p);
        }
    }
    out
}

/// The report as a table.
pub fn render(r: &SkewReport) -> String {
    let mut out = String::new();
    let f =
        |v: Option<f64>, scale: f64| v.map_or("n/a".to_string(), |v| format!("{:.2}", v * scale));
    if r.skewed.is_none() {
        out.push_str("skewed: not measured (the brokers' own rebalancer acts from the start)\n");
    }
    let phases = r.skewed.iter().map(|p| ("skewed", p));
    for (name, p) in phases.chain([("balanced", &r.balanced)]) {
        out.push_str(&format!(
            "{name}: produce (acks=all) p99 {:.0} ms, p99.9 {:.0} ms, avg {:.1} ms, {:.0} records/s, {} failed\n",
            p.produce.p99_ms, p.produce.p999_ms, p.produce.avg_ms, p.produce.records_per_sec, p.produce.failed
        ));
        out.push_str("  broker  leaders  FetchFollower LocalTimeMs (mean)  network idle %  handler idle %  Produce TotalTimeMs (mean)\n");
        for (b, x) in &p.brokers {
            out.push_str(&format!(
                "  {b:>6}  {:>7}  {:>33}  {:>14}  {:>14}  {:>26}\n",
                x.leaders,
                f(x.signals.fetch_follower_local_ms, 1.0),
                f(x.signals.network_idle, 100.0),
                f(x.signals.handler_idle, 100.0),
                f(x.signals.produce_total_ms, 1.0),
            ));
        }
    }
    out.push_str(&format!(
        "skew to balance: {:.1} s, {} leadership changes\n",
        r.seconds_to_balance, r.leadership_changes
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skewed_layout_puts_the_first_broker_first_in_its_share() {
        let a = skewed_assignment(300, &[1, 2, 3], 0.8);
        assert_eq!(a.iter().filter(|r| r[0] == 1).count(), 240);
        assert_eq!(a.iter().filter(|r| r[0] == 2).count(), 30);
        for r in &a {
            let mut s = r.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 3, "{r:?}");
        }
        let six = skewed_assignment(300, &[1, 2, 3, 4, 5, 6], 0.8);
        assert!((2..=6).all(|b| six.iter().filter(|r| r[0] == b).count() == 12));
        assert!(six.iter().all(|r| r.len() == 3));
    }
}
