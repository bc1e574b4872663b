//! Records as HTTP clients send them, turned into producer records: REST Proxy v2's
//! `{"records": [...]}` with the embedded format of the content type (json or base64 binary),
//! and v3's one-record objects with typed key and value (`BINARY`, `JSON`, `STRING`).

use std::borrow::Cow;

use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::errors::{self, ApiError};
use crate::client::producer::ProducerRecord;

/// How v2 keys and values are written in the JSON body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbeddedFormat {
    /// `application/vnd.kafka.json.v2+json`: any JSON value, stored as its JSON text.
    Json,
    /// `application/vnd.kafka.binary.v2+json`: base64 strings.
    Binary,
}

impl EmbeddedFormat {
    /// The format a v2 content type names; `None` for one the proxy does not take.
    pub fn from_content_type(ct: &str) -> Option<EmbeddedFormat> {
        let ct = ct.split(';').next().unwrap_or("").trim();
        match ct {
            "application/vnd.kafka.json.v2+json" | "application/json" => Some(EmbeddedFormat::Json),
            "application/vnd.kafka.binary.v2+json" => Some(EmbeddedFormat::Binary),
            _ => None,
        }
    }
}

/// A record from a request, and the partition it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    pub partition: Option<i32>,
    pub record: ProducerRecord,
}

fn base64(what: &str, s: &str) -> Result<Bytes, ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map(Bytes::from)
        .map_err(|e| {
            ApiError::invalid(errors::INVALID_BASE64, format!("{what} is not base64: {e}"))
        })
}

/// A JSON value as compact text, the way it is stored (`{"a": 1}` becomes `{"a":1}`).
fn json_bytes(raw: &RawValue) -> Bytes {
    let v: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// The fields of one record object (v2 or v3), each kept as its JSON text until it is read, so
/// a record costs no tree of values. A field that is there as `null` is `Some("null")`.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    key: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    value: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    partition: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    partition_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    headers: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    timestamp: Option<&'a RawValue>,
}

/// A v3 key or value object.
#[derive(Deserialize)]
struct TypedData<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "present")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
}

/// A field that is there, `null` included (serde's `Option` would take `null` as absent).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Parses one record object; `None` when the text is not an object.
fn fields(raw: &RawValue) -> Option<Result<Fields<'_>, serde_json::Error>> {
    raw.get()
        .starts_with('{')
        .then(|| serde_json::from_str(raw.get()))
}

fn not_null(v: Option<&RawValue>) -> Option<&RawValue> {
    v.filter(|v| v.get() != "null")
}

/// A JSON string's text, borrowed when it has no escapes; `None` when it is not a string.
fn json_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct Str<'a>(#[serde(borrow)] Cow<'a, str>);
    serde_json::from_str::<Str>(raw.get()).ok().map(|s| s.0)
}

/// A small field (partition, headers) as a value tree.
fn tree(raw: Option<&RawValue>) -> Option<Value> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// A v2 key or value: `None` for JSON null.
fn v2_field(
    format: EmbeddedFormat,
    what: &str,
    v: Option<&RawValue>,
) -> Result<Option<Bytes>, ApiError> {
    let Some(v) = not_null(v) else {
        return Ok(None);
    };
    match (format, json_str(v)) {
        (EmbeddedFormat::Json, _) => Ok(Some(json_bytes(v))),
        (EmbeddedFormat::Binary, Some(s)) => base64(what, &s).map(Some),
        (EmbeddedFormat::Binary, None) => Err(ApiError::invalid(
            errors::INVALID_BASE64,
            format!("{what} must be a base64 string"),
        )),
    }
}

fn parse_json(body: &[u8]) -> Result<&RawValue, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            errors::INVALID_ENTITY,
            "the request body is empty",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(errors::INVALID_ENTITY, format!("malformed JSON: {e}")))
}

/// Headers as Strimzi's bridge and REST Proxy v3 send them: `[{"key"|"name": ..., "value":
/// base64 or null}]`, in order; a name may come more than once, as in Kafka.
fn headers(v: Option<&Value>) -> Result<Vec<(String, Option<Bytes>)>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = v
        .as_array()
        .ok_or_else(|| ApiError::invalid(errors::INVALID_ENTITY, "headers must be a list"))?;
    list.iter()
        .map(|h| {
            let name = h
                .get("key")
                .or_else(|| h.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid(errors::INVALID_ENTITY, "a header needs a name")
                })?;
            let value = match h.get("value") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(base64("a header value", s)?),
                Some(_) => {
                    return Err(ApiError::invalid(
                        errors::INVALID_BASE64,
                        "a header value must be a base64 string",
                    ))
                }
            };
            Ok((name.to_string(), value))
        })
        .collect()
}

