//! Security shared by the broker and the controller: Kafka's ACLs, the StandardAuthorizer's
//! decision over them and their wire forms, SASL authentication (PLAIN, SCRAM), TLS for the
//! listeners and the principals of TLS clients.

pub mod acl;
pub mod authorizer;
pub mod sasl;
pub mod ssl_principal;
pub mod tls;
pub mod wire;
