//! Deciding whether to act: leader-count skew from the layout, and per broker the overload
//! symptoms its metrics show (idle network and handler threads, slow follower fetches, queues).

use std::collections::BTreeMap;

use super::scrape::{Layout, Page};

/// Strimzi JMX-exporter names (evenkeel's own); a Kafka with the exporter serves the same.
pub const NETWORK_IDLE: &str = "kafka_network_socketserver_networkprocessoravgidle_percent";
pub const HANDLER_IDLE: &str = "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent";
pub const LOCAL_TIME: &str = "kafka_network_requestmetrics_localtimems";
pub const TOTAL_TIME: &str = "kafka_network_requestmetrics_totaltimems";
pub const REQUEST_QUEUE: &str = "kafka_network_requestchannel_requestqueuesize";
pub const PURGATORY_SIZE: &str = "kafka_server_delayedoperationpurgatory_purgatorysize";
/// Consumer fetch requests that covered a partition (evenkeel exports it per led partition): how
/// many fetches a partition's leadership brings.
pub const PARTITION_FETCHES: &str = "evenkeel_partition_consumer_fetches_total";

/// When a broker counts as overloaded. Idle values are fractions (0..1), as Kafka's gauges.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    pub min_network_idle: f64,
    pub min_handler_idle: f64,
    pub max_fetch_follower_local_ms: f64,
    pub max_produce_total_ms: f64,
    pub max_request_queue: f64,
    pub max_fetch_purgatory: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_network_idle: 0.3,
            min_handler_idle: 0.3,
            // A healthy broker answers follower fetches in 1–2 ms of handler time.
            max_fetch_follower_local_ms: 10.0,
            max_produce_total_ms: 500.0,
            // Half of queued.max.requests' default (500).
            max_request_queue: 250.0,
            max_fetch_purgatory: 100_000.0,
        }
    }
}

/// An overload signal, by the metric that shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Symptom {
    NetworkIdle,
    HandlerIdle,
    FetchFollowerLocalTime,
    ProduceTotalTime,
    RequestQueue,
    FetchPurgatory,
}

impl Symptom {
    pub const ALL: [Symptom; 6] = [
        Symptom::NetworkIdle,
        Symptom::HandlerIdle,
        Symptom::FetchFollowerLocalTime,
        Symptom::ProduceTotalTime,
        Symptom::RequestQueue,
        Symptom::FetchPurgatory,
    ];

    /// The name used in logs and as the `symptom` label.
    pub fn name(self) -> &'static str {
        match self {
            Symptom::NetworkIdle => "NetworkProcessorAvgIdlePercent",
            Symptom::HandlerIdle => "RequestHandlerAvgIdlePercent",
            Symptom::FetchFollowerLocalTime => "FetchFollowerLocalTimeMs",
            Symptom::ProduceTotalTime => "ProduceTotalTimeMs",
            Symptom::RequestQueue => "RequestQueueSize",
            Symptom::FetchPurgatory => "DelayedFetchPurgatorySize",
        }
    }
}

/// What one broker's metrics said over the last interval (`None`: not exported or not
/// measurable yet, e.g. no requests of that kind).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signals {
    pub network_idle: Option<f64>,
    pub handler_idle: Option<f64>,
    pub fetch_follower_local_ms: Option<f64>,
    pub produce_total_ms: Option<f64>,
    pub request_queue: Option<f64>,
    pub fetch_purgatory: Option<f64>,
}

impl Signals {
    /// Reads a page; request times are the mean over the interval since `previous` (the
    /// histogram's sum and count deltas), or the page's own quantile gauge without histogram.
    pub fn read(page: &Page, previous: Option<&Page>) -> Signals {
        Signals {
            network_idle: page.value(NETWORK_IDLE, &[]),
            handler_idle: page.value(HANDLER_IDLE, &[]),
            fetch_follower_local_ms: request_ms(page, previous, LOCAL_TIME, "FetchFollower"),
            produce_total_ms: request_ms(page, previous, TOTAL_TIME, "Produce"),
            request_queue: page.value(REQUEST_QUEUE, &[]),
            fetch_purgatory: page.value(PURGATORY_SIZE, &[("delayedOperation", "Fetch")]),
        }
    }

