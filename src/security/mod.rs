//! Security shared by the broker and the controller: Kafka's ACLs, the StandardAuthorizer's
//! decision over them, their wire forms, and SASL authentication (PLAIN, SCRAM).

pub mod acl;
pub mod authorizer;
pub mod sasl;
pub mod wire;
