//! The accept loop of every listener, the broker's and the controller's, shaped like
//! mini-redis's server: it owns how many connections are open (`max.connections` across the
//! listeners that share one `ConnectionQuotas`, `max.connections.per.ip` and its overrides),
//! how long a connection may go without a request (`connections.max.idle.ms`), TCP_NODELAY, the
//! pause after a failed accept, the TLS handshake of a TLS listener (in the connection's own
//! task, bounded), the log line of every close, and the drain on stop: no more accepts, then a
//! bounded wait for open connections to finish the request in hand. What a connection does
//! with its requests is the caller's handler.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::creation_rate::{take_token, CreationRate};
use super::wire::{read_request, RequestReadError};
use crate::security::ssl_principal::ANONYMOUS;
use crate::security::tls::TlsServer;

/// The pause after a failed accept (out of file descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How long a stop waits for open connections to finish the request they are serving.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

/// Why a connection was closed, for the log.
#[derive(Debug, thiserror::Error)]
pub enum CloseReason {
    #[error("no request for {0} ms (connections.max.idle.ms)")]
    Idle(u128),
    /// A bad frame or a failed read.
    #[error("{0}")]
    Read(String),
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    /// The handler's own reason: a request it cannot serve, a server shutting down.
    #[error("{0}")]
    Handler(String),
    /// The TLS handshake failed or timed out, or the client's certificate maps to no
    /// principal.
    #[error("{0}")]
    Handshake(#[from] crate::security::tls::HandshakeError),
}

/// A connection refused for its address (Kafka's `TooManyConnectionsException`), in Kafka's
/// words.
#[derive(Debug, thiserror::Error)]
#[error("Rejected connection from {ip}, address already has the configured maximum of {max} connections.")]
pub struct TooManyConnections {
    pub ip: IpAddr,
    pub max: usize,
}

/// A host of `max.connections.per.ip.overrides` that does not resolve.
#[derive(Debug, thiserror::Error)]
#[error("max.connections.per.ip.overrides: cannot resolve {host}: {source}")]
pub struct UnknownHost {
    pub host: String,
    #[source]
    pub source: std::io::Error,
}

/// An address as connections are counted: an IPv4-mapped IPv6 peer counts as its IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The connection counts of one server's listeners (Kafka's `ConnectionQuotas`).
pub struct ConnectionQuotas {
    /// `max.connections`: one permit per open connection.
    total: Arc<Semaphore>,
    /// `max.connections.per.ip`, and its overrides by address.
    per_ip: usize,
    overrides: HashMap<IpAddr, usize>,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// `max.connection.creation.rate`: new connections a second on every listener but the
    /// protected (inter-broker) one.
    creation_rate: Option<CreationRate>,
    /// The `connection_creation_rate` client quota of an address (KIP-612), once the broker
    /// can read its quotas; each address's bucket of new connections.
    ip_rates: std::sync::OnceLock<IpRateLookup>,
    ip_buckets: Mutex<HashMap<IpAddr, (f64, std::time::Instant)>>,
}

/// The `connection_creation_rate` quota that applies to an address, if any.
pub type IpRateLookup = Arc<dyn Fn(IpAddr) -> Option<f64> + Send + Sync>;

/// Address buckets kept before idle ones are dropped.
const IP_BUCKETS_KEPT: usize = 1024;

/// One connection's place in its address's count, given back when dropped.
struct IpSlot {
    ip: IpAddr,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

impl ConnectionQuotas {
    pub fn new(
        max_connections: usize,
        per_ip: usize,
        overrides: HashMap<IpAddr, usize>,
    ) -> Arc<ConnectionQuotas> {
        Self::with_creation_rate(max_connections, per_ip, overrides, None)
    }

