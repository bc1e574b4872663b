//! The network side: listeners on their own runtime of `num.network.threads` threads, framing
//! with `socket.request.max.bytes`, one request in flight per connection (responses stay in
//! order, as Kafka's muted channels keep them), a bounded request queue (`queued.max.requests`)
//! drained by `num.io.threads` request handlers, a fetch runtime for consumer fetches,
//! per-request timings and the metrics endpoint. Accepting, the connection limits, the idle
//! timeout and the drain on stop are `protocol::listener`'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::auth::Session;
use super::{Broker, Reply};
use crate::config::broker::{BrokerConfig, Listener};
use crate::metrics::RequestTimes;
use crate::protocol::creation_rate::CreationRate;
use crate::protocol::listener::{
    serve, CloseReason, Connection, ConnectionQuotas, Handler, ListenerSettings, DEFAULT_DRAIN,
};
use crate::protocol::sasl::{self, SaslAuthenticator, Turn};
use crate::protocol::{FrameError, RawHeader};
use crate::security::sasl::ScramMechanism;
use crate::security::tls::TlsServer;

/// One request on its way to a handler.
struct Job {
    frame: Bytes,
    session: Arc<Session>,
    /// When the request's first bytes arrived (queue time counts from here, not from dequeue).
    arrived: Instant,
    respond: oneshot::Sender<Answer>,
}

/// A handler's answer with what the connection needs for the request metrics.
struct Answer {
    label: &'static str,
    reply: Result<Option<Bytes>, FrameError>,
    times: RequestTimes,
}

/// A running broker's network side.
pub struct Server {
    pub addrs: Vec<SocketAddr>,
    pub metrics_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    /// The accept loops, which end once their connections have drained.
    listeners: Vec<tokio::task::JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    network: BackgroundRuntime,
    fetch: BackgroundRuntime,
}

/// A runtime of the server's own; dropped (on stop, or when starting fails half-way) it shuts
/// down in the background, which is allowed inside the async context that owns it.
struct BackgroundRuntime(Option<tokio::runtime::Runtime>);

impl BackgroundRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("running until dropped").handle()
    }
}

impl Drop for BackgroundRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// One fetch thread per core, at most `num.io.threads`.
fn fetch_threads(io_threads: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(io_threads)
        .max(1)
}

/// One client listener, bound; with its TLS side when it is an SSL or SASL_SSL listener.
struct BoundListener {
    name: String,
    socket: std::net::TcpListener,
    local: SocketAddr,
    tls: Option<Arc<TlsServer>>,
}

/// A broker's listeners bound and its runtimes started, before the broker exists: the broker
/// is built with the ports bound here (advertised, and registered with the controller) and the
/// fetch runtime, then `serve` starts answering.
pub struct BoundServer {
    listeners: Vec<BoundListener>,
    advertised: Vec<Listener>,
    quotas: Arc<ConnectionQuotas>,
    network: BackgroundRuntime,
    fetch: BackgroundRuntime,
}

impl BoundServer {
    /// The advertised listeners, a port 0 replaced by the port bound.
    pub fn advertised_listeners(&self) -> Vec<Listener> {
        self.advertised.clone()
    }

    /// Where consumer fetches are read and encoded.
    pub fn fetch_pool(&self) -> tokio::runtime::Handle {
        self.fetch.handle().clone()
    }

