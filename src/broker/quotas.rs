//! Client quotas enforced as Kafka's quota managers enforce them: the bytes each user and client
//! id produces (`producer_byte_rate`) and fetches (`consumer_byte_rate`) and the share of a
//! request handler its requests take (`request_percentage`), measured over `quota.window.num`
//! samples of `quota.window.size.seconds` against the quota the metadata image resolves for it.
//! A request that takes a client over its quota is served; the client is then throttled: its
//! connection reads nothing more until the throttle time has passed.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use prometheus::GaugeVec;

use crate::metadata::quota_image::{QuotaImage, CLIENT_ID, IP, USER};

/// The quotas measured per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaType {
    /// Bytes produced per second.
    Produce,
    /// Bytes fetched per second.
    Fetch,
    /// Percent of one request handler's time.
    Request,
}

impl QuotaType {
    /// The quota's key in the metadata image.
    pub fn key(self) -> &'static str {
        match self {
            QuotaType::Produce => "producer_byte_rate",
            QuotaType::Fetch => "consumer_byte_rate",
            QuotaType::Request => "request_percentage",
        }
    }
}

/// Handler time as the request quota counts it: percent-seconds (a second of one thread is
/// 100).
pub fn handler_percent(d: Duration) -> f64 {
    d.as_secs_f64() * 100.0
}

/// Who a request counts against: the user (the principal's name) and the client id.
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

impl<'a> ClientIdentity<'a> {
    /// The user of a principal (`User:alice` is `alice`) and a client id.
    pub fn new(principal: &'a str, client_id: &'a str) -> Self {
        let user = principal
            .split_once(':')
            .map_or(principal, |(_, name)| name);
        ClientIdentity { user, client_id }
    }
}

/// A quota that applies to a client: its bound (bytes per second) and the sensor it shares
/// with every client the same entity covers, named by Kafka's metric tags (user, client id;
/// empty where the quota does not tell them apart).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedQuota {
    pub bound: f64,
    pub tags: (String, String),
}

/// An entity as `(type, name)` pairs, `None` for a type's default.
type EntityParts<'a> = &'a [(&'a str, Option<&'a str>)];

/// The quota that applies to a client for `key`, by Kafka's precedence: user and client id,
/// user and default client, user, default user and client id, default user and default client,
/// default user, client id, default client.
pub fn resolve(img: &QuotaImage, key: &str, who: ClientIdentity<'_>) -> Option<ResolvedQuota> {
    if img.is_empty() {
        return None;
    }
    let (u, c) = (Some(who.user), Some(who.client_id));
    let levels: [(EntityParts<'_>, bool, bool); 8] = [
        (&[(USER, u), (CLIENT_ID, c)], true, true),
        (&[(USER, u), (CLIENT_ID, None)], true, true),
        (&[(USER, u)], true, false),
        (&[(USER, None), (CLIENT_ID, c)], true, true),
        (&[(USER, None), (CLIENT_ID, None)], true, true),
        (&[(USER, None)], true, false),
        (&[(CLIENT_ID, c)], false, true),
        (&[(CLIENT_ID, None)], false, true),
    ];
    levels.iter().find_map(|(parts, by_user, by_client)| {
        let entity = crate::metadata::quota_image::entity(parts.iter().copied());
        let bound = *img.get(&entity)?.get(key)?;
        let tag = |on: bool, v: &str| if on { v.to_string() } else { String::new() };
        Some(ResolvedQuota {
            bound,
            tags: (tag(*by_user, who.user), tag(*by_client, who.client_id)),
        })
    })
}

/// One sample: when it started, the bytes in it, and the throttles it handed out.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Instant,
    value: f64,
    throttle_ms_sum: f64,
    throttles: u32,
}

/// Kafka's sampled `Rate` over a window of samples, and the `throttle-time` average.
#[derive(Debug, Default)]
struct Sensor {
    samples: VecDeque<Sample>,
}

impl Sensor {
    fn purge(&mut self, now: Instant, window: Duration, n: usize) {
        let horizon = window * n as u32;
        while self
            .samples
            .front()
            .is_some_and(|s| now.saturating_duration_since(s.start) >= horizon)
        {
            self.samples.pop_front();
        }
    }