    /// As `new`, with `max.connection.creation.rate`.
    pub fn with_creation_rate(
        max_connections: usize,
        per_ip: usize,
        overrides: HashMap<IpAddr, usize>,
        creation_rate: Option<CreationRate>,
    ) -> Arc<ConnectionQuotas> {
        Arc::new(ConnectionQuotas {
            total: Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS))),
            per_ip,
            overrides: overrides
                .into_iter()
                .map(|(ip, n)| (canonical(ip), n))
                .collect(),
            counts: Arc::default(),
            creation_rate,
            ip_rates: std::sync::OnceLock::new(),
            ip_buckets: Mutex::default(),
        })
    }

    /// Where the per-address `connection_creation_rate` quotas come from (set once, when the
    /// broker that holds them starts serving).
    pub fn set_ip_rates(&self, lookup: IpRateLookup) {
        let _ = self.ip_rates.set(lookup);
    }

    /// How long a new connection from `ip` is held before it is closed unserved, when the
    /// address is over its `connection_creation_rate` quota (Kafka throttles it the same way);
    /// zero when it is within it or has none.
    fn ip_throttle(&self, ip: IpAddr) -> Duration {
        let ip = canonical(ip);
        let Some(rate) = self.ip_rates.get().and_then(|f| f(ip)) else {
            return Duration::ZERO;
        };
        let now = std::time::Instant::now();
        let mut buckets = self.ip_buckets.lock();
        if buckets.len() > IP_BUCKETS_KEPT {
            // A bucket untouched for a minute is full again: forgetting it changes nothing.
            buckets.retain(|_, b| now.duration_since(b.1) < Duration::from_secs(60));
        }
        let rate = rate.max(f64::MIN_POSITIVE);
        let bucket = buckets.entry(ip).or_insert((rate, now));
        take_token(bucket, rate, now)
    }

    /// No limit at all.
    pub fn unlimited() -> Arc<ConnectionQuotas> {
        Self::new(Semaphore::MAX_PERMITS, usize::MAX, HashMap::new())
    }

    /// The overrides' hosts as addresses: an IP as written, a name as DNS answers now (every
    /// address it has; Kafka resolves them once, at start, too).
    pub async fn resolve(
        overrides: &[(String, usize)],
    ) -> Result<HashMap<IpAddr, usize>, UnknownHost> {
        let mut out = HashMap::new();
        for (host, count) in overrides {
            if let Ok(ip) = host.parse::<IpAddr>() {
                out.insert(ip, *count);
                continue;
            }
            let addrs = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|source| UnknownHost {
                    host: host.clone(),
                    source,
                })?;
            for a in addrs {
                out.insert(a.ip(), *count);
            }
        }
        Ok(out)
    }

    /// Connections open from `ip` now.
    pub fn count(&self, ip: IpAddr) -> usize {
        self.counts.lock().get(&canonical(ip)).copied().unwrap_or(0)
    }

    /// Room for one more connection: waits while `max.connections` are open. A protected
    /// listener (Kafka's inter-broker listener, when there are several) does not wait: it takes
    /// a permit if one is free and goes without otherwise.
    async fn slot(&self, protected: bool) -> Option<OwnedSemaphorePermit> {
        if protected {
            return self.total.clone().try_acquire_owned().ok();
        }
        if let Some(rate) = &self.creation_rate {
            rate.acquire().await;
        }
        // The semaphore is never closed, so this only ends with a permit.
        self.total.clone().acquire_owned().await.ok()
    }

    /// Counts a connection from `ip`, or refuses it when the address is at its limit.
    fn claim(&self, ip: IpAddr) -> Result<IpSlot, TooManyConnections> {
        let ip = canonical(ip);
        let max = self.overrides.get(&ip).copied().unwrap_or(self.per_ip);
        let mut counts = self.counts.lock();
        let n = counts.entry(ip).or_insert(0);
        if *n >= max {
            if *n == 0 {
                counts.remove(&ip);
            }
            return Err(TooManyConnections { ip, max });
        }
        *n += 1;
        Ok(IpSlot {
            ip,
            counts: self.counts.clone(),
        })
    }
}

