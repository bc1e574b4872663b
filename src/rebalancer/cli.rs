//! `evenkeel rebalancer`: its command-line options and the process that serves its metrics and
//! runs rounds until SIGTERM or Ctrl-C.

use std::collections::BTreeMap;
use std::time::Duration;

use super::detect::Thresholds;
use super::execute::Limits;
use super::{MetricsSource, Rebalancer, RebalancerConfig};
use crate::client::ClientSecurity;

/// `evenkeel rebalancer` options.
#[derive(clap::Args, Debug, Clone)]
pub struct RebalancerArgs {
    /// Kafka bootstrap servers, host:port[,host:port...].
    #[arg(long)]
    pub bootstrap: String,
    /// A properties file of Kafka client keys: security.protocol, ssl.* (PEM) and sasl.*, as
    /// Kafka's tools take it.
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    /// Scrape http://<broker host>:PORT/metrics on every broker.
    #[arg(long, default_value_t = 9404, conflicts_with_all = ["metrics", "no_metrics"])]
    pub metrics_port: u16,
    /// The brokers' metrics URLs instead, as ID=URL, or plain URLs for the brokers in id order.
    #[arg(long, value_delimiter = ',', value_name = "URL")]
    pub metrics: Vec<String>,
    /// Balance from the layout alone, scraping no metrics.
    #[arg(long)]
    pub no_metrics: bool,
    /// Time between rounds (e.g. 30s, 2m, 500ms).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Act when the largest leader count is over THRESHOLD x the mean; the target band is
    /// Cruise Control's: mean x (1 +/- 0.9 x (THRESHOLD - 1)).
    #[arg(long, default_value_t = 1.1, value_parser = parse_threshold)]
    pub threshold: f64,
    /// Print the plan and change nothing.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false",
          action = clap::ArgAction::Set)]
    pub dry_run: bool,
    /// Wait this long after acting before acting again.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub mute: Duration,
    /// The broker this sidecar sits beside: it acts only while that broker is the active
    /// controller, and stands by otherwise. Without it, the rebalancer always acts.
    #[arg(long)]
    pub broker_id: Option<i32>,
    /// Address of this rebalancer's /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub listen: String,
    /// A broker whose NetworkProcessorAvgIdlePercent is under this (0-100) is overloaded.
    #[arg(long, default_value_t = 30.0)]
    pub min_network_idle_percent: f64,
    /// A broker whose RequestHandlerAvgIdlePercent is under this (0-100) is overloaded.
    #[arg(long, default_value_t = 30.0)]
    pub min_handler_idle_percent: f64,
    /// A broker whose mean FetchFollower LocalTimeMs is over this is overloaded.
    #[arg(long, default_value_t = 10.0)]
    pub max_fetch_follower_local_ms: f64,
    /// Most leadership changes per batch, and per broker within a batch.
    #[arg(long, default_value_t = 1000)]
    pub moves_per_batch: usize,
    #[arg(long, default_value_t = 250)]
    pub moves_per_broker: usize,
    /// Run one round, print what it found, and exit.
    #[arg(long)]
    pub once: bool,
    /// On Kubernetes: the KafkaCluster to report each action to (an Event and
    /// `status.rebalance`), in the pod's namespace.
    #[arg(long)]
    pub kafka_cluster: Option<String>,
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub namespace: String,
}

/// `30s`, `500ms`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 30s, 500ms or 2m"))?;
    let d = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("{s:?} is not a duration like 30s, 500ms or 2m")),
    };
    if d.is_zero() {
        return Err(format!("{s:?}: the duration must be above zero"));
    }
    Ok(d)
}

fn parse_threshold(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if (1.0..=10.0).contains(&t) => Ok(t),
        _ => Err(format!(
            "{s:?}: the threshold is a ratio to the mean, from 1.0 to 10"
        )),
    }
}

/// The metrics source the options name.
pub fn metrics_source(args: &RebalancerArgs) -> Result<MetricsSource, String> {
    if args.no_metrics {
        return Ok(MetricsSource::None);
    }
    if args.metrics.is_empty() {
        return Ok(MetricsSource::Port(args.metrics_port));
    }
    let mut by_id = BTreeMap::new();
    let mut plain = Vec::new();
    for item in &args.metrics {
        match item.split_once('=') {
            Some((id, url)) if !id.contains('/') => {
                let id: i32 = id
                    .trim()
                    .parse()
                    .map_err(|_| format!("--metrics {item:?}: {id:?} is not a broker id"))?;
                by_id.insert(id, url.trim().to_string());
            }
            _ => plain.push(item.trim().to_string()),
        }
    }
    match (by_id.is_empty(), plain.is_empty()) {
        (false, true) => Ok(MetricsSource::Urls(by_id)),
        (true, false) => Ok(MetricsSource::InOrder(plain)),
        _ => Err("--metrics: give every URL as ID=URL, or none".into()),
    }
}