    /// The symptoms these signals show.
    pub fn symptoms(&self, t: &Thresholds) -> Vec<Symptom> {
        let below = |v: Option<f64>, min: f64| v.is_some_and(|v| v < min);
        let above = |v: Option<f64>, max: f64| v.is_some_and(|v| v > max);
        let checks = [
            (
                Symptom::NetworkIdle,
                below(self.network_idle, t.min_network_idle),
            ),
            (
                Symptom::HandlerIdle,
                below(self.handler_idle, t.min_handler_idle),
            ),
            (
                Symptom::FetchFollowerLocalTime,
                above(self.fetch_follower_local_ms, t.max_fetch_follower_local_ms),
            ),
            (
                Symptom::ProduceTotalTime,
                above(self.produce_total_ms, t.max_produce_total_ms),
            ),
            (
                Symptom::RequestQueue,
                above(self.request_queue, t.max_request_queue),
            ),
            (
                Symptom::FetchPurgatory,
                above(self.fetch_purgatory, t.max_fetch_purgatory),
            ),
        ];
        checks
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(s, _)| s)
            .collect()
    }
}

/// Mean time of one request kind over the interval: histogram sum/count deltas, else the
/// 99th-percentile gauge a JMX exporter publishes (`quantile="0.99"`). Without a previous page
/// (the first look at a broker) there is no interval yet, and the mean since the broker started
/// (its startup included) says nothing about now: unknown.
fn request_ms(page: &Page, previous: Option<&Page>, base: &str, request: &str) -> Option<f64> {
    let labels = [("request", request)];
    let (sum, count) = (format!("{base}_sum"), format!("{base}_count"));
    if let (Some(s), Some(c)) = (page.value(&sum, &labels), page.value(&count, &labels)) {
        let previous = previous?;
        // A series the previous page lacked began within the interval: count it from zero.
        let (s0, c0) = previous
            .value(&sum, &labels)
            .zip(previous.value(&count, &labels))
            .unwrap_or((0.0, 0.0));
        let (ds, dc) = (s - s0, c - c0);
        // A restarted broker's counters start again from zero: use its totals.
        let (ds, dc) = if dc < 0.0 || ds < 0.0 {
            (s, c)
        } else {
            (ds, dc)
        };
        return (dc > 0.0).then(|| ds / dc);
    }
    page.value(base, &[("request", request), ("quantile", "0.99")])
}

/// Consumer fetches per partition over the interval, as a load weight: 1 for a partition no
/// consumer fetched, plus the fetches covering it per second. A broker seen for the first time
/// has no interval yet and adds nothing.
pub fn partition_loads(
    pages: &BTreeMap<i32, (Page, Option<Page>)>,
    interval_secs: f64,
) -> BTreeMap<(String, i32), f64> {
    let mut loads = BTreeMap::new();
    for (page, previous) in pages.values() {
        let Some(previous) = previous else {
            continue;
        };
        for s in page.matching(PARTITION_FETCHES, &[]) {
            let (Some(topic), Some(partition)) = (
                s.labels.get("topic"),
                s.labels
                    .get("partition")
                    .and_then(|p| p.parse::<i32>().ok()),
            ) else {
                continue;
            };
            let before = previous
                .value(
                    PARTITION_FETCHES,
                    &[("topic", topic), ("partition", &partition.to_string())],
                )
                .unwrap_or(0.0);
            let delta = if s.value >= before {
                s.value - before
            } else {
                s.value
            };
            *loads.entry((topic.clone(), partition)).or_insert(1.0) +=
                delta / interval_secs.max(1e-3);
        }
    }
    loads
}