/// How one listener serves its connections.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    /// The listener's name, for the log.
    pub name: String,
    /// The TLS side of an SSL or SASL_SSL listener; `None`: connections are plain TCP.
    pub tls: Option<Arc<TlsServer>>,
    /// `socket.request.max.bytes`.
    pub max_request_bytes: usize,
    /// `connections.max.idle.ms`; `None`: a connection may wait for its next request forever.
    pub idle: Option<Duration>,
    /// Not held back by `max.connections` (Kafka's inter-broker listener, when there are
    /// several listeners).
    pub protected: bool,
    /// How long a stop waits for open connections to finish the request in hand.
    pub drain: Duration,
    /// `listener.name.<l>.max.connection.creation.rate`: this listener's own limit.
    pub creation_rate: Option<Arc<CreationRate>>,
}

impl ListenerSettings {
    /// A plain-TCP PLAINTEXT listener named `name`, with no idle timeout.
    pub fn plaintext(name: &str, max_request_bytes: usize) -> ListenerSettings {
        ListenerSettings {
            name: name.to_string(),
            tls: None,
            max_request_bytes,
            idle: None,
            protected: false,
            drain: DEFAULT_DRAIN,
            creation_rate: None,
        }
    }
}

/// A connection's byte stream: plain TCP, or TLS over TCP once the handshake is done (the
/// server side of an accepted connection, the client side of one the broker opens).
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One accepted connection, as the handler sees it.
pub struct Connection {
    stream: Stream,
    peer: SocketAddr,
    /// Kafka's principal of the connection: the mapped client certificate, or
    /// `User:ANONYMOUS` (a SASL login gives the broker's session its own principal).
    principal: String,
    stop: watch::Receiver<bool>,
    max_request_bytes: usize,
    idle: Option<Duration>,
}

impl Connection {
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The largest request frame read from now on (a SASL listener reads small ones until the
    /// client has logged in: `sasl.server.max.receive.size`).
    pub fn set_max_request_bytes(&mut self, max: usize) {
        self.max_request_bytes = max;
    }

    /// The principal, Kafka's way: `User:<mapped certificate subject>` for a TLS client with
    /// a certificate (`ssl.principal.mapping.rules`), else `User:ANONYMOUS`.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The next request frame; `None` once the peer closed the connection or the server
    /// stops. The idle timer (`connections.max.idle.ms`) runs until the request's first byte
    /// arrives.
    pub async fn next_request(&mut self) -> Result<Option<Bytes>, CloseReason> {
        read_request(
            &mut self.stream,
            &mut self.stop,
            self.max_request_bytes,
            self.idle,
        )
        .await
        .map_err(|e| match e {
            RequestReadError::Idle(idle) => CloseReason::Idle(idle.as_millis()),
            other => CloseReason::Read(other.to_string()),
        })
    }

    /// Runs the TLS handshake of a TLS listener (the connection's task does, not the accept
    /// loop); a stop during it ends the connection.
    async fn handshake(mut self, tls: &TlsServer) -> Result<Option<Connection>, CloseReason> {
        let Stream::Plain(tcp) = self.stream else {
            return Ok(Some(self));
        };
        let accepted = tokio::select! {
            _ = self.stop.changed() => return Ok(None),
            accepted = tls.accept(tcp) => accepted?,
        };
        let (stream, principal) = accepted;
        self.stream = Stream::Tls(Box::new(stream.into()));
        self.principal = principal;
        Ok(Some(self))
    }

    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), CloseReason> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(CloseReason::Write)?;
        // TLS buffers what it encrypts; a plain socket's flush does nothing.
        self.stream.flush().await.map_err(CloseReason::Write)
    }
}

/// Serves one connection until it closes; the error is the reason it was closed.
pub type Handler =
    Arc<dyn Fn(Connection) -> BoxFuture<'static, Result<(), CloseReason>> + Send + Sync>;

