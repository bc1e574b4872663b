//! librdkafka's idempotent producer against evenkeel: responses lost on the way back (so the
//! client retries batches the broker already appended) and a broker crash and restart in
//! mid-stream leave no duplicate and no gap.

mod common;

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

#[tokio::test]
async fn idempotent_producer_leaves_no_duplicates_across_a_broker_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let (port, proxy_port) = (common::free_port(), common::free_port());
    // Clients reach the broker only through a proxy that loses every 13th response.
    let advertised = format!("advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}");
    let overrides = [advertised.as_str()];
    let mut b = common::BrokerProcess::start_on(tmp.path(), port, &overrides);
    let proxy = common::lossy_proxy::start(proxy_port, port, 13);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .create()
        .unwrap();
    let r = admin
        .create_topics(
            &[NewTopic::new("idem", 2, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(r[0].is_ok());
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("batch.num.messages", "200")
        .set("message.timeout.ms", "120000")
        // The lossy proxy closes the connection with each response it swallows, so the
        // client notices at once and reconnects. librdkafka doubles its reconnect backoff on
        // every reconnect up to reconnect.backoff.max.ms (default 10 s) and does not reset it
        // after a short-lived connection: with the default, each of the ten or more lost
        // responses cost up to 10 s, all 20,000 records (queued within the first seconds) took
        // 50-100 s on a quiet machine, and a loaded CI machine passed the 120 s message
        // timeout (MessageTimedOut on one record). Capping the backoff keeps each loss cheap.
        .set("request.timeout.ms", "5000")
        .set("socket.timeout.ms", "10000")
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "500")
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    let total = 20_000usize;
    let mut deliveries = Vec::with_capacity(total);
    let mut restarted = false;
    for i in 0..total {
        let key = format!("k{}", i % 50);
        let value = format!("{i}");
        deliveries.push(
            p.send_result(FutureRecord::to("idem").key(&key).payload(&value))
                .unwrap(),
        );
        if i == total / 3 {
            // Let some of it land, then crash the broker with requests in flight.
            tokio::time::sleep(Duration::from_millis(30)).await;
            b.kill();
            b = common::BrokerProcess::start_on(tmp.path(), port, &overrides);
            restarted = true;
        }
        if i % 1000 == 0 {
            tokio::task::yield_now().await;
        }
    }
    assert!(restarted);
    for d in deliveries {
        d.await.unwrap().expect("every record is delivered");
    }
    let lost = proxy.dropped.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        lost >= 3,
        "only {lost} responses were lost; the test did not force retries"
    );
    // Read everything back: each value exactly once, in send order per key.
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for part in 0..2 {
        tpl.add_partition_offset("idem", part, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut seen = vec![0u32; total];
    let mut last_per_key: std::collections::HashMap<String, usize> = Default::default();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < total && Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            // The lossy proxy also cuts fetches; the consumer reconnects and carries on.
            let Ok(m) = m else { continue };
            let v: usize = std::str::from_utf8(m.payload().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            let k = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
            if let Some(prev) = last_per_key.insert(k.clone(), v) {
                assert!(prev < v, "key {k}: {v} after {prev}");
            }
            seen[v] += 1;
            got += 1;
        }
    }
    while let Some(m) = c.poll(Duration::from_millis(500)) {
        assert!(m.is_err(), "more records than were sent");
    }
    let dups: Vec<usize> = (0..total).filter(|i| seen[*i] > 1).collect();
    let missing: Vec<usize> = (0..total).filter(|i| seen[*i] == 0).collect();
    assert!(
        dups.is_empty(),
        "{} duplicates, e.g. {:?}",
        dups.len(),
        &dups[..dups.len().min(5)]
    );
    assert!(
        missing.is_empty(),
        "{} missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}
