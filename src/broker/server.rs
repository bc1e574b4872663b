//! The network side: listeners, framing with `socket.request.max.bytes`, one request in flight
//! per connection (responses stay in order, as Kafka's muted channels keep them), a bounded
//! request queue (`queued.max.requests`) and `num.io.threads` request handlers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

use super::{Broker, Reply};
use crate::protocol::FrameError;

/// One request on its way to a handler.
struct Job {
    frame: Bytes,
    /// When the request's first bytes arrived (seed 003: measure from here, not from dequeue).
    arrived: Instant,
    respond: oneshot::Sender<Result<Option<Bytes>, FrameError>>,
}

/// A running broker's network side.
pub struct Server {
    pub addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Binds every listener and starts accepting. Port 0 binds an ephemeral port, which is then
    /// advertised.
    pub async fn start(broker: Arc<Broker>) -> Result<Server, super::BrokerError> {
        let (shutdown, stop) = watch::channel(false);
        let (tx, rx) = async_channel::bounded::<Job>(broker.config.queued_max_requests);
        let mut tasks = Vec::new();
        for i in 0..broker.config.num_io_threads {
            let rx = rx.clone();
            let broker = broker.clone();
            tasks.push(tokio::spawn(async move { handler(i, broker, rx).await }));
        }
        let mut addrs = Vec::new();
        for l in &broker.config.listeners {
            let host = if l.host.is_empty() {
                "0.0.0.0"
            } else {
                &l.host
            };
            let addr = format!("{host}:{}", l.port);
            let listener =
                TcpListener::bind(&addr)
                    .await
                    .map_err(|source| super::BrokerError::Bind {
                        addr: addr.clone(),
                        source,
                    })?;
            let local = listener
                .local_addr()
                .map_err(|source| super::BrokerError::Bind {
                    addr: addr.clone(),
                    source,
                })?;
            if addrs.is_empty() {
                broker.set_advertised_port(local.port());
            }
            addrs.push(local);
            tracing::info!(listener = %l.name, address = %local, "listening");
            tasks.push(tokio::spawn(accept_loop(
                listener,
                broker.clone(),
                tx.clone(),
                stop.clone(),
            )));
        }
        Ok(Server {
            addrs,
            shutdown,
            tasks,
        })
    }

    /// Stops accepting and closes every connection.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

async fn handler(id: usize, broker: Arc<Broker>, rx: async_channel::Receiver<Job>) {
    while let Ok(job) = rx.recv().await {
        let _queued_for = job.arrived.elapsed();
        match broker.handle(job.frame) {
            Ok(Reply::Now(r)) => {
                let _ = job.respond.send(Ok(r));
            }
            Ok(Reply::Later(fut)) => {
                // Parked: the handler is free at once; the purgatory wakes the future.
                tokio::spawn(async move {
                    let r = match fut.await {
                        Ok(Reply::Now(r)) => Ok(r),
                        Ok(Reply::Later(_)) => Ok(None),
                        Err(e) => Err(e),
                    };
                    let _ = job.respond.send(r);
                });
            }
            Err(e) => {
                let _ = job.respond.send(Err(e));
            }
        }
    }
    tracing::debug!(handler = id, "request handler stopped");
}

async fn accept_loop(
    listener: TcpListener,
    broker: Arc<Broker>,
    queue: async_channel::Sender<Job>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let max = broker.config.socket_request_max_bytes;
                    let queue = queue.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        if let Err(reason) = connection(stream, max, queue, stop).await {
                            tracing::info!(%peer, %reason, "closing connection");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Serves one connection until the peer closes it, a frame is bad, or the broker stops.
async fn connection(
    mut stream: TcpStream,
    max_request_bytes: usize,
    queue: async_channel::Sender<Job>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    loop {
        let mut size = [0u8; 4];
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            r = stream.read_exact(&mut size) => match r {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
        let arrived = Instant::now();
        let size = i32::from_be_bytes(size);
        if size < 0 || size as usize > max_request_bytes {
            return Err(format!(
                "request size {size} is outside 0..={max_request_bytes} (socket.request.max.bytes)"
            ));
        }
        let mut frame = vec![0u8; size as usize];
        stream
            .read_exact(&mut frame)
            .await
            .map_err(|e| format!("read failed mid-request: {e}"))?;
        let (tx, rx) = oneshot::channel();
        queue
            .send(Job {
                frame: Bytes::from(frame),
                arrived,
                respond: tx,
            })
            .await
            .map_err(|_| "the broker is shutting down".to_string())?;
        match rx.await {
            Ok(Ok(Some(resp))) => stream
                .write_all(&resp)
                .await
                .map_err(|e| format!("write failed: {e}"))?,
            Ok(Ok(None)) => {}
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("the request was dropped".into()),
        }
    }
}
