//! One connection to one broker: connect (with TLS and SASL as `ClientSecurity` says), ApiVersions
//! negotiation, and calls with correlation ids, a frame size limit and a per-call timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::security::{self, ClientSecurity};
use super::ClientError;
use crate::protocol::errors;
use crate::protocol::listener::Stream;
use crate::protocol::wire::{read_frame, FrameReadError};

/// The client id sent in every request header.
pub const CLIENT_ID: &str = "evenkeel";

/// The largest response frame accepted; anything bigger is a framing error.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// `(api, lowest, highest)` versions this client knows the meaning of, for the APIs it sends.
/// The version used is the highest one inside this range, the codec's range and the broker's.
pub const CLIENT_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::Metadata, 4, 12),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeCluster, 0, 1),
    // Replica fetchers: v12+ carries the last fetched epoch and the diverging epoch.
    (ApiKey::Fetch, 12, 17),
    // The producer: v3+ carries v2 record batches; v13 names topics by id, which we do not.
    (ApiKey::Produce, 3, 12),
    (ApiKey::InitProducerId, 0, 4),
    // SASL logins (inter-broker): v1 handshakes carry the tokens in SaslAuthenticate.
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    // Users and their ACLs (the operator's KafkaUser); v1+ ACL requests carry the pattern type.
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// For each API in `CLIENT_VERSIONS`, the highest version both sides speak; APIs with no
/// common version are left out.
pub fn negotiate(broker: &[ApiVersion]) -> HashMap<ApiKey, i16> {
    let mut out = HashMap::new();
    for (key, lo, hi) in CLIENT_VERSIONS {
        let codec = key.valid_versions();
        let Some(b) = broker.iter().find(|v| v.api_key == *key as i16) else {
            continue;
        };
        let lo = (*lo).max(codec.min).max(b.min_version);
        let hi = (*hi).min(codec.max).min(b.max_version);
        if lo <= hi {
            out.insert(*key, hi);
        }
    }
    out
}

/// A connection to one broker with the versions negotiated on connect.
pub struct Connection {
    addr: String,
    timeout: Duration,
    versions: HashMap<ApiKey, i16>,
    io: Mutex<Io>,
    broken: AtomicBool,
    /// When a SASL session the broker limited (KIP-368) should be given up: this client
    /// does not re-authenticate, it connects again.
    session_ends: Option<Instant>,
}

/// A stream with the next correlation id to use on it.
pub(super) struct Io<S = Stream> {
    pub(super) stream: S,
    pub(super) next_correlation_id: i32,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .field("broken", &self.is_broken())
            .finish()
    }
}

impl Connection {
    /// Connects to `addr` ("host:port") and negotiates API versions, all within `timeout`;
    /// `timeout` is also the limit for each later call.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Connection, ClientError> {
        Self::connect_with(addr, timeout, &ClientSecurity::plaintext()).await
    }

    /// As `connect`, secured as `security` says: the TLS handshake (the server's certificate
    /// checked against `addr`'s host), ApiVersions, then the SASL login, each step within
    /// `timeout`. A failed step is a `ClientError::Security` naming it.
    pub async fn connect_with(
        addr: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Connection, ClientError> {
        let opened = open(addr, timeout, security).await?;
        Ok(Connection {
            addr: addr.to_string(),
            timeout,
            versions: opened.versions,
            io: Mutex::new(opened.io),
            broken: AtomicBool::new(false),
            session_ends: opened
                .session
                .map(|lifetime| Instant::now() + lifetime.mul_f64(0.9)),
        })
    }

    /// The address this connection was made to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The negotiated version of `key`, if both sides speak one.
    pub fn version(&self, key: ApiKey) -> Option<i16> {
        self.versions.get(&key).copied()
    }

    /// True once an I/O error, timeout or framing error has left the stream unusable, or its
    /// SASL session is near the end the broker gave it.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
            || self.session_ends.is_some_and(|t| Instant::now() >= t)
    }

    /// Sends `req` at the negotiated version and decodes the response.
    pub async fn call<R: Request>(&self, req: &R) -> Result<R::Response, ClientError> {
        let key = api_key::<R>()?;
        let version = self.version(key).ok_or_else(|| {
            ClientError::Protocol(format!(
                "{key:?}: no version in common with the broker at {}",
                self.addr
            ))
        })?;
        self.call_at(req, version).await
    }

    /// Sends `req` at `version` and decodes the response.
    pub async fn call_at<R: Request>(
        &self,
        req: &R,
        version: i16,
    ) -> Result<R::Response, ClientError> {
        let key = api_key::<R>()?;
        if self.is_broken() {
            return Err(ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("connection to {} failed earlier", self.addr),
            )));
        }
        let mut io = self.io.lock().await;
        let result = tokio::time::timeout(self.timeout, exchange(&mut io, key, version, req)).await;
        let mut body = match result {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => {
                if e.desyncs {
                    self.broken.store(true, Ordering::Release);
                }
                return Err(e.error);
            }
            Err(_) => {
                // The response may still arrive and would be read as the next call's.
                self.broken.store(true, Ordering::Release);
                return Err(ClientError::Timeout(format!("{key:?}")));
            }
        };
        R::Response::decode(&mut body, version)
            .map_err(|e| ClientError::Protocol(format!("{key:?} v{version} response: {e:#}")))
    }
}