    /// Starts the request handlers, the accept loops and the metrics endpoint for `broker`.
    pub async fn serve(self, broker: Arc<Broker>) -> Result<Server, super::BrokerError> {
        let (shutdown, stop) = watch::channel(false);
        let weak = Arc::downgrade(&broker);
        self.quotas.set_ip_rates(Arc::new(move |ip| {
            let broker = weak.upgrade()?;
            super::quotas::ip_connection_rate(broker.image().quotas(), ip)
        }));
        let (tx, rx) = async_channel::bounded::<Job>(broker.config.queued_max_requests);
        let mut tasks = Vec::new();
        for i in 0..broker.config.num_io_threads {
            let rx = rx.clone();
            let broker = broker.clone();
            tasks.push(tokio::spawn(async move { handler(i, broker, rx).await }));
        }
        let mut addrs = Vec::new();
        let mut listeners = Vec::new();
        for l in self.listeners {
            addrs.push(l.local);
            let settings = listener_settings(&broker.config, &l.name, l.tls);
            let (quotas, stop) = (self.quotas.clone(), stop.clone());
            let handler = connection_handler(broker.clone(), tx.clone(), &l.name);
            let socket = l.socket;
            listeners.push(self.network.handle().spawn(async move {
                match TcpListener::from_std(socket) {
                    Ok(listener) => serve(listener, settings, quotas, handler, stop).await,
                    Err(e) => tracing::error!(error = %e, "cannot register the listener"),
                }
            }));
        }
        let refresh = refresh_hook(broker.clone(), tx.clone(), self.network.handle().clone());
        let (metrics_addr, metrics_task) = serve_metrics(&broker, refresh).await?;
        tracing::info!(address = %metrics_addr, "metrics on /metrics, /healthz, /readyz");
        tasks.push(metrics_task);
        Ok(Server {
            addrs,
            metrics_addr,
            shutdown,
            listeners,
            tasks,
            network: self.network,
            fetch: self.fetch,
        })
    }
}

impl Server {
    /// Starts the network and fetch runtimes and binds every client listener (all of them
    /// share one `ConnectionQuotas`: `max.connections` is broker-wide, as in Kafka). Port 0
    /// binds an ephemeral port, which is then advertised.
    pub async fn bind(config: &BrokerConfig) -> Result<BoundServer, super::BrokerError> {
        let network = runtime("evenkeel-network", config.num_network_threads)?;
        let fetch = runtime("evenkeel-fetch", fetch_threads(config.num_io_threads))?;
        let c = &config.connections;
        let overrides = ConnectionQuotas::resolve(&c.max_connections_per_ip_overrides).await?;
        let quotas = ConnectionQuotas::with_creation_rate(
            c.max_connections,
            c.max_connections_per_ip,
            overrides,
            CreationRate::new(c.max_connection_creation_rate),
        );
        let mut advertised = config.advertised_listeners.clone();
        let mut listeners = Vec::new();
        for (i, l) in config.listeners.iter().enumerate() {
            let (std_listener, local) = bind_one(l)?;
            let shown = advertised
                .iter()
                .position(|a| a.name == l.name)
                .or((i == 0).then_some(0));
            if let Some(a) = shown.and_then(|j| advertised.get_mut(j)) {
                if a.port == 0 {
                    a.port = local.port();
                }
            }
            let tls = tls_server(config, &l.name)?;
            let protocol = config.cluster.security_protocols.protocol(&l.name);
            tracing::info!(listener = %l.name, address = %local, %protocol, "listening");
            listeners.push(BoundListener {
                name: l.name.clone(),
                socket: std_listener,
                local,
                tls,
            });
        }
        Ok(BoundServer {
            listeners,
            advertised,
            quotas,
            network,
            fetch,
        })
    }

    /// Stops accepting, lets the open connections finish the request in hand (bounded by
    /// the listeners' drain) while the request handlers still run, then stops the rest.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        let bound = DEFAULT_DRAIN + Duration::from_secs(1);
        for mut t in self.listeners.drain(..) {
            if tokio::time::timeout(bound, &mut t).await.is_err() {
                t.abort();
            }
        }
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        drop(self.network);
        drop(self.fetch);
    }
}

/// A multi-threaded runtime of the server's own.
fn runtime(name: &str, threads: usize) -> Result<BackgroundRuntime, super::BrokerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|source| super::BrokerError::Bind {
            addr: format!("{name} runtime"),
            source,
        })?;
    Ok(BackgroundRuntime(Some(rt)))
}

