//! The wire side of AlterClientQuotas that broker and controller share: an entry read as its
//! entity and changes, and answers that name each entry's entity as the request did.

use kafka_protocol::messages::alter_client_quotas_request::EntryData;
use kafka_protocol::messages::alter_client_quotas_response;
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
use kafka_protocol::protocol::StrBytes;

/// An entity as `(type, name)` pairs in request order, `None` for a type's default.
pub type EntityParts = Vec<(String, Option<String>)>;
/// Each key with its new value, or `None` to remove it.
pub type QuotaChanges = Vec<(String, Option<f64>)>;

/// An entry's entity and changes.
pub fn alteration(e: &EntryData) -> (EntityParts, QuotaChanges) {
    let entity = e
        .entity
        .iter()
        .map(|d| {
            let name = d.entity_name.as_ref().map(|n| n.to_string());
            (d.entity_type.to_string(), name)
        })
        .collect();
    let changes = e
        .ops
        .iter()
        .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
        .collect();
    (entity, changes)
}

/// An entry's answer: its entity as asked, with `code` and `message`.
pub fn answer(
    e: &EntryData,
    code: i16,
    message: Option<StrBytes>,
) -> alter_client_quotas_response::EntryData {
    let entity = e
        .entity
        .iter()
        .map(|d| {
            alter_client_quotas_response::EntityData::default()
                .with_entity_type(d.entity_type.clone())
                .with_entity_name(d.entity_name.clone())
        })
        .collect();
    alter_client_quotas_response::EntryData::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_entity(entity)
}

/// Every entry refused with `code`.
pub fn refuse_all(
    req: &AlterClientQuotasRequest,
    code: i16,
    message: Option<StrBytes>,
) -> AlterClientQuotasResponse {
    let entries = req
        .entries
        .iter()
        .map(|e| answer(e, code, message.clone()))
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}