    /// The current sample, a new one once the last is a window old.
    fn current(&mut self, now: Instant, window: Duration, n: usize) -> &mut Sample {
        self.purge(now, window, n);
        let fresh = self
            .samples
            .back()
            .is_none_or(|s| now.saturating_duration_since(s.start) >= window);
        if fresh {
            if self.samples.len() >= n {
                self.samples.pop_front();
            }
            self.samples.push_back(Sample {
                start: now,
                value: 0.0,
                throttle_ms_sum: 0.0,
                throttles: 0,
            });
        }
        self.samples.back_mut().expect("a sample was just ensured")
    }

    /// The rate per second and the window it was measured over: at least `n - 1` whole windows,
    /// so a young sensor does not read a short burst as a high rate (Kafka's Rate.windowSize).
    fn rate(&self, now: Instant, window: Duration, n: usize) -> (f64, Duration) {
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        let oldest = self.samples.front().map_or(now, |s| s.start);
        let mut elapsed = now.saturating_duration_since(oldest);
        let full = (elapsed.as_nanos() / window.as_nanos().max(1)) as u32;
        let min_full = n.saturating_sub(1) as u32;
        if full < min_full {
            elapsed += window * (min_full - full);
        }
        let elapsed = elapsed.max(Duration::from_millis(1));
        (total / elapsed.as_secs_f64(), elapsed)
    }

    /// The average throttle time (ms) handed out over the window, 0 without any.
    fn throttle_avg_ms(&self) -> f64 {
        let (sum, n) = self.samples.iter().fold((0.0, 0u32), |(sum, n), s| {
            (sum + s.throttle_ms_sum, n + s.throttles)
        });
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    }
}

/// The throttle for a rate over its bound (Kafka's QuotaUtils.throttleTime): how long the
/// client must stay quiet for the rate over `window` to come back to the bound.
fn throttle_time(rate: f64, bound: f64, window: Duration) -> Duration {
    if rate <= bound || bound <= 0.0 {
        return Duration::ZERO;
    }
    millis((rate - bound) / bound * window.as_secs_f64() * 1000.0)
}

/// A throttle of `ms` milliseconds, at most `i32::MAX` (what `throttle_time_ms` can say): a
/// tiny quota can make any figure, never a panic.
fn millis(ms: f64) -> Duration {
    if ms.is_nan() || ms <= 0.0 {
        return Duration::ZERO;
    }
    Duration::from_millis(ms.round().min(i32::MAX as f64) as u64)
}

/// The `connection_creation_rate` quota of address `ip` (KIP-612): the address's own (its
/// entity name read as an address, so `::1` and `0:0:0:0:0:0:0:1` are one), else the default
/// address's.
pub fn ip_connection_rate(img: &QuotaImage, ip: std::net::IpAddr) -> Option<f64> {
    const KEY: &str = "connection_creation_rate";
    let mut default = None;
    for (entity, values) in img.entities() {
        let Some(name) = entity.get(IP).filter(|_| entity.len() == 1) else {
            continue;
        };
        let Some(rate) = values.get(KEY) else {
            continue;
        };
        match name {
            None => default = Some(*rate),
            Some(n)
                if n.parse::<std::net::IpAddr>()
                    .is_ok_and(|a| a.to_canonical() == ip) =>
            {
                return Some(*rate)
            }
            Some(_) => {}
        }
    }
    default
}