/// Binds one client listener (not yet accepting): the socket and the address it got.
fn bind_one(l: &Listener) -> Result<(std::net::TcpListener, SocketAddr), super::BrokerError> {
    let host = if l.host.is_empty() {
        "0.0.0.0"
    } else {
        &l.host
    };
    let addr = format!("{host}:{}", l.port);
    let bind_err = |source| super::BrokerError::Bind {
        addr: addr.clone(),
        source,
    };
    let std_listener = std::net::TcpListener::bind(&addr).map_err(bind_err)?;
    std_listener.set_nonblocking(true).map_err(bind_err)?;
    let local = std_listener.local_addr().map_err(bind_err)?;
    Ok((std_listener, local))
}

/// How this broker connects to other brokers' inter-broker listener: that listener's
/// security protocol, its `ssl.*` settings (client side, read now so that a bad one stops the
/// start) and the broker's inter-broker SASL login.
pub fn inter_broker_security(
    config: &BrokerConfig,
) -> Result<crate::client::ClientSecurity, super::BrokerError> {
    let listener = &config.cluster.inter_broker_listener_name;
    crate::client::ClientSecurity::for_listener(
        config.cluster.security_protocols.protocol(listener),
        config.ssl.get(listener),
        config.auth.inter_broker.as_ref(),
    )
    .map_err(|source| super::BrokerError::InterBroker {
        listener: listener.clone(),
        source,
    })
}

/// The TLS side of listener `name` when it is an SSL or SASL_SSL listener (a client listener,
/// or the controller listener): its key and certificates read now, so that a bad one stops the
/// start.
pub fn tls_server(
    config: &BrokerConfig,
    name: &str,
) -> Result<Option<Arc<TlsServer>>, super::BrokerError> {
    let Some(ssl) = config.ssl.get(name) else {
        return Ok(None);
    };
    let tls = TlsServer::new(ssl.clone()).map_err(|source| super::BrokerError::Tls {
        listener: name.to_string(),
        source,
    })?;
    Ok(Some(Arc::new(tls)))
}

/// How the client listener `name` serves its connections. The inter-broker listener, when
/// there are several, is not held back by `max.connections`, so that replication goes on
/// when clients fill the broker (Kafka's protected listener).
fn listener_settings(
    config: &BrokerConfig,
    name: &str,
    tls: Option<Arc<TlsServer>>,
) -> ListenerSettings {
    ListenerSettings {
        name: name.to_string(),
        tls,
        max_request_bytes: config.socket_request_max_bytes,
        idle: config.connections.idle_timeout(),
        protected: config.listeners.len() > 1 && config.cluster.inter_broker_listener_name == name,
        drain: DEFAULT_DRAIN,
        creation_rate: config
            .connections
            .listener_creation_rate(name)
            .and_then(CreationRate::new)
            .map(Arc::new),
    }
}

/// Serves each accepted connection of listener `name` through the request queue, after SASL
/// authentication where the listener's protocol asks for it.
fn connection_handler(
    broker: Arc<Broker>,
    queue: async_channel::Sender<Job>,
    name: &str,
) -> Handler {
    let sasl = broker.config.auth.sasl.get(name).cloned().map(Arc::new);
    let reauth_ms = broker.config.auth.connections_max_reauth_ms;
    let name = name.to_string();
    Arc::new(move |conn| {
        let authenticator = sasl
            .clone()
            .map(|s| SaslAuthenticator::new(&name, s, reauth_ms));
        Box::pin(connection(
            conn,
            broker.clone(),
            queue.clone(),
            name.clone(),
            authenticator,
        ))
    })
}

