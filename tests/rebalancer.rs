//! `evenkeel rebalancer` against real evenkeel clusters: one broker leading most partitions is
//! evened out with the optimal number of leadership changes and stays so under the controller's
//! automatic preferred-leader elections; only the sidecar beside the active controller acts; a
//! balanced cluster gets no moves; unreadable metrics, a broker down and a broker killed
//! mid-way are handled; a dry run changes nothing.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{admin, create_assigned, until, Cluster};
use common::rebalancer::{leaders, optimal_moves, skewed_assignment, RebalancerProcess};

const THRESHOLD: f64 = 1.1;

/// Flags that turn the overload symptoms off, for tests about the leader count: on a busy
/// machine a broker shows them (follower fetches over 10 ms, idle threads under 30 %), and a
/// broker with symptoms gains no leaders and sheds down to the mean, not to the band's top.
const NO_SYMPTOMS: [&str; 6] = [
    "--min-network-idle-percent",
    "0",
    "--min-handler-idle-percent",
    "0",
    "--max-fetch-follower-local-ms",
    "1e9",
];

/// `1=http://…/metrics,2=…` for every node of `c`.
fn metrics_urls(c: &Cluster) -> String {
    c.nodes
        .iter()
        .map(|n| {
            format!(
                "{}=http://127.0.0.1:{}/metrics",
                n.id,
                n.metrics.expect("node serves metrics")
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn broker_ids(c: &Cluster) -> Vec<i32> {
    (1..=c.nodes.len() as i32).collect()
}

/// Creates the skewed topic and waits until every partition is led by its first replica with
/// a full ISR; returns the leader counts.
async fn skewed_topic(
    c: &Cluster,
    topic: &str,
    partitions: usize,
    share: f64,
) -> BTreeMap<i32, usize> {
    let n = c.nodes.len() as i32;
    let assignment = skewed_assignment(partitions, n, share);
    create_assigned(c, topic, assignment.clone(), &[]).await;
    let a = admin(&c.addr(1)).await;
    until(
        "the skewed topic's leaders and full ISRs",
        Duration::from_secs(60),
        || async {
            let t = a
                .describe_topics(Some(&[topic.to_string()]))
                .await
                .ok()?
                .into_iter()
                .next()?;
            let settled = t.partitions.len() == partitions
                && t.partitions.iter().all(|p| {
                    let want = &assignment[p.partition as usize];
                    p.leader == want[0] && p.isr.len() == want.len()
                });
            settled.then_some(())
        },
    )
    .await;
    leaders(&a, &broker_ids(c)).await.0
}

fn in_band(counts: &BTreeMap<i32, usize>, lower: usize, upper: usize) -> bool {
    counts.values().all(|c| (lower..=upper).contains(c))
}

fn changed(before: &BTreeMap<(String, i32), i32>, after: &BTreeMap<(String, i32), i32>) -> usize {
    before
        .iter()
        .filter(|(tp, l)| after.get(*tp) != Some(l))
        .count()
}

/// Seconds the balance must hold under automatic preferred-leader elections every 10 s.
fn hold_secs() -> u64 {
    std::env::var("EVENKEEL_REBALANCE_HOLD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_brokers_skewed_by_one_are_evened_out_optimally_by_the_one_rebalancer_beside_the_controller_and_stay_so(
) {
    let mut c = Cluster::start(
        6,
        &[
            "auto.leader.rebalance.enable=true",
            "leader.imbalance.check.interval.seconds=10",
        ],
    );
    let before = skewed_topic(&c, "skewed", 300, 0.8).await;
    assert_eq!(before[&1], 240, "{before:?}");
    let (optimum, lower, upper) = optimal_moves(&before, THRESHOLD);
    let a = admin(&c.addr(1)).await;
    let (_, leaders_before) = leaders(&a, &broker_ids(&c)).await;

    // A sidecar beside each of the three controllers, started at once, with the symptoms off
    // (a broker whose follower fetches took over 10 ms once gained nothing and the band was
    // missed).
    let urls = metrics_urls(&c);
    let sidecars: Vec<RebalancerProcess> = (1..=3)
        .map(|i| {
            let id = i.to_string();
            let flags = [
                "--interval",
                "3s",
                "--metrics",
                &urls,
                "--mute",
                "10m",
                "--broker-id",
                &id,
            ];
            RebalancerProcess::start(&c.addr(i), &[&flags[..], &NO_SYMPTOMS].concat())
        })
        .collect();
    let started = Instant::now();
    let acted = |r: &RebalancerProcess| r.rounds("acted") >= 1.0;
    until("one rebalancer to act", Duration::from_secs(60), || async {
        sidecars.iter().any(acted).then_some(())
    })
    .await;
    let took = started.elapsed();
    let actors: Vec<&RebalancerProcess> = sidecars.iter().filter(|r| acted(r)).collect();
    assert_eq!(actors.len(), 1, "exactly one rebalancer acts");
    let actor = actors[0];
    let rounds_until_acted: f64 = ["balanced", "muted", "skipped", "stood_down", "failed"]
        .iter()
        .map(|o| actor.rounds(o))
        .sum::<f64>()
        + 1.0;
    assert!(
        rounds_until_acted <= 2.0,
        "acted only in round {rounds_until_acted}:\n{}",
        actor.log()
    );
    eprintln!("skew to balance: {took:?} ({rounds_until_acted} round(s) of 3 s)");

    let (after, leaders_after) = leaders(&a, &broker_ids(&c)).await;
    assert!(
        in_band(&after, lower, upper),
        "{after:?} not within [{lower}, {upper}]; the acting rebalancer's log:\n{}",
        actor.log()
    );
    let made = changed(&leaders_before, &leaders_after);
    assert_eq!(made, optimum, "leadership changes made vs the optimum");
    assert_eq!(
        actor.metric("evenkeel_rebalancer_moves_planned_total", ""),
        optimum as f64
    );
    assert_eq!(
        actor.metric("evenkeel_rebalancer_moves_made_total", ""),
        optimum as f64
    );
    // The others stand by (on a busy machine one may not have ended its first round yet when
    // the actor is done: wait for it).
    for r in sidecars.iter().filter(|r| !acted(r)) {
        r.wait_for("a round standing by", Duration::from_secs(30), |r| {
            r.rounds("standby") >= 1.0
        });
        assert_eq!(r.metric("evenkeel_rebalancer_active", ""), 0.0);
        assert_eq!(r.metric("evenkeel_rebalancer_moves_made_total", ""), 0.0);
    }

    // The controller's automatic preferred-leader election (every 10 s) keeps the balance,
    // and no rebalancer moves anything more.
    let hold = Duration::from_secs(hold_secs());
    let until_t = Instant::now() + hold;
    while Instant::now() < until_t {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (_, now) = leaders(&a, &broker_ids(&c)).await;
        assert_eq!(
            changed(&leaders_after, &now),
            0,
            "leadership moved back after {:?}",
            hold - (until_t - Instant::now())
        );
    }
    let made_total: f64 = sidecars
        .iter()
        .map(|r| r.metric("evenkeel_rebalancer_moves_made_total", ""))
        .sum();
    assert_eq!(made_total, optimum as f64, "moves after the balance");

    // The active controller dies: the sidecar beside the new one takes over.
    let quorum = a.describe_quorum().await.unwrap();
    let old = quorum.leader_id as usize;
    c.kill(old);
    let survivors: Vec<&RebalancerProcess> = sidecars
        .iter()
        .enumerate()
        .filter(|(i, _)| i + 1 != old)
        .map(|(_, r)| r)
        .collect();
    until(
        "a new rebalancer to take over",
        Duration::from_secs(60),
        || async {
            survivors
                .iter()
                .any(|r| r.metric("evenkeel_rebalancer_active", "") == 1.0)
                .then_some(())
        },
    )
    .await;
    let active: usize = survivors
        .iter()
        .filter(|r| r.metric("evenkeel_rebalancer_active", "") == 1.0)
        .count();
    assert_eq!(active, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balanced_cluster_gets_no_moves_ever() {
    let c = Cluster::start(3, &[]);
    let a = admin(&c.addr(1)).await;
    a.create_topic("even", 30, 3, &BTreeMap::new())
        .await
        .unwrap();
    let ids = broker_ids(&c);
    until(
        "leaders for every partition",
        Duration::from_secs(60),
        || async {
            let (counts, _) = leaders(&a, &ids).await;
            (counts.values().sum::<usize>() == 30).then_some(())
        },
    )
    .await;
    let (counts, before) = leaders(&a, &ids).await;
    assert!(counts.values().all(|c| *c == 10), "{counts:?}");
    let r = RebalancerProcess::start(
        &c.addr(1),
        &["--interval", "500ms", "--metrics", &metrics_urls(&c)],
    );
    r.wait_for("five balanced rounds", Duration::from_secs(30), |r| {
        r.rounds("balanced") >= 5.0
    });
    assert_eq!(r.metric("evenkeel_rebalancer_moves_planned_total", ""), 0.0);
    assert_eq!(r.rounds("acted"), 0.0);
    assert_eq!(changed(&before, &leaders(&a, &ids).await.1), 0);
    assert!(r.metric("evenkeel_rebalancer_leader_skew", "") <= 1.0 + 1e-9);
}

/// A metrics endpoint that answers 200 with a page that is not Prometheus text.
fn garbage_metrics_server() -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html><body>hello</body></html>\n",
            );
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_metrics_leave_that_brokers_symptoms_unknown_and_balancing_goes_on() {
    let c = Cluster::start(3, &[]);
    let before = skewed_topic(&c, "skewed", 30, 0.8).await;
    let (optimum, lower, upper) = optimal_moves(&before, THRESHOLD);
    let closed = common::free_port();
    let garbage = garbage_metrics_server();
    let urls = format!(
        "1=http://127.0.0.1:{}/metrics,2=http://127.0.0.1:{closed}/metrics,3=http://127.0.0.1:{garbage}/metrics",
        c.nodes[0].metrics.unwrap()
    );
    // Symptoms off: broker 1's (the only page read) would make it shed down to the mean.
    let flags = ["--interval", "1s", "--metrics", &urls];
    let r = RebalancerProcess::start(&c.addr(1), &[&flags[..], &NO_SYMPTOMS].concat());
    r.wait_for("the rebalancer to act", Duration::from_secs(30), |r| {
        r.rounds("acted") >= 1.0
    });
    assert_eq!(
        r.metric("evenkeel_rebalancer_metrics_unknown", "broker=\"1\""),
        0.0
    );
    assert_eq!(
        r.metric("evenkeel_rebalancer_metrics_unknown", "broker=\"2\""),
        1.0
    );
    assert_eq!(
        r.metric("evenkeel_rebalancer_metrics_unknown", "broker=\"3\""),
        1.0
    );
    let log = r.log();
    assert!(
        log.contains("symptoms are unknown") && log.contains("not a Prometheus sample"),
        "{log}"
    );
    let a = admin(&c.addr(1)).await;
    let (after, _) = leaders(&a, &broker_ids(&c)).await;
    assert!(
        in_band(&after, lower, upper),
        "{after:?} not within [{lower}, {upper}]; the rebalancer's log:\n{log}"
    );
    assert_eq!(
        r.metric("evenkeel_rebalancer_moves_made_total", ""),
        optimum as f64,
        "moves made vs the optimum; the rebalancer's log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rebalancer_stands_down_while_a_broker_is_down_and_acts_once_it_is_back() {
    let mut c = Cluster::start(3, &[]);
    let before = skewed_topic(&c, "skewed", 30, 0.8).await;
    let (_, lower, upper) = optimal_moves(&before, THRESHOLD);
    let a = admin(&c.addr(1)).await;
    c.kill(3);
    until(
        "broker 3 out of the ISRs",
        Duration::from_secs(60),
        || async {
            let t = a.describe_topics(None).await.ok()?;
            t.iter()
                .flat_map(|t| &t.partitions)
                .all(|p| !p.isr.contains(&3))
                .then_some(())
        },
    )
    .await;
    let (_, frozen) = leaders(&a, &broker_ids(&c)).await;
    let r = RebalancerProcess::start(&c.addr(1), &["--interval", "1s", "--no-metrics"]);
    r.wait_for("rounds that stand down", Duration::from_secs(30), |r| {
        r.rounds("stood_down") >= 3.0
    });
    assert_eq!(r.rounds("acted"), 0.0, "{}", r.log());
    assert_eq!(changed(&frozen, &leaders(&a, &broker_ids(&c)).await.1), 0);
    assert!(r.log().contains("under-replicated"), "{}", r.log());
    c.spawn(3);
    c.wait(3);
    r.wait_for("the rebalancer to act", Duration::from_secs(90), |r| {
        r.rounds("acted") >= 1.0
    });
    let (after, _) = leaders(&a, &broker_ids(&c)).await;
    assert!(in_band(&after, lower, upper), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_mid_way_abandons_the_rest_and_a_later_round_finishes() {
    let mut c = Cluster::start(
        3,
        &[
            "broker.session.timeout.ms=2000",
            "broker.heartbeat.interval.ms=200",
        ],
    );
    let before = skewed_topic(&c, "skewed", 300, 0.8).await;
    let (_, lower, upper) = optimal_moves(&before, THRESHOLD);
    let a = admin(&c.addr(1)).await;
    let ids = broker_ids(&c);
    let (_, start) = leaders(&a, &ids).await;
    // One move per batch, so the execution spans many batches.
    let r = RebalancerProcess::start(
        &c.addr(1),
        &[
            "--interval",
            "1s",
            "--no-metrics",
            "--moves-per-batch",
            "1",
            "--mute",
            "1s",
        ],
    );
    until(
        "the first leadership changes",
        Duration::from_secs(30),
        || async { (changed(&start, &leaders(&a, &ids).await.1) >= 3).then_some(()) },
    )
    .await;
    c.kill(3);
    r.wait_for(
        "the execution to be abandoned",
        Duration::from_secs(60),
        |r| r.log().contains("left the cluster mid-way"),
    );
    c.spawn(3);
    c.wait(3);
    until(
        "every broker within the band",
        Duration::from_secs(120),
        || async {
            let (counts, _) = leaders(&a, &ids).await;
            in_band(&counts, lower, upper).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_prints_the_plan_and_changes_nothing() {
    let c = Cluster::start(3, &[]);
    let before = skewed_topic(&c, "skewed", 30, 0.8).await;
    let (optimum, _, _) = optimal_moves(&before, THRESHOLD);
    let a = admin(&c.addr(1)).await;
    let (_, start) = leaders(&a, &broker_ids(&c)).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args(["rebalancer", "--bootstrap", &c.addr(1), "--no-metrics"])
        .args(["--dry-run", "--once"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("dry run: {optimum} leadership change(s)")),
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.contains(" -> ")).count(),
        optimum,
        "{stdout}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(changed(&start, &leaders(&a, &broker_ids(&c)).await.1), 0);
}

#[test]
fn a_bad_flag_is_one_readable_line_and_a_non_zero_exit() {
    for (args, says) in [
        (vec!["--threshold", "0.5"], "threshold"),
        (vec!["--interval", "soon"], "duration"),
        (vec!["--metrics", "x=http://a/metrics"], "broker id"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_evenkeel"))
            .args(["rebalancer", "--bootstrap", "127.0.0.1:1"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
