//! The group coordinator: the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
//! the consumer protocol (KIP-848's ConsumerGroupHeartbeat), offsets in __consumer_offsets,
//! and the group admin APIs.

pub mod api;
pub mod assignor;
pub mod consumer_api;
pub mod consumer_group;
pub mod consumer_records;
pub mod coordinator;
pub mod metadata_manager;
pub mod records;
