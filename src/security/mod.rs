//! Security shared by the broker and the controller: Kafka's ACLs and the StandardAuthorizer's
//! decision over them, TLS for the listeners and the principals of TLS clients.

pub mod acl;
pub mod authorizer;
pub mod ssl_principal;
pub mod tls;
