//! Consumer groups through librdkafka against the real binary: assignment, rebalances on
//! failure, committed offsets across a restart, auto.offset.reset, cooperative-sticky, scale.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};

fn consumer(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().unwrap()
}

fn assigned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .map(|a| a.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// Polls every consumer until `done` holds or the time runs out; returns the records seen.
fn poll_until(
    consumers: &[&BaseConsumer],
    timeout: Duration,
    mut done: impl FnMut(&[&BaseConsumer]) -> bool,
) -> Vec<(usize, i32, i64, Vec<u8>)> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        for (i, c) in consumers.iter().enumerate() {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(20)) {
                seen.push((i, m.partition(), m.offset(), m.payload().unwrap_or_default().to_vec()));
            }
        }
        if done(consumers) {
            break;
        }
    }
    seen
}

async fn produce(bootstrap: &str, topic: &str, from: usize, n: usize) {
    let p = common::producer(bootstrap, &[]);
    for i in from..from + n {
        let v = format!("{i}");
        p.send(FutureRecord::to(topic).key(&v).payload(&v), Duration::from_secs(10))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn three_consumers_on_two_partitions_leave_exactly_one_idle() {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "two", 2, &[]).await;
    let cs: Vec<BaseConsumer> = (0..3).map(|_| consumer(&b.bootstrap, "trio", &[])).collect();
    for c in &cs {
        c.subscribe(&["two"]).unwrap();
    }
    let refs: Vec<&BaseConsumer> = cs.iter().collect();
    poll_until(&refs, Duration::from_secs(30), |cs| {
        cs.iter().map(|c| assigned(c).len()).sum::<usize>() == 2
            && cs.iter().filter(|c| assigned(c).is_empty()).count() == 1
    });
    let sizes: Vec<usize> = cs.iter().map(|c| assigned(c).len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 2, "{sizes:?}");
    assert_eq!(sizes.iter().filter(|s| **s == 0).count(), 1, "{sizes:?}");
}
