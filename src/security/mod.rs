//! Security shared by the broker and the controller: Kafka's ACLs, the StandardAuthorizer's
//! decision over them and their wire forms, SASL authentication (PLAIN, SCRAM), TLS for the
//! listeners and the principals of TLS clients.

pub mod acl;
pub mod authorizer;
pub mod sasl;
pub mod ssl_principal;
pub mod tls;
pub mod wire;

/// Lower-case hexadecimal of `bytes` (digests, DER values in principals).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