impl RebalancerArgs {
    pub fn config(&self) -> Result<RebalancerConfig, String> {
        Ok(RebalancerConfig {
            bootstrap: self.bootstrap.clone(),
            metrics: metrics_source(self)?,
            interval: self.interval,
            threshold: self.threshold,
            dry_run: self.dry_run,
            mute: self.mute,
            broker_id: self.broker_id,
            thresholds: Thresholds {
                min_network_idle: self.min_network_idle_percent / 100.0,
                min_handler_idle: self.min_handler_idle_percent / 100.0,
                max_fetch_follower_local_ms: self.max_fetch_follower_local_ms,
                ..Thresholds::default()
            },
            limits: Limits {
                moves_per_batch: self.moves_per_batch.max(1),
                moves_per_broker: self.moves_per_broker.max(1),
            },
        })
    }
}

/// How the rebalancer connects: as `--command-config` says, else PLAINTEXT.
fn client_security(args: &RebalancerArgs) -> anyhow::Result<ClientSecurity> {
    let Some(path) = &args.command_config else {
        return Ok(ClientSecurity::plaintext());
    };
    let props = crate::config::load_properties(path)?;
    ClientSecurity::from_properties(&props)
        .map_err(|e| anyhow::anyhow!("--command-config {}: {e}", path.display()))
}

/// Runs the rebalancer until SIGTERM or Ctrl-C (or after one round with `--once`).
pub fn run(args: RebalancerArgs) -> anyhow::Result<()> {
    let config = args.config().map_err(anyhow::Error::msg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        // Beside a broker that is still starting, a sidecar waits for it (its rounds fail until
        // the broker answers); a one-off round needs a broker now.
        let security = client_security(&args)?;
        let mut rebalancer = if args.once {
            Rebalancer::connect_with(config, security).await?
        } else {
            Rebalancer::new(config, security)?
        };
        if let Some(name) = &args.kafka_cluster {
            let reporter = super::report::KubeReporter::connect(name, &args.namespace)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot reach the Kubernetes API to report to KafkaCluster {name}: {e}"
                    )
                })?;
            rebalancer.report_to(reporter);
        }
        if args.once {
            let outcome = rebalancer.round_and_report().await?;
            println!("{}", super::summary(&outcome));
            return Ok(());
        }
        let running = rebalancer
            .spawn(&args.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
        tracing::info!(addr = %running.addr, "rebalancer health and metrics listening");
        eprintln!(
            "evenkeel rebalancer: metrics on http://{}/metrics",
            running.addr
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        drop(running);
        anyhow::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: RebalancerArgs,
    }

    fn args(argv: &[&str]) -> Result<RebalancerArgs, clap::Error> {
        let mut full = vec!["rebalancer", "--bootstrap", "h:9092"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).map(|c| c.args)
    }

    #[test]
    fn durations_read_like_kubernetes_ones() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let a = args(&[]).unwrap();
        assert_eq!(a.interval, Duration::from_secs(30));
        assert_eq!(a.threshold, 1.1);
        assert!(!a.dry_run);
        assert_eq!(a.mute, Duration::from_secs(300));
        assert_eq!(metrics_source(&a), Ok(MetricsSource::Port(9404)));
        assert!(args(&["--dry-run"]).unwrap().dry_run);
        assert!(!args(&["--dry-run=false"]).unwrap().dry_run);
        assert!(args(&["--threshold", "0.5"]).is_err());
        assert_eq!(a.config().unwrap(), RebalancerConfig::new("h:9092"));
    }

    #[test]
    fn metrics_urls_are_by_id_or_in_order_but_not_mixed() {
        let by_id = args(&["--metrics", "1=http://a:1/metrics,2=http://b:1/metrics"]).unwrap();
        match metrics_source(&by_id).unwrap() {
            MetricsSource::Urls(m) => assert_eq!(m[&2], "http://b:1/metrics"),
            other => panic!("{other:?}"),
        }
        let plain = args(&["--metrics", "http://a:1/metrics,http://b:1/metrics"]).unwrap();
        assert_eq!(
            metrics_source(&plain),
            Ok(MetricsSource::InOrder(vec![
                "http://a:1/metrics".into(),
                "http://b:1/metrics".into()
            ]))
        );
        let mixed = args(&["--metrics", "1=http://a:1/metrics,http://b:1/metrics"]).unwrap();
        assert!(metrics_source(&mixed).is_err());
        assert_eq!(
            metrics_source(&args(&["--no-metrics"]).unwrap()),
            Ok(MetricsSource::None)
        );
    }
}
