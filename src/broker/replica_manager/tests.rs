//! ReplicaManager in one process: a leader and a follower, each with its own log directory,
//! replicating through the same calls a follower's fetch and the fetcher make.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::metadata::records::{BrokerRegistration, MetadataRecord, PartitionChange};
use crate::storage::batch::build_batch;
use crate::storage::LogManagerConfig;

const LEADER: i32 = 1;
const FOLLOWER: i32 = 2;

struct Replica {
    rm: Arc<ReplicaManager>,
    _dir: tempfile::TempDir,
}

fn replica(node: i32, image: &Arc<MetadataImage>, min_isr: i32) -> Replica {
    // No AlterPartition sender: an ISR change a leader proposes is answered as not sent.
    replica_proposing(node, image, min_isr).0
}

/// A replica whose ISR proposals come out of the returned receiver (the AlterPartition
/// sender's end).
fn replica_proposing(
    node: i32,
    image: &Arc<MetadataImage>,
    min_isr: i32,
) -> (Replica, mpsc::UnboundedReceiver<IsrChangeRequest>) {
    let dir = tempfile::tempdir().unwrap();
    let defaults = LogConfig {
        min_insync_replicas: min_isr,
        ..LogConfig::default()
    };
    let logs = LogManager::open(LogManagerConfig::new(dir.path(), defaults.clone())).unwrap();
    let (isr_changes, proposals) = mpsc::unbounded_channel();
    let rm = ReplicaManager::new(ReplicaManagerParts {
        node_id: node,
        logs,
        config: ReplicationConfig::default(),
        inter_broker_listener: "PLAINTEXT".into(),
        inter_broker_security: crate::client::ClientSecurity::plaintext(),
        metrics: Arc::new(BrokerMetrics::new()),
        broker_epoch: Arc::new(|| -1),
        isr_changes,
    });
    rm.apply_image(image, &defaults).unwrap();
    (Replica { rm, _dir: dir }, proposals)
}

/// Topic `t` with one partition on brokers 1 (leader) and 2, both in the ISR.
fn image() -> Arc<MetadataImage> {
    image_of(&[("t", &[LEADER, FOLLOWER])])
}

/// Topics of one partition each, on the given replicas (the first leads), all in the ISR.
fn image_of(topics: &[(&str, &[i32])]) -> Arc<MetadataImage> {
    let mut img = MetadataImage::empty();
    // Brokers 1 and 2, registered and unfenced: each may join an ISR.
    for id in [LEADER, FOLLOWER] {
        img.apply(
            &MetadataRecord::RegisterBroker(BrokerRegistration {
                broker_id: id,
                incarnation_id: KafkaUuid::random(),
                broker_epoch: 1,
                endpoints: Vec::new(),
                features: Vec::new(),
                rack: None,
                fenced: false,
                in_controlled_shutdown: false,
            }),
            -1,
        );
    }
    for (i, (name, replicas)) in topics.iter().enumerate() {
        let id = KafkaUuid::random();
        img.apply(
            &MetadataRecord::Topic {
                name: name.to_string(),
                topic_id: id,
            },
            2 * i as i64,
        );
        img.apply(
            &MetadataRecord::Partition {
                partition_id: 0,
                topic_id: id,
                replicas: replicas.to_vec(),
                isr: replicas.to_vec(),
                removing_replicas: vec![],
                adding_replicas: vec![],
                leader: replicas[0],
                leader_epoch: 0,
                partition_epoch: 0,
            },
            2 * i as i64 + 1,
        );
    }
    Arc::new(img)
}

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn records(n: usize) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("v{i}").into_bytes()).collect();
    let kvs: Vec<_> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    build_batch(&kvs, now_ms())
}

/// One fetch by the follower from the leader, and its append: what the fetcher does.
fn replicate_once(leader: &ReplicaManager, follower: &ReplicaManager) {
    let read = fetch_once(leader, follower, FOLLOWER, 1 << 20);
    assert!(read.divergence.is_none());
    append_read(follower, 0, &read);
}

