//! The Kafka wire: frames, request headers, version negotiation, response framing and error
//! codes — glue over the kafka-protocol crate — and the listeners' accept loop with its
//! connection limits. Knows nothing of storage.

pub mod api_versions;
pub mod client_quotas;
pub mod creation_rate;
pub mod errors;
pub mod listener;
pub mod murmur2;
pub mod sasl;
pub mod wire;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// A string as the wire's string type.
pub fn str_bytes(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

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

/// The client id of a request (header v1 and later: a nullable string after the first eight
/// bytes, never a compact one), without decoding the rest; `None` when absent or malformed.
pub fn peek_client_id(frame: &[u8]) -> Option<String> {
    let len = i16::from_be_bytes([*frame.get(8)?, *frame.get(9)?]);
    let len = usize::try_from(len).ok()?;
    let bytes = frame.get(10..10 + len)?;
    String::from_utf8(bytes.to_vec()).ok()
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

/// `encode_response` for a handler: a body that cannot be encoded is a `FrameError`, which
/// closes the connection.
pub fn frame_response<R: Encodable + HeaderVersion>(
    api_version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<Bytes, FrameError> {
    encode_response(api_version, correlation_id, body)
        .map_err(|e| FrameError::Malformed(format!("cannot encode the response: {e:#}")))
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

/// Declares `DecodedRequest` and the body decoder from one list of `ApiKey => RequestType`, so
/// the two cannot drift apart. Every key in `api_versions::SUPPORTED` must be listed (a unit
/// test checks it).
macro_rules! decoded_requests {
    ($($key:ident => $req:ident,)*) => {
        /// A decoded request body of one of the APIs in `api_versions::SUPPORTED`.
        #[derive(Debug, Clone, PartialEq)]
        pub enum DecodedRequest {
            $($key(kafka_protocol::messages::$req),)*
        }

        /// The body of `key` at version `v`; `None` when `key` is not listed above.
        fn decode_listed_body(
            key: ApiKey,
            frame: &mut Bytes,
            v: i16,
        ) -> Option<Result<DecodedRequest, FrameError>> {
            match key {
                $(ApiKey::$key => Some(
                    decode_body::<kafka_protocol::messages::$req>(frame, v)
                        .map(DecodedRequest::$key),
                ),)*
                _ => None,
            }
        }

        /// The default request of `key` encoded at `v`, for tests; `None` when not listed.
        #[cfg(test)]
        fn encode_default_body(key: ApiKey, v: i16, buf: &mut BytesMut) -> Option<()> {
            match key {
                $(ApiKey::$key => {
                    kafka_protocol::messages::$req::default().encode(buf, v).unwrap();
                    Some(())
                })*
                _ => None,
            }
        }
    };
}

decoded_requests! {
    Produce => ProduceRequest,
    Fetch => FetchRequest,
    ListOffsets => ListOffsetsRequest,
    Metadata => MetadataRequest,
    ApiVersions => ApiVersionsRequest,
    CreateTopics => CreateTopicsRequest,
    DeleteTopics => DeleteTopicsRequest,
    DeleteRecords => DeleteRecordsRequest,
    InitProducerId => InitProducerIdRequest,
    OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
    DescribeConfigs => DescribeConfigsRequest,
    AlterConfigs => AlterConfigsRequest,
    CreatePartitions => CreatePartitionsRequest,
    IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
    DescribeCluster => DescribeClusterRequest,
    FindCoordinator => FindCoordinatorRequest,
    JoinGroup => JoinGroupRequest,
    SyncGroup => SyncGroupRequest,
    Heartbeat => HeartbeatRequest,
    LeaveGroup => LeaveGroupRequest,
    OffsetCommit => OffsetCommitRequest,
    OffsetFetch => OffsetFetchRequest,
    ListGroups => ListGroupsRequest,
    DescribeGroups => DescribeGroupsRequest,
    DeleteGroups => DeleteGroupsRequest,
    OffsetDelete => OffsetDeleteRequest,
    ElectLeaders => ElectLeadersRequest,
    AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
    ListPartitionReassignments => ListPartitionReassignmentsRequest,
    DescribeQuorum => DescribeQuorumRequest,
    UnregisterBroker => UnregisterBrokerRequest,
    DescribeTopicPartitions => DescribeTopicPartitionsRequest,
    AlterPartition => AlterPartitionRequest,
    FetchSnapshot => FetchSnapshotRequest,
    BrokerRegistration => BrokerRegistrationRequest,
    BrokerHeartbeat => BrokerHeartbeatRequest,
    AllocateProducerIds => AllocateProducerIdsRequest,
    SaslHandshake => SaslHandshakeRequest,
    SaslAuthenticate => SaslAuthenticateRequest,
    DescribeAcls => DescribeAclsRequest,
    CreateAcls => CreateAclsRequest,
    DeleteAcls => DeleteAclsRequest,
    DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
    DescribeClientQuotas => DescribeClientQuotasRequest,
    AlterClientQuotas => AlterClientQuotasRequest,
    DescribeLogDirs => DescribeLogDirsRequest,
    UpdateFeatures => UpdateFeaturesRequest,
    AlterUserScramCredentials => AlterUserScramCredentialsRequest,
    ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
    ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
    AddRaftVoter => AddRaftVoterRequest,
    RemoveRaftVoter => RemoveRaftVoterRequest,
}

/// Decodes a whole request frame (without its 4-byte size prefix) with the checks the broker
/// applies before a handler runs: the 8-byte raw header, a known API key, a served version, the
/// request header, then the body of the matching type. Trailing bytes are ignored, as the broker
/// ignores them. A too-new ApiVersions is an error here (the broker answers it with a v0
/// UNSUPPORTED_VERSION response, but there is nothing to decode). Used by the fuzz target.
pub fn decode_request(frame: Bytes) -> Result<(RequestHeader, DecodedRequest), FrameError> {
    decode_request_for(frame, api_versions::BROKER)
}

/// As `decode_request`, for the APIs of one listener (`api_versions::CONTROLLER` for the
/// controller listener).
pub fn decode_request_for(
    mut frame: Bytes,
    served: api_versions::ApiSet,
) -> Result<(RequestHeader, DecodedRequest), FrameError> {
    let raw = peek_header(&frame)?;
    let key = ApiKey::try_from(raw.api_key).map_err(|_| FrameError::UnknownApiKey(raw.api_key))?;
    if !served.is_served(key, raw.api_version) {
        return Err(FrameError::UnsupportedVersion {
            key,
            version: raw.api_version,
        });
    }
    let (_, header) = decode_header(&mut frame)?;
    let v = header.request_api_version;
    match decode_listed_body(key, &mut frame, v) {
        Some(body) => Ok((header, body?)),
        None => Err(FrameError::UnsupportedVersion { key, version: v }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn header_bytes(key: ApiKey, version: i16) -> BytesMut {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("unit")));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        buf
    }

    /// A frame as a client writes it, without the size prefix.
    fn request_frame<R: Encodable>(key: ApiKey, version: i16, body: &R) -> Bytes {
        let mut buf = header_bytes(key, version);
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn the_client_id_is_read_without_decoding_the_request() {
        // Header v2 (flexible Metadata v12) keeps the client id a plain nullable string.
        for version in [1, 12] {
            let frame = request_frame(ApiKey::Metadata, version, &MetadataRequest::default());
            assert_eq!(peek_client_id(&frame).as_deref(), Some("unit"));
        }
        assert_eq!(peek_client_id(&bare_header(3, 1)), None);
        assert_eq!(peek_client_id(&[0, 3, 0, 1, 0, 0, 0, 1, 0, 9, b'x']), None);
    }

    /// Just the 8-byte raw header and a null client id.
    fn bare_header(key: i16, version: i16) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(key);
        b.put_i16(version);
        b.put_i32(1);
        b.put_i16(-1);
        b.freeze()
    }

    #[test]
    fn decode_request_round_trips_a_metadata_request() {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))]));
        for v in [0, 4, 9, 12] {
            let (h, body) = decode_request(request_frame(ApiKey::Metadata, v, &req)).unwrap();
            assert_eq!(h.request_api_key, ApiKey::Metadata as i16);
            assert_eq!(h.request_api_version, v);
            assert_eq!(h.correlation_id, 42);
            assert_eq!(h.client_id.as_deref(), Some("unit"));
            assert_eq!(body, DecodedRequest::Metadata(req.clone()), "v{v}");
        }
    }

    #[test]
    fn decode_request_decodes_every_served_version_of_every_supported_api() {
        for set in [api_versions::BROKER, api_versions::CONTROLLER] {
            for (key, lo, hi) in set.0 {
                for v in *lo..=*hi {
                    if !set.is_served(*key, v) {
                        continue;
                    }
                    let mut buf = header_bytes(*key, v);
                    encode_default_body(*key, v, &mut buf).unwrap_or_else(|| {
                        panic!("{key:?} is served but not in decoded_requests!")
                    });
                    let r = decode_request_for(buf.freeze(), set);
                    assert!(r.is_ok(), "{key:?} v{v}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn decode_request_refuses_what_the_broker_refuses() {
        assert!(matches!(
            decode_request(bare_header(999, 0)),
            Err(FrameError::UnknownApiKey(999))
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 3, 0])),
            Err(FrameError::TooShort(3))
        ));
        let mut too_new = request_frame(ApiKey::Metadata, 12, &MetadataRequest::default()).to_vec();
        too_new[2..4].copy_from_slice(&99i16.to_be_bytes());
        assert!(matches!(
            decode_request(Bytes::from(too_new)),
            Err(FrameError::UnsupportedVersion {
                key: ApiKey::Metadata,
                version: 99
            })
        ));
        // Known to Kafka, never served on a broker listener (a KRaft controller API).
        assert!(!api_versions::is_served(ApiKey::Vote, 0));
        assert!(matches!(
            decode_request(bare_header(ApiKey::Vote as i16, 0)),
            Err(FrameError::UnsupportedVersion {
                key: ApiKey::Vote,
                ..
            })
        ));
        // Produce v2 is advertised but not served.
        assert!(matches!(
            decode_request(bare_header(ApiKey::Produce as i16, 2)),
            Err(FrameError::UnsupportedVersion {
                key: ApiKey::Produce,
                version: 2
            })
        ));
        // A truncated body.
        let full = request_frame(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))])),
        );
        assert!(matches!(
            decode_request(full.slice(..full.len() - 4)),
            Err(FrameError::Malformed(_))
        ));
    }
}
