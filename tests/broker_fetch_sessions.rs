//! Incremental fetch sessions (KIP-227) on the wire, against the real binary: a full fetch opens
//! a session, incremental fetches carry only what changed, epochs and ids are checked, forgotten
//! partitions leave the session, topic-id sessions from v13, and the cache's metrics.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::FutureRecord;

use common::raw;
use evenkeel::protocol::errors::{
    FETCH_SESSION_ID_NOT_FOUND, FETCH_SESSION_TOPIC_ID_ERROR, INVALID_FETCH_SESSION_EPOCH,
};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A fetch of `parts` (partition, offset) of `topic`, by name or (with `id`) by topic id.
fn fetch_request(
    session: (i32, i32),
    topic: &str,
    id: Option<uuid::Uuid>,
    parts: &[(i32, i64)],
    forget: &[i32],
    max_wait_ms: i32,
) -> FetchRequest {
    let partitions: Vec<_> = parts
        .iter()
        .map(|&(p, o)| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(o)
                .with_partition_max_bytes(1 << 20)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
        })
        .collect();
    let mut topics = Vec::new();
    if !partitions.is_empty() {
        let mut t = FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(partitions);
        if let Some(id) = id {
            t = t.with_topic_id(id);
        }
        topics.push(t);
    }
    let mut forgotten = Vec::new();
    if !forget.is_empty() {
        let mut f = ForgottenTopic::default()
            .with_topic(name(topic))
            .with_partitions(forget.to_vec());
        if let Some(id) = id {
            f = f.with_topic_id(id);
        }
        forgotten.push(f);
    }
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_session_id(session.0)
        .with_session_epoch(session.1)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

fn call(s: &mut TcpStream, version: i16, req: &FetchRequest) -> FetchResponse {
    raw::call(s, ApiKey::Fetch, version, req)
}

/// (partition, high watermark, record bytes) of every partition in a response.
fn partitions(r: &FetchResponse) -> Vec<(i32, i64, usize)> {
    r.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            (
                p.partition_index,
                p.high_watermark,
                p.records.as_ref().map_or(0, |b| b.len()),
            )
        })
        .collect()
}

/// One record to each of `partitions` of `topic`, from one producer.
async fn produce_to(bootstrap: &str, topic: &str, partitions: &[i32]) {
    let p = common::producer(bootstrap, &[]);
    for &partition in partitions {
        p.send(
            FutureRecord::<(), _>::to(topic)
                .partition(partition)
                .payload("v"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
}

fn metric(port: u16, series: &str) -> f64 {
    common::metric_value(&common::http_get(port, "/metrics").1, series)
}

#[tokio::test]
async fn incremental_fetches_carry_only_what_changed() {
    let port = common::free_port();
    let metrics = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let b = common::BrokerProcess::start(&[&metrics]);
    common::create_topic(&b.bootstrap, "s", 3, &[]).await;
    let mut c = raw::connect(&b.bootstrap);

    // A full fetch (epoch 0) opens a session and lists every partition.
    let all = [(0, 0), (1, 0), (2, 0)];
    let full = call(&mut c, 12, &fetch_request((0, 0), "s", None, &all, &[], 0));
    assert_eq!(full.error_code, 0);
    let id = full.session_id;
    assert_ne!(id, 0, "a full fetch at epoch 0 opens a session");
    assert_eq!(partitions(&full), vec![(0, 0, 0), (1, 0, 0), (2, 0, 0)]);

    // Nothing changed: an incremental fetch waits out max wait and answers no partition.
    let t = Instant::now();
    let idle = call(
        &mut c,
        12,
        &fetch_request((id, 1), "s", None, &[], &[], 300),
    );
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "it waited in the purgatory"
    );
    assert_eq!((idle.error_code, idle.session_id), (0, id));
    assert!(partitions(&idle).is_empty(), "{:?}", partitions(&idle));

    // A record arrives on partition 1 while the fetch waits: only partition 1 comes back.
    let bootstrap = b.bootstrap.clone();
    let producer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        produce_to(&bootstrap, "s", &[1]).await;
    });
    let mut c2 = raw::connect(&b.bootstrap);
    let woken = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let r = call(
            &mut c2,
            12,
            &fetch_request((id, 2), "s", None, &[], &[], 10_000),
        );
        (r, t.elapsed())
    })
    .await
    .unwrap();
    producer.await.unwrap();
    let (r, waited) = woken;
    assert!(
        waited < Duration::from_secs(8),
        "woken by the append, not the timeout"
    );
    let got = partitions(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (1, 1));
    assert!(got[0].2 > 0, "the new record is in the response");

    // The client moves partition 1 on to offset 1; its watermark is known, so nothing is new.
    let r = call(
        &mut c,
        12,
        &fetch_request((id, 3), "s", None, &[(1, 1)], &[], 100),
    );
    assert!(partitions(&r).is_empty(), "{:?}", partitions(&r));

    // A repeated epoch and an unknown session are refused with no partitions and session id 0.
    let stale = call(&mut c, 12, &fetch_request((id, 3), "s", None, &[], &[], 0));
    assert_eq!(
        (stale.error_code, stale.session_id),
        (INVALID_FETCH_SESSION_EPOCH, 0)
    );
    assert!(stale.responses.is_empty());
    let unknown = call(
        &mut c,
        12,
        &fetch_request((id ^ 1, 1), "s", None, &[], &[], 0),
    );
    assert_eq!(
        (unknown.error_code, unknown.session_id),
        (FETCH_SESSION_ID_NOT_FOUND, 0)
    );

    // Forget partition 0; new records on 0 and 2 then show only on 2.
    let r = call(&mut c, 12, &fetch_request((id, 4), "s", None, &[], &[0], 0));
    assert_eq!(r.error_code, 0);
    produce_to(&b.bootstrap, "s", &[0, 2]).await;
    let r = call(
        &mut c,
        12,
        &fetch_request((id, 5), "s", None, &[], &[], 1000),
    );
    let got: Vec<i32> = partitions(&r).iter().map(|p| p.0).collect();
    assert_eq!(got, vec![2]);

    assert_eq!(
        metric(
            port,
            "kafka_server_fetchsessioncache_numincrementalfetchsessions"
        ),
        1.0
    );
    assert_eq!(
        metric(
            port,
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
        ),
        2.0
    );

    // Epoch -1 closes the session: a sessionless full answer, and the id is gone.
    let close = call(
        &mut c,
        12,
        &fetch_request((id, -1), "s", None, &all, &[], 0),
    );
    assert_eq!((close.error_code, close.session_id), (0, 0));
    assert_eq!(partitions(&close).len(), 3);
    let gone = call(&mut c, 12, &fetch_request((id, 6), "s", None, &[], &[], 0));
    assert_eq!(gone.error_code, FETCH_SESSION_ID_NOT_FOUND);
    assert_eq!(
        metric(
            port,
            "kafka_server_fetchsessioncache_numincrementalfetchsessions"
        ),
        0.0
    );
}