/// A throttle as the wire's `throttle_time_ms`.
pub fn as_throttle_ms(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

/// How long a client's measurement outlives its last request (Kafka expires quota sensors
/// after an hour), and how often the idle ones are looked for.
const IDLE_EXPIRY: Duration = Duration::from_secs(3600);
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Per-client state by metric tags, with its metric series dropped once idle for an hour, so
/// clients that come and go (a default quota covers every client id) leave nothing behind.
struct PerClient<T> {
    entries: HashMap<(String, String), (T, Instant)>,
    swept: Option<Instant>,
}

impl<T> PerClient<T> {
    fn new() -> Self {
        PerClient {
            entries: HashMap::new(),
            swept: None,
        }
    }

    /// The entry of `tags`, made with `make` if new; idle entries are swept first, and
    /// `forget` is called with the tags of each.
    fn entry(
        &mut self,
        tags: &(String, String),
        now: Instant,
        make: impl FnOnce() -> T,
        forget: impl Fn(&(String, String)),
    ) -> &mut T {
        if self
            .swept
            .is_none_or(|t| now.saturating_duration_since(t) >= SWEEP_EVERY)
        {
            self.swept = Some(now);
            self.entries.retain(|tags, (_, used)| {
                let keep = now.saturating_duration_since(*used) < IDLE_EXPIRY;
                if !keep {
                    forget(tags);
                }
                keep
            });
        }
        let (value, used) = self
            .entries
            .entry(tags.clone())
            .or_insert_with(|| (make(), now));
        *used = now;
        value
    }
}

/// Drops one client's series from a gauge.
fn forget_series(gauge: &GaugeVec, tags: &(String, String)) {
    let _ = gauge.remove_label_values(&[tags.0.as_str(), tags.1.as_str()]);
}

/// The metrics of one quota type: `kafka.server:type=Produce|Fetch|Request,user=…,
/// client-id=…`'s rate (`byte-rate`, `request-time`) and `throttle-time`.
pub struct QuotaMetrics {
    pub rate: GaugeVec,
    pub throttle_time: GaugeVec,
}

/// One quota type's sensors, by metric tags.
pub struct ClientQuotaManager {
    kind: QuotaType,
    window: Duration,
    samples: usize,
    /// The longest throttle: one window for the request quota (Kafka's
    /// ClientRequestQuotaManager), none for the byte rates.
    max_throttle: Option<Duration>,
    sensors: parking_lot::Mutex<PerClient<Sensor>>,
    metrics: QuotaMetrics,
}

impl ClientQuotaManager {
    pub fn new(kind: QuotaType, window: Duration, samples: usize, metrics: QuotaMetrics) -> Self {
        ClientQuotaManager {
            kind,
            window,
            samples: samples.max(1),
            max_throttle: (kind == QuotaType::Request).then_some(window),
            sensors: parking_lot::Mutex::new(PerClient::new()),
            metrics,
        }
    }

    /// Counts `value` (bytes, or handler percent-seconds) against the client's quota, if one
    /// applies; the throttle time it earned (zero when within its quota or without one).
    pub fn record(&self, img: &QuotaImage, who: ClientIdentity<'_>, value: f64) -> Duration {
        let Some(quota) = resolve(img, self.kind.key(), who) else {
            return Duration::ZERO;
        };
        self.record_at(&quota, value, Instant::now())
    }

    fn record_at(&self, quota: &ResolvedQuota, value: f64, now: Instant) -> Duration {
        let mut sensors = self.sensors.lock();
        let forget = |tags: &(String, String)| {
            forget_series(&self.metrics.rate, tags);
            forget_series(&self.metrics.throttle_time, tags);
        };
        let sensor = sensors.entry(&quota.tags, now, Sensor::default, forget);
        sensor.current(now, self.window, self.samples).value += value;
        let (rate, window) = sensor.rate(now, self.window, self.samples);
        let mut throttle = throttle_time(rate, quota.bound, window);
        if let Some(max) = self.max_throttle {
            throttle = throttle.min(max);
        }
        if !throttle.is_zero() {
            let s = sensor.current(now, self.window, self.samples);
            s.throttle_ms_sum += throttle.as_millis() as f64;
            s.throttles += 1;
        }
        let labels = [quota.tags.0.as_str(), quota.tags.1.as_str()];
        self.metrics.rate.with_label_values(&labels).set(rate);
        self.metrics
            .throttle_time
            .with_label_values(&labels)
            .set(sensor.throttle_avg_ms());
        throttle
    }

    /// The most bytes a fetch may return to stay within one quota window
    /// (Kafka's getMaxValueInQuotaWindow), or `None` without a quota.
    pub fn max_in_window(&self, img: &QuotaImage, who: ClientIdentity<'_>) -> Option<usize> {
        let quota = resolve(img, self.kind.key(), who)?;
        let bytes = quota.bound * self.samples.saturating_sub(1) as f64 * self.window.as_secs_f64();
        Some(bytes.clamp(1.0, i32::MAX as f64) as usize)
    }
}

/// What a controller mutation quota decided for one topic's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Let through; the client is throttled this long (zero while within its quota).
    Allowed(Duration),
    /// Refused with THROTTLING_QUOTA_EXCEEDED: the client was already over its quota, and
    /// is throttled this long.
    Refused(Duration),
}

