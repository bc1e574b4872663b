//! `evenkeel perf`: the options of each benchmark and the code that runs it and prints its
//! figures, one function per subcommand.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::kafka::{self, ProduceOptions, ProduceReport};

/// The benchmarks of `evenkeel perf`.
#[derive(clap::Subcommand)]
pub enum PerfCommand {
    /// Produce load through librdkafka, printed like kafka-producer-perf-test. SIGTERM stops
    /// sending; what was sent is waited for and the figures printed as at the end of a run.
    Produce(ProduceArgs),
    /// Read a topic from the beginning through librdkafka, printed like kafka-consumer-perf-test.
    Consume(ConsumeArgs),
    /// Seed 003 in small: produce p99 with and without consumers fetching every partition of
    /// a wide topic in one request (fetch.min.bytes 1 MiB, max wait 500 ms).
    WideFetch(WideFetchArgs),
    /// Leader concentration end to end: a topic whose first broker leads most partitions,
    /// wide fetchers and a producer, figures; then the rebalancer evens leadership out and the
    /// same load is measured again.
    Skew(SkewArgs),
    /// Keyed load through the producer proxy's HTTP API (v2 and v3 clients side by side),
    /// printed like kafka-producer-perf-test, then every record read back and checked.
    Proxy(super::proxy::ProxyLoadArgs),
    /// Append and read throughput of the partition log, beside dd's figures.
    Storage(StorageArgs),
    /// Secured connections per second: TCP, TLS handshake, ApiVersions and a SASL login, then
    /// closed, from several connections at once.
    Auth(super::auth::AuthArgs),
}

/// `evenkeel perf produce` options.
#[derive(clap::Args)]
pub struct ProduceArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[arg(long, default_value = "perf")]
    topic: String,
    /// Partitions, if the topic has to be created.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Replication factor, if the topic has to be created; -1 (the default) takes the
    /// brokers' `default.replication.factor`, as kafka-topics does without one.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    replication_factor: i32,
    #[arg(long, default_value_t = 1_000_000)]
    num_records: u64,
    #[arg(long, default_value_t = 1024)]
    record_size: usize,
    /// Records per second; -1 for as fast as possible.
    #[arg(long, default_value_t = -1.0, allow_hyphen_values = true)]
    throughput: f64,
    /// Producer properties, e.g. acks=1 linger.ms=5 batch.size=65536.
    #[arg(long = "producer-props", num_args = 1..)]
    producer_props: Vec<String>,
    /// The client: librdkafka, or evenkeel (our producer, the proxy's, with Java's keys).
    #[arg(long, default_value = "librdkafka", value_parser = ["librdkafka", "evenkeel"])]
    client: String,
}

/// `evenkeel perf consume` options.
#[derive(clap::Args)]
pub struct ConsumeArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[arg(long, default_value = "perf")]
    topic: String,
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    #[arg(long = "consumer-props", num_args = 1..)]
    consumer_props: Vec<String>,
}

/// `evenkeel perf wide-fetch` options.
#[derive(clap::Args)]
pub struct WideFetchArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// The broker's metrics address (host:port) for the handler idle figure.
    #[arg(long, default_value = "127.0.0.1:9404")]
    metrics: String,
    #[arg(long, default_value = "wide")]
    topic: String,
    #[arg(long, default_value_t = 1000)]
    partitions: i32,
    #[arg(long, default_value_t = 4)]
    fetchers: usize,
    /// Records per second from the producer, spread over all partitions.
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    #[arg(long, default_value_t = 512)]
    record_size: usize,
}