fn topic_id(c: &mut TcpStream, topic: &str) -> uuid::Uuid {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    let r: MetadataResponse = raw::call(c, ApiKey::Metadata, 12, &req);
    r.topics[0].topic_id
}

#[tokio::test]
async fn sessions_from_v13_are_keyed_by_topic_id() {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "ids", 2, &[]).await;
    let mut c = raw::connect(&b.bootstrap);
    let id = topic_id(&mut c, "ids");
    assert!(!id.is_nil());

    let full = call(
        &mut c,
        13,
        &fetch_request((0, 0), "", Some(id), &[(0, 0), (1, 0)], &[], 0),
    );
    assert_eq!(full.error_code, 0);
    assert_ne!(full.session_id, 0);
    assert_eq!(full.responses.len(), 1);
    assert_eq!(full.responses[0].topic_id, id);
    let session = full.session_id;

    // A v12 (name-based) request cannot continue a topic-id session.
    let mixed = call(
        &mut c,
        12,
        &fetch_request((session, 1), "ids", None, &[], &[], 0),
    );
    assert_eq!(mixed.error_code, FETCH_SESSION_TOPIC_ID_ERROR);

    // Forgetting by topic id: a record on partition 0 is then not reported.
    let r = call(
        &mut c,
        13,
        &fetch_request((session, 1), "", Some(id), &[], &[0], 0),
    );
    assert_eq!(r.error_code, 0);
    produce_to(&b.bootstrap, "ids", &[0, 1]).await;
    let r = call(
        &mut c,
        13,
        &fetch_request((session, 2), "", Some(id), &[], &[], 1000),
    );
    assert_eq!(r.responses.len(), 1);
    assert_eq!(r.responses[0].topic_id, id);
    let got: Vec<i32> = partitions(&r).iter().map(|p| p.0).collect();
    assert_eq!(got, vec![1]);
}

#[tokio::test]
async fn no_cache_slots_means_sessionless_fetches() {
    let b = common::BrokerProcess::start(&["max.incremental.fetch.session.cache.slots=0"]);
    common::create_topic(&b.bootstrap, "none", 1, &[]).await;
    let mut c = raw::connect(&b.bootstrap);
    let full = call(
        &mut c,
        12,
        &fetch_request((0, 0), "none", None, &[(0, 0)], &[], 0),
    );
    assert_eq!((full.error_code, full.session_id), (0, 0));
    assert_eq!(partitions(&full), vec![(0, 0, 0)]);
}