fn partition_field(v: Option<&Value>, key: &str) -> Result<Option<i32>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(p) => p
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .map(Some)
            .ok_or_else(|| {
                ApiError::invalid(errors::INVALID_ENTITY, format!("{key} must be an integer"))
            }),
    }
}

/// The `records` list of a v2 body; `None` when the body is not an object with one.
fn v2_records(doc: &RawValue) -> Option<Vec<&RawValue>> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        records: Option<Vec<&'a RawValue>>,
    }
    if !doc.get().starts_with('{') {
        return None;
    }
    serde_json::from_str::<Body>(doc.get()).ok()?.records
}

/// The records of a v2 produce body.
pub fn parse_v2(body: &[u8], format: EmbeddedFormat) -> Result<Vec<Incoming>, ApiError> {
    let doc = parse_json(body)?;
    let records = v2_records(doc).ok_or_else(|| {
        ApiError::invalid(errors::INVALID_ENTITY, "the body needs a \"records\" list")
    })?;
    if records.is_empty() {
        return Err(ApiError::invalid(
            errors::INVALID_ENTITY,
            "records may not be empty",
        ));
    }
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let r = match fields(r) {
                Some(Ok(r)) => r,
                Some(Err(e)) => {
                    return Err(ApiError::invalid(
                        errors::INVALID_ENTITY,
                        format!("record {i}: {e}"),
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        errors::INVALID_ENTITY,
                        format!("record {i} is not an object"),
                    ))
                }
            };
            if r.value.is_none() {
                return Err(ApiError::invalid(
                    errors::MISSING_VALUE,
                    format!("record {i} has no value"),
                ));
            }
            Ok(Incoming {
                partition: partition_field(tree(r.partition).as_ref(), "partition")?,
                record: ProducerRecord {
                    key: v2_field(format, "a key", r.key)?,
                    value: v2_field(format, "a value", r.value)?,
                    headers: headers(tree(r.headers).as_ref())?,
                    timestamp: -1,
                },
            })
        })
        .collect()
}

/// A v3 key or value: `{"type": "BINARY"|"JSON"|"STRING", "data": ...}`, JSON when the type is
/// left out. Returns the bytes and the type to report back.
/// Anything but an object (a bare string, say) carries no data.
fn v3_field(what: &str, v: Option<&RawValue>) -> Result<Option<(Bytes, &'static str)>, ApiError> {
    let Some(v) = v.filter(|v| v.get().starts_with('{')) else {
        return Ok(None);
    };
    let typed: TypedData = serde_json::from_str(v.get())
        .map_err(|e| ApiError::invalid(errors::INVALID_ENTITY, format!("{what}: {e}")))?;
    let kind = typed.kind.and_then(json_str);
    let Some(data) = not_null(typed.data) else {
        return Ok(None);
    };
    match kind
        .as_deref()
        .unwrap_or("JSON")
        .to_ascii_uppercase()
        .as_str()
    {
        "BINARY" => match json_str(data) {
            Some(s) => Ok(Some((base64(what, &s)?, "BINARY"))),
            None => Err(ApiError::invalid(
                errors::INVALID_BASE64,
                format!("{what} of type BINARY must be a base64 string"),
            )),
        },
        "STRING" => match json_str(data) {
            Some(s) => Ok(Some((Bytes::from(s.into_owned()), "STRING"))),
            None => Err(ApiError::invalid(
                errors::INVALID_ENTITY,
                format!("{what} of type STRING must be a string"),
            )),
        },
        "JSON" => Ok(Some((json_bytes(data), "JSON"))),
        other => Err(ApiError::invalid(
            errors::INVALID_ENTITY,
            format!("{what} has type {other}; BINARY, JSON and STRING are supported"),
        )),
    }
}

/// One v3 record, with the types of its key and value for the delivery report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncomingV3 {
    pub incoming: Incoming,
    pub key_type: Option<&'static str>,
    pub value_type: Option<&'static str>,
}

