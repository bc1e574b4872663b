//! Quorum traffic between voters on the controller listener: openraft's AppendEntries, Vote
//! and InstallSnapshot carried in Kafka-framed requests of a private API key, each naming the
//! cluster id so that a node of another cluster is refused (INCONSISTENT_CLUSTER_ID).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::voters::VoterNode;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use super::election::ElectionTimer;
use super::{NodeId, Raft, TypeConfig};
use crate::client::{ClientError, ClientSecurity};
use crate::protocol::errors;
use crate::protocol::listener::Stream;
use crate::protocol::wire::{read_frame, FrameReadError};

/// The API key of quorum requests: outside Kafka's range, never sent by a client.
pub const RAFT_API_KEY: i16 = 10_001;
const KIND_APPEND: i8 = 0;
const KIND_VOTE: i8 = 1;
const KIND_SNAPSHOT: i8 = 2;
/// Largest quorum response accepted.
const MAX_FRAME: usize = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
    /// The peer belongs to another cluster.
    #[error("the peer belongs to cluster {0}")]
    OtherCluster(String),
}

/// Set once a voter answers with another cluster id: this node must not go on.
#[derive(Clone, Default)]
pub struct ClusterMismatch(Arc<parking_lot::Mutex<Option<String>>>);

impl ClusterMismatch {
    pub fn report(&self, message: String) {
        let mut m = self.0.lock();
        if m.is_none() {
            *m = Some(message);
        }
    }
    pub fn get(&self) -> Option<String> {
        self.0.lock().clone()
    }
}

/// Dials voters (over TLS when the controller listener is SSL) and keeps idle connections for
/// reuse.
#[derive(Clone)]
pub struct Network {
    cluster_id: Arc<str>,
    node_id: i32,
    security: ClientSecurity,
    idle: Arc<parking_lot::Mutex<HashMap<String, Vec<Stream>>>>,
    mismatch: ClusterMismatch,
    acks: Acks,
    election: ElectionTimer,
    /// Voters that do not answer: since when, and whether that was logged yet.
    down: Arc<parking_lot::Mutex<HashMap<NodeId, (std::time::Instant, bool)>>>,
    /// Where each voter is dialled, from `controller.quorum.voters`: a static quorum takes its
    /// voters' addresses from configuration, as Kafka's does, not from the membership written
    /// when the log began, so a roll can move the controller listener to another port.
    addresses: Arc<HashMap<NodeId, String>>,
}

/// When each voter last answered an AppendEntries (milliseconds since the epoch).
pub type Acks = Arc<parking_lot::Mutex<HashMap<i32, i64>>>;

impl Network {
    pub fn new(
        cluster_id: &str,
        node_id: i32,
        security: ClientSecurity,
        mismatch: ClusterMismatch,
        acks: Acks,
        election: ElectionTimer,
        addresses: HashMap<NodeId, String>,
    ) -> Network {
        Network {
            cluster_id: cluster_id.into(),
            node_id,
            security,
            idle: Arc::default(),
            mismatch,
            acks,
            election,
            down: Arc::default(),
            addresses: Arc::new(addresses),
        }
    }

    /// Logs a voter that has not answered for `OUTAGE_WARNING` once, and its return; the
    /// moments while the voters of a new cluster start one after another stay quiet.
    fn note_reachable(&self, target: NodeId, addr: &str, reachable: bool, why: &str) {
        let mut down = self.down.lock();
        if reachable {
            if let Some((_, true)) = down.remove(&target) {
                tracing::info!(voter = target, %addr, "voter reachable again");
            }
            return;
        }
        let (since, warned) = down
            .entry(target)
            .or_insert((std::time::Instant::now(), false));
        if !*warned && since.elapsed() >= OUTAGE_WARNING {
            *warned = true;
            tracing::warn!(voter = target, %addr, reason = why, "cannot reach voter");
        }
    }
}

/// How long a voter must stay unreachable before it is logged.
const OUTAGE_WARNING: std::time::Duration = std::time::Duration::from_secs(5);

/// One voter as openraft talks to it.
pub struct Peer {
    target: NodeId,
    addr: String,
    net: Network,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &VoterNode) -> Peer {
        let configured = self.addresses.get(&target);
        Peer {
            target,
            addr: configured.unwrap_or(&node.addr).clone(),
            net: self.clone(),
        }
    }
}

