//! The leadership rebalancer: it watches the brokers' layout and metrics, and when one broker
//! leads too many partitions it moves leadership to others with the fewest changes.
//!
//! Each round: scrape (layout through the admin client, `/metrics` per broker), detect (skew
//! and overload symptoms), plan (an optimal set of leader changes), execute (reorder replica
//! lists, then PREFERRED elections). Only the sidecar beside the active controller acts.

pub mod cli;
pub mod detect;
pub mod execute;
pub mod metrics;
pub mod plan;
pub mod report;
pub mod scrape;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::admin::AdminClient;
use crate::client::ClientSecurity;

use detect::{Finding, Signals, Thresholds};
use execute::{Execution, Limits};
use metrics::RebalancerMetrics;
use scrape::{Layout, Page};

/// Where the brokers' metrics pages are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsSource {
    /// `http://<broker host>:<port>/metrics` for every broker.
    Port(u16),
    /// Explicit URLs by broker id.
    Urls(BTreeMap<i32, String>),
    /// URLs for the brokers in id order.
    InOrder(Vec<String>),
    /// No metrics: balance from the layout alone.
    None,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RebalancerConfig {
    pub bootstrap: String,
    pub metrics: MetricsSource,
    pub interval: Duration,
    /// Act when the largest leader count is over `threshold` × the mean.
    pub threshold: f64,
    pub dry_run: bool,
    /// How long to wait after acting before acting again.
    pub mute: Duration,
    /// The broker this sidecar sits beside (it acts only while that broker is the active
    /// controller); `None`: a rebalancer beside no broker, which always acts.
    pub broker_id: Option<i32>,
    pub thresholds: Thresholds,
    pub limits: Limits,
}

impl RebalancerConfig {
    /// The defaults (those of `evenkeel rebalancer`'s flags) for `bootstrap`.
    pub fn new(bootstrap: &str) -> RebalancerConfig {
        RebalancerConfig {
            bootstrap: bootstrap.to_string(),
            metrics: MetricsSource::Port(9404),
            interval: Duration::from_secs(30),
            threshold: 1.1,
            dry_run: false,
            mute: Duration::from_secs(300),
            broker_id: None,
            thresholds: Thresholds::default(),
            limits: Limits::default(),
        }
    }
}