/// Accepts connections on `listener` and serves each with `handler` until `stop` changes;
/// then stops accepting, and waits up to `settings.drain` for the open connections to finish
/// (each stops at its next request) before it closes the ones left.
pub async fn serve(
    listener: TcpListener,
    settings: ListenerSettings,
    quotas: Arc<ConnectionQuotas>,
    handler: Handler,
    mut stop: watch::Receiver<bool>,
) {
    let mut open = JoinSet::new();
    let _reloads = settings
        .tls
        .as_ref()
        .and_then(|t| t.watch_files())
        .map(AbortOnDrop);
    {
        // The next accept lives across the loop's turns, so a connection that closes meanwhile
        // does not cost it its place under `max.connections` or its creation-rate token.
        let mut next = std::pin::pin!(accept_next(&listener, &settings, &quotas));
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                Some(done) = open.join_next() => {
                    if let Err(e) = done {
                        tracing::error!(listener = %settings.name, error = %e, "a connection failed");
                    }
                }
                (permit, accepted) = &mut next => {
                    match accepted {
                        Ok((stream, peer)) => {
                            let conn = Connection {
                                stream: Stream::Plain(stream),
                                peer,
                                principal: ANONYMOUS.to_string(),
                                stop: stop.clone(),
                                max_request_bytes: settings.max_request_bytes,
                                idle: settings.idle,
                            };
                            admit(&mut open, conn, permit, &quotas, &settings, &handler);
                        }
                        Err(e) => {
                            tracing::warn!(listener = %settings.name, error = %e, "accept failed");
                            drop(permit);
                            tokio::time::sleep(ACCEPT_BACKOFF).await;
                        }
                    }
                    next.set(accept_next(&listener, &settings, &quotas));
                }
            }
        }
    }
    drop(listener);
    drain(open, settings.drain, &settings.name).await;
}

/// Stops a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for room under the listener's and the broker's creation rates and `max.connections`,
/// then accepts the next connection.
async fn accept_next(
    listener: &TcpListener,
    settings: &ListenerSettings,
    quotas: &ConnectionQuotas,
) -> (
    Option<OwnedSemaphorePermit>,
    std::io::Result<(TcpStream, SocketAddr)>,
) {
    if let Some(rate) = &settings.creation_rate {
        rate.acquire().await;
    }
    let permit = quotas.slot(settings.protected).await;
    (permit, listener.accept().await)
}

/// Counts the connection against its address and starts serving it (after its TLS handshake
/// on a TLS listener), or closes it at once when the address is at its limit.
fn admit(
    open: &mut JoinSet<()>,
    conn: Connection,
    permit: Option<OwnedSemaphorePermit>,
    quotas: &ConnectionQuotas,
    settings: &ListenerSettings,
    handler: &Handler,
) {
    let listener = settings.name.clone();
    let slot = match quotas.claim(conn.peer.ip()) {
        Ok(slot) => slot,
        Err(refused) => {
            tracing::info!(%listener, "{refused}");
            return;
        }
    };
    let throttle = match settings.protected {
        true => Duration::ZERO,
        false => quotas.ip_throttle(conn.peer.ip()),
    };
    if !throttle.is_zero() {
        let peer = conn.peer;
        tracing::debug!(%listener, %peer, ?throttle, "over its connection_creation_rate: held, then closed");
        open.spawn(async move {
            let _held = (permit, slot, conn);
            tokio::time::sleep(throttle).await;
        });
        return;
    }
    if let Stream::Plain(tcp) = &conn.stream {
        let _ = tcp.set_nodelay(true);
    }
    let peer = conn.peer;
    let (tls, handler) = (settings.tls.clone(), handler.clone());
    open.spawn(async move {
        let _held = (permit, slot);
        let served = match tls {
            Some(tls) => match conn.handshake(&tls).await {
                Ok(Some(conn)) => handler(conn).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            },
            None => handler(conn).await,
        };
        match served {
            Ok(()) => tracing::debug!(%listener, %peer, "connection closed"),
            Err(reason @ CloseReason::Idle(_)) => {
                tracing::debug!(%listener, %peer, %reason, "closing connection")
            }
            Err(reason) => tracing::info!(%listener, %peer, %reason, "closing connection"),
        }
    });
}