/// What follower `id` reads from `leader` at its own position, up to `max_bytes` (one batch
/// at least).
fn fetch_once(
    leader: &ReplicaManager,
    follower: &ReplicaManager,
    id: i32,
    max_bytes: usize,
) -> FollowerRead {
    let (offset, epoch, _) = follower.fetch_position(&tp()).unwrap();
    let p = leader.get(&tp()).unwrap();
    leader
        .read_for_follower(&p, id, -1, offset, epoch, max_bytes, true)
        .unwrap()
}

/// The follower appends what it read from a leader of `leader_epoch`.
fn append_read(follower: &ReplicaManager, leader_epoch: i32, read: &FollowerRead) {
    follower
        .append_fetched(
            &tp(),
            leader_epoch,
            &read.read.records,
            read.read.high_watermark,
            read.read.log_start_offset,
        )
        .unwrap();
}

/// One acks=all append of `n` records to `t` on the leader, and what its answer waits for.
fn append_waiting(leader: &Replica, n: usize, timeout: Duration) -> Outcome<Vec<i16>> {
    let (_, pending) = leader
        .rm
        .append_records(&tp(), &mut records(n), -1)
        .unwrap();
    leader.rm.await_replication(vec![pending.unwrap()], timeout)
}

async fn codes(outcome: Outcome<Vec<i16>>) -> Vec<i16> {
    tokio::time::timeout(Duration::from_secs(10), outcome.resolve())
        .await
        .expect("the DelayedProduce completes within its own timeout")
}

#[tokio::test]
async fn an_acks_all_append_completes_once_the_follower_has_it() {
    let img = image();
    let (leader, follower) = (replica(LEADER, &img, 2), replica(FOLLOWER, &img, 2));
    let (info, pending) = leader
        .rm
        .append_records(&tp(), &mut records(3), -1)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    let outcome = leader
        .rm
        .await_replication(vec![pending.unwrap()], Duration::from_secs(5));
    assert!(
        matches!(outcome, Outcome::Later(_)),
        "nobody else has it yet"
    );
    replicate_once(&leader.rm, &follower.rm); // the records
    replicate_once(&leader.rm, &follower.rm); // the follower's new position moves the HW
    assert_eq!(codes(outcome).await, [errors::NONE]);
}

#[tokio::test]
async fn an_acks_all_produce_to_two_partitions_completes_when_the_slower_one_is_replicated() {
    // `solo` has the leader alone in its ISR: its append is replicated the moment it is made,
    // and no notification for it will come. The operation must still complete on `t`'s.
    let img = image_of(&[("t", &[LEADER, FOLLOWER]), ("solo", &[LEADER])]);
    let (leader, follower) = (replica(LEADER, &img, 1), replica(FOLLOWER, &img, 1));
    let (_, on_t) = leader
        .rm
        .append_records(&tp(), &mut records(2), -1)
        .unwrap();
    let (_, on_solo) = leader
        .rm
        .append_records(&TopicPartition::new("solo", 0), &mut records(1), -1)
        .unwrap();
    let outcome = leader.rm.await_replication(
        vec![on_t.unwrap(), on_solo.unwrap()],
        Duration::from_secs(60),
    );
    assert!(
        matches!(outcome, Outcome::Later(_)),
        "t waits for its follower"
    );
    replicate_once(&leader.rm, &follower.rm);
    replicate_once(&leader.rm, &follower.rm);
    let codes = tokio::time::timeout(Duration::from_secs(5), outcome.resolve())
        .await
        .expect("completed once t's follower had it, not at the 60 s timeout");
    assert_eq!(codes, [errors::NONE, errors::NONE]);
}

#[tokio::test]
async fn an_acks_all_append_times_out_without_the_follower() {
    let img = image();
    let leader = replica(LEADER, &img, 1);
    let outcome = append_waiting(&leader, 1, Duration::from_millis(50));
    assert_eq!(codes(outcome).await, [errors::REQUEST_TIMED_OUT]);
}

