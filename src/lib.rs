//! evenkeel: Kafka-compatible streaming for Kubernetes.
//! The library holds every role; `src/main.rs` is only the CLI edge.

pub mod alloc;
pub mod broker;
pub mod client;
pub mod config;
pub mod controller;
pub mod dev;
pub mod metadata;
pub mod metrics;
pub mod node;
pub mod operator;
pub mod perf;
pub mod protocol;
pub mod proxy;
pub mod rebalancer;
pub mod security;
pub mod storage;
pub mod tools;