/// Waits up to `bound` for the open connections to end, then closes the rest.
async fn drain(mut open: JoinSet<()>, bound: Duration, listener: &str) {
    if open.is_empty() {
        return;
    }
    let ended =
        tokio::time::timeout(bound, async { while open.join_next().await.is_some() {} }).await;
    if ended.is_err() {
        tracing::warn!(
            %listener,
            left = open.len(),
            waited_ms = bound.as_millis() as u64,
            "connections still serving a request at shutdown; closing them"
        );
        open.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::AsyncReadExt;
    use tokio::sync::{mpsc, Notify};

    use super::*;
    use crate::protocol::wire::read_frame;
    use crate::security::tls::test_pki::{client_config, ssl_config, Leaf, Pki};

    const WAIT: Duration = Duration::from_secs(5);

    fn settings() -> ListenerSettings {
        ListenerSettings {
            drain: WAIT,
            ..ListenerSettings::plaintext("test", 1024)
        }
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as i32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    /// Answers every request with its own bytes.
    fn echo() -> Handler {
        Arc::new(|mut conn: Connection| {
            Box::pin(async move {
                while let Some(frame) = conn.next_request().await? {
                    conn.write(&framed(&frame)).await?;
                }
                Ok(())
            })
        })
    }

    struct Running {
        addr: SocketAddr,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(
        settings: ListenerSettings,
        quotas: Arc<ConnectionQuotas>,
        handler: Handler,
    ) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, settings, quotas, handler, rx));
        Running { addr, stop, task }
    }

    /// Sends `body` as a request; the answer, or `None` when there is none within `within`.
    async fn call(s: &mut TcpStream, body: &[u8], within: Duration) -> Option<Bytes> {
        s.write_all(&framed(body)).await.ok()?;
        answer(s, within).await
    }

    async fn answer(s: &mut TcpStream, within: Duration) -> Option<Bytes> {
        tokio::time::timeout(within, read_frame(s, 0, 1024))
            .await
            .ok()?
            .ok()
    }

    /// Whether the server closed `s` within `WAIT`, after whatever it sent (a TLS alert).
    async fn closed(s: &mut TcpStream) -> bool {
        let mut rest = Vec::new();
        match tokio::time::timeout(WAIT, s.read_to_end(&mut rest)).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Err(_) => false,
        }
    }

    async fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Opens `n` connections at once, each sending one request; how long after the start each
    /// was answered (every one must be).
    async fn answered_after(addr: SocketAddr, n: usize) -> Vec<Duration> {
        let start = Instant::now();
        let clients: Vec<_> = (0..n)
            .map(|i| {
                tokio::spawn(async move {
                    let mut s = TcpStream::connect(addr).await.unwrap();
                    let body = [i as u8];
                    let answer = call(&mut s, &body, Duration::from_secs(20)).await;
                    assert_eq!(
                        answer.as_deref(),
                        Some(&body[..]),
                        "connection {i} answered"
                    );
                    start.elapsed()
                })
            })
            .collect();
        let mut out = Vec::new();
        for c in clients {
            out.push(c.await.unwrap());
        }
        out.sort();
        out
    }

    #[tokio::test]
    async fn connections_over_the_creation_rate_wait_and_are_then_served() {
        // 12 connections at 5 a second: 5 at once, then one every 200 ms, so the last is
        // accepted 1.4 s in. On the listener's own key and broker-wide alike.
        for (listener_rate, broker_rate) in [(Some(5), None), (None, Some(5))] {
            let settings = ListenerSettings {
                creation_rate: listener_rate.and_then(CreationRate::new).map(Arc::new),
                ..settings()
            };
            let quotas = ConnectionQuotas::with_creation_rate(
                usize::MAX,
                usize::MAX,
                HashMap::new(),
                broker_rate.and_then(CreationRate::new),
            );
            let r = start(settings, quotas, echo()).await;
            let times = answered_after(r.addr, 12).await;
            assert!(times[11] >= Duration::from_millis(1300), "{times:?}");
        }
        // The protected (inter-broker) listener is not held back by the broker-wide rate (at 1
        // a second, the sixth connection would wait 5 s).
        let protected = ListenerSettings {
            protected: true,
            ..settings()
        };
        let quotas = ConnectionQuotas::with_creation_rate(
            usize::MAX,
            usize::MAX,
            HashMap::new(),
            CreationRate::new(1),
        );
        let r = start(protected, quotas, echo()).await;
        let times = answered_after(r.addr, 6).await;
        assert!(times[5] < Duration::from_millis(3000), "{times:?}");
    }

    #[tokio::test]
    async fn a_connection_over_its_address_limit_is_closed_and_a_closed_one_frees_its_place() {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        for quotas in [
            ConnectionQuotas::new(usize::MAX, 1, HashMap::new()),
            // max.connections.per.ip=0 with an override for this address.
            ConnectionQuotas::new(usize::MAX, 0, HashMap::from([(local, 1)])),
        ] {
            let r = start(settings(), quotas.clone(), echo()).await;
            let mut first = TcpStream::connect(r.addr).await.unwrap();
            assert_eq!(
                call(&mut first, b"a", WAIT).await.as_deref(),
                Some(&b"a"[..])
            );
            let mut second = TcpStream::connect(r.addr).await.unwrap();
            assert!(
                closed(&mut second).await,
                "the second connection is refused"
            );
            assert_eq!(
                call(&mut first, b"b", WAIT).await.as_deref(),
                Some(&b"b"[..])
            );
            assert_eq!(quotas.count(local), 1);
            drop(first);
            wait_until("the first connection is counted out", || {
                quotas.count(local) == 0
            })
            .await;
            let mut third = TcpStream::connect(r.addr).await.unwrap();
            assert_eq!(
                call(&mut third, b"c", WAIT).await.as_deref(),
                Some(&b"c"[..])
            );
        }
    }

    #[tokio::test]
    async fn at_max_connections_the_next_connection_waits_until_one_closes() {
        let r = start(
            settings(),
            ConnectionQuotas::new(1, usize::MAX, HashMap::new()),
            echo(),
        )
        .await;
        let mut first = TcpStream::connect(r.addr).await.unwrap();
        assert!(call(&mut first, b"a", WAIT).await.is_some());
        let mut second = TcpStream::connect(r.addr).await.unwrap();
        assert_eq!(
            call(&mut second, b"b", Duration::from_millis(300)).await,
            None,
            "not served while the first is open"
        );
        drop(first);
        assert_eq!(answer(&mut second, WAIT).await.as_deref(), Some(&b"b"[..]));
    }

    #[tokio::test]
    async fn a_protected_listener_is_not_held_back_by_max_connections() {
        let protected = ListenerSettings {
            protected: true,
            ..settings()
        };
        let quotas = ConnectionQuotas::new(0, usize::MAX, HashMap::new());
        let r = start(protected, quotas, echo()).await;
        let mut s = TcpStream::connect(r.addr).await.unwrap();
        assert!(call(&mut s, b"a", WAIT).await.is_some());
    }

    #[tokio::test]
    async fn a_connection_without_a_request_for_the_idle_timeout_is_closed() {
        let idle = Duration::from_millis(200);
        let s = ListenerSettings {
            idle: Some(idle),
            ..settings()
        };
        let r = start(s, ConnectionQuotas::unlimited(), echo()).await;
        let mut busy = TcpStream::connect(r.addr).await.unwrap();
        let mut quiet = TcpStream::connect(r.addr).await.unwrap();
        assert!(call(&mut quiet, b"a", WAIT).await.is_some());
        let last_request = Instant::now();
        // The busy connection asks every 20 ms, for three idle timeouts.
        while last_request.elapsed() < idle * 3 {
            assert!(call(&mut busy, b"b", WAIT).await.is_some());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(closed(&mut quiet).await);
        assert!(last_request.elapsed() >= idle);
        assert!(call(&mut busy, b"c", WAIT).await.is_some());
    }

    /// A handler that tells the test when a request arrived and answers it once released.
    fn held(arrived: mpsc::UnboundedSender<()>, release: Arc<Notify>) -> Handler {
        Arc::new(move |mut conn: Connection| {
            let (arrived, release) = (arrived.clone(), release.clone());
            Box::pin(async move {
                while let Some(frame) = conn.next_request().await? {
                    let _ = arrived.send(());
                    release.notified().await;
                    conn.write(&framed(&frame)).await?;
                }
                Ok(())
            })
        })
    }

    #[tokio::test]
    async fn a_stop_stops_accepting_and_lets_the_request_in_hand_be_answered() {
        let (arrived, mut arrivals) = mpsc::unbounded_channel();
        let release = Arc::new(Notify::new());
        let r = start(
            settings(),
            ConnectionQuotas::unlimited(),
            held(arrived, release.clone()),
        )
        .await;
        let mut busy = TcpStream::connect(r.addr).await.unwrap();
        let mut idle = TcpStream::connect(r.addr).await.unwrap();
        busy.write_all(&framed(b"in flight")).await.unwrap();
        arrivals.recv().await.unwrap();
        r.stop.send(true).unwrap();
        assert!(closed(&mut idle).await, "an idle connection closes at once");
        let deadline = Instant::now() + WAIT;
        while TcpStream::connect(r.addr).await.is_ok() {
            assert!(Instant::now() < deadline, "still accepting after stop");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!r.task.is_finished(), "the drain waits for the request");
        release.notify_one();
        assert_eq!(
            answer(&mut busy, WAIT).await.as_deref(),
            Some(&b"in flight"[..])
        );
        assert!(closed(&mut busy).await, "then the connection closes");
        tokio::time::timeout(WAIT, r.task).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn the_drain_on_stop_is_bounded() {
        let (arrived, mut arrivals) = mpsc::unbounded_channel();
        let drain = Duration::from_millis(300);
        let s = ListenerSettings {
            drain,
            ..settings()
        };
        let never = Arc::new(Notify::new());
        let r = start(s, ConnectionQuotas::unlimited(), held(arrived, never)).await;
        let mut stuck = TcpStream::connect(r.addr).await.unwrap();
        stuck.write_all(&framed(b"never answered")).await.unwrap();
        arrivals.recv().await.unwrap();
        let stopped = Instant::now();
        r.stop.send(true).unwrap();
        tokio::time::timeout(WAIT, r.task).await.unwrap().unwrap();
        assert!(stopped.elapsed() >= drain, "{:?}", stopped.elapsed());
        assert!(closed(&mut stuck).await);
    }

    #[tokio::test]
    async fn override_hosts_resolve_to_addresses() {
        let o = ConnectionQuotas::resolve(&[
            ("10.1.2.3".to_string(), 2),
            ("::1".to_string(), 4),
            ("localhost".to_string(), 3),
        ])
        .await
        .unwrap();
        assert_eq!(o.get(&"10.1.2.3".parse().unwrap()), Some(&2));
        let loopback = [IpAddr::from([127, 0, 0, 1]), "::1".parse().unwrap()];
        assert!(
            loopback.iter().any(|ip| o.get(ip) == Some(&3)),
            "localhost resolves to a loopback address: {o:?}"
        );
    }

    #[test]
    fn an_ipv4_mapped_peer_counts_as_its_ipv4_address() {
        let quotas = ConnectionQuotas::new(
            usize::MAX,
            usize::MAX,
            HashMap::from([(IpAddr::from([10, 0, 0, 1]), 1)]),
        );
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let _held = quotas.claim(mapped).unwrap();
        assert_eq!(quotas.count(IpAddr::from([10, 0, 0, 1])), 1);
        assert!(quotas.claim(IpAddr::from([10, 0, 0, 1])).is_err());
    }

    /// A TLS listener's server side: a certificate for localhost signed by `pki`'s CA, which
    /// the truststore holds; `extra` settings added (client auth, mapping rules).
    fn tls_server(handshake: Duration, pki: &Pki, extra: &[(&str, &str)]) -> Arc<TlsServer> {
        let (server, ca) = (pki.leaf("broker"), pki.ca_pem());
        let mut kv = vec![
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", server.cert.as_str()),
            ("ssl.keystore.key", server.key.as_str()),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.certificates", ca.as_str()),
        ];
        kv.extend_from_slice(extra);
        let tls = TlsServer::new(ssl_config(&kv)).unwrap();
        Arc::new(tls.with_timings(handshake, WAIT))
    }

    fn tls_settings(tls: Arc<TlsServer>) -> ListenerSettings {
        ListenerSettings {
            tls: Some(tls),
            ..settings()
        }
    }

    /// A client of the TLS listener at `addr` trusting `pki`'s CA, presenting `client`.
    async fn tls_client(
        addr: SocketAddr,
        pki: &Pki,
        client: Option<&Leaf>,
    ) -> tokio_rustls::client::TlsStream<TcpStream> {
        let connector = tokio_rustls::TlsConnector::from(client_config(&pki.ca_pem(), client));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        connector.connect(name, tcp).await.unwrap()
    }

    /// Answers every request with the connection's principal.
    fn whoami() -> Handler {
        Arc::new(|mut conn: Connection| {
            Box::pin(async move {
                while conn.next_request().await?.is_some() {
                    conn.write(&framed(conn.principal().as_bytes())).await?;
                }
                Ok(())
            })
        })
    }

    /// The answer of the listener at `addr` to one request from a client presenting `client`.
    async fn whoami_over_tls(addr: SocketAddr, pki: &Pki, client: Option<&Leaf>) -> Bytes {
        let mut s = tls_client(addr, pki, client).await;
        s.write_all(&framed(b"who")).await.unwrap();
        tokio::time::timeout(WAIT, read_frame(&mut s, 0, 1024))
            .await
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn a_tls_listener_serves_requests_after_the_handshake_with_the_principal() {
        let pki = Pki::new("ca");
        let requested = [("ssl.client.auth", "requested")];
        let tls = tls_server(WAIT, &pki, &requested);
        let r = start(tls_settings(tls), ConnectionQuotas::unlimited(), whoami()).await;
        let alice = pki.leaf("alice");
        let answer = whoami_over_tls(r.addr, &pki, Some(&alice)).await;
        assert_eq!(&answer[..], b"User:CN=alice,O=acme");
        let answer = whoami_over_tls(r.addr, &pki, None).await;
        assert_eq!(&answer[..], b"User:ANONYMOUS");
    }

    #[tokio::test]
    async fn a_tls_listener_maps_the_client_certificate_by_the_mapping_rules() {
        let pki = Pki::new("ca");
        let required = [
            ("ssl.client.auth", "required"),
            (
                "ssl.principal.mapping.rules",
                "RULE:^CN=(.*?),O=acme$/$1/U,DEFAULT",
            ),
        ];
        let tls = tls_server(WAIT, &pki, &required);
        let r = start(tls_settings(tls), ConnectionQuotas::unlimited(), whoami()).await;
        let bob = pki.leaf("bob");
        let answer = whoami_over_tls(r.addr, &pki, Some(&bob)).await;
        assert_eq!(&answer[..], b"User:BOB");
    }

    #[tokio::test]
    async fn a_failed_or_slow_handshake_closes_only_that_connection() {
        let pki = Pki::new("ca");
        let tls = tls_server(Duration::from_millis(300), &pki, &[]);
        let r = start(tls_settings(tls), ConnectionQuotas::unlimited(), whoami()).await;
        // A plaintext Kafka client on the TLS port.
        let mut plain = TcpStream::connect(r.addr).await.unwrap();
        plain.write_all(&framed(b"\x00\x12\x00\x03")).await.unwrap();
        assert!(closed(&mut plain).await, "a plaintext client is closed");
        // A client that never starts its handshake.
        let mut silent = TcpStream::connect(r.addr).await.unwrap();
        assert!(closed(&mut silent).await, "the handshake timeout closes it");
        let answer = whoami_over_tls(r.addr, &pki, None).await;
        assert!(!answer.is_empty(), "the listener still serves");
    }
}