/// The request frame: a v1 request header with our key, then cluster id, kind and payload.
fn request_frame(cluster_id: &str, node_id: i32, kind: i8, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(32 + cluster_id.len() + payload.len());
    b.put_i32(0);
    b.put_i16(RAFT_API_KEY);
    b.put_i16(0);
    b.put_i32(node_id);
    b.put_i16(-1);
    b.put_i16(cluster_id.len() as i16);
    b.put_slice(cluster_id.as_bytes());
    b.put_i8(kind);
    b.put_slice(payload);
    let size = (b.len() - 4) as i32;
    b[..4].copy_from_slice(&size.to_be_bytes());
    b.freeze()
}

impl Peer {
    /// Sends `frame` and reads the answer, on an idle connection when there is one. A pooled
    /// connection the peer closed meanwhile (it restarted) fails at once; the request is then
    /// sent again on a new connection, as quorum requests may be repeated.
    async fn exchange(&self, frame: &[u8], timeout: Duration) -> Result<Bytes, WireError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let pooled = self.net.idle.lock().get_mut(&self.addr).and_then(Vec::pop);
        if let Some(stream) = pooled {
            match self.exchange_on(stream, frame, deadline).await {
                Err(WireError::Io(e)) if e.kind() != std::io::ErrorKind::TimedOut => {
                    tracing::debug!(addr = %self.addr, error = %e, "an idle quorum connection was closed; reconnecting");
                }
                other => return other,
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let open = crate::client::connection::open_stream(&self.addr, left, &self.net.security);
        let stream = tokio::time::timeout_at(deadline, open)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect"))?
            .map_err(|e| match e {
                ClientError::Io(e) => e,
                ClientError::Timeout(what) => {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, what)
                }
                // A refused TLS handshake: the voter is as good as unreachable, and the reason
                // is what the outage warning shows.
                other => std::io::Error::other(other.to_string()),
            })?;
        self.exchange_on(stream, frame, deadline).await
    }

