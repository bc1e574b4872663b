//! A connection that keeps several requests in flight (Java's `max.in.flight.requests.per.connection`):
//! requests are queued in order for a writer task, and a reader task hands each response to its
//! waiter in order. Sending never waits on the socket, so a broker that stops reading holds up
//! only its own requests, as Java's non-blocking NetworkClient.
//!
//! The producer's sender uses it; `Connection` stays the simple one-call-at-a-time kind.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Request};
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::connection::{encode_request, open, read_response};
use super::{ClientError, ClientSecurity};
use crate::protocol::listener::Stream;

/// A request waiting for its response.
struct Pending {
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    reply: oneshot::Sender<Result<Bytes, ClientError>>,
}

struct Shared {
    addr: String,
    pending: Mutex<VecDeque<Pending>>,
    /// Requests the broker does not answer (acks=0) that are not yet written: in flight too.
    unwritten: AtomicUsize,
    broken: AtomicBool,
}

/// A request's bytes for the writer, and for a request the broker does not answer, whom to
/// tell once it is written.
struct Outgoing {
    frame: Bytes,
    written: Option<oneshot::Sender<Result<(), ClientError>>>,
}

impl Shared {
    /// Marks the connection unusable and fails every request still waiting.
    fn fail_all(&self, why: &str) {
        self.broken.store(true, Ordering::Release);
        let waiting: Vec<Pending> = self.pending.lock().drain(..).collect();
        for p in waiting {
            let _ = p.reply.send(Err(ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                format!("connection to {} lost: {why}", self.addr),
            ))));
        }
    }
}

/// A pipelined connection to one broker. Dropping it closes the socket and fails what waits.
pub struct PipelinedConnection {
    shared: Arc<Shared>,
    versions: HashMap<ApiKey, i16>,
    /// Frames for the writer task, in the order their waiters were queued in `pending`. At
    /// most `in_flight()` are queued: the caller sends no more than it allows in flight.
    frames: mpsc::UnboundedSender<Outgoing>,
    next_correlation_id: AtomicI32,
    reader: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

impl Drop for PipelinedConnection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
        self.shared.fail_all("closed");
    }
}

impl PipelinedConnection {
    /// Connects, secured as `security` says, and negotiates API versions within `timeout`.
    /// A SASL session the broker limits is not renewed: the broker closes the connection at
    /// its end, and the sender connects again.
    pub async fn connect(
        addr: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<PipelinedConnection, ClientError> {
        let opened = open(addr, timeout, security).await?;
        let (versions, next) = (opened.versions, opened.io.next_correlation_id);
        let (read, write) = tokio::io::split(opened.io.stream);
        let shared = Arc::new(Shared {
            addr: addr.to_string(),
            pending: Mutex::new(VecDeque::new()),
            unwritten: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
        });
        let reader = tokio::spawn(read_responses(BufReader::new(read), shared.clone()));
        let (frames, queued) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_requests(write, queued, shared.clone()));
        Ok(PipelinedConnection {
            shared,
            versions,
            frames,
            next_correlation_id: AtomicI32::new(next),
            reader,
            writer,
        })
    }

    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// The negotiated version of `key`, if both sides speak one.
    pub fn version(&self, key: ApiKey) -> Option<i16> {
        self.versions.get(&key).copied()
    }

    /// Requests sent and not yet answered, and unanswered requests (acks=0) not yet written.
    pub fn in_flight(&self) -> usize {
        self.shared.pending.lock().len() + self.shared.unwritten.load(Ordering::Acquire)
    }

    pub fn is_broken(&self) -> bool {
        self.shared.broken.load(Ordering::Acquire)
    }

    /// Queues `req` at `version` for writing. It does not wait for the socket; what it returns
    /// settles later: the decoded response, or for a request the broker does not answer (a
    /// Produce with acks=0) the moment it is written, as Java completes such a request once
    /// sent. A write that fails fails every request waiting.
    pub fn send<R: Request>(
        &self,
        req: &R,
        version: i16,
        expect_response: bool,
    ) -> Result<Sent<R::Response>, ClientError> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|_| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::AcqRel);
        let frame = encode_request(key, version, correlation_id, req)?;
        // The waiter and the frame are queued under one lock, so that responses, which come in
        // the order of the frames, find their waiters in the same order. `fail_all` marks the
        // connection broken before it takes this lock: a waiter queued here after it drained
        // the queue would wait in vain, so broken is checked under the lock.
        let mut pending = self.shared.pending.lock();
        if self.is_broken() {
            return Err(self.broken());
        }
        let (sent, written) = if expect_response {
            let (tx, rx) = oneshot::channel();
            pending.push_back(Pending {
                key,
                version,
                correlation_id,
                reply: tx,
            });
            let answer = ResponseFuture {
                rx,
                version,
                _r: std::marker::PhantomData,
            };
            (Sent::Answer(answer), None)
        } else {
            let (tx, rx) = oneshot::channel();
            self.shared.unwritten.fetch_add(1, Ordering::AcqRel);
            (Sent::Written(WriteFuture { rx }), Some(tx))
        };
        if self.frames.send(Outgoing { frame, written }).is_err() {
            drop(pending);
            self.shared.fail_all("the writer stopped");
            return Err(self.broken());
        }
        Ok(sent)
    }

    fn broken(&self) -> ClientError {
        ClientError::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!("connection to {} failed earlier", self.addr()),
        ))
    }
}