/// Refreshes the gauges that describe state, at scrape time.
fn refresh_hook(
    broker: Arc<Broker>,
    queue: async_channel::Sender<Job>,
    network: tokio::runtime::Handle,
) -> Arc<dyn Fn() + Send + Sync> {
    Arc::new(move || {
        let m = &broker.metrics;
        m.request_queue_size.set(queue.len() as i64);
        let rt = network.metrics();
        let busy: u64 = (0..rt.num_workers())
            .map(|w| rt.worker_total_busy_duration(w).as_nanos() as u64)
            .sum();
        m.network_idle
            .set(m.network_meter.idle_fraction(rt.num_workers(), Some(busy)));
        m.handler_idle.set(
            m.handler_meter
                .idle_fraction(broker.config.num_io_threads, None),
        );
        let (fetch, produce) = broker.replicas.purgatory_sizes();
        m.purgatory_size
            .with_label_values(&["Fetch"])
            .set(fetch as f64);
        m.purgatory_size
            .with_label_values(&["Produce"])
            .set(produce as f64);
        let sessions = broker.fetch_sessions.stats();
        m.fetch_sessions.set(sessions.sessions as i64);
        m.fetch_session_partitions
            .set(sessions.partitions_cached as i64);
        let g = broker.replicas.gauges();
        m.partition_count.set(g.partitions as i64);
        m.log_size.reset();
        m.partition_consumer_fetches.reset();
        for load in &g.loads {
            let labels = [load.tp.topic.as_str(), &load.tp.partition.to_string()];
            if let Some(fetches) = load.consumer_fetches {
                m.partition_consumer_fetches
                    .with_label_values(&labels)
                    .inc_by(fetches);
            }
            m.log_size.with_label_values(&labels).set(load.size as f64);
        }
        m.leader_count.set(g.leaders);
        let image = broker.published.borrow().clone();
        m.global_topic_count.set(image.topic_count() as i64);
        m.global_partition_count.set(image.partition_count() as i64);
        m.offline_partitions
            .set(image.offline_partition_count() as i64);
        m.under_replicated.set(g.under_replicated);
        m.under_min_isr.set(g.under_min_isr);
        m.at_min_isr.set(g.at_min_isr);
        m.replica_fetcher_max_lag.set(g.max_follower_lag);
        let dir = broker.logs.log_dir().display().to_string();
        m.log_cleaner.set(&broker.logs.cleaner_metrics(), &dir);
    })
}

/// Serves /metrics on the configured address. The default port, when another process (another
/// node on the same machine) holds it, gives way to a free port, with a warning; an address
/// set in the config must be free.
async fn serve_metrics(
    broker: &Arc<Broker>,
    refresh: Arc<dyn Fn() + Send + Sync>,
) -> Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>), super::BrokerError> {
    let bind_err = |addr: String| move |source| super::BrokerError::Bind { addr, source };
    let want = broker.config.metrics_address;
    match crate::metrics::serve(want, broker.metrics.clone(), refresh.clone()).await {
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse && !broker.config.metrics_address_set =>
        {
            let any = std::net::SocketAddr::new(want.ip(), 0);
            let served = crate::metrics::serve(any, broker.metrics.clone(), refresh)
                .await
                .map_err(bind_err(any.to_string()))?;
            tracing::warn!(
                default = %want,
                address = %served.0,
                "the default metrics port is taken; serving /metrics on a free port \
                 (set evenkeel.metrics.address to choose one)"
            );
            Ok(served)
        }
        other => other.map_err(bind_err(want.to_string())),
    }
}

async fn handler(id: usize, broker: Arc<Broker>, rx: async_channel::Receiver<Job>) {
    while let Ok(job) = rx.recv().await {
        let dequeued = Instant::now();
        let handled = broker.handle(job.frame, &job.session);
        let local = dequeued.elapsed();
        broker.metrics.handler_meter.add_busy(local);
        let mut times = RequestTimes {
            queue: dequeued.duration_since(job.arrived),
            local,
            ..Default::default()
        };
        let label = handled.label;
        match handled.reply {
            Ok(Reply::Now(r)) => {
                let _ = job.respond.send(Answer {
                    label,
                    reply: Ok(r),
                    times,
                });
            }
            Ok(Reply::Later(fut)) => {
                // Parked: the handler is free at once; the purgatory wakes the future.
                tokio::spawn(async move {
                    let parked = Instant::now();
                    let reply = fut.await;
                    times.remote = parked.elapsed();
                    let _ = job.respond.send(Answer {
                        label,
                        reply,
                        times,
                    });
                });
            }
            Err(e) => {
                let _ = job.respond.send(Answer {
                    label,
                    reply: Err(e),
                    times,
                });
            }
        }
    }
    tracing::debug!(handler = id, "request handler stopped");
}

