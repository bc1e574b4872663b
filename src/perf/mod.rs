//! `evenkeel perf`: load generators and micro-benchmarks that print figures, never assert them.

pub mod auth;
pub mod cli;
pub mod kafka;
pub mod producer;
pub mod proxy;
pub mod skew;
pub mod storage;