/// The verdict of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub counts: BTreeMap<i32, usize>,
    /// Largest leader count over the mean.
    pub skew: f64,
    /// The same over load-weighted leadership (Σ partition load per broker).
    pub weighted_skew: f64,
    /// Brokers with symptoms and which.
    pub symptomatic: BTreeMap<i32, Vec<Symptom>>,
    /// Brokers whose leader count is fine but whose load-weighted leadership is over the
    /// threshold: they lead the partitions that bring the most fetch work.
    pub heavy: Vec<i32>,
    /// Brokers whose metrics could not be read.
    pub unknown: Vec<i32>,
    /// Why to act, when the round should plan moves.
    pub reason: Option<String>,
}

/// Looks at one round's layout and signals. Acts when the leader-count skew is over
/// `threshold`, or when a broker with symptoms leads more than the mean (its leadership is the
/// likely cause, as when wide fetches over one broker's partitions stall it).
pub fn detect(
    layout: &Layout,
    signals: &BTreeMap<i32, Option<Signals>>,
    loads: &BTreeMap<(String, i32), f64>,
    thresholds: &Thresholds,
    threshold: f64,
) -> Finding {
    let counts = layout.leader_counts();
    let skew = max_over_mean(counts.values().map(|c| *c as f64));
    let mut weighted: BTreeMap<i32, f64> = counts.keys().map(|b| (*b, 0.0)).collect();
    for p in &layout.partitions {
        if let Some(w) = weighted.get_mut(&p.leader) {
            *w += loads
                .get(&(p.topic.clone(), p.partition))
                .copied()
                .unwrap_or(1.0);
        }
    }
    let weighted_skew = max_over_mean(weighted.values().copied());
    let heavy = heavy_brokers(&counts, &weighted, threshold);
    let mut symptomatic = BTreeMap::new();
    let mut unknown = Vec::new();
    for b in counts.keys() {
        match signals.get(b) {
            Some(Some(s)) => {
                let found = s.symptoms(thresholds);
                if !found.is_empty() {
                    symptomatic.insert(*b, found);
                }
            }
            _ => unknown.push(*b),
        }
    }
    let reason = reason_to_act(&counts, skew, threshold, &symptomatic).or_else(|| {
        (!heavy.is_empty()).then(|| {
            format!(
                "broker(s) {heavy:?} lead partitions that bring over {threshold} x the mean fetch load"
            )
        })
    });
    Finding {
        counts,
        skew,
        weighted_skew,
        symptomatic,
        heavy,
        unknown,
        reason,
    }
}

/// Brokers over `threshold` × the mean weighted load while their plain count is not over it
/// (a count skew is the count plan's to fix).
fn heavy_brokers(
    counts: &BTreeMap<i32, usize>,
    weighted: &BTreeMap<i32, f64>,
    threshold: f64,
) -> Vec<i32> {
    let mean_count = mean(counts.values().map(|c| *c as f64));
    let mean_load = mean(weighted.values().copied());
    if mean_count <= 0.0 || mean_load <= 0.0 {
        return Vec::new();
    }
    weighted
        .iter()
        .filter(|(b, w)| {
            let count = counts.get(b).copied().unwrap_or(0) as f64;
            **w / mean_load > threshold && count / mean_count <= threshold && count > mean_count
        })
        .map(|(b, _)| *b)
        .collect()
}