#[tokio::test]
async fn an_isr_that_shrinks_below_min_insync_fails_the_waiting_append() {
    let img = image();
    let leader = replica(LEADER, &img, 2);
    let outcome = append_waiting(&leader, 1, Duration::from_secs(5));
    // The controller commits an ISR of the leader alone: the high watermark reaches the
    // append, but with fewer replicas than min.insync.replicas = 2.
    leader
        .rm
        .on_isr_change_answer(&tp(), 0, Some((1, vec![LEADER])));
    assert_eq!(
        codes(outcome).await,
        [errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND]
    );
    // And the next acks=all append is refused before it is written.
    let refused = leader.rm.append_records(&tp(), &mut records(1), -1);
    assert_eq!(refused.unwrap_err().code, errors::NOT_ENOUGH_REPLICAS);
}

#[tokio::test]
async fn a_follower_append_wakes_a_consumer_fetch_parked_on_the_follower() {
    let img = image();
    let (leader, follower) = (replica(LEADER, &img, 1), replica(FOLLOWER, &img, 1));
    // A consumer (KIP-392) fetches from the follower at its high watermark and is parked.
    let fp = follower.rm.get(&tp()).unwrap();
    let op = follower
        .rm
        .delay_fetch(false, 1, 0, &[(fp.clone(), fp.high_watermark())]);
    assert!(!op.is_completed());
    leader.rm.append_records(&tp(), &mut records(3), 1).unwrap();
    replicate_once(&leader.rm, &follower.rm);
    assert!(
        !op.is_completed(),
        "the records are above the follower's high watermark still"
    );
    replicate_once(&leader.rm, &follower.rm);
    assert_eq!(fp.high_watermark(), 3);
    assert!(
        op.is_completed(),
        "the leader's high watermark reached the follower and woke the fetch"
    );
}

/// A consumer's fetch of `t` from offset 0 that waits up to `max_wait` for a byte.
fn consumer_fetch(
    rm: &Arc<ReplicaManager>,
    max_wait: Duration,
) -> Outcome<Vec<FetchPartitionData>> {
    let params = FetchParams {
        fetcher: Fetcher::Consumer {
            from_followers: false,
            rack: None,
        },
        max_wait,
        min_bytes: 1,
        max_bytes: 1 << 20,
    };
    let info = FetchInfo {
        fetch_offset: 0,
        max_bytes: 1 << 20,
        current_leader_epoch: -1,
        last_fetched_epoch: -1,
        log_start_offset: -1,
    };
    rm.fetch_messages(params, vec![(tp(), info)])
}

#[tokio::test]
async fn a_parked_fetch_returns_the_records_appended_while_it_waited() {
    // The leader alone in the ISR: an append moves the high watermark at once.
    let img = image_of(&[("t", &[LEADER])]);
    let leader = replica(LEADER, &img, 1);
    let max_wait = Duration::from_secs(60);
    let outcome = consumer_fetch(&leader.rm, max_wait);
    assert!(
        matches!(outcome, Outcome::Later(_)),
        "an empty partition has nothing for min_bytes = 1"
    );
    assert_eq!(leader.rm.purgatory_sizes(), (1, 0), "the fetch is parked");
    leader.rm.append_records(&tp(), &mut records(3), 1).unwrap();
    let parts = tokio::time::timeout(max_wait / 6, outcome.resolve())
        .await
        .expect("the append completed the fetch long before its max_wait");
    let p = &parts[0];
    assert_eq!((p.error, p.high_watermark), (errors::NONE, 3));
    let offsets: Vec<i64> = crate::storage::batch::record_offsets_and_timestamps(&p.records)
        .unwrap()
        .into_iter()
        .map(|(offset, _)| offset)
        .collect();
    assert_eq!(
        offsets,
        [0, 1, 2],
        "the answer is read again after the append"
    );
}

#[tokio::test]
async fn completed_fetches_are_purged_from_the_purgatory() {
    let img = image();
    let leader = replica(LEADER, &img, 1);
    let p = leader.rm.get(&tp()).unwrap();
    for _ in 0..3 {
        let op = leader.rm.delay_fetch(false, 1, 0, &[(p.clone(), 0)]);
        assert!(!op.wait(Duration::from_millis(1)).await, "nothing to read");
    }
    assert_eq!(
        leader.rm.purgatory_sizes(),
        (3, 0),
        "timed-out watchers stay"
    );
    leader.rm.purge_purgatories();
    assert_eq!(leader.rm.purgatory_sizes(), (0, 0));
}