/// One client's token bucket of partition mutations.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Kafka's ControllerMutationQuotaManager: `controller_mutation_rate` partitions a second
/// created, deleted or added, as a token bucket per client that holds at most
/// `quota.window.num × quota.window.size.seconds` seconds' worth and starts full. A request may
/// take the bucket into debt; while it is in debt, a strict request (CreateTopics v6+,
/// DeleteTopics v5+, CreatePartitions v3+) has its topics refused, an older one is throttled.
pub struct MutationQuotaManager {
    depth: Duration,
    buckets: parking_lot::Mutex<PerClient<Bucket>>,
    throttle_time: GaugeVec,
}

impl MutationQuotaManager {
    pub fn new(window: Duration, samples: usize, throttle_time: GaugeVec) -> Self {
        MutationQuotaManager {
            depth: window * samples.max(1) as u32,
            buckets: parking_lot::Mutex::new(PerClient::new()),
            throttle_time,
        }
    }

    /// Takes `permits` partitions from the client's bucket, if a quota applies.
    pub fn take(
        &self,
        img: &QuotaImage,
        who: ClientIdentity<'_>,
        permits: f64,
        strict: bool,
    ) -> Mutation {
        match resolve(img, "controller_mutation_rate", who) {
            Some(quota) => self.take_at(&quota, permits, strict, Instant::now()),
            None => Mutation::Allowed(Duration::ZERO),
        }
    }

    fn take_at(&self, quota: &ResolvedQuota, permits: f64, strict: bool, now: Instant) -> Mutation {
        let rate = quota.bound;
        let burst = rate * self.depth.as_secs_f64();
        let mut buckets = self.buckets.lock();
        let full = || Bucket {
            tokens: burst,
            at: now,
        };
        let forget = |tags: &(String, String)| forget_series(&self.throttle_time, tags);
        let b = buckets.entry(&quota.tags, now, full, forget);
        let refill = rate * now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + refill).min(burst);
        b.at = now;
        let debt = |tokens: f64| millis(-tokens / rate * 1000.0);
        let decided = if strict && b.tokens < 0.0 {
            Mutation::Refused(debt(b.tokens))
        } else {
            b.tokens = (b.tokens - permits).min(burst);
            Mutation::Allowed(debt(b.tokens))
        };
        let (Mutation::Allowed(t) | Mutation::Refused(t)) = decided;
        self.throttle_time
            .with_label_values(&[quota.tags.0.as_str(), quota.tags.1.as_str()])
            .set(t.as_millis() as f64);
        decided
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::{ClientQuotaRecord, MetadataRecord};
    use prometheus::core::Collector;

