//! The broker's AlterPartition sender (Kafka's AlterPartitionManager): ISR changes that
//! partition leaders propose are batched into one AlterPartition request to the active
//! controller at a time, with the partition and leader epochs they were made under and each new
//! ISR member's broker epoch (KIP-903); each partition's answer goes back to its leader.

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::{AlterPartitionRequest, BrokerId};
use tokio::sync::mpsc;

use super::controller_channel::{self, is_not_controller};
use super::replica_manager::IsrChangeRequest;
use super::Broker;
use crate::protocol::errors;

/// Changes sent in one request at most.
const MAX_BATCH: usize = 10_000;

/// Sends ISR changes from `rx` until the channel closes.
pub async fn run(broker: Arc<Broker>, mut rx: mpsc::UnboundedReceiver<IsrChangeRequest>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        send(&broker, batch).await;
    }
}

fn request(broker: &Broker, batch: &[IsrChangeRequest]) -> AlterPartitionRequest {
    let mut topics: Vec<TopicData> = Vec::new();
    for c in batch {
        let pd = PartitionData::default()
            .with_partition_index(c.tp.partition)
            .with_leader_epoch(c.proposal.leader_epoch)
            .with_partition_epoch(c.proposal.partition_epoch)
            .with_leader_recovery_state(0)
            .with_new_isr_with_epochs(
                c.proposal
                    .new_isr
                    .iter()
                    .map(|(b, e)| {
                        BrokerState::default()
                            .with_broker_id(BrokerId(*b))
                            .with_broker_epoch(*e)
                    })
                    .collect(),
            );
        let id = uuid::Uuid::from_bytes(c.topic_id.0);
        match topics.iter_mut().find(|t| t.topic_id == id) {
            Some(t) => t.partitions.push(pd),
            None => topics.push(
                TopicData::default()
                    .with_topic_id(id)
                    .with_partitions(vec![pd]),
            ),
        }
    }
    AlterPartitionRequest::default()
        .with_broker_id(BrokerId(broker.node_id()))
        .with_broker_epoch(broker.broker_epoch())
        .with_topics(topics)
}

async fn send(broker: &Broker, batch: Vec<IsrChangeRequest>) {
    let req = request(broker, &batch);
    let resp = broker
        .controller
        .call(&req, 3, controller_channel::DEFAULT_RETRY_TIMEOUT, |r| {
            is_not_controller(r.error_code)
        })
        .await;
    let resp = match resp {
        Ok(r) if r.error_code == errors::NONE => r,
        Ok(r) => {
            tracing::warn!(
                error = errors::error_name(r.error_code),
                "the controller refused AlterPartition"
            );
            return answer_all(broker, &batch);
        }
        Err(e) => {
            tracing::warn!(error = %e, "AlterPartition failed");
            return answer_all(broker, &batch);
        }
    };
    for c in &batch {
        let id = uuid::Uuid::from_bytes(c.topic_id.0);
        let part = resp
            .topics
            .iter()
            .filter(|t| t.topic_id == id)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == c.tp.partition);
        let committed = match part {
            Some(p) if p.error_code == errors::NONE => Some((
                p.partition_epoch,
                p.isr.iter().map(|b| b.0).collect::<Vec<i32>>(),
            )),
            Some(p) => {
                tracing::info!(
                    partition = %c.tp,
                    error = errors::error_name(p.error_code),
                    "the controller refused an ISR change"
                );
                None
            }
            None => None,
        };
        broker
            .replicas
            .on_isr_change_answer(&c.tp, c.proposal.leader_epoch, committed);
    }
}

/// No answer: every leader forgets its proposal (the next fetch or shrink check proposes again).
fn answer_all(broker: &Broker, batch: &[IsrChangeRequest]) {
    for c in batch {
        broker
            .replicas
            .on_isr_change_answer(&c.tp, c.proposal.leader_epoch, None);
    }
}
