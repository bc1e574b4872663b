//! Reconcile scenarios for KafkaTopic.
