//! Metadata snapshots on real processes: with a small snapshot threshold and small metadata
//! segments, nodes write `<offset>-<epoch>.checkpoint` files and delete the segments the
//! snapshot covers, so a restarted node must load the snapshot (the records before it are gone),
//! and a voter or broker that was down meanwhile must be sent one.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use evenkeel::client::AdminClient;

const T: Duration = Duration::from_secs(20);

fn metadata_dir(c: &Cluster, id: usize) -> PathBuf {
    c.data
        .join(format!("broker-{id}"))
        .join("__cluster_metadata-0")
}

fn files(dir: &Path, ext: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(ext))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The newest snapshot's end offset, when it is past the start of the log.
fn snapshot_offset(dir: &Path) -> Option<i64> {
    let name = files(dir, ".checkpoint").pop()?;
    let offset: i64 = name.get(..20)?.parse().ok()?;
    (offset > 0).then_some(offset)
}

/// Whether the segment holding offset 0 has been deleted.
fn first_segment_deleted(dir: &Path) -> bool {
    let logs = files(dir, ".log");
    !logs.is_empty() && !logs.iter().any(|n| n == "00000000000000000000.log")
}

async fn topics_seen(addr: &str) -> Option<Vec<String>> {
    let a = AdminClient::connect(addr, T).await.ok()?;
    let t = a.describe_topics(None).await.ok()?;
    Some(t.into_iter().map(|t| t.name).collect())
}

/// Creates `n` topics through node 1; a refusal fails the test with every node's log tail.
async fn create_topics(c: &Cluster, prefix: &str, n: usize) -> Vec<String> {
    let a = AdminClient::connect(&c.addr(1), T).await.unwrap();
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        a.create_topic(&name, 4, 2, &BTreeMap::new())
            .await
            .unwrap_or_else(|e| {
                panic!("create {name}: {e}; the nodes' logs:\n{}", c.log_tails(60))
            });
        names.push(name);
    }
    names
}

async fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn sees_all(addr: &str, names: &[String], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let seen = topics_seen(addr).await.unwrap_or_default();
        let missing: Vec<&String> = names.iter().filter(|n| !seen.contains(n)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{addr} is missing {} topics, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(3)]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const SMALL: [&str; 3] = [
    "metadata.log.max.record.bytes.between.snapshots=4096",
    "metadata.log.segment.bytes=8192",
    "metadata.log.segment.min.bytes=8192",
];

#[tokio::test]
async fn a_restarted_node_loads_its_snapshot_once_the_segments_before_it_are_deleted() {
    let mut c = Cluster::start(3, &SMALL);
    let names = create_topics(&c, "snap", 40).await;
    for id in 1..=3 {
        let dir = metadata_dir(&c, id);
        wait_for(&format!("a snapshot on node {id}"), T, || {
            snapshot_offset(&dir).is_some() && first_segment_deleted(&dir)
        })
        .await;
        for snap in files(&dir, ".checkpoint") {
            // <20-digit end offset>-<10-digit epoch>.checkpoint, as Kafka names them.
            assert_eq!(snap.len(), 20 + 1 + 10 + ".checkpoint".len(), "{snap}");
            assert_eq!(&snap[20..21], "-", "{snap}");
        }
    }
    // kill -9 and a clean stop: both come back with every topic, from the snapshot.
    c.kill(2);
    c.restart(2);
    sees_all(&c.addr(2), &names, T).await;
    assert!(c.stop(3));
    c.restart(3);
    sees_all(&c.addr(3), &names, T).await;
}

#[tokio::test]
async fn a_voter_and_a_broker_that_were_down_are_sent_the_snapshot() {
    let mut c = Cluster::start(4, &SMALL);
    let before = create_topics(&c, "early", 5).await;
    sees_all(&c.addr(4), &before, T).await;
    c.kill(3);
    c.kill(4);
    // Enough records for several snapshots; the leader deletes what they cover.
    let names = create_topics(&c, "while-down", 40).await;
    for id in 1..=2 {
        let dir = metadata_dir(&c, id);
        wait_for(&format!("node {id} to delete its first segment"), T, || {
            first_segment_deleted(&dir)
        })
        .await;
    }
    let leader = AdminClient::connect(&c.addr(1), T)
        .await
        .unwrap()
        .describe_quorum()
        .await
        .unwrap();
    let start = files(&metadata_dir(&c, leader.leader_id as usize), ".log");
    assert!(
        !start.iter().any(|n| n == "00000000000000000000.log"),
        "the leader still holds offset 0: {start:?}"
    );
    // The voter (openraft's InstallSnapshot) and the broker (FetchSnapshot) catch up.
    c.restart(3);
    c.restart(4);
    for id in [3, 4] {
        sees_all(&c.addr(id), &before, T).await;
        sees_all(&c.addr(id), &names, T).await;
        assert!(
            snapshot_offset(&metadata_dir(&c, id)).is_some(),
            "node {id} holds no snapshot"
        );
    }
}
