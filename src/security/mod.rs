//! Security shared by the broker and the controller: Kafka's ACLs and the StandardAuthorizer's
//! decision over them, and SASL authentication (PLAIN, SCRAM) as pure state machines.

pub mod acl;
pub mod authorizer;
pub mod sasl;