fn api_key<R: Request>() -> Result<ApiKey, ClientError> {
    ApiKey::try_from(R::KEY)
        .map_err(|_| ClientError::Protocol(format!("unknown API key {}", R::KEY)))
}

/// An exchange failure, and whether the stream is left out of step.
struct ExchangeError {
    error: ClientError,
    desyncs: bool,
}

impl From<std::io::Error> for ExchangeError {
    fn from(e: std::io::Error) -> Self {
        ExchangeError {
            error: ClientError::Io(e),
            desyncs: true,
        }
    }
}

/// A connection made ready for requests: the stream with its next correlation id, the
/// negotiated versions, and the SASL session's lifetime when the broker limits it (KIP-368).
pub(super) struct Opened {
    pub(super) io: Io,
    pub(super) versions: HashMap<ApiKey, i16>,
    pub(super) session: Option<Duration>,
}

/// Connects to `addr` secured as `security` says: the TLS handshake (the server's certificate
/// checked against `addr`'s host), ApiVersions, then the SASL login, each step within
/// `timeout`. A failed step is a `ClientError::Security` naming it.
pub(super) async fn open(
    addr: &str,
    timeout: Duration,
    security: &ClientSecurity,
) -> Result<Opened, ClientError> {
    let stream = connect_stream(addr, timeout, security).await?;
    let mut io = Io {
        stream,
        next_correlation_id: 1,
    };
    let versions = negotiate(&within(timeout, "ApiVersions", api_versions(&mut io)).await?);
    let session = match security.sasl() {
        Some(login) => {
            let login = security::authenticate(&mut io, addr, &versions, login);
            within(timeout, "SASL authentication", login).await?
        }
        None => None,
    };
    Ok(Opened {
        io,
        versions,
        session,
    })
}

/// A byte stream to `addr` for the quorum's own requests, which are not Kafka's: TCP, TLS when
/// `security` has a TLS config, then ApiVersions and the SASL login when it has one, each step
/// within `timeout`. The session's lifetime (KIP-368) is not kept: a stream used after its
/// session ended is closed by the controller, and its user opens another.
pub async fn open_stream(
    addr: &str,
    timeout: Duration,
    security: &ClientSecurity,
) -> Result<Stream, ClientError> {
    match security.sasl() {
        Some(_) => Ok(open(addr, timeout, security).await?.io.stream),
        None => connect_stream(addr, timeout, security).await,
    }
}

/// A byte stream to `addr`: TCP, then the TLS handshake when `security` has a TLS config (the
/// server's certificate checked against `addr`'s host), each step within `timeout`.
async fn connect_stream(
    addr: &str,
    timeout: Duration,
    security: &ClientSecurity,
) -> Result<Stream, ClientError> {
    let tcp = tcp_connect(addr, timeout).await?;
    match security.tls() {
        Some(config) => {
            let shake = security::tls_handshake(tcp, addr, config);
            within(timeout, "TLS handshake", shake).await
        }
        None => Ok(Stream::Plain(tcp)),
    }
}

/// A TCP connection to `addr` with TCP_NODELAY, within `timeout`.
async fn tcp_connect(addr: &str, timeout: Duration) -> Result<TcpStream, ClientError> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| ClientError::Timeout(format!("connect to {addr}")))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// `step` within `timeout`; else a timeout naming `what`.
async fn within<T>(
    timeout: Duration,
    what: &str,
    step: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(timeout, step)
        .await
        .map_err(|_| ClientError::Timeout(what.to_string()))?
}

/// Sends `req` at `version` on `io` and decodes the response (connection setup, before the
/// stream goes into a `Connection`).
pub(super) async fn request<R: Request, S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Io<S>,
    req: &R,
    version: i16,
) -> Result<R::Response, ClientError> {
    let key = api_key::<R>()?;
    let mut body = exchange(io, key, version, req).await.map_err(|e| e.error)?;
    R::Response::decode(&mut body, version)
        .map_err(|e| ClientError::Protocol(format!("{key:?} v{version} response: {e:#}")))
}

