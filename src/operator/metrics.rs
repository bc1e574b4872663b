//! The operator's own metrics (reconcile counts, failures, durations, leadership) and the HTTP
//! server for `/metrics`, `/healthz` and `/readyz` on port 8081.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

pub struct Metrics {
    registry: Registry,
    reconciles: IntCounterVec,
    failures: IntCounterVec,
    duration: HistogramVec,
    leader: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new(
                "evenkeel_operator_reconciliations_total",
                "Reconciles run, by kind",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let failures = IntCounterVec::new(
            Opts::new(
                "evenkeel_operator_reconcile_failures_total",
                "Reconciles that ended in an error, by kind",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "evenkeel_operator_reconcile_duration_seconds",
                "Time one reconcile took, by kind",
            )
            .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &["kind"],
        )
        .expect("valid metric");
        let leader = IntGauge::new(
            "evenkeel_operator_leader",
            "1 while this replica holds the leader Lease",
        )
        .expect("valid metric");
        for c in [
            Box::new(reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(failures.clone()),
            Box::new(duration.clone()),
            Box::new(leader.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        Metrics {
            registry,
            reconciles,
            failures,
            duration,
            leader,
        }
    }
}

impl Metrics {
    pub fn observe(&self, kind: &str, took: Duration, ok: bool) {
        self.reconciles.with_label_values(&[kind]).inc();
        if !ok {
            self.failures.with_label_values(&[kind]).inc();
        }
        self.duration
            .with_label_values(&[kind])
            .observe(took.as_secs_f64());
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub fn render(&self) -> String {
        crate::metrics::render_registry(&self.registry)
    }
}

/// Serves the endpoints until the returned task is aborted.
pub async fn serve(
    addr: &str,
    metrics: Arc<Metrics>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    Ok(
        crate::metrics::serve_registry(addr, metrics.registry.clone())
            .await?
            .1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_and_failures_are_counted_by_kind() {
        let m = Metrics::default();
        m.observe("KafkaTopic", Duration::from_millis(20), true);
        m.observe("KafkaTopic", Duration::from_millis(20), false);
        m.set_leader(true);
        let text = m.render();
        assert!(
            text.contains("evenkeel_operator_reconciliations_total{kind=\"KafkaTopic\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("evenkeel_operator_reconcile_failures_total{kind=\"KafkaTopic\"} 1"),
            "{text}"
        );
        assert!(text.contains("evenkeel_operator_leader 1"), "{text}");
        assert!(text
            .contains("evenkeel_operator_reconcile_duration_seconds_count{kind=\"KafkaTopic\"} 2"));
    }
}