/// `evenkeel perf skew` options.
#[derive(clap::Args)]
pub struct SkewArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Each broker's metrics URL as ID=URL, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    metrics: Vec<String>,
    #[arg(long, default_value = "skewed")]
    topic: String,
    #[arg(long, default_value_t = 300)]
    partitions: usize,
    /// Share of partitions whose preferred leader is the first broker.
    #[arg(long, default_value_t = 0.8)]
    share: f64,
    #[arg(long, default_value_t = 4)]
    fetchers: usize,
    /// Records per second from the producer (acks=all), over all partitions.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Seconds of load per phase.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    #[arg(long, default_value_t = 512)]
    record_size: usize,
    /// The rebalancer's interval.
    #[arg(long, default_value = "10s", value_parser = crate::rebalancer::cli::parse_duration)]
    interval: Duration,
    /// A rebalancer already runs beside the brokers (the KafkaCluster's sidecar): wait for it
    /// to even leadership out (up to 600 s) instead of starting one here.
    #[arg(long)]
    external_rebalancer: bool,
}

/// `evenkeel perf storage` options.
#[derive(clap::Args)]
pub struct StorageArgs {
    /// Directory for the benchmark files (on the disk to measure).
    #[arg(long, default_value = "./.evenkeel-perf")]
    dir: PathBuf,
    /// MiB to append per run.
    #[arg(long, default_value_t = 2048)]
    mib: u64,
    #[arg(long, default_value_t = 1024)]
    record_size: usize,
    #[arg(long, default_value_t = 16384)]
    batch_bytes: usize,
    /// Runs per measurement; the median is printed with the range.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// Runs one benchmark, printing its figures to stdout and its progress to stderr.
pub fn run(what: PerfCommand) -> anyhow::Result<()> {
    match what {
        PerfCommand::Produce(args) => produce(args),
        PerfCommand::Consume(args) => consume(args),
        PerfCommand::WideFetch(args) => wide_fetch(args),
        PerfCommand::Skew(args) => skew(args),
        PerfCommand::Proxy(args) => proxy(args),
        PerfCommand::Storage(args) => storage(args),
        PerfCommand::Auth(args) => super::auth::run(args),
    }
}

fn produce(a: ProduceArgs) -> anyhow::Result<()> {
    let o = ProduceOptions {
        bootstrap: a.bootstrap,
        topic: a.topic,
        num_records: a.num_records,
        record_size: a.record_size,
        throughput: a.throughput,
        props: crate::config::parse_key_values(&a.producer_props)?,
        round_robin: None,
        stop: Some(Default::default()),
    };
    let rt = tokio::runtime::Runtime::new()?;
    // SIGTERM (a client pod deleted) ends the run early, reported like a finished one.
    if let Some(stop) = o.stop.clone() {
        let mut term = rt.block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        })?;
        rt.spawn(async move {
            term.recv().await;
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let (partitions, rf) = (a.partitions, a.replication_factor);
    match a.client.as_str() {
        "evenkeel" => rt.block_on(super::producer::ensure_topic(&o, partitions, rf))?,
        _ => rt.block_on(kafka::ensure_topic(&o.bootstrap, &o.topic, partitions, rf))?,
    }
    let report = match a.client.as_str() {
        "evenkeel" => rt.block_on(super::producer::produce(&o, &mut |line| println!("{line}")))?,
        _ => kafka::produce(&o, &mut |line| println!("{line}"))?,
    };
    println!("{report}");
    if o.stopped() {
        // Stopped by SIGTERM (its pod deleted): a moment for whoever follows the log to read
        // the figures before the process, and with it the log, is gone.
        std::thread::sleep(Duration::from_secs(2));
    }
    if report.failed > 0 {
        let why = report.first_error.as_deref().unwrap_or("no reason given");
        anyhow::bail!("{} records failed; the first: {why}", report.failed);
    }
    Ok(())
}

fn consume(a: ConsumeArgs) -> anyhow::Result<()> {
    let o = kafka::ConsumeOptions {
        bootstrap: a.bootstrap,
        topic: a.topic,
        messages: a.messages,
        timeout: Duration::from_secs(10),
        props: crate::config::parse_key_values(&a.consumer_props)?,
    };
    let (n, bytes, secs) = kafka::consume(&o)?;
    let mb = bytes as f64 / 1048576.0;
    println!("data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, seconds");
    println!(
        "{mb:.4}, {:.4}, {n}, {:.4}, {secs:.3}",
        mb / secs,
        n as f64 / secs
    );
    Ok(())
}

fn skew(a: SkewArgs) -> anyhow::Result<()> {
    let o = super::skew::SkewOptions {
        bootstrap: a.bootstrap,
        metrics: parse_metrics_urls(&a.metrics)?,
        topic: a.topic,
        partitions: a.partitions,
        share: a.share,
        fetchers: a.fetchers,
        rate: a.rate,
        seconds: a.seconds,
        record_size: a.record_size,
        interval: a.interval,
        external_rebalancer: a.external_rebalancer,
    };
    let report = super::skew::run(&o, &mut |m| eprintln!("{m}"))?;
    print!("{}", super::skew::render(&report));
    Ok(())
}

/// `--metrics 1=http://...,2=http://...` as broker id -> URL.
fn parse_metrics_urls(items: &[String]) -> anyhow::Result<BTreeMap<i32, String>> {
    items
        .iter()
        .map(|m| {
            let (id, url) = m
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--metrics {m:?} is not ID=URL"))?;
            let id: i32 = id
                .parse()
                .map_err(|_| anyhow::anyhow!("--metrics {m:?}: {id:?} is not a broker id"))?;
            Ok((id, url.to_string()))
        })
        .collect()
}

fn proxy(args: super::proxy::ProxyLoadArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let report = rt.block_on(super::proxy::run(args, &mut |line| println!("{line}")))?;
    print!("{report}");
    if !report.errors.is_empty() {
        anyhow::bail!(
            "{} records were answered with an error",
            report.errors.len()
        );
    }
    if let Some(v) = report.verification.as_ref().filter(|v| !v.clean()) {
        anyhow::bail!("the read-back disagrees with what was sent and answered: {v}");
    }
    Ok(())
}

fn storage(a: StorageArgs) -> anyhow::Result<()> {
    let opts = super::storage::StoragePerfOptions {
        dir: a.dir.clone(),
        total_bytes: a.mib * 1024 * 1024,
        record_size: a.record_size,
        batch_bytes: a.batch_bytes,
        fsync_every_bytes: 1024 * 1024,
    };
    eprintln!(
        "measuring in {} ({} MiB per run, {} runs each, sync before each) ...",
        a.dir.display(),
        a.mib,
        a.runs
    );
    let report = super::storage::run(&opts, a.runs)?;
    let _ = std::fs::remove_dir(&a.dir);
    println!("{:<52} {:>12}   range MB/s", "measurement", "median MB/s");
    for r in &report.rows {
        println!(
            "{:<52} {:>12.1}   {:.1} .. {:.1}",
            r.name, r.median_mb_s, r.min_mb_s, r.max_mb_s
        );
    }
    if let Some(ratio) = report.fsync_vs_dd_ratio {
        println!(
            "append with fsync every 1 MiB inline / dd conv=fdatasync, same round (median): {:.0} %",
            100.0 * ratio
        );
    }
    if let Some(ratio) = report.pipelined_vs_dd_ratio {
        println!(
            "append with fsync every 1 MiB by a flusher thread (at most 2 MiB unsynced, preallocate=true) / dd conv=fdatasync, same round (median): {:.0} %",
            100.0 * ratio
        );
    }
    Ok(())
}

// --- wide fetch --------------------------------------------------------------------------

const HANDLER_IDLE: &str = "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent";
const NETWORK_IDLE: &str = "kafka_network_socketserver_networkprocessoravgidle_percent";
const PRODUCE_TOTAL_TIME: &str =
    "kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\"";

/// One phase of the wide-fetch benchmark: the producer's figures and the broker's.
struct WidePhase {
    produced: ProduceReport,
    handler_idle: Option<f64>,
    network_idle: Option<f64>,
    /// The upper bound of the bucket that holds the broker's Produce TotalTimeMs p99.
    broker_p99_bound: Option<f64>,
}

fn wide_fetch(a: WideFetchArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(kafka::ensure_topic(&a.bootstrap, &a.topic, a.partitions, 1))?;
    let produce = ProduceOptions {
        bootstrap: a.bootstrap.clone(),
        topic: a.topic.clone(),
        num_records: (a.rate * a.seconds as f64) as u64,
        record_size: a.record_size,
        throughput: a.rate,
        props: vec![
            ("acks".into(), "1".into()),
            ("linger.ms".into(), "0".into()),
            ("statistics.interval.ms".into(), "1000".into()),
        ],
        round_robin: Some(a.partitions),
        stop: None,
    };
    eprintln!("warming up (metadata, connections) ...");
    let warm = ProduceOptions {
        num_records: (a.rate * 3.0) as u64,
        ..produce.clone()
    };
    kafka::produce(&warm, &mut |_| {})?;
    eprintln!(
        "phase 1: producing {} records/s over {} partitions, no wide fetchers ...",
        a.rate, a.partitions
    );
    let base = measure_wide_phase(&a.metrics, &produce)?;
    println!("without wide fetchers: {}", base.produced);
    eprintln!(
        "phase 2: the same with {} consumers fetching all {} partitions per request ...",
        a.fetchers, a.partitions
    );
    let fetchers = kafka::WideFetchOptions {
        bootstrap: a.bootstrap,
        topic: a.topic,
        partitions: a.partitions,
        fetchers: a.fetchers,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let fetched = Arc::new(AtomicU64::new(0));
    let handles = kafka::start_wide_fetchers(&fetchers, stop.clone(), fetched.clone())?;
    std::thread::sleep(Duration::from_secs(3));
    let wide = measure_wide_phase(&a.metrics, &produce);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let wide = wide?;
    println!("with {} wide fetchers:  {}", a.fetchers, wide.produced);
    println!(
        "records fetched by the wide fetchers: {}",
        fetched.load(Ordering::Relaxed)
    );
    print_wide_comparison(&base, &wide);
    Ok(())
}

/// Produces the load once; the broker's idle gauges and Produce histogram are read around it.
fn measure_wide_phase(metrics: &str, produce: &ProduceOptions) -> anyhow::Result<WidePhase> {
    // The idle gauges average since their last scrape: scraping now starts the window.
    let _ = kafka::scrape_metric(metrics, HANDLER_IDLE);
    let _ = kafka::scrape_metric(metrics, NETWORK_IDLE);
    let before = kafka::scrape_buckets(metrics, PRODUCE_TOTAL_TIME);
    let produced = kafka::produce(produce, &mut |_| {})?;
    let handler_idle = kafka::scrape_metric(metrics, HANDLER_IDLE);
    let after = kafka::scrape_buckets(metrics, PRODUCE_TOTAL_TIME);
    let network_idle = kafka::scrape_metric(metrics, NETWORK_IDLE);
    Ok(WidePhase {
        produced,
        handler_idle,
        network_idle,
        broker_p99_bound: kafka::bucket_quantile(&before, &after, 0.99),
    })
}

fn print_wide_comparison(base: &WidePhase, wide: &WidePhase) {
    let show = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.3}"));
    println!(
        "request handler idle: {} without, {} with wide fetchers; network idle with: {}",
        show(base.handler_idle),
        show(wide.handler_idle),
        show(wide.network_idle)
    );
    let bound = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("<= {v} ms"));
    println!(
        "broker-side Produce TotalTimeMs p99: {} without, {} with wide fetchers",
        bound(base.broker_p99_bound),
        bound(wide.broker_p99_bound)
    );
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2} ms"));
    let (b, w) = (&base.produced, &wide.produced);
    println!(
        "librdkafka producer, median of 1 s windows: request round trip p99 {} without, {} with; queue wait p99 {} without, {} with",
        ms(b.rtt_p99_ms),
        ms(w.rtt_p99_ms),
        ms(b.queue_p99_ms),
        ms(w.queue_p99_ms)
    );
    println!(
        "client-side produce p99: {:.1} ms without, {:.1} ms with -> ratio {:.2} (target <= 1.5)",
        b.p99_ms,
        w.p99_ms,
        w.p99_ms / b.p99_ms.max(0.001)
    );
}
