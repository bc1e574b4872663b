//! `evenkeel rebalancer` as a real process for black-box tests, read through its own /metrics,
//! and the seed-shaped skewed layout the tests give it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RebalancerProcess {
    child: Child,
    /// Where it serves /metrics.
    pub port: u16,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl RebalancerProcess {
    /// Starts `evenkeel rebalancer --bootstrap BOOTSTRAP ARGS… --listen 127.0.0.1:0` and waits
    /// for its metrics address.
    pub fn start(bootstrap: &str, args: &[&str]) -> RebalancerProcess {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
            .args([
                "rebalancer",
                "--bootstrap",
                bootstrap,
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .env("EVENKEEL_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start evenkeel rebalancer");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(p) = text
                .split("metrics on http://")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
            {
                break p;
            }
            assert!(
                Instant::now() < deadline,
                "the rebalancer did not start:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        RebalancerProcess {
            child,
            port,
            log,
            _tmp: tmp,
        }
    }

    /// One of its metrics (summed over samples whose labels contain `labels`); 0 when absent.
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        let (_, page) = super::http_get(self.port, "/metrics");
        page.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(series, _)| series.split('{').next() == Some(name) && series.contains(labels))
            .filter_map(|(_, v)| v.parse::<f64>().ok())
            .sum()
    }

    pub fn rounds(&self, outcome: &str) -> f64 {
        self.metric(
            "evenkeel_rebalancer_rounds_total",
            &format!("outcome=\"{outcome}\""),
        )
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `check` holds on this rebalancer, failing with its log otherwise.
    pub fn wait_for(&self, what: &str, within: Duration, check: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !check(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; rebalancer log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for RebalancerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Seed 003's shape over brokers `1..=brokers`: broker 1 first in `share` of the lists.
pub fn skewed_assignment(partitions: usize, brokers: i32, share: f64) -> Vec<Vec<i32>> {
    let ids: Vec<i32> = (1..=brokers).collect();
    evenkeel::perf::skew::skewed_assignment(partitions, &ids, share)
}

/// The least number of leadership changes that brings every count into the band, when every
/// partition may be led by any broker: each change lowers one count by one and raises another
/// by one, so it is the larger of the total excess over the top and the total shortfall under
/// the bottom of the band (Cruise Control's band for `threshold`).
pub fn optimal_moves(counts: &BTreeMap<i32, usize>, threshold: f64) -> (usize, usize, usize) {
    let total: usize = counts.values().sum();
    let mean = total as f64 / counts.len() as f64;
    let upper = (mean * (1.0 + 0.9 * (threshold - 1.0))).ceil() as usize;
    let lower = (mean * (1.0 - 0.9 * (threshold - 1.0)).max(0.0)).floor() as usize;
    let excess: usize = counts.values().map(|c| c.saturating_sub(upper)).sum();
    let shortfall: usize = counts.values().map(|c| lower.saturating_sub(*c)).sum();
    (excess.max(shortfall), lower, upper)
}

/// Leaders per broker (every broker listed) and each partition's leader, over `topics`.
pub async fn leaders(
    admin: &evenkeel::client::AdminClient,
    brokers: &[i32],
) -> (BTreeMap<i32, usize>, BTreeMap<(String, i32), i32>) {
    let mut counts: BTreeMap<i32, usize> = brokers.iter().map(|b| (*b, 0)).collect();
    let mut by_partition = BTreeMap::new();
    for t in admin.describe_topics(None).await.unwrap() {
        for p in t.partitions {
            if let Some(c) = counts.get_mut(&p.leader) {
                *c += 1;
            }
            by_partition.insert((t.name.clone(), p.partition), p.leader);
        }
    }
    (counts, by_partition)
}