    fn image(quotas: &[(EntityParts<'_>, f64)]) -> QuotaImage {
        let mut img = QuotaImage::default();
        for (entity, value) in quotas {
            img.apply(&MetadataRecord::ClientQuota(ClientQuotaRecord {
                entity: entity
                    .iter()
                    .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                    .collect(),
                key: "producer_byte_rate".into(),
                value: *value,
                remove: false,
            }));
        }
        img
    }

    fn metrics() -> QuotaMetrics {
        let opts = |n: &str| prometheus::Opts::new(n, "test");
        QuotaMetrics {
            rate: GaugeVec::new(opts("rate"), &["user", "client_id"]).unwrap(),
            throttle_time: GaugeVec::new(opts("throttle"), &["user", "client_id"]).unwrap(),
        }
    }

    #[test]
    fn an_address_has_its_own_connection_rate_else_the_default_addresses() {
        let mut img = QuotaImage::default();
        for (name, key, value) in [
            (None, "connection_creation_rate", 5.0),
            (Some("0:0:0:0:0:0:0:1"), "connection_creation_rate", 2.0),
            (Some("10.0.0.9"), "other_key", 7.0),
        ] {
            img.apply(&MetadataRecord::ClientQuota(ClientQuotaRecord {
                entity: vec![(IP.to_string(), name.map(str::to_string))],
                key: key.into(),
                value,
                remove: false,
            }));
        }
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(ip_connection_rate(&img, ip("::1")), Some(2.0));
        assert_eq!(ip_connection_rate(&img, ip("10.0.0.9")), Some(5.0));
        assert_eq!(ip_connection_rate(&QuotaImage::default(), ip("::1")), None);
    }

    #[test]
    fn the_most_specific_quota_wins_and_names_the_sensor() {
        let img = image(&[
            (&[(CLIENT_ID, None)], 1.0),
            (&[(CLIENT_ID, Some("app"))], 2.0),
            (&[(USER, None)], 3.0),
            (&[(USER, Some("alice"))], 4.0),
            (&[(USER, Some("alice")), (CLIENT_ID, None)], 5.0),
        ]);
        let key = "producer_byte_rate";
        let got = |user, client_id| {
            let q = resolve(&img, key, ClientIdentity { user, client_id }).unwrap();
            (q.bound, q.tags.0, q.tags.1)
        };
        assert_eq!(got("alice", "app"), (5.0, "alice".into(), "app".into()));
        assert_eq!(got("bob", "app"), (3.0, "bob".into(), "".into()));
        let clients_only = image(&[
            (&[(CLIENT_ID, None)], 1.0),
            (&[(CLIENT_ID, Some("app"))], 2.0),
        ]);
        let q = |c| {
            resolve(
                &clients_only,
                key,
                ClientIdentity {
                    user: "bob",
                    client_id: c,
                },
            )
        };
        assert_eq!(q("app").map(|q| q.bound), Some(2.0));
        assert_eq!(
            q("other").map(|q| (q.bound, q.tags)),
            Some((1.0, ("".into(), "other".into())))
        );
        assert_eq!(
            resolve(
                &QuotaImage::default(),
                key,
                ClientIdentity {
                    user: "a",
                    client_id: "b"
                }
            ),
            None
        );
        assert_eq!(ClientIdentity::new("User:alice", "x").user, "alice");
    }

    #[test]
    fn a_young_sensor_counts_a_whole_window_and_throttles_what_goes_over() {
        let window = Duration::from_secs(1);
        let m = ClientQuotaManager::new(QuotaType::Produce, window, 11, metrics());
        let quota = ResolvedQuota {
            bound: 1000.0,
            tags: ("".into(), "c".into()),
        };
        let t0 = Instant::now();
        // 10,000 bytes at once is 1,000/s over the 10 s a young sensor is measured over.
        assert_eq!(m.record_at(&quota, 10_000.0, t0), Duration::ZERO);
        // 1,000 more: 1,100/s over 10 s, 10 % over: a tenth of the window, 1 s.
        assert_eq!(
            m.record_at(&quota, 1_000.0, t0),
            Duration::from_millis(1000)
        );
        let labels = ["", "c"];
        assert_eq!(m.metrics.rate.with_label_values(&labels).get(), 1100.0);
        assert_eq!(
            m.metrics.throttle_time.with_label_values(&labels).get(),
            1000.0
        );
        // Eleven windows later every sample has aged out: the client starts afresh.
        let later = t0 + window * 12;
        assert_eq!(m.record_at(&quota, 500.0, later), Duration::ZERO);
        assert_eq!(m.metrics.rate.with_label_values(&labels).get(), 50.0);
    }

    #[test]
    fn a_mutation_bucket_starts_full_goes_into_debt_then_refuses_strict_requests_until_refilled() {
        let m = MutationQuotaManager::new(Duration::from_secs(1), 11, metrics().throttle_time);
        let quota = ResolvedQuota {
            bound: 2.0,
            tags: ("".into(), "admin".into()),
        };
        let t0 = Instant::now();
        // 22 partitions' worth to start with: 20 are within it.
        assert_eq!(
            m.take_at(&quota, 20.0, true, t0),
            Mutation::Allowed(Duration::ZERO)
        );
        // 10 more leave it 8 in debt: 4 s at 2 a second.
        assert_eq!(
            m.take_at(&quota, 10.0, true, t0),
            Mutation::Allowed(Duration::from_secs(4))
        );
        // In debt, a strict request is refused and takes nothing; an old one is throttled.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            m.take_at(&quota, 1.0, true, t1),
            Mutation::Refused(Duration::from_secs(3))
        );
        assert_eq!(
            m.take_at(&quota, 2.0, false, t1),
            Mutation::Allowed(Duration::from_secs(4))
        );
        // Once refilled above zero, strict requests pass again.
        let t2 = t1 + Duration::from_secs(5);
        assert_eq!(
            m.take_at(&quota, 1.0, true, t2),
            Mutation::Allowed(Duration::ZERO)
        );
    }

    #[test]
    fn a_tiny_quota_throttles_for_as_long_as_the_wire_can_say_and_never_panics() {
        let m = MutationQuotaManager::new(Duration::from_secs(1), 11, metrics().throttle_time);
        let quota = ResolvedQuota {
            bound: 1e-19,
            tags: ("".into(), "admin".into()),
        };
        let longest = Duration::from_millis(i32::MAX as u64);
        assert_eq!(
            m.take_at(&quota, 10.0, false, Instant::now()),
            Mutation::Allowed(longest)
        );
        assert_eq!(
            throttle_time(1e300, 1e-300, Duration::from_secs(1)),
            longest
        );
    }

    #[test]
    fn an_idle_client_is_forgotten_with_its_metric_series() {
        let window = Duration::from_secs(1);
        let m = ClientQuotaManager::new(QuotaType::Produce, window, 11, metrics());
        let quota = |client: &str| ResolvedQuota {
            bound: 1000.0,
            tags: ("".into(), client.into()),
        };
        let t0 = Instant::now();
        m.record_at(&quota("gone"), 10.0, t0);
        m.record_at(&quota("stays"), 10.0, t0 + IDLE_EXPIRY / 2);
        assert_eq!(m.metrics.rate.collect()[0].get_metric().len(), 2);
        m.record_at(&quota("stays"), 10.0, t0 + IDLE_EXPIRY);
        let series = m.metrics.rate.collect()[0].get_metric().len();
        assert_eq!(series, 1, "the idle client's series is gone");
        assert_eq!(m.sensors.lock().entries.len(), 1);
    }

    #[test]
    fn the_request_quota_throttles_at_most_one_window() {
        let window = Duration::from_secs(1);
        let m = ClientQuotaManager::new(QuotaType::Request, window, 11, metrics());
        let quota = ResolvedQuota {
            bound: 10.0,
            tags: ("alice".into(), "".into()),
        };
        let t0 = Instant::now();
        // Five handler-seconds in ten: 50 % of a thread against 10 %, four windows over; the
        // request quota holds a client back one window at most.
        let used = handler_percent(Duration::from_secs(5));
        assert_eq!(used, 500.0);
        assert_eq!(m.record_at(&quota, used, t0), window);
        // Within the quota: no throttle.
        let small = ResolvedQuota {
            bound: 1000.0,
            tags: ("bob".into(), "".into()),
        };
        assert_eq!(m.record_at(&small, used, t0), Duration::ZERO);
    }

    #[test]
    fn the_rate_over_a_full_window_is_bytes_over_elapsed_time() {
        let window = Duration::from_secs(1);
        let mut s = Sensor::default();
        let t0 = Instant::now();
        for i in 0..15u32 {
            s.current(t0 + window * i, window, 11).value += 100.0;
        }
        let now = t0 + window * 14 + Duration::from_millis(500);
        let (rate, over) = s.rate(now, window, 11);
        // Samples from 4 s to 14 s: 11 × 100 bytes over 10.5 s.
        assert_eq!(over, Duration::from_millis(10_500));
        assert!((rate - 1100.0 / 10.5).abs() < 1e-9, "{rate}");
    }
}
