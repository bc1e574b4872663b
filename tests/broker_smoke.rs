mod common;

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

#[tokio::test]
async fn smoke() {
    let b = common::BrokerProcess::start(&[]);
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .create()
        .unwrap();
    let res = admin
        .create_topics(
            &[NewTopic::new("smoke", 3, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    println!("{res:?}");
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("acks", "all")
        .create()
        .unwrap();
    for i in 0..100 {
        p.send(
            BaseRecord::to("smoke")
                .key(&format!("k{i}"))
                .payload(&format!("v{i}")),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("group.id", "g")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset("smoke", p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut n = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while n < 100 && std::time::Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            n += 1;
            let _ = m.offset();
        }
    }
    assert_eq!(n, 100);
}