    /// One request and its answer on `stream`, which goes back to the pool afterwards.
    async fn exchange_on(
        &self,
        mut stream: Stream,
        frame: &[u8],
        deadline: tokio::time::Instant,
    ) -> Result<Bytes, WireError> {
        let body = tokio::time::timeout_at(deadline, async {
            stream.write_all(frame).await?;
            match read_frame(&mut stream, 4, MAX_FRAME).await {
                Ok(frame) => Ok(frame),
                Err(e @ FrameReadError::Size { .. }) => {
                    Err(WireError::Protocol(format!("quorum response {e}")))
                }
                Err(e) => Err(WireError::Io(e.into())),
            }
        })
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "quorum request"))??;
        self.net
            .idle
            .lock()
            .entry(self.addr.clone())
            .or_default()
            .push(stream);
        Ok(body)
    }

    async fn call<Req, Resp, E>(
        &self,
        kind: i8,
        req: &Req,
        option: RPCOption,
    ) -> Result<Resp, RPCError<NodeId, VoterNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload =
            bincode::serialize(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let frame = request_frame(&self.net.cluster_id, self.net.node_id, kind, &payload);
        let mut body = match self.exchange(&frame, option.hard_ttl()).await {
            Ok(b) => {
                self.net.note_reachable(self.target, &self.addr, true, "");
                b
            }
            Err(WireError::Io(e)) => {
                self.net
                    .note_reachable(self.target, &self.addr, false, &e.to_string());
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        if body.len() < 6 {
            let e = WireError::Protocol("short quorum response".into());
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        body.advance(4); // correlation id
        let code = body.get_i16();
        if code == errors::INCONSISTENT_CLUSTER_ID {
            let theirs = String::from_utf8_lossy(&body).to_string();
            let e = WireError::OtherCluster(theirs.clone());
            self.net.mismatch.report(format!(
                "voter {} at {} belongs to cluster {theirs}, but this node was formatted for cluster {}",
                self.target, self.addr, self.net.cluster_id
            ));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        if code != errors::NONE {
            let why = format!("quorum request refused with {}", errors::error_name(code));
            // Refused (CLUSTER_AUTHORIZATION_FAILED: this node's certificate lacks the right):
            // as good as unreachable, and logged as such when it lasts.
            self.net
                .note_reachable(self.target, &self.addr, false, &why);
            let e = WireError::Protocol(why);
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let result: Result<Resp, RaftError<NodeId, E>> =
            bincode::deserialize(&body).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, VoterNode, RaftError<NodeId>>> {
        let r = self.call(KIND_APPEND, &rpc, option).await;
        if r.is_ok() {
            self.net
                .acks
                .lock()
                .insert(self.target as i32, crate::storage::log::now_ms());
        }
        r
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, VoterNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(KIND_SNAPSHOT, &rpc, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, VoterNode, RaftError<NodeId>>> {
        let r: Result<VoteResponse<NodeId>, _> = self.call(KIND_VOTE, &rpc, option).await;
        if let Ok(resp) = &r {
            if !resp.vote_granted && resp.last_log_id > rpc.last_log_id {
                self.net.election.defer();
            }
        }
        r
    }
}

/// A response body: error code, then the payload.
pub fn response_body(code: i16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + payload.len());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Answers one quorum request (the frame after its size prefix). Returns the response body
/// (after the correlation id), or an error for a frame that is not a quorum request. An accepted
/// AppendEntries or a granted vote restarts `election`'s wait.
pub async fn serve(
    raft: &Raft,
    cluster_id: &str,
    election: &ElectionTimer,
    frame: &[u8],
) -> Result<Vec<u8>, WireError> {
    let mut b = frame;
    if b.len() < 10 {
        return Err(WireError::Protocol("short quorum request".into()));
    }
    b.advance(8); // key, version, correlation id
    let client_id_len = b.get_i16();
    if client_id_len > 0 {
        if b.len() < client_id_len as usize {
            return Err(WireError::Protocol("truncated client id".into()));
        }
        b.advance(client_id_len as usize);
    }
    if b.len() < 3 {
        return Err(WireError::Protocol("truncated quorum request".into()));
    }
    let n = b.get_i16();
    if n < 0 || b.len() < n as usize + 1 {
        return Err(WireError::Protocol("truncated cluster id".into()));
    }
    let theirs = std::str::from_utf8(&b[..n as usize])
        .map_err(|_| WireError::Protocol("cluster id is not UTF-8".into()))?;
    if theirs != cluster_id {
        tracing::warn!(
            theirs,
            ours = cluster_id,
            "refused a quorum request from another cluster"
        );
        return Ok(response_body(
            errors::INCONSISTENT_CLUSTER_ID,
            cluster_id.as_bytes(),
        ));
    }
    b.advance(n as usize);
    let kind = b.get_i8();
    let bad = |e: bincode::Error| WireError::Protocol(format!("undecodable quorum request: {e}"));
    let ok = |payload: Result<Vec<u8>, bincode::Error>| {
        payload
            .map(|p| response_body(errors::NONE, &p))
            .map_err(|e| WireError::Protocol(e.to_string()))
    };
    match kind {
        KIND_APPEND => {
            let req: AppendEntriesRequest<TypeConfig> = bincode::deserialize(b).map_err(bad)?;
            let handling = election.handling();
            let resp = raft.append_entries(req).await;
            drop(handling);
            if resp
                .as_ref()
                .is_ok_and(|r| !matches!(r, AppendEntriesResponse::HigherVote(_)))
            {
                election.heard();
            }
            ok(bincode::serialize(&resp))
        }
        KIND_VOTE => {
            let req: VoteRequest<NodeId> = bincode::deserialize(b).map_err(bad)?;
            let handling = election.handling();
            let resp = raft.vote(req).await;
            drop(handling);
            if resp.as_ref().is_ok_and(|r| r.vote_granted) {
                election.heard();
            }
            ok(bincode::serialize(&resp))
        }
        KIND_SNAPSHOT => {
            let req: InstallSnapshotRequest<TypeConfig> = bincode::deserialize(b).map_err(bad)?;
            ok(bincode::serialize(&raft.install_snapshot(req).await))
        }
        other => Err(WireError::Protocol(format!(
            "unknown quorum request kind {other}"
        ))),
    }
}

/// A quorum request naming `cluster_id`, for tests that play a node of another cluster.
pub fn vote_request_frame(cluster_id: &str, node_id: i32, req: &VoteRequest<NodeId>) -> Bytes {
    let payload = bincode::serialize(req).unwrap_or_default();
    request_frame(cluster_id, node_id, KIND_VOTE, &payload)
}
