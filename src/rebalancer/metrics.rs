//! The rebalancer's own metrics, served on port 8081: leaders and skew per broker, the symptoms
//! seen, moves planned and made, and whether this sidecar acts, stands by or is muted.

use std::collections::BTreeMap;

use prometheus::{Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::metrics::{counter, gauge, gauge_vec, int_counter, int_gauge};

use super::detect::{Finding, Symptom};

pub struct RebalancerMetrics {
    pub registry: Registry,
    leaders: GaugeVec,
    skew: GaugeVec,
    leader_skew: Gauge,
    weighted_skew: Gauge,
    symptom: GaugeVec,
    metrics_unknown: GaugeVec,
    pub moves_planned: IntCounter,
    pub moves_made: IntCounter,
    pub moves_failed: IntCounter,
    pub rounds: IntCounterVec,
    pub muted: IntGauge,
    pub active: IntGauge,
}

impl Default for RebalancerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RebalancerMetrics {
    pub fn new() -> RebalancerMetrics {
        let r = Registry::new();
        RebalancerMetrics {
            leaders: gauge_vec(
                &r,
                "evenkeel_rebalancer_leaders",
                "Partitions each broker leads, at the last round",
                &["broker"],
            ),
            skew: gauge_vec(
                &r,
                "evenkeel_rebalancer_broker_leader_skew",
                "A broker's leader count over the mean, at the last round",
                &["broker"],
            ),
            leader_skew: gauge(
                &r,
                "evenkeel_rebalancer_leader_skew",
                "The largest leader count over the mean, at the last round",
            ),
            weighted_skew: gauge(
                &r,
                "evenkeel_rebalancer_weighted_leader_skew",
                "The same over leadership weighted by consumer fetches per partition",
            ),
            symptom: gauge_vec(
                &r,
                "evenkeel_rebalancer_symptom",
                "1 when the broker's metrics showed this overload symptom at the last round",
                &["broker", "symptom"],
            ),
            metrics_unknown: gauge_vec(
                &r,
                "evenkeel_rebalancer_metrics_unknown",
                "1 when the broker's /metrics could not be read at the last round",
                &["broker"],
            ),
            moves_planned: int_counter(
                &r,
                "evenkeel_rebalancer_moves_planned_total",
                "Leadership changes planned",
            ),
            moves_made: int_counter(
                &r,
                "evenkeel_rebalancer_moves_made_total",
                "Leadership changes made and seen in Metadata",
            ),
            moves_failed: int_counter(
                &r,
                "evenkeel_rebalancer_moves_failed_total",
                "Planned leadership changes that did not happen",
            ),
            rounds: counter(
                &r,
                "evenkeel_rebalancer_rounds_total",
                "Rounds by outcome (balanced, acted, planned, standby, stood_down, muted, skipped, failed)",
                &["outcome"],
            ),
            muted: int_gauge(
                &r,
                "evenkeel_rebalancer_muted",
                "1 while the rebalancer waits out its mute period after acting",
            ),
            active: int_gauge(
                &r,
                "evenkeel_rebalancer_active",
                "1 when this rebalancer is the one that acts (beside the active controller)",
            ),
            registry: r,
        }
    }

    /// Records what a round saw.
    pub fn observe(&self, finding: &Finding, brokers: &BTreeMap<i32, String>) {
        let mean =
            finding.counts.values().sum::<usize>() as f64 / finding.counts.len().max(1) as f64;
        self.leaders.reset();
        self.skew.reset();
        self.symptom.reset();
        self.metrics_unknown.reset();
        for (b, c) in &finding.counts {
            let id = b.to_string();
            self.leaders.with_label_values(&[&id]).set(*c as f64);
            let s = if mean > 0.0 { *c as f64 / mean } else { 1.0 };
            self.skew.with_label_values(&[&id]).set(s);
        }
        for b in brokers.keys() {
            let id = b.to_string();
            let found = finding.symptomatic.get(b);
            for s in Symptom::ALL {
                let on = found.is_some_and(|f| f.contains(&s));
                self.symptom
                    .with_label_values(&[&id, s.name()])
                    .set(f64::from(u8::from(on)));
            }
            self.metrics_unknown
                .with_label_values(&[&id])
                .set(f64::from(u8::from(finding.unknown.contains(b))));
        }
        self.leader_skew.set(finding.skew);
        self.weighted_skew.set(finding.weighted_skew);
    }

    pub fn render(&self) -> String {
        crate::metrics::render_registry(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_shown_per_broker() {
        let m = RebalancerMetrics::new();
        let finding = Finding {
            counts: [(1, 8), (2, 2), (3, 2)].into_iter().collect(),
            skew: 2.0,
            weighted_skew: 2.5,
            symptomatic: [(1, vec![Symptom::NetworkIdle])].into_iter().collect(),
            heavy: Vec::new(),
            unknown: vec![3],
            reason: Some("skew".into()),
        };
        let brokers = [1, 2, 3].iter().map(|b| (*b, String::new())).collect();
        m.observe(&finding, &brokers);
        let text = m.render();
        for line in [
            "evenkeel_rebalancer_leaders{broker=\"1\"} 8",
            "evenkeel_rebalancer_broker_leader_skew{broker=\"1\"} 2",
            "evenkeel_rebalancer_broker_leader_skew{broker=\"2\"} 0.5",
            "evenkeel_rebalancer_leader_skew 2",
            "evenkeel_rebalancer_symptom{broker=\"1\",symptom=\"NetworkProcessorAvgIdlePercent\"} 1",
            "evenkeel_rebalancer_symptom{broker=\"2\",symptom=\"NetworkProcessorAvgIdlePercent\"} 0",
            "evenkeel_rebalancer_metrics_unknown{broker=\"3\"} 1",
            "evenkeel_rebalancer_metrics_unknown{broker=\"1\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
