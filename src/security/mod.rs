//! Security vocabulary shared by the broker and the controller: Kafka's ACLs (resource
//! patterns, operations, filters) and the StandardAuthorizer's decision over them.

pub mod acl;
pub mod authorizer;