/// Reads one size-prefixed response frame and checks its header against `correlation_id`;
/// returns the body after the header. An error leaves the stream out of step.
pub(super) async fn read_response<R: tokio::io::AsyncRead + Unpin>(
    stream: &mut R,
    key: ApiKey,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, ClientError> {
    let mut buf = match read_frame(stream, 4, MAX_RESPONSE_BYTES).await {
        Ok(frame) => frame,
        Err(e @ FrameReadError::Size { .. }) => {
            return Err(ClientError::Protocol(format!("{key:?} response {e}")))
        }
        Err(e) => return Err(ClientError::Io(e.into())),
    };
    let header = ResponseHeader::decode(&mut buf, key.response_header_version(version))
        .map_err(|e| ClientError::Protocol(format!("{key:?} response header: {e:#}")))?;
    if header.correlation_id != correlation_id {
        return Err(ClientError::Protocol(format!(
            "{key:?} response has correlation id {}, expected {correlation_id}",
            header.correlation_id
        )));
    }
    Ok(buf)
}

/// Writes one request and reads its response; returns the body after the response header.
async fn exchange<B: Encodable, S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Io<S>,
    key: ApiKey,
    version: i16,
    body: &B,
) -> Result<Bytes, ExchangeError> {
    let correlation_id = io.next_correlation_id;
    io.next_correlation_id = io.next_correlation_id.wrapping_add(1);
    let frame = encode_request(key, version, correlation_id, body).map_err(|e| ExchangeError {
        error: e,
        desyncs: false,
    })?;
    io.stream.write_all(&frame).await?;
    read_response(&mut io.stream, key, version, correlation_id)
        .await
        .map_err(|error| ExchangeError {
            error,
            desyncs: true,
        })
}

/// A size-prefixed request frame with our client id.
pub fn encode_request<B: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &B,
) -> Result<Bytes, ClientError> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let hv = key.request_header_version(version);
    let encode = |buf: &mut BytesMut| -> anyhow::Result<()> {
        header.encode(buf, hv)?;
        body.encode(buf, version)
    };
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    encode(&mut buf).map_err(|e| ClientError::Protocol(format!("{key:?} v{version}: {e:#}")))?;
    let size = i32::try_from(buf.len() - 4)
        .map_err(|_| ClientError::Protocol(format!("{key:?} request too large")))?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// The broker's ApiVersions list. Asks at our highest version; a broker that does not speak it
/// answers UNSUPPORTED_VERSION in the v0 layout with its own range, and we ask again within it.
async fn api_versions<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Io<S>,
) -> Result<Vec<ApiVersion>, ClientError> {
    let ours = CLIENT_VERSIONS
        .iter()
        .find(|(k, _, _)| *k == ApiKey::ApiVersions)
        .map(|(_, _, hi)| *hi)
        .unwrap_or(0);
    let first = api_versions_at(io, ours).await?;
    if first.error_code == errors::NONE {
        return Ok(first.api_keys);
    }
    if first.error_code == errors::UNSUPPORTED_VERSION {
        let theirs = first
            .api_keys
            .iter()
            .find(|v| v.api_key == ApiKey::ApiVersions as i16)
            .map(|v| v.max_version.min(ours))
            .unwrap_or(0);
        let second = api_versions_at(io, theirs).await?;
        if second.error_code == errors::NONE {
            return Ok(second.api_keys);
        }
        return Err(ClientError::kafka("ApiVersions", second.error_code, None));
    }
    Err(ClientError::kafka("ApiVersions", first.error_code, None))
}