/// A v3 record object.
pub fn parse_v3(doc: &RawValue) -> Result<IncomingV3, ApiError> {
    let doc = match fields(doc) {
        Some(Ok(doc)) => doc,
        Some(Err(e)) => return Err(ApiError::invalid(errors::INVALID_ENTITY, e.to_string())),
        None => {
            return Err(ApiError::invalid(
                errors::INVALID_ENTITY,
                "a record must be a JSON object",
            ))
        }
    };
    let key = v3_field("the key", doc.key)?;
    let value = v3_field("the value", doc.value)?;
    if value.is_none() {
        return Err(ApiError::invalid(
            errors::MISSING_VALUE,
            "the record has no value",
        ));
    }
    let timestamp = match not_null(doc.timestamp).map(json_str) {
        None => -1,
        Some(Some(s)) => parse_rfc3339_ms(&s).ok_or_else(|| {
            ApiError::invalid(
                errors::INVALID_ENTITY,
                format!("timestamp {s:?} is not RFC 3339"),
            )
        })?,
        Some(None) => {
            return Err(ApiError::invalid(
                errors::INVALID_ENTITY,
                "timestamp must be a string",
            ))
        }
    };
    Ok(IncomingV3 {
        key_type: key.as_ref().map(|k| k.1),
        value_type: value.as_ref().map(|v| v.1),
        incoming: Incoming {
            partition: partition_field(tree(doc.partition_id).as_ref(), "partition_id")?,
            record: ProducerRecord {
                key: key.map(|k| k.0),
                value: value.map(|v| v.0),
                headers: headers(tree(doc.headers).as_ref())?,
                timestamp,
            },
        },
    })
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2024-05-06T07:08:09Z` or with a fraction and an offset, as milliseconds since the epoch.
fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut millis = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(char::is_ascii_digit).collect();
        let ms: String = format!("{digits:0<3}").chars().take(3).collect();
        millis = ms.parse().ok()?;
        rest = &frac[digits.len()..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && matches!(&o[..1], "+" | "-") && &o[3..4] == ":" => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (o[1..3].parse::<i64>().ok()? * 3600 + o[4..6].parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    Some(secs * 1000 + millis)
}

/// Milliseconds since the epoch as RFC 3339 in UTC with milliseconds.
pub fn format_rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // civil_from_days
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<Vec<Incoming>, ApiError>) -> u32 {
        r.unwrap_err().error_code
    }

    fn raw(s: &str) -> Box<RawValue> {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn a_null_v2_value_is_a_tombstone_and_a_missing_one_is_refused() {
        let json = EmbeddedFormat::Json;
        let r = parse_v2(br#"{"records":[{"key":"k","value":null}]}"#, json).unwrap();
        assert_eq!(r[0].record.value, None);
        assert_eq!(
            code(parse_v2(br#"{"records":[{"key":"k"}]}"#, json)),
            errors::MISSING_VALUE
        );
    }

    #[test]
    fn escaped_strings_and_spaced_json_read_as_their_values() {
        let body = br#"{ "records" : [ { "value" : "dmFs\u0064WU=" , "key" : "\/" } ] }"#;
        let r = parse_v2(body, EmbeddedFormat::Binary);
        assert_eq!(code(r), errors::INVALID_BASE64, "\\/ is / and not base64");
        let body = br#"{ "records" : [ { "value" : "dmFs\u0064WU=" } ] }"#;
        let r = parse_v2(body, EmbeddedFormat::Binary).unwrap();
        assert_eq!(r[0].record.value.as_deref(), Some(&b"value"[..]));
        let r = parse_v2(
            br#"{"records":[{"value": { "a" : [1, 2] }}]}"#,
            EmbeddedFormat::Json,
        );
        assert_eq!(
            r.unwrap()[0].record.value.as_deref(),
            Some(&br#"{"a":[1,2]}"#[..])
        );
    }

    #[test]
    fn bodies_and_records_that_are_not_objects_are_refused() {
        let json = EmbeddedFormat::Json;
        assert_eq!(
            code(parse_v2(br#"[{"value":1}]"#, json)),
            errors::INVALID_ENTITY
        );
        assert_eq!(
            code(parse_v2(br#"{"records":{"value":1}}"#, json)),
            errors::INVALID_ENTITY
        );
        assert_eq!(
            code(parse_v2(br#"{"records":[5]}"#, json)),
            errors::INVALID_ENTITY
        );
        assert_eq!(
            parse_v3(&raw("[1]")).unwrap_err().error_code,
            errors::INVALID_ENTITY
        );
        let bare = raw(r#"{"value":"not an object"}"#);
        assert_eq!(
            parse_v3(&bare).unwrap_err().error_code,
            errors::MISSING_VALUE
        );
    }

    #[test]
    fn v2_json_and_binary_records_become_bytes() {
        let body = br#"{"records":[{"key":"k","value":{"a":1}},{"value":[1,2],"partition":2}]}"#;
        let r = parse_v2(body, EmbeddedFormat::Json).unwrap();
        assert_eq!(r[0].record.key.as_deref(), Some(&b"\"k\""[..]));
        assert_eq!(r[0].record.value.as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!((r[1].partition, r[1].record.key.clone()), (Some(2), None));
        let bin = br#"{"records":[{"key":"a2V5","value":"dmFsdWU=","headers":[{"key":"h","value":"aGk="}]}]}"#;
        let r = parse_v2(bin, EmbeddedFormat::Binary).unwrap();
        assert_eq!(r[0].record.key.as_deref(), Some(&b"key"[..]));
        assert_eq!(r[0].record.value.as_deref(), Some(&b"value"[..]));
        assert_eq!(
            r[0].record.headers,
            vec![("h".to_string(), Some(Bytes::from_static(b"hi")))]
        );
    }

    #[test]
    fn v2_bad_bodies_get_their_own_codes() {
        let json = EmbeddedFormat::Json;
        assert_eq!(code(parse_v2(b"", json)), errors::INVALID_ENTITY);
        assert_eq!(
            code(parse_v2(b"{\"records\":[", json)),
            errors::INVALID_ENTITY
        );
        assert_eq!(
            code(parse_v2(b"{\"records\":[]}", json)),
            errors::INVALID_ENTITY
        );
        assert_eq!(
            code(parse_v2(b"{\"records\":[{\"key\":1}]}", json)),
            errors::MISSING_VALUE
        );
        let bad64 = br#"{"records":[{"value":"not base64!"}]}"#;
        assert_eq!(
            code(parse_v2(bad64, EmbeddedFormat::Binary)),
            errors::INVALID_BASE64
        );
        let badp = br#"{"records":[{"value":1,"partition":"x"}]}"#;
        assert_eq!(code(parse_v2(badp, json)), errors::INVALID_ENTITY);
    }

    #[test]
    fn v3_records_carry_typed_keys_and_values() {
        let doc = raw(
            r#"{"partition_id":1,"key":{"type":"STRING","data":"k"},"value":{"type":"BINARY","data":"aGk="},"timestamp":"2021-02-05T19:14:42.500Z"}"#,
        );
        let r = parse_v3(&doc).unwrap();
        assert_eq!(r.incoming.partition, Some(1));
        assert_eq!(r.incoming.record.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.incoming.record.value.as_deref(), Some(&b"hi"[..]));
        assert_eq!((r.key_type, r.value_type), (Some("STRING"), Some("BINARY")));
        assert_eq!(r.incoming.record.timestamp, 1_612_552_482_500);
        let untyped = raw(r#"{"value":{"data": {"x": true}}}"#);
        let r = parse_v3(&untyped).unwrap();
        assert_eq!(
            r.incoming.record.value.as_deref(),
            Some(&br#"{"x":true}"#[..])
        );
        let none = raw(r#"{"key":{"data":"k"}}"#);
        assert_eq!(
            parse_v3(&none).unwrap_err().error_code,
            errors::MISSING_VALUE
        );
    }

    #[test]
    fn timestamps_round_trip_through_rfc3339() {
        for ms in [0, 1_612_552_482_500, 951_782_400_000, 4_102_444_799_999] {
            let s = format_rfc3339_ms(ms);
            assert_eq!(parse_rfc3339_ms(&s), Some(ms), "{s}");
        }
        assert_eq!(
            format_rfc3339_ms(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            parse_rfc3339_ms("2021-02-05T20:14:42+01:00"),
            parse_rfc3339_ms("2021-02-05T19:14:42Z")
        );
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
    }
}
