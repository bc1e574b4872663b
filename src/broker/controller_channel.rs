//! The broker's channel to the active controller (Kafka's NodeToControllerChannelManager):
//! requests go to the controller the quorum names, over a few pooled connections to its
//! controller listener, and are sent again elsewhere on NOT_CONTROLLER or a broken connection
//! until their deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::protocol::Request;
use tokio::sync::watch;

use crate::client::{ClientError, ClientSecurity, Connection};
use crate::protocol::errors;

/// How long a forwarded request may keep looking for the controller.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// The quorum's voters as this node's metadata log names them, `(id, address)`: a dynamic
/// quorum's voters may be none of the configured controllers.
pub type VoterLookup = Arc<dyn Fn() -> Vec<(i32, String)> + Send + Sync>;

pub struct ControllerChannel {
    /// `(voter id, address)`; id -1 for bootstrap servers.
    controllers: Vec<(i32, String)>,
    voters: VoterLookup,
    leader: watch::Receiver<Option<i32>>,
    request_timeout: Duration,
    /// How to connect to the controller listener (PLAINTEXT or TLS).
    security: ClientSecurity,
    idle: parking_lot::Mutex<Vec<(String, Arc<Connection>)>>,
    next: std::sync::atomic::AtomicUsize,
    max_idle: usize,
}

impl ControllerChannel {
    pub fn new(
        controllers: Vec<(i32, String)>,
        voters: VoterLookup,
        leader: watch::Receiver<Option<i32>>,
        request_timeout: Duration,
        security: ClientSecurity,
        max_idle: usize,
    ) -> ControllerChannel {
        ControllerChannel {
            controllers,
            voters,
            leader,
            request_timeout,
            security,
            idle: parking_lot::Mutex::new(Vec::new()),
            next: std::sync::atomic::AtomicUsize::new(0),
            max_idle: max_idle.max(1),
        }
    }

    /// The address to try: the known leader's, else the next one in turn.
    fn target(&self, avoid: Option<&str>) -> String {
        let leader = *self.leader.borrow();
        let known = crate::controller::raft::voters::contacts(&self.controllers, &(self.voters)());
        if let Some(l) = leader {
            if let Some((_, a)) = known.iter().find(|(id, _)| *id == l) {
                if Some(a.as_str()) != avoid {
                    return a.clone();
                }
            }
        }
        let n = known.len().max(1);
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        known.get(i % n).map(|(_, a)| a.clone()).unwrap_or_default()
    }

    async fn connection(&self, addr: &str) -> Result<Arc<Connection>, ClientError> {
        let pooled = {
            let mut idle = self.idle.lock();
            idle.iter()
                .position(|(a, c)| a == addr && !c.is_broken())
                .map(|i| idle.swap_remove(i).1)
        };
        match pooled {
            Some(c) => Ok(c),
            None => Ok(Arc::new(
                Connection::connect_with(addr, self.request_timeout, &self.security).await?,
            )),
        }
    }

    fn give_back(&self, addr: String, c: Arc<Connection>) {
        if c.is_broken() {
            return;
        }
        let mut idle = self.idle.lock();
        idle.retain(|(_, c)| !c.is_broken());
        if idle.len() < self.max_idle {
            idle.push((addr, c));
        }
    }

    /// Sends `req` at `version` to the active controller, again elsewhere while
    /// `not_controller(response)` says it went to the wrong node or the connection fails,
    /// until `deadline` passes.
    pub async fn call<R: Request>(
        &self,
        req: &R,
        version: i16,
        retry_for: Duration,
        not_controller: impl Fn(&R::Response) -> bool,
    ) -> Result<R::Response, ClientError> {
        let deadline = Instant::now() + retry_for;
        let mut avoid: Option<String> = None;
        let mut backoff = Duration::from_millis(20);
        loop {
            let addr = self.target(avoid.as_deref());
            let outcome = match self.connection(&addr).await {
                Ok(c) => {
                    let r = c.call_at(req, version).await;
                    self.give_back(addr.clone(), c);
                    r
                }
                Err(e) => Err(e),
            };
            let retry = match &outcome {
                Ok(resp) if not_controller(resp) => true,
                Ok(_) => return outcome,
                // A TLS handshake cut short by a controller that restarts is a Security error
                // too; a bad certificate fails again each time, and its error ends the wait.
                Err(
                    ClientError::Io(_)
                    | ClientError::Timeout(_)
                    | ClientError::NoBroker(_)
                    | ClientError::Security { .. },
                ) => true,
                Err(_) => return outcome,
            };
            if !retry || Instant::now() + backoff > deadline {
                return match outcome {
                    Ok(resp) => Ok(resp),
                    Err(e) => Err(e),
                };
            }
            tracing::debug!(%addr, "the controller asked is not active; trying again");
            avoid = Some(addr);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }
}

impl ControllerChannel {
    /// As `call`, for a request the controller may take long to answer (a voter change waits
    /// for the new voter to catch up): each try has `per_call` for its answer, on a connection
    /// of its own, and a try that was sent but got no answer is not repeated, since the
    /// controller may have acted on it. One the controller refused as not the leader is.
    pub async fn call_slow<R: Request>(
        &self,
        req: &R,
        version: i16,
        per_call: Duration,
        not_controller: impl Fn(&R::Response) -> bool,
    ) -> Result<R::Response, ClientError> {
        let deadline = Instant::now() + DEFAULT_RETRY_TIMEOUT;
        let mut avoid: Option<String> = None;
        let mut backoff = Duration::from_millis(20);
        loop {
            let addr = self.target(avoid.as_deref());
            match Connection::connect_with(&addr, per_call, &self.security).await {
                Ok(c) => match c.call_at(req, version).await {
                    Ok(resp) if not_controller(&resp) && Instant::now() + backoff < deadline => {}
                    answered => return answered,
                },
                Err(e) if Instant::now() + backoff > deadline => return Err(e),
                Err(_) => {}
            }
            avoid = Some(addr);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }
}

/// Whether an error code says the request reached a node that is not the active controller.
pub fn is_not_controller(code: i16) -> bool {
    code == errors::NOT_CONTROLLER
}