async fn api_versions_at<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Io<S>,
    version: i16,
) -> Result<ApiVersionsResponse, ClientError> {
    let mut req = ApiVersionsRequest::default();
    if version >= 3 {
        req = req
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    }
    let mut body = exchange(io, ApiKey::ApiVersions, version, &req)
        .await
        .map_err(|e| e.error)?;
    // An UNSUPPORTED_VERSION answer is laid out as v0 whatever version was asked.
    let decode_version = if body.len() >= 2 && (&body[..2]).get_i16() == errors::UNSUPPORTED_VERSION
    {
        0
    } else {
        version
    };
    ApiVersionsResponse::decode(&mut body, decode_version).map_err(|e| {
        ClientError::Protocol(format!("ApiVersions v{decode_version} response: {e:#}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn v(key: ApiKey, min: i16, max: i16) -> ApiVersion {
        ApiVersion::default()
            .with_api_key(key as i16)
            .with_min_version(min)
            .with_max_version(max)
    }

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        let t = negotiate(&[
            v(ApiKey::Metadata, 0, 13),
            v(ApiKey::CreateTopics, 2, 5),
            v(ApiKey::DeleteTopics, 1, 6),
            v(ApiKey::ApiVersions, 0, 4),
        ]);
        assert_eq!(
            t.get(&ApiKey::Metadata),
            Some(&12),
            "capped by what we encode"
        );
        assert_eq!(
            t.get(&ApiKey::CreateTopics),
            Some(&5),
            "capped by the broker"
        );
        assert_eq!(t.get(&ApiKey::DeleteTopics), Some(&6));
        assert_eq!(t.get(&ApiKey::ApiVersions), Some(&3));
        assert_eq!(t.get(&ApiKey::CreatePartitions), None, "not advertised");
    }

    #[test]
    fn negotiation_leaves_out_apis_without_a_common_version() {
        let t = negotiate(&[v(ApiKey::Metadata, 0, 3), v(ApiKey::DescribeConfigs, 5, 9)]);
        assert_eq!(t.get(&ApiKey::Metadata), None, "we need v4+");
        assert_eq!(t.get(&ApiKey::DescribeConfigs), None);
    }

    #[test]
    fn our_ranges_fit_the_codec() {
        for (key, lo, hi) in CLIENT_VERSIONS {
            let codec = key.valid_versions();
            assert!(
                codec.min <= *lo && *hi <= codec.max,
                "{key:?} {lo}..{hi} vs {codec}"
            );
        }
    }

    #[test]
    fn negotiated_against_our_own_broker_every_api_is_available() {
        let t = negotiate(&crate::protocol::api_versions::response(0).api_keys);
        for (key, _, hi) in CLIENT_VERSIONS {
            assert_eq!(t.get(key), Some(hi), "{key:?}");
        }
    }

    #[test]
    fn request_frames_carry_size_header_and_client_id() {
        let frame = encode_request(
            ApiKey::Metadata,
            12,
            9,
            &kafka_protocol::messages::MetadataRequest::default(),
        )
        .unwrap();
        let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        assert_eq!(size as usize, frame.len() - 4);
        let mut rest = frame.slice(4..);
        let (key, header) = crate::protocol::decode_header(&mut rest).unwrap();
        assert_eq!(key, ApiKey::Metadata);
        assert_eq!(header.correlation_id, 9);
        assert_eq!(header.client_id.as_deref(), Some(CLIENT_ID));
    }

    /// A loopback listener whose single connection is served by `serve`.
    async fn fake_broker<F, Fut>(serve: F) -> String
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            serve(stream).await;
        });
        addr
    }

    async fn read_request(s: &mut TcpStream) -> RequestHeader {
        let mut frame = read_frame(s, 0, 1 << 20).await.unwrap();
        crate::protocol::decode_header(&mut frame).unwrap().1
    }

    /// Answers the ApiVersions handshake with our own broker's list.
    async fn handshake(s: &mut TcpStream) {
        let h = read_request(s).await;
        let resp = crate::protocol::api_versions::response(0);
        let frame =
            crate::protocol::encode_response(h.request_api_version, h.correlation_id, &resp)
                .unwrap();
        s.write_all(&frame).await.unwrap();
    }

    fn metadata() -> kafka_protocol::messages::MetadataRequest {
        kafka_protocol::messages::MetadataRequest::default()
    }

    #[tokio::test]
    async fn api_versions_falls_back_when_the_broker_refuses_our_version() {
        let addr = fake_broker(|mut s| async move {
            let first = read_request(&mut s).await;
            assert_eq!(first.request_api_version, 3);
            let refusal = ApiVersionsResponse::default()
                .with_error_code(errors::UNSUPPORTED_VERSION)
                .with_api_keys(vec![v(ApiKey::ApiVersions, 0, 2)]);
            let frame = crate::protocol::encode_response_with_header_version(
                0,
                0,
                first.correlation_id,
                &refusal,
            )
            .unwrap();
            s.write_all(&frame).await.unwrap();
            let second = read_request(&mut s).await;
            assert_eq!(second.request_api_version, 2);
            let ok = ApiVersionsResponse::default().with_api_keys(vec![
                v(ApiKey::ApiVersions, 0, 2),
                v(ApiKey::Metadata, 0, 9),
            ]);
            let frame = crate::protocol::encode_response(2, second.correlation_id, &ok).unwrap();
            s.write_all(&frame).await.unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        })
        .await;
        let c = Connection::connect(&addr, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(c.version(ApiKey::ApiVersions), Some(2));
        assert_eq!(c.version(ApiKey::Metadata), Some(9));
        assert_eq!(c.version(ApiKey::CreateTopics), None);
    }

    /// Answers the next request, which must be of `key`, with `resp`.
    async fn answer<R: Encodable + kafka_protocol::protocol::HeaderVersion>(
        s: &mut TcpStream,
        key: ApiKey,
        resp: &R,
    ) {
        let h = read_request(s).await;
        assert_eq!(h.request_api_key, key as i16);
        let frame = crate::protocol::encode_response(h.request_api_version, h.correlation_id, resp)
            .unwrap();
        s.write_all(&frame).await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_sasl_login_says_which_step_failed() {
        use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
        let addr = fake_broker(|mut s| async move {
            handshake(&mut s).await;
            let shake = SaslHandshakeResponse::default()
                .with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]);
            answer(&mut s, ApiKey::SaslHandshake, &shake).await;
            let no = SaslAuthenticateResponse::default()
                .with_error_code(errors::SASL_AUTHENTICATION_FAILED)
                .with_error_message(Some(StrBytes::from_static_str(
                    "Authentication failed: Invalid username or password",
                )));
            answer(&mut s, ApiKey::SaslAuthenticate, &no).await;
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        })
        .await;
        let login = super::super::SaslLogin {
            mechanism: crate::security::sasl::Mechanism::PLAIN,
            username: "broker".into(),
            password: "wrong".into(),
        };
        let security = ClientSecurity::new(
            crate::config::security::SecurityProtocol::SaslPlaintext,
            None,
            Some(login),
        )
        .unwrap();
        let e = Connection::connect_with(&addr, Duration::from_secs(5), &security)
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                ClientError::Security {
                    source: super::super::SecurityError::AuthenticationFailed { .. },
                    ..
                }
            ),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.contains("SaslAuthenticate as broker with PLAIN failed")
                && shown.contains("Invalid username or password")
                && !shown.contains("wrong"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn a_response_with_another_correlation_id_breaks_the_connection() {
        let addr = fake_broker(|mut s| async move {
            handshake(&mut s).await;
            let h = read_request(&mut s).await;
            let resp = kafka_protocol::messages::MetadataResponse::default();
            let frame = crate::protocol::encode_response(
                h.request_api_version,
                h.correlation_id + 1000,
                &resp,
            )
            .unwrap();
            s.write_all(&frame).await.unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        })
        .await;
        let c = Connection::connect(&addr, Duration::from_secs(5))
            .await
            .unwrap();
        let e = c.call(&metadata()).await.unwrap_err();
        assert!(matches!(e, ClientError::Protocol(_)), "{e:?}");
        assert!(c.is_broken());
        let e = c.call(&metadata()).await.unwrap_err();
        assert!(matches!(e, ClientError::Io(_)), "{e:?}");
    }

    #[tokio::test]
    async fn an_oversized_response_frame_is_a_protocol_error() {
        let addr = fake_broker(|mut s| async move {
            handshake(&mut s).await;
            read_request(&mut s).await;
            s.write_all(&i32::MAX.to_be_bytes()).await.unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        })
        .await;
        let c = Connection::connect(&addr, Duration::from_secs(5))
            .await
            .unwrap();
        let e = c.call(&metadata()).await.unwrap_err();
        assert!(
            matches!(e, ClientError::Protocol(ref m) if m.contains("2147483647 is outside 4..=")),
            "{e:?}"
        );
        assert!(c.is_broken());
    }

    #[tokio::test]
    async fn a_silent_broker_times_out_and_breaks_the_connection() {
        let addr = fake_broker(|mut s| async move {
            handshake(&mut s).await;
            read_request(&mut s).await;
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        })
        .await;
        let c = Connection::connect(&addr, Duration::from_millis(300))
            .await
            .unwrap();
        let e = c.call(&metadata()).await.unwrap_err();
        assert!(
            matches!(e, ClientError::Timeout(ref api) if api == "Metadata"),
            "{e:?}"
        );
        assert!(c.is_broken());
    }

    #[tokio::test]
    async fn a_broker_that_closes_mid_call_is_an_io_error() {
        let addr = fake_broker(|mut s| async move {
            handshake(&mut s).await;
            read_request(&mut s).await;
        })
        .await;
        let c = Connection::connect(&addr, Duration::from_secs(5))
            .await
            .unwrap();
        let e = c.call(&metadata()).await.unwrap_err();
        assert!(matches!(e, ClientError::Io(_)), "{e:?}");
        assert!(c.is_broken());
    }
}