fn reason_to_act(
    counts: &BTreeMap<i32, usize>,
    skew: f64,
    threshold: f64,
    symptomatic: &BTreeMap<i32, Vec<Symptom>>,
) -> Option<String> {
    if skew > threshold {
        return Some(format!(
            "leader skew {skew:.2} is over the threshold {threshold}"
        ));
    }
    let mean = mean(counts.values().map(|c| *c as f64));
    let hot: Vec<String> = symptomatic
        .iter()
        .filter(|(b, _)| counts.get(b).is_some_and(|c| *c as f64 > mean))
        .map(|(b, s)| {
            let names: Vec<&str> = s.iter().map(|s| s.name()).collect();
            format!("broker {b} ({})", names.join(", "))
        })
        .collect();
    (!hot.is_empty()).then(|| {
        format!(
            "{} shows overload and leads more than the mean",
            hot.join(", ")
        )
    })
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

fn max_over_mean(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let m = mean(values.clone());
    if m <= 0.0 {
        return 1.0;
    }
    values.fold(0.0, f64::max) / m
}

#[cfg(test)]
mod tests {
    use super::super::scrape::{parse, PartitionState};
    use super::*;

    fn layout(leaders: &[i32]) -> Layout {
        Layout {
            brokers: [1, 2, 3].iter().map(|b| (*b, format!("h:{b}"))).collect(),
            controller: 1,
            partitions: leaders
                .iter()
                .enumerate()
                .map(|(i, l)| PartitionState {
                    topic: "t".into(),
                    partition: i as i32,
                    leader: *l,
                    replicas: vec![1, 2, 3],
                    isr: vec![1, 2, 3],
                })
                .collect(),
        }
    }

    fn healthy() -> BTreeMap<i32, Option<Signals>> {
        [1, 2, 3]
            .iter()
            .map(|b| (*b, Some(Signals::default())))
            .collect()
    }

    #[test]
    fn skew_over_the_threshold_is_a_reason_to_act() {
        let l = layout(&[1, 1, 1, 1, 2, 3]);
        let f = detect(
            &l,
            &healthy(),
            &BTreeMap::new(),
            &Thresholds::default(),
            1.1,
        );
        assert!((f.skew - 2.0).abs() < 1e-9, "{}", f.skew);
        assert!(f.reason.unwrap().contains("leader skew 2.00"));
        let even = detect(
            &layout(&[1, 2, 3, 1, 2, 3]),
            &healthy(),
            &BTreeMap::new(),
            &Thresholds::default(),
            1.1,
        );
        assert_eq!(even.reason, None);
        assert_eq!(even.skew, 1.0);
    }

    #[test]
    fn a_symptomatic_broker_above_the_mean_is_a_reason_to_act() {
        // Within the band (skew 4/3.33 = 1.2 < 1.5) but broker 1 shows slow follower fetches.
        let l = layout(&[1, 1, 1, 1, 2, 2, 2, 3, 3, 3]);
        let mut signals = healthy();
        signals.insert(
            1,
            Some(Signals {
                fetch_follower_local_ms: Some(45.0),
                network_idle: Some(0.05),
                ..Signals::default()
            }),
        );
        let f = detect(&l, &signals, &BTreeMap::new(), &Thresholds::default(), 1.5);
        assert_eq!(
            f.symptomatic[&1],
            vec![Symptom::NetworkIdle, Symptom::FetchFollowerLocalTime]
        );
        let reason = f.reason.unwrap();
        assert!(reason.contains("broker 1"), "{reason}");
        // The same symptoms on a broker at or below the mean are not its leadership's doing.
        signals.insert(1, Some(Signals::default()));
        signals.insert(
            2,
            Some(Signals {
                network_idle: Some(0.05),
                ..Signals::default()
            }),
        );
        let f = detect(&l, &signals, &BTreeMap::new(), &Thresholds::default(), 1.5);
        assert_eq!(f.reason, None);
        assert!(f.symptomatic.contains_key(&2));
    }

    #[test]
    fn a_broker_without_metrics_is_unknown_not_healthy() {
        let mut signals = healthy();
        signals.insert(2, None);
        signals.remove(&3);
        let f = detect(
            &layout(&[1, 2, 3]),
            &signals,
            &BTreeMap::new(),
            &Thresholds::default(),
            1.1,
        );
        assert_eq!(f.unknown, vec![2, 3]);
    }

    #[test]
    fn request_times_are_the_mean_over_the_interval() {
        let before = parse(
            "u",
            "kafka_network_requestmetrics_localtimems_sum{request=\"FetchFollower\"} 100\n\
             kafka_network_requestmetrics_localtimems_count{request=\"FetchFollower\"} 50\n",
        )
        .unwrap();
        let after = parse(
            "u",
            "kafka_network_requestmetrics_localtimems_sum{request=\"FetchFollower\"} 400\n\
             kafka_network_requestmetrics_localtimems_count{request=\"FetchFollower\"} 60\n\
             kafka_network_socketserver_networkprocessoravgidle_percent 0.25\n\
             kafka_network_requestmetrics_totaltimems{request=\"Produce\",quantile=\"0.99\"} 700\n",
        )
        .unwrap();
        let s = Signals::read(&after, Some(&before));
        assert_eq!(s.fetch_follower_local_ms, Some(30.0));
        assert_eq!(s.network_idle, Some(0.25));
        assert_eq!(s.produce_total_ms, Some(700.0));
        assert_eq!(s.handler_idle, None);
        // A first look has no interval: the histogram's mean since start is not used, the
        // exporter's windowed quantile gauge is.
        let first = Signals::read(&after, None);
        assert_eq!(first.fetch_follower_local_ms, None);
        assert_eq!(first.produce_total_ms, Some(700.0));
        // No follower fetch in the interval: nothing to say.
        assert_eq!(
            Signals::read(&before, Some(&before)).fetch_follower_local_ms,
            None
        );
        assert_eq!(
            s.symptoms(&Thresholds::default()),
            vec![
                Symptom::NetworkIdle,
                Symptom::FetchFollowerLocalTime,
                Symptom::ProduceTotalTime
            ]
        );
    }

    #[test]
    fn partition_load_follows_the_fetches_that_cover_it() {
        let before = parse(
            "u",
            "evenkeel_partition_consumer_fetches_total{topic=\"t\",partition=\"0\"} 100\n",
        )
        .unwrap();
        let after = parse(
            "u",
            "evenkeel_partition_consumer_fetches_total{topic=\"t\",partition=\"0\"} 400\n\
             evenkeel_partition_consumer_fetches_total{topic=\"t\",partition=\"1\"} 0\n",
        )
        .unwrap();
        let first = [(1, (after.clone(), None))].into_iter().collect();
        assert!(
            partition_loads(&first, 10.0).is_empty(),
            "a first look adds no load"
        );
        let pages = [(1, (after, Some(before)))].into_iter().collect();
        let loads = partition_loads(&pages, 10.0);
        assert_eq!(loads[&("t".to_string(), 0)], 31.0);
        assert_eq!(loads[&("t".to_string(), 1)], 1.0);
        let l = layout(&[1, 2]);
        let f = detect(&l, &healthy(), &loads, &Thresholds::default(), 1.1);
        // Broker 1 carries 31 of 32 units over 3 brokers.
        assert!((f.weighted_skew - 31.0 / (32.0 / 3.0)).abs() < 1e-9);
    }

    #[test]
    fn a_broker_leading_the_busiest_partitions_is_heavy_though_its_count_is_even() {
        // Counts 4/3/3 are within 1.5 x the mean; broker 1's partitions bring the fetch work.
        let l = layout(&[1, 1, 1, 1, 2, 2, 2, 3, 3, 3]);
        let loads: BTreeMap<(String, i32), f64> =
            (0..4).map(|p| (("t".to_string(), p), 50.0)).collect();
        let f = detect(&l, &healthy(), &loads, &Thresholds::default(), 1.5);
        assert_eq!(f.heavy, vec![1]);
        assert!(f.reason.unwrap().contains("fetch load"));
        // A count skew is not "heavy": the count plan fixes it.
        let skewed = layout(&[1, 1, 1, 1, 1, 1, 1, 1, 2, 3]);
        let f = detect(
            &skewed,
            &healthy(),
            &BTreeMap::new(),
            &Thresholds::default(),
            1.5,
        );
        assert!(f.heavy.is_empty());
        assert!(f.reason.unwrap().contains("leader skew"));
    }
}