/// A SASL listener's turn at a request: `Ok(true)` when the authenticator answered it (after a
/// login, `session` names the principal and full-size frames are read again), `Ok(false)` when
/// it is served as usual; an error closes the connection.
async fn sasl_turn(
    conn: &mut Connection,
    auth: &mut SaslAuthenticator,
    broker: &Arc<Broker>,
    frame: &Bytes,
    raw: Option<RawHeader>,
    session: &mut Arc<Session>,
) -> Result<bool, CloseReason> {
    let step = {
        let scram = |user: &str, m: ScramMechanism| {
            let image = broker.published.borrow().clone();
            let c = image.security().scram_credential(user, m.type_code());
            c.map(|c| c.credential())
        };
        auth.on_request(&scram, frame, raw)
    };
    let logins = |counter: &prometheus::IntCounterVec| {
        counter.with_label_values(&[&session.listener]).inc();
    };
    match sasl::answer(conn, step).await? {
        Turn::Serve => Ok(false),
        Turn::Answered => Ok(true),
        Turn::LoggedIn(principal) => {
            logins(&broker.metrics.sasl_authentications);
            *session = Arc::new(Session::new(principal, session.peer, &session.listener));
            conn.set_max_request_bytes(broker.config.socket_request_max_bytes);
            Ok(true)
        }
        Turn::Refused(reason) => {
            logins(&broker.metrics.sasl_authentication_failures);
            tokio::time::sleep(broker.config.connections.failed_authentication_delay()).await;
            Err(CloseReason::Handler(reason))
        }
    }
}

/// Serves one connection until the peer closes it, a frame is bad, or the broker stops.
async fn connection(
    mut conn: Connection,
    broker: Arc<Broker>,
    queue: async_channel::Sender<Job>,
    listener: String,
    mut sasl: Option<SaslAuthenticator>,
) -> Result<(), CloseReason> {
    let peer = conn.peer();
    let mut session = Arc::new(Session::new(conn.principal(), Some(peer), &listener));
    // Until a SASL client has logged in it may send only small frames.
    if sasl.is_some() {
        conn.set_max_request_bytes(broker.config.auth.sasl_server_max_receive_size);
    }
    loop {
        let Some(frame) = conn.next_request().await? else {
            return Ok(());
        };
        let raw = crate::protocol::peek_header(&frame).ok();
        if let Some(auth) = sasl.as_mut() {
            if sasl_turn(&mut conn, auth, &broker, &frame, raw, &mut session).await? {
                continue;
            }
        }
        let arrived = Instant::now();
        let version = raw.map_or(-1, |h| h.api_version);
        tracing::trace!(%peer, key = raw.map(|h| h.api_key), correlation_id = raw.map(|h| h.correlation_id), "request");
        let (tx, mut rx) = oneshot::channel();
        queue
            .send(Job {
                frame,
                session: session.clone(),
                arrived,
                respond: tx,
            })
            .await
            .map_err(|_| CloseReason::Handler("the broker is shutting down".into()))?;
        let answer = match tokio::time::timeout(Duration::from_secs(5), &mut rx).await {
            Ok(a) => a,
            Err(_) => {
                tracing::warn!(%peer, key = raw.map(|h| h.api_key), correlation_id = raw.map(|h| h.correlation_id), "a request has waited 5 s for its answer");
                rx.await
            }
        }
        .map_err(|_| CloseReason::Handler("the request was dropped".into()))?;
        let mut times = answer.times;
        tracing::trace!(%peer, request = answer.label, correlation_id = raw.map(|h| h.correlation_id), "answered");
        match answer.reply {
            Ok(Some(resp)) => {
                let t = Instant::now();
                conn.write(&resp).await?;
                times.send = t.elapsed();
            }
            Ok(None) => {}
            Err(e) => return Err(CloseReason::Handler(e.to_string())),
        }
        broker.metrics.observe(answer.label, version, times);
        // A client over its quota: read nothing more from it until its throttle time is over
        // (Kafka mutes the channel after sending the response, KIP-219).
        let mute = session.take_mute();
        if !mute.is_zero() {
            tokio::time::sleep(mute).await;
        }
    }
}