/// What a sent request settles into.
pub enum Sent<T> {
    /// The broker's answer, to wait for.
    Answer(ResponseFuture<T>),
    /// A request the broker does not answer: done once written.
    Written(WriteFuture),
}

/// Settles once an unanswered request is written (or its connection failed first).
pub struct WriteFuture {
    rx: oneshot::Receiver<Result<(), ClientError>>,
}

impl WriteFuture {
    pub async fn wait(self) -> Result<(), ClientError> {
        self.rx.await.unwrap_or_else(|_| {
            Err(ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "connection closed before the request was written",
            )))
        })
    }
}

/// Writes queued frames in order; the first failed write fails every request waiting, the
/// unanswered ones still queued included.
async fn write_requests(
    mut write: WriteHalf<Stream>,
    mut frames: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
) {
    while let Some(out) = frames.recv().await {
        let result = write.write_all(&out.frame).await;
        if let Some(written) = out.written {
            shared.unwritten.fetch_sub(1, Ordering::AcqRel);
            let _ = written.send(
                result
                    .as_ref()
                    .map(|_| ())
                    .map_err(|e| ClientError::Io(std::io::Error::new(e.kind(), e.to_string()))),
            );
        }
        if let Err(e) = result {
            shared.fail_all(&e.to_string());
            frames.close();
            while let Ok(out) = frames.try_recv() {
                if let Some(written) = out.written {
                    shared.unwritten.fetch_sub(1, Ordering::AcqRel);
                    let _ = written.send(Err(ClientError::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        format!("connection to {} lost: {e}", shared.addr),
                    ))));
                }
            }
            return;
        }
    }
}

/// The response to one pipelined request.
pub struct ResponseFuture<T> {
    rx: oneshot::Receiver<Result<Bytes, ClientError>>,
    version: i16,
    _r: std::marker::PhantomData<fn() -> T>,
}

impl<T: Decodable> ResponseFuture<T> {
    /// Waits up to `timeout` for the response. A timeout leaves the connection in flight: the
    /// caller should drop the connection, as the response may still come.
    pub async fn wait(self, timeout: Duration) -> Result<T, ClientError> {
        let body = match tokio::time::timeout(timeout, self.rx).await {
            Err(_) => return Err(ClientError::Timeout("response".into())),
            Ok(Err(_)) => {
                return Err(ClientError::Io(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "connection closed",
                )))
            }
            Ok(Ok(r)) => r?,
        };
        let mut body = body;
        T::decode(&mut body, self.version)
            .map_err(|e| ClientError::Protocol(format!("response v{}: {e:#}", self.version)))
    }
}

/// Reads responses in order and hands each to the oldest waiting request.
async fn read_responses(mut read: BufReader<ReadHalf<Stream>>, shared: Arc<Shared>) {
    loop {
        let next = shared
            .pending
            .lock()
            .front()
            .map(|p| (p.key, p.version, p.correlation_id));
        let Some((key, version, correlation_id)) = next else {
            // Nothing expected: wait for bytes without taking them (a close, or data we did not
            // ask for, which is a protocol error), or for the response to a request written
            // meanwhile (its waiter is queued before its frame is written).
            match read.fill_buf().await {
                Ok([]) => return shared.fail_all("closed by the broker"),
                Ok(_) if shared.pending.lock().is_empty() => {
                    return shared.fail_all("an unexpected response")
                }
                Ok(_) => {}
                Err(e) => return shared.fail_all(&e.to_string()),
            }
            continue;
        };
        match read_response(&mut read, key, version, correlation_id).await {
            Ok(body) => {
                if let Some(p) = shared.pending.lock().pop_front() {
                    let _ = p.reply.send(Ok(body));
                }
            }
            Err(e) => return shared.fail_all(&e.to_string()),
        }
    }
}
