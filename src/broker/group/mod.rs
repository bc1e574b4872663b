//! The classic group coordinator: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! offsets in __consumer_offsets, and the group admin APIs.

pub mod api;
pub mod coordinator;
pub mod metadata_manager;
pub mod records;