/// How a round ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Another rebalancer (beside the active controller) acts.
    Standby {
        active: i32,
    },
    /// Something else changes the cluster, or it is not healthy: no action this round.
    StoodDown(String),
    /// The layout could not be trusted.
    Skipped(String),
    Muted {
        remaining: Duration,
    },
    Balanced,
    /// `--dry-run`: the plan, not carried out.
    Planned(plan::Plan),
    Acted {
        plan: plan::Plan,
        execution: Execution,
    },
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Standby { .. } => "standby",
            Outcome::StoodDown(_) => "stood_down",
            Outcome::Skipped(_) => "skipped",
            Outcome::Muted { .. } => "muted",
            Outcome::Balanced => "balanced",
            Outcome::Planned(_) => "planned",
            Outcome::Acted { .. } => "acted",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RebalancerError {
    #[error("{0}")]
    Client(#[from] crate::client::ClientError),
    #[error("{0}")]
    Scrape(#[from] scrape::ScrapeError),
    #[error("{0}")]
    Execute(#[from] execute::ExecuteError),
}

/// One rebalancer: its admin client, what it remembers between rounds, its metrics.
pub struct Rebalancer {
    config: RebalancerConfig,
    admin: AdminClient,
    metrics: Arc<RebalancerMetrics>,
    /// Each broker's last metrics page, for rates over the interval.
    pages: BTreeMap<i32, Page>,
    /// Brokers whose metrics could not be read at the last round (warned once until they answer).
    unreadable: BTreeMap<i32, String>,
    muted_until: Option<Instant>,
    /// On Kubernetes: where each action is reported.
    reporter: Option<report::KubeReporter>,
    /// The last dry-run plan reported, so an unchanged plan is not reported every round.
    last_planned: Option<Vec<plan::LeaderMove>>,
}

impl Rebalancer {
    pub async fn connect(config: RebalancerConfig) -> Result<Rebalancer, RebalancerError> {
        Self::connect_with(config, ClientSecurity::plaintext()).await
    }

    /// `connect`, its connections secured as `security` says (`--command-config`).
    pub async fn connect_with(
        config: RebalancerConfig,
        security: ClientSecurity,
    ) -> Result<Rebalancer, RebalancerError> {
        let timeout = Duration::from_secs(15);
        let admin = AdminClient::connect_with(&config.bootstrap, timeout, security).await?;
        Ok(Self::with_admin(config, admin))
    }

    /// A rebalancer that reaches its brokers on its first round, so it can start before they
    /// answer (a sidecar starts beside its broker): until then each round fails and is retried
    /// the next interval. Only an empty bootstrap list is refused.
    pub fn new(
        config: RebalancerConfig,
        security: ClientSecurity,
    ) -> Result<Rebalancer, RebalancerError> {
        let admin = AdminClient::new(&config.bootstrap, Duration::from_secs(15))?;
        Ok(Self::with_admin(config, admin.with_security(security)))
    }

    fn with_admin(config: RebalancerConfig, admin: AdminClient) -> Rebalancer {
        Rebalancer {
            config,
            admin,
            metrics: Arc::new(RebalancerMetrics::new()),
            pages: BTreeMap::new(),
            unreadable: BTreeMap::new(),
            muted_until: None,
            reporter: None,
            last_planned: None,
        }
    }

    /// Reports each action to a KafkaCluster (an Event and `status.rebalance`).
    pub fn report_to(&mut self, reporter: report::KubeReporter) {
        self.reporter = Some(reporter);
    }

    pub fn metrics(&self) -> Arc<RebalancerMetrics> {
        self.metrics.clone()
    }

    /// Serves its metrics on `listen` and runs rounds in the background until the handle is
    /// dropped.
    pub async fn spawn(self, listen: &str) -> std::io::Result<RebalancerHandle> {
        let (addr, server) =
            crate::metrics::serve_registry(listen, self.metrics.registry.clone()).await?;
        Ok(RebalancerHandle {
            addr,
            server,
            rounds: tokio::spawn(self.run()),
        })
    }

    /// Runs rounds every interval until the future is dropped.
    pub async fn run(mut self) {
        let mut ticker = tokio::time::interval(self.config.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(e) = self.round_and_report().await {
                tracing::warn!(error = %e, "rebalancer round failed; trying again next interval");
            }
        }
    }

    /// One round, counted in the metrics, logged, and reported to Kubernetes when it acted.
    pub async fn round_and_report(&mut self) -> Result<Outcome, RebalancerError> {
        match self.round().await {
            Ok(outcome) => {
                self.metrics
                    .rounds
                    .with_label_values(&[outcome.label()])
                    .inc();
                report(&outcome, self.config.dry_run);
                self.report_to_kube(&outcome).await;
                Ok(outcome)
            }
            Err(e) => {
                self.metrics.rounds.with_label_values(&["failed"]).inc();
                Err(e)
            }
        }
    }

    /// One round: scrape, detect, plan, execute.
    #[tracing::instrument(skip(self), fields(round = %uuid::Uuid::new_v4().simple()))]
    pub async fn round(&mut self) -> Result<Outcome, RebalancerError> {
        let layout = scrape::layout(&self.admin).await?;
        let active = acting_broker(self.active_controller(&layout).await, &layout);
        let acting = self.config.broker_id.is_none_or(|me| me == active);
        self.metrics.active.set(i64::from(acting));
        if !acting {
            return Ok(Outcome::Standby { active });
        }
        if let Some(why) = self.reason_to_stand_down(&layout).await? {
            return Ok(why);
        }
        let signals = self.scrape_signals(&layout).await;
        let loads = detect::partition_loads(&signals.1, self.config.interval.as_secs_f64());
        let finding = detect::detect(
            &layout,
            &signals.0,
            &loads,
            &self.config.thresholds,
            self.config.threshold,
        );
        self.metrics.observe(&finding, &layout.brokers);
        if let Some(remaining) = self.muted_for() {
            return Ok(Outcome::Muted { remaining });
        }
        let Some(reason) = finding.reason.clone() else {
            return Ok(Outcome::Balanced);
        };
        tracing::info!(
            %reason,
            skew = finding.skew,
            overloaded = ?finding.symptomatic,
            heavy = ?finding.heavy,
            "leadership is uneven; planning (overloaded and heavy brokers gain no leadership)"
        );
        let plan = self.plan(&layout, &finding, &loads);
        self.metrics.moves_planned.inc_by(plan.moves.len() as u64);
        if plan.moves.is_empty() {
            return Ok(Outcome::Balanced);
        }
        if self.config.dry_run {
            return Ok(Outcome::Planned(plan));
        }
        let execution =
            execute::execute(&self.admin, &layout, &plan.moves, self.config.limits).await?;
        self.metrics.moves_made.inc_by(execution.made as u64);
        self.metrics
            .moves_failed
            .inc_by(execution.failed.len() as u64);
        if execution.abandoned.is_none() {
            self.muted_until = Some(Instant::now() + self.config.mute);
        }
        Ok(Outcome::Acted { plan, execution })
    }

    /// Writes an action to the KafkaCluster, when running on Kubernetes.
    async fn report_to_kube(&mut self, outcome: &Outcome) {
        let Some(reporter) = &self.reporter else {
            return;
        };
        let status = match outcome {
            Outcome::Planned(plan) => {
                if self.last_planned.as_ref() == Some(&plan.moves) {
                    return;
                }
                self.last_planned = Some(plan.moves.clone());
                rebalance_status("RebalancePlanned", plan, plan.moves.len(), summary(outcome))
            }
            Outcome::Acted { plan, execution } => {
                let action = if execution.abandoned.is_some() {
                    "RebalanceAbandoned"
                } else {
                    "LeadershipRebalanced"
                };
                rebalance_status(action, plan, execution.made, summary(outcome))
            }
            _ => return,
        };
        let warning = status.last_action == "RebalanceAbandoned";
        reporter.report(&status, warning).await;
    }

    /// The active controller: the quorum's leader, where the brokers tell it.
    async fn active_controller(&self, layout: &Layout) -> i32 {
        match self.admin.describe_quorum().await {
            Ok(q) if q.leader_id >= 0 => q.leader_id,
            _ => layout.controller,
        }
    }

    async fn reason_to_stand_down(
        &self,
        layout: &Layout,
    ) -> Result<Option<Outcome>, RebalancerError> {
        if let Some(why) = layout.incomplete() {
            return Ok(Some(Outcome::Skipped(why)));
        }
        let ongoing = self.admin.list_partition_reassignments().await?;
        if let Some(r) = ongoing.first() {
            return Ok(Some(Outcome::StoodDown(format!(
                "{} reassignment(s) running (first {}-{})",
                ongoing.len(),
                r.topic,
                r.partition
            ))));
        }
        if let Some(why) = layout.under_replicated_reason(&self.pages) {
            return Ok(Some(Outcome::StoodDown(why)));
        }
        Ok(None)
    }

    fn muted_for(&self) -> Option<Duration> {
        let until = self.muted_until?;
        let now = Instant::now();
        self.metrics.muted.set(i64::from(until > now));
        (until > now).then(|| until - now)
    }

    /// Reads every broker's metrics page; a broker whose page cannot be read has unknown
    /// signals (warned once until it answers again).
    #[allow(clippy::type_complexity)]
    async fn scrape_signals(
        &mut self,
        layout: &Layout,
    ) -> (
        BTreeMap<i32, Option<Signals>>,
        BTreeMap<i32, (Page, Option<Page>)>,
    ) {
        let urls = metrics_urls(&self.config.metrics, &layout.brokers);
        let timeout = self.config.interval.min(Duration::from_secs(5));
        let fetched =
            futures::future::join_all(urls.iter().map(|(b, url)| async move {
                (*b, url.clone(), scrape::page(url, timeout).await)
            }))
            .await;
        let mut signals: BTreeMap<i32, Option<Signals>> =
            layout.brokers.keys().map(|b| (*b, None)).collect();
        let mut pages = BTreeMap::new();
        for (b, url, result) in fetched {
            match result {
                Ok(page) => {
                    if self.unreadable.remove(&b).is_some() {
                        tracing::info!(broker = b, %url, "metrics readable again");
                    }
                    let previous = self.pages.insert(b, page.clone());
                    signals.insert(b, Some(Signals::read(&page, previous.as_ref())));
                    pages.insert(b, (page, previous));
                }
                Err(e) => {
                    self.pages.remove(&b);
                    if self.unreadable.insert(b, e.to_string()).is_none() {
                        tracing::warn!(broker = b, error = %e,
                            "cannot read this broker's metrics; its symptoms are unknown");
                    }
                }
            }
        }
        (signals, pages)
    }

    fn plan(
        &self,
        layout: &Layout,
        finding: &Finding,
        loads: &BTreeMap<(String, i32), f64>,
    ) -> plan::Plan {
        let brokers: Vec<plan::BrokerState> = layout
            .brokers
            .keys()
            .map(|b| plan::BrokerState {
                id: *b,
                // Overloaded or heavy brokers only shed (down to the mean), never gain.
                eligible: !finding.symptomatic.contains_key(b) && !finding.heavy.contains(b),
            })
            .collect();
        let partitions: Vec<plan::PartitionLayout> = layout
            .partitions
            .iter()
            .map(|p| plan::PartitionLayout {
                topic: p.topic.clone(),
                partition: p.partition,
                leader: p.leader,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                load: loads
                    .get(&(p.topic.clone(), p.partition))
                    .copied()
                    .unwrap_or(1.0),
            })
            .collect();
        plan::plan(&partitions, &brokers, self.config.threshold)
    }
}

/// The broker whose sidecar acts: the active controller when it is a broker (Kafka's combined
/// mode), else (dedicated controllers have no sidecar) the live broker with the smallest id.
fn acting_broker(active_controller: i32, layout: &Layout) -> i32 {
    if layout.brokers.contains_key(&active_controller) {
        return active_controller;
    }
    layout
        .brokers
        .keys()
        .next()
        .copied()
        .unwrap_or(active_controller)
}

/// A rebalancer running in the background and its metrics server; dropping it stops both.
pub struct RebalancerHandle {
    /// Where its /metrics, /healthz and /readyz are served.
    pub addr: std::net::SocketAddr,
    server: tokio::task::JoinHandle<()>,
    rounds: tokio::task::JoinHandle<()>,
}

impl Drop for RebalancerHandle {
    fn drop(&mut self) {
        self.server.abort();
        self.rounds.abort();
    }
}

/// The metrics URL of each broker.
fn metrics_urls(source: &MetricsSource, brokers: &BTreeMap<i32, String>) -> BTreeMap<i32, String> {
    match source {
        MetricsSource::None => BTreeMap::new(),
        MetricsSource::Urls(urls) => urls
            .iter()
            .filter(|(b, _)| brokers.contains_key(b))
            .map(|(b, u)| (*b, u.clone()))
            .collect(),
        MetricsSource::InOrder(urls) => brokers.keys().copied().zip(urls.iter().cloned()).collect(),
        MetricsSource::Port(port) => brokers
            .iter()
            .map(|(b, addr)| {
                let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
                (*b, format!("http://{host}:{port}/metrics"))
            })
            .collect(),
    }
}

/// Logs a round's outcome; a dry run also prints its plan on stdout.
fn report(outcome: &Outcome, dry_run: bool) {
    match outcome {
        Outcome::Standby { active } => {
            tracing::debug!(
                active,
                "standing by: the rebalancer beside the active controller acts"
            )
        }
        Outcome::StoodDown(why) => tracing::info!(%why, "standing down this round"),
        Outcome::Skipped(why) => tracing::warn!(%why, "layout incomplete; no action this round"),
        Outcome::Muted { remaining } => {
            tracing::debug!(remaining_s = remaining.as_secs(), "muted after acting")
        }
        Outcome::Balanced => tracing::debug!("balanced"),
        Outcome::Planned(plan) => {
            if dry_run {
                print_plan(plan);
            }
        }
        Outcome::Acted { plan, execution } => tracing::info!(
            planned = plan.moves.len(),
            made = execution.made,
            reordered = execution.reordered,
            failed = execution.failed.len(),
            abandoned = execution.abandoned.as_deref().unwrap_or(""),
            before = ?plan.before,
            after = ?plan.after,
            "moved leadership"
        ),
    }
}

fn rebalance_status(
    action: &str,
    plan: &plan::Plan,
    moves: usize,
    message: String,
) -> crate::operator::crd::RebalanceStatus {
    crate::operator::crd::RebalanceStatus {
        last_action: action.to_string(),
        last_action_time: crate::operator::status::now_rfc3339(),
        moves: i32::try_from(moves).unwrap_or(i32::MAX),
        skew_before: round2(plan::skew(&plan.before)),
        skew_after: round2(plan::skew(&plan.after)),
        message,
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// One line saying how a round ended.
fn summary(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Standby { active } => {
            format!("standby: the rebalancer beside broker {active} (the active controller) acts")
        }
        Outcome::StoodDown(why) => format!("stood down: {why}"),
        Outcome::Skipped(why) => format!("skipped: {why}"),
        Outcome::Muted { remaining } => format!("muted for {}s more", remaining.as_secs()),
        Outcome::Balanced => "balanced: no leadership change needed".into(),
        Outcome::Planned(plan) => format!(
            "planned: {} leadership change(s); leaders before {:?}, after {:?}",
            plan.moves.len(),
            plan.before,
            plan.after
        ),
        Outcome::Acted { plan, execution } => format!(
            "acted: {} of {} planned leadership change(s) made, {} failed{}; leaders before {:?}, planned {:?}",
            execution.made,
            plan.moves.len(),
            execution.failed.len(),
            execution
                .abandoned
                .as_ref()
                .map(|a| format!(", the rest abandoned ({a})"))
                .unwrap_or_default(),
            plan.before,
            plan.after
        ),
    }
}

fn print_plan(plan: &plan::Plan) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "dry run: {} leadership change(s) would bring every broker within [{}, {}] leaders",
        plan.moves.len(),
        plan.band.lower,
        plan.band.upper
    );
    for m in &plan.moves {
        let _ = writeln!(out, "  {}-{}: {} -> {}", m.topic, m.partition, m.from, m.to);
    }
    let _ = writeln!(
        out,
        "  leaders before {:?}, after {:?}",
        plan.before, plan.after
    );
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecar_beside_the_active_controller_acts_or_the_first_broker_s_without_one() {
        let layout = Layout {
            brokers: [(1, "a:1".to_string()), (2, "b:1".into()), (3, "c:1".into())]
                .into_iter()
                .collect(),
            controller: 2,
            partitions: Vec::new(),
        };
        assert_eq!(acting_broker(2, &layout), 2);
        // A dedicated controller (node 3000) has no sidecar: the first broker's acts.
        assert_eq!(acting_broker(3000, &layout), 1);
    }

    #[test]
    fn metrics_urls_follow_the_brokers_hosts_or_the_list() {
        let brokers: BTreeMap<i32, String> =
            [(1, "10.0.0.1:9092".to_string()), (2, "b:9092".into())]
                .into_iter()
                .collect();
        let by_port = metrics_urls(&MetricsSource::Port(9404), &brokers);
        assert_eq!(by_port[&1], "http://10.0.0.1:9404/metrics");
        assert_eq!(by_port[&2], "http://b:9404/metrics");
        let listed = MetricsSource::Urls(
            [
                (2, "http://x/metrics".to_string()),
                (7, "http://gone".into()),
            ]
            .into_iter()
            .collect(),
        );
        let urls = metrics_urls(&listed, &brokers);
        assert_eq!(urls.len(), 1, "a broker not in the cluster is not scraped");
        assert!(metrics_urls(&MetricsSource::None, &brokers).is_empty());
    }
}
