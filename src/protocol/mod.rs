//! The Kafka wire: frames, request headers, version negotiation, response framing and error
//! codes — glue over the kafka-protocol crate. Knows nothing of storage.

pub mod api_versions;
pub mod errors;
pub mod murmur2;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

/// Why a frame could not be turned into a request.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("request of {0} bytes is too short for a header")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("unsupported version {version} of {key:?}")]
    UnsupportedVersion { key: ApiKey, version: i16 },
    #[error("malformed request: {0}")]
    Malformed(String),
}

/// The first eight bytes of every request, readable even when the rest is not.
#[derive(Debug, Clone, Copy)]
pub struct RawHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

pub fn peek_header(frame: &[u8]) -> Result<RawHeader, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::TooShort(frame.len()));
    }
    Ok(RawHeader {
        api_key: i16::from_be_bytes([frame[0], frame[1]]),
        api_version: i16::from_be_bytes([frame[2], frame[3]]),
        correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
    })
}

/// Decodes the request header and leaves `frame` at the body.
pub fn decode_header(frame: &mut Bytes) -> Result<(ApiKey, RequestHeader), FrameError> {
    let raw = peek_header(frame)?;
    let key = ApiKey::try_from(raw.api_key).map_err(|_| FrameError::UnknownApiKey(raw.api_key))?;
    let hv = key.request_header_version(raw.api_version);
    let header = RequestHeader::decode(frame, hv)
        .map_err(|e| FrameError::Malformed(format!("request header: {e}")))?;
    Ok((key, header))
}

/// Decodes a request body of a known version.
pub fn decode_body<T: Decodable>(frame: &mut Bytes, version: i16) -> Result<T, FrameError> {
    T::decode(frame, version).map_err(|e| FrameError::Malformed(format!("{e:#}")))
}

/// A size-prefixed response frame: length, response header, body.
pub fn encode_response<R: Encodable + HeaderVersion>(
    api_version: i16,
    correlation_id: i32,
    body: &R,
) -> anyhow::Result<Bytes> {
    encode_response_with_header_version(
        R::header_version(api_version),
        api_version,
        correlation_id,
        body,
    )
}

/// As `encode_response`, with an explicit header version (ApiVersions error replies use v0).
pub fn encode_response_with_header_version<R: Encodable>(
    header_version: i16,
    body_version: i16,
    correlation_id: i32,
    body: &R,
) -> anyhow::Result<Bytes> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header.compute_size(header_version)? + body.compute_size(body_version)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version)?;
    body.encode(&mut buf, body_version)?;
    Ok(buf.freeze())
}
