//! Reconcile scenarios for KafkaCluster.