#[tokio::test]
async fn a_lagging_follower_is_proposed_out_of_the_isr_and_back_in_once_caught_up() {
    let img = image();
    let (leader, mut proposals) = replica_proposing(LEADER, &img, 1);
    let follower = replica(FOLLOWER, &img, 1);
    leader.rm.append_records(&tp(), &mut records(2), 1).unwrap();
    // The follower does not fetch: once `lag_ms` (0 here) has passed, the leader proposes an
    // ISR without it.
    let shrink = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            leader.rm.maybe_shrink_isrs(0);
            if let Ok(req) = proposals.try_recv() {
                return req;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a shrink is proposed");
    let ids = |req: &IsrChangeRequest| -> Vec<i32> {
        req.proposal.new_isr.iter().map(|(id, _)| *id).collect()
    };
    assert_eq!(
        (ids(&shrink), shrink.proposal.leader_epoch),
        (vec![LEADER], 0)
    );
    assert_eq!(leader.rm.metrics.isr_shrinks.get(), 1);
    // The controller commits it (partition epoch 1); the leader alone now moves the HW.
    leader
        .rm
        .on_isr_change_answer(&tp(), 0, Some((1, vec![LEADER])));
    assert_eq!(leader.rm.get(&tp()).unwrap().high_watermark(), 2);
    // The follower catches up: its fetch at the leader's log end proposes it back in.
    replicate_once(&leader.rm, &follower.rm);
    assert!(
        proposals.try_recv().is_err(),
        "still behind after one fetch"
    );
    replicate_once(&leader.rm, &follower.rm);
    let expand = proposals.try_recv().expect("an expand is proposed");
    assert_eq!(ids(&expand), vec![LEADER, FOLLOWER]);
    assert_eq!(expand.proposal.partition_epoch, 1);
    assert_eq!(leader.rm.metrics.isr_expands.get(), 1);
}

#[tokio::test]
async fn a_follower_truncates_where_its_log_diverges_from_the_new_leader() {
    // Epoch 0: 1 leads and writes two batches; 2 copies only the first.
    let img0 = image();
    let (a, b) = (replica(LEADER, &img0, 1), replica(FOLLOWER, &img0, 1));
    a.rm.append_records(&tp(), &mut records(1), 1).unwrap();
    a.rm.append_records(&tp(), &mut records(1), 1).unwrap();
    let first = fetch_once(&a.rm, &b.rm, FOLLOWER, 1);
    append_read(&b.rm, 0, &first);
    assert_eq!(b.rm.fetch_position(&tp()).unwrap().0, 1);
    // Epoch 1: 2 leads (unclean: 1's second batch was never replicated) and writes its own.
    let mut next = (*img0).clone();
    let topic_id = img0.topic("t").unwrap().id;
    next.apply(
        &MetadataRecord::PartitionChange(PartitionChange {
            partition_id: 0,
            topic_id,
            leader: FOLLOWER,
            isr: Some(vec![FOLLOWER, LEADER]),
            ..PartitionChange::default()
        }),
        100,
    );
    let img1 = Arc::new(next);
    assert_eq!(img1.partition("t", 0).unwrap().leader_epoch, 1);
    for r in [&a, &b] {
        r.rm.apply_image(&img1, &LogConfig::default()).unwrap();
    }
    b.rm.append_records(&tp(), &mut records(1), 1).unwrap();
    // 1 fetches as a follower: its offset 1 is of epoch 0, which ended at 1 on the leader.
    let read = fetch_once(&b.rm, &a.rm, LEADER, 1 << 20);
    let d = read.divergence.expect("the leader reports the divergence");
    assert_eq!((d.epoch, d.end_offset), (0, 1));
    a.rm.truncate_to_divergence(&tp(), 1, d).unwrap();
    assert_eq!(a.rm.fetch_position(&tp()).unwrap(), (1, 0, 0));
    // Then it copies the new leader's batch: both logs end at 2 in epoch 1.
    let read = fetch_once(&b.rm, &a.rm, LEADER, 1 << 20);
    append_read(&a.rm, 1, &read);
    assert_eq!(a.rm.fetch_position(&tp()).unwrap(), (2, 1, 0));
    assert_eq!(b.rm.get(&tp()).unwrap().fetch_position(), (2, 1));
}
