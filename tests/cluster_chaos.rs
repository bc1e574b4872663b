//! The metadata quorum under faults: the active controller is killed with -9 again and again
//! while topics are created and deleted through a broker-only node. Every change the cluster
//! acknowledged must be there afterwards, and every broker must hold the same image.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{eventually, Cluster};
use evenkeel::client::{AdminClient, ClusterDescription, TopicDescription};

/// Long enough for a forwarded request to outlive an election (the broker retries
/// NOT_CONTROLLER for 30 s), so most operations get a definite answer.
const OP_TIMEOUT: Duration = Duration::from_secs(40);
/// Kills in a run; `EVENKEEL_CHAOS_KILLS` asks for another number (`.ci/run` does 5,
/// `scripts/validate` the default).
const KILLS: usize = 20;

/// What the writer was told. A create or delete that failed without a definite answer may
/// or may not have happened; those topics are left out of the check.
#[derive(Default)]
struct Ledger {
    created: BTreeSet<String>,
    deleted: BTreeSet<String>,
    uncertain: BTreeSet<String>,
    /// Deletes answered "unknown topic": an earlier attempt the broker sent again after a
    /// failover already removed it (as in Kafka, a forwarded request is resent when its
    /// controller dies before answering). Such a topic must be gone.
    gone_before: BTreeSet<String>,
}

async fn connect(addr: &str) -> Option<AdminClient> {
    AdminClient::connect(addr, OP_TIMEOUT).await.ok()
}

/// Creates and deletes topics through `addr` until `stop`, recording every answer.
async fn write_metadata(
    addr: String,
    ledger: Arc<Mutex<Ledger>>,
    acked: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    let mut i = 0;
    while !stop.load(Ordering::Acquire) {
        let Some(admin) = connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        i += 1;
        let name = format!("chaos-{i}");
        let created = admin.create_topic(&name, 2, 2, &BTreeMap::new()).await;
        {
            let mut l = ledger.lock().unwrap();
            match created {
                Ok(_) => {
                    l.created.insert(name);
                    acked.fetch_add(1, Ordering::AcqRel);
                }
                Err(_) => {
                    l.uncertain.insert(name);
                }
            }
        }
        if i % 3 != 0 {
            continue;
        }
        // Delete the oldest acknowledged topic still standing.
        let victim = ledger.lock().unwrap().created.iter().next().cloned();
        let Some(victim) = victim else { continue };
        let deleted = admin.delete_topic(&victim).await;
        let mut l = ledger.lock().unwrap();
        l.created.remove(&victim);
        match deleted {
            Ok(()) => {
                l.deleted.insert(victim);
                acked.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) if e.code() == Some(evenkeel::protocol::errors::UNKNOWN_TOPIC_OR_PARTITION) => {
                l.gone_before.insert(victim);
            }
            Err(_) => {
                l.uncertain.insert(victim);
            }
        }
    }
}

/// The active controller as the broker at `addr` reports it.
async fn active_controller(addr: &str) -> Option<i32> {
    let q = connect(addr).await?.describe_quorum().await.ok()?;
    (q.leader_id >= 0).then_some(q.leader_id)
}

/// What one broker holds: its last applied metadata offset, brokers and topics.
#[derive(Debug, PartialEq)]
struct View {
    offset: i64,
    cluster: ClusterDescription,
    topics: Vec<TopicDescription>,
}

async fn view(c: &Cluster, id: usize) -> Option<View> {
    let offset = c.metric(
        id,
        "kafka_server_broker_metadata_metrics_last_applied_record_offset",
    )? as i64;
    let admin = connect(&c.addr(id)).await?;
    let mut cluster = admin.describe_cluster().await.ok()?;
    // Every broker names the same active controller; the field is compared separately.
    cluster.controller_id = -1;
    let topics = admin.describe_topics(None).await.ok()?;
    Some(View {
        offset,
        cluster,
        topics,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_metadata_survives_repeated_active_controller_kills() {
    let kills = common::env_count("EVENKEEL_CHAOS_KILLS", KILLS);
    // Three combined voters and one broker-only node that follows the quorum.
    let mut c = Cluster::start(4, &[]);
    let entry = c.addr(4);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let acked = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_metadata(
        entry.clone(),
        ledger.clone(),
        acked.clone(),
        stop.clone(),
    ));

    let mut elections = Vec::new();
    for round in 0..kills {
        let before = acked.load(Ordering::Acquire);
        let leader = eventually(Duration::from_secs(30), || active_controller(&entry))
            .await
            .unwrap_or_else(|| panic!("round {round}: no active controller"));
        c.kill(leader as usize);
        let killed = Instant::now();
        let next = eventually(Duration::from_secs(30), || async {
            let l = active_controller(&entry).await?;
            (l != leader).then_some(l)
        })
        .await
        .unwrap_or_else(|| panic!("round {round}: no controller after killing {leader}"));
        elections.push(killed.elapsed());
        assert_ne!(next, leader);
        c.restart(leader as usize);
        // Metadata changes go on under the new controller before the next kill.
        eventually(Duration::from_secs(60), || async {
            (acked.load(Ordering::Acquire) > before).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("round {round}: no change was acknowledged"));
    }
    stop.store(true, Ordering::Release);
    writer.await.unwrap();
    eprintln!("elections after each kill: {elections:?}");

    // Every broker converges on one image.
    let views = eventually(Duration::from_secs(60), || async {
        let mut vs = Vec::new();
        for id in 1..=4 {
            vs.push(view(&c, id).await?);
        }
        vs.windows(2).all(|w| w[0] == w[1]).then_some(vs)
    })
    .await;
    let views = match views {
        Some(v) => v,
        None => {
            let mut vs = Vec::new();
            for id in 1..=4 {
                vs.push(view(&c, id).await);
            }
            panic!("the brokers' images differ: {vs:#?}");
        }
    };
    let image = &views[0];
    assert_eq!(image.cluster.brokers.len(), 4, "{:?}", image.cluster);
    let names: BTreeSet<&str> = image.topics.iter().map(|t| t.name.as_str()).collect();
    let l = std::mem::take(&mut *ledger.lock().unwrap());
    for t in l.created.iter().filter(|t| !l.uncertain.contains(*t)) {
        assert!(
            names.contains(t.as_str()),
            "acknowledged create of {t} lost"
        );
    }
    for t in l.deleted.iter().chain(&l.gone_before) {
        assert!(
            !names.contains(t.as_str()),
            "acknowledged delete of {t} lost"
        );
    }
    assert!(
        l.created.len() + l.deleted.len() >= kills,
        "too few acknowledged changes to mean anything: {} created, {} deleted",
        l.created.len(),
        l.deleted.len()
    );
    for t in &image.topics {
        for p in &t.partitions {
            assert!(
                p.leader >= 0,
                "{}-{} has no leader: {p:?}",
                t.name,
                p.partition
            );
        }
    }
    let controllers: BTreeSet<i32> = {
        let mut s = BTreeSet::new();
        for id in 1..=4 {
            if let Some(a) = connect(&c.addr(id)).await {
                if let Ok(d) = a.describe_cluster().await {
                    s.insert(d.controller_id);
                }
            }
        }
        s
    };
    assert_eq!(
        controllers.len(),
        1,
        "brokers name different controllers: {controllers:?}"
    );
}
