//! KafkaApis: one request frame in, its reply out. Decodes the frame, hands the request to its
//! API family's handler (produce, fetch, metadata, admin, group) and frames the answer, now or
//! when the handler's parked future completes.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, ProduceRequest};
use kafka_protocol::protocol::{Encodable, HeaderVersion};

use super::auth::Session;
use super::quotas::{self, ClientIdentity};
use super::refusals::{refuse_cluster_request, refuse_group_request, Refusal};
use super::{
    acls, admin, client_quotas, features, fetch, group, log_dirs, metadata, produce,
    scram_credentials, Broker, Outcome,
};
use crate::protocol::{self, api_versions, errors, sasl, DecodedRequest, FrameError};

/// A handled request: Kafka's request name for metrics, and the reply.
pub struct Handled {
    pub label: &'static str,
    pub reply: Result<Reply, FrameError>,
}

/// A future yielding a parked request's response frame (or nothing, for acks=0).
pub type ReplyFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Option<Bytes>, FrameError>> + Send>>;

/// What a request handler produced.
pub enum Reply {
    /// The response frame, or nothing (acks=0).
    Now(Option<Bytes>),
    /// The request waits in the purgatory; the future yields the response.
    Later(ReplyFuture),
}

impl Broker {
    /// Handles one request frame. `Reply::Now(None)` means no response (acks=0); `Reply::Later`
    /// is a request parked in the purgatory. An error closes the connection, as Kafka does for
    /// unknown APIs, unsupported versions and malformed requests.
    pub fn handle(self: &Arc<Self>, frame: Bytes, session: &Arc<Session>) -> Handled {
        let started = std::time::Instant::now();
        let quotas_set = !self.published.borrow().quotas().is_empty();
        let header = quotas_set.then(|| frame.clone());
        let mut label = "Unknown";
        let reply = self.dispatch(frame, session, &mut label);
        if let Some(frame) = header.filter(|_| label != "FetchFollower") {
            self.record_request_time(&frame, session, started.elapsed());
        }
        Handled { label, reply }
    }

    /// Counts a request's handler time against the client's `request_percentage` and mutes its
    /// connection for the throttle. Unlike Kafka, the response does not carry that throttle
    /// time (it is encoded by then); follower fetches are not counted, as in Kafka.
    fn record_request_time(&self, frame: &Bytes, session: &Session, spent: std::time::Duration) {
        let client_id = protocol::peek_client_id(frame).unwrap_or_default();
        let who = ClientIdentity::new(&session.principal, &client_id);
        let image = self.image();
        let throttle =
            self.request_quotas
                .record(image.quotas(), who, quotas::handler_percent(spent));
        session.mute_after_response(throttle);
    }

    fn dispatch(
        self: &Arc<Self>,
        frame: Bytes,
        session: &Arc<Session>,
        label: &mut &'static str,
    ) -> Result<Reply, FrameError> {
        let raw = protocol::peek_header(&frame)?;
        if let Ok(key) = ApiKey::try_from(raw.api_key) {
            *label = request_name(key);
            if key == ApiKey::ApiVersions && !api_versions::is_served(key, raw.api_version) {
                // A too-new ApiVersions gets a v0 answer with UNSUPPORTED_VERSION and our ranges.
                let body = api_versions::response(errors::UNSUPPORTED_VERSION);
                return encoded(protocol::encode_response_with_header_version(
                    0,
                    0,
                    raw.correlation_id,
                    &body,
                ))
                .map(Reply::Now);
            }
        }
        // What a produce quota counts: the request, header and body (Kafka's sizeInBytes).
        let size = frame.len();
        // The same checks and decoding the fuzz target exercises.
        let (header, request) = protocol::decode_request(frame)?;
        let at = Request {
            version: header.request_api_version,
            correlation_id: header.correlation_id,
        };
        let client_id = super::client_id(&header);
        if let DecodedRequest::Fetch(req) = request {
            if fetch::is_follower(&req) {
                *label = "FetchFollower";
            }
            return self.fetch(at, req, session, client_id);
        }
        if let DecodedRequest::Produce(req) = request {
            return self.produce(at, req, session, client_id, size);
        }
        let refusal = refuse_group_request(self, session, &request)
            .or_else(|| refuse_cluster_request(self, session, &request));
        if let Some(refusal) = refusal {
            return at.now_any(refusal);
        }
        if let DecodedRequest::JoinGroup(req) = request {
            let host = session
                .peer
                .map(|p| format!("/{}", p.ip()))
                .unwrap_or_default();
            let client = super::client_id(&header).to_string();
            return at.answer(group::api::join_group(
                self, at.version, &client, &host, req,
            ));
        }
        self.handle_request(at, request, header.request_api_key, session, client_id)
    }

    /// Every API but Fetch, Produce and JoinGroup (which need more than the request).
    fn handle_request(
        self: &Arc<Self>,
        at: Request,
        request: DecodedRequest,
        key: i16,
        session: &Arc<Session>,
        client_id: &str,
    ) -> Result<Reply, FrameError> {
        let v = at.version;
        let who = ClientIdentity::new(&session.principal, client_id);
        match request {
            DecodedRequest::DescribeAcls(req) => at.now(&acls::describe_acls(self, session, req)),
            DecodedRequest::CreateAcls(req) => at.answer(acls::create_acls(self, session, v, req)),
            DecodedRequest::DeleteAcls(req) => at.answer(acls::delete_acls(self, session, v, req)),
            DecodedRequest::DescribeClientQuotas(req) => {
                at.now(&client_quotas::describe(self, session, req))
            }
            DecodedRequest::AlterClientQuotas(req) => {
                at.answer(client_quotas::alter(self, session, v, req))
            }
            DecodedRequest::DescribeLogDirs(req) => {
                at.now(&log_dirs::describe_log_dirs(self, session, req))
            }
            DecodedRequest::DescribeUserScramCredentials(req) => {
                at.now(&scram_credentials::describe(self, session, req))
            }
            DecodedRequest::AlterUserScramCredentials(req) => {
                at.answer(scram_credentials::alter(self, session, v, req))
            }
            DecodedRequest::SaslHandshake(req) => {
                at.now(&sasl::handshake_after_authentication(req))
            }
            DecodedRequest::SaslAuthenticate(_) => {
                at.now(&sasl::authenticate_after_authentication())
            }
            DecodedRequest::ApiVersions(_) => at.now(&features::api_versions(self, v)),
            DecodedRequest::UpdateFeatures(req) => {
                at.answer(features::update_features(self, session, v, req))
            }
            DecodedRequest::Metadata(req) => {
                at.answer(metadata::metadata(self, session.clone(), v, req))
            }
            DecodedRequest::DescribeCluster(req) => {
                at.now(&metadata::describe_cluster(self, session, v, req))
            }
            DecodedRequest::DescribeTopicPartitions(req) => {
                at.now(&metadata::describe_topic_partitions(self, session, req))
            }
            DecodedRequest::ListOffsets(req) => at.now(&fetch::list_offsets(self, session, v, req)),
            DecodedRequest::OffsetForLeaderEpoch(req) => {
                at.now(&fetch::offset_for_leader_epoch(self, session, req))
            }
            DecodedRequest::InitProducerId(req) => {
                at.answer(produce::init_producer_id(self, session, req))
            }
            DecodedRequest::CreateTopics(req) => {
                at.answer(admin::create_topics(self, session, who, v, req))
            }
            DecodedRequest::DeleteTopics(req) => {
                at.answer(admin::delete_topics(self, session, who, v, req))
            }
            DecodedRequest::CreatePartitions(req) => {
                at.answer(admin::create_partitions(self, session, who, v, req))
            }
            DecodedRequest::DeleteRecords(req) => {
                at.now(&admin::delete_records(self, session, req))
            }
            DecodedRequest::DescribeConfigs(req) => {
                at.now(&admin::describe_configs(self, session, v, req))
            }
            DecodedRequest::AlterConfigs(req) => {
                at.answer(admin::alter_configs(self, session, v, req))
            }
            DecodedRequest::IncrementalAlterConfigs(req) => {
                at.answer(admin::incremental_alter_configs(self, session, v, req))
            }
            DecodedRequest::ElectLeaders(req) => at.answer(admin::elect_leaders(self, v, req)),
            DecodedRequest::AlterPartitionReassignments(req) => {
                at.answer(admin::alter_partition_reassignments(self, v, req))
            }
            DecodedRequest::ListPartitionReassignments(req) => {
                at.answer(admin::list_partition_reassignments(self, v, req))
            }
            DecodedRequest::DescribeQuorum(req) => at.answer(admin::describe_quorum(self, v, req)),
            DecodedRequest::AddRaftVoter(req) => at.answer(admin::add_raft_voter(self, v, req)),
            DecodedRequest::RemoveRaftVoter(req) => {
                at.answer(admin::remove_raft_voter(self, v, req))
            }
            DecodedRequest::UnregisterBroker(req) => {
                at.answer(admin::unregister_broker(self, v, req))
            }
            DecodedRequest::FindCoordinator(req) => {
                at.answer(group::api::find_coordinator(self, session, v, req))
            }
            DecodedRequest::SyncGroup(req) => at.answer(group::api::sync_group(self, req)),
            DecodedRequest::Heartbeat(req) => at.now(&group::api::heartbeat(self, req)),
            DecodedRequest::LeaveGroup(req) => at.now(&group::api::leave_group(self, v, req)),
            DecodedRequest::OffsetCommit(req) => {
                at.answer(group::api::offset_commit(self, session, v, req))
            }
            DecodedRequest::OffsetFetch(req) => {
                at.now(&group::api::offset_fetch(self, session, v, req))
            }
            DecodedRequest::ListGroups(req) => {
                at.now(&group::api::list_groups(self, session, v, req))
            }
            DecodedRequest::DescribeGroups(req) => {
                at.now(&group::api::describe_groups(self, session, v, req))
            }
            DecodedRequest::DeleteGroups(req) => {
                at.now(&group::api::delete_groups(self, session, req))
            }
            DecodedRequest::OffsetDelete(req) => {
                at.now(&group::api::offset_delete(self, session, req))
            }
            DecodedRequest::ConsumerGroupHeartbeat(req) => at.answer(
                group::consumer_api::heartbeat(self, session, v, client_id, req),
            ),
            DecodedRequest::ConsumerGroupDescribe(req) => {
                at.now(&group::consumer_api::describe(self, session, v, req))
            }
            // Fetch and JoinGroup are handled before; controller APIs are not served here
            // (decoding refuses them first).
            _ => Err(FrameError::UnsupportedVersion {
                key: ApiKey::try_from(key).unwrap_or(ApiKey::ApiVersions),
                version: v,
            }),
        }
    }

    /// Produce, counted against the client's `producer_byte_rate`: a response carries the
    /// throttle time the request earned, and the connection is muted for it (acks=0 too, which
    /// answers nothing).
    fn produce(
        self: &Arc<Self>,
        at: Request,
        req: ProduceRequest,
        session: &Arc<Session>,
        client_id: &str,
        size: usize,
    ) -> Result<Reply, FrameError> {
        let who = ClientIdentity::new(&session.principal, client_id);
        let throttle = self
            .produce_quotas
            .record(self.image().quotas(), who, size as f64);
        session.mute_after_response(throttle);
        let ms = quotas::as_throttle_ms(throttle);
        reply(produce::produce(self, session, req), move |r| {
            r.map_or(Ok(None), |r| at.frame(&r.with_throttle_time_ms(ms)))
        })
    }

    /// A Fetch. A follower's is served on the handler and counts against no client quota.
    /// Consumer fetches, wide ones included, are read and encoded on the fetch pool, so produce
    /// and follower fetches never queue behind them, and count against `consumer_byte_rate` (at
    /// most a quota window's bytes per fetch; the response carries the throttle time).
    fn fetch(
        self: &Arc<Self>,
        at: Request,
        mut req: FetchRequest,
        session: &Arc<Session>,
        client_id: &str,
    ) -> Result<Reply, FrameError> {
        if fetch::is_follower(&req) {
            return at.answer(fetch::fetch(self, session, at.version, req));
        }
        let broker = self.clone();
        let session = session.clone();
        let client_id = client_id.to_string();
        let image = self.image();
        let who = ClientIdentity::new(&session.principal, &client_id);
        if let Some(max) = self.fetch_quotas.max_in_window(image.quotas(), who) {
            // 0 or less asks for no limit, which a quota does not grant.
            let max = max.min(i32::MAX as usize) as i32;
            req.max_bytes = if req.max_bytes > 0 {
                req.max_bytes.min(max)
            } else {
                max
            };
        }
        let task = self.fetch_pool.spawn(async move {
            let r = fetch::fetch(&broker, &session, at.version, req)
                .resolve()
                .await;
            let who = ClientIdentity::new(&session.principal, &client_id);
            let r = broker.throttle_fetch(&session, who, at.version, r);
            at.frame(&r)
        });
        Ok(Reply::Later(Box::pin(async move {
            task.await
                .unwrap_or_else(|e| Err(FrameError::Malformed(format!("fetch task failed: {e}"))))
        })))
    }

    /// Counts a consumer fetch's response against the client's quota (Kafka counts the body
    /// and its 4-byte size); the response carries the throttle time, the connection is muted.
    fn throttle_fetch(
        &self,
        session: &Session,
        who: ClientIdentity<'_>,
        version: i16,
        r: FetchResponse,
    ) -> FetchResponse {
        let image = self.image();
        if quotas::resolve(image.quotas(), quotas::QuotaType::Fetch.key(), who).is_none() {
            return r;
        }
        let size = r.compute_size(version).map_or(0, |n| n + 4);
        let throttle = self.fetch_quotas.record(image.quotas(), who, size as f64);
        session.mute_after_response(throttle);
        r.with_throttle_time_ms(quotas::as_throttle_ms(throttle))
    }
}

/// The version and correlation id a response is framed with.
#[derive(Clone, Copy)]
struct Request {
    version: i16,
    correlation_id: i32,
}

impl Request {
    /// A response body as its frame.
    fn frame<R: Encodable + HeaderVersion>(self, body: &R) -> Result<Option<Bytes>, FrameError> {
        encoded(protocol::encode_response(
            self.version,
            self.correlation_id,
            body,
        ))
    }

    /// A refusal, framed now.
    fn now_any(self, refusal: Refusal) -> Result<Reply, FrameError> {
        match refusal {
            Refusal::Join(r) => self.now(&r),
            Refusal::Sync(r) => self.now(&r),
            Refusal::Heartbeat(r) => self.now(&r),
            Refusal::ConsumerHeartbeat(r) => self.now(&r),
            Refusal::Leave(r) => self.now(&r),
            Refusal::Commit(r) => self.now(&r),
            Refusal::Elect(r) => self.now(&r),
            Refusal::Reassign(r) => self.now(&r),
            Refusal::ListReassignments(r) => self.now(&r),
            Refusal::Quorum(r) => self.now(&r),
            Refusal::Unregister(r) => self.now(&r),
            Refusal::AddVoter(r) => self.now(&r),
            Refusal::RemoveVoter(r) => self.now(&r),
        }
    }

    /// The reply, framed now.
    fn now<R: Encodable + HeaderVersion>(self, body: &R) -> Result<Reply, FrameError> {
        self.frame(body).map(Reply::Now)
    }

    /// The reply, framed now or by the parked future when it completes.
    fn answer<R: Encodable + HeaderVersion + Send + 'static>(
        self,
        outcome: Outcome<R>,
    ) -> Result<Reply, FrameError> {
        reply(outcome, move |r| self.frame(&r))
    }
}

fn encoded(r: anyhow::Result<Bytes>) -> Result<Option<Bytes>, FrameError> {
    r.map(Some)
        .map_err(|e| FrameError::Malformed(format!("cannot encode the response: {e:#}")))
}

/// An outcome as a reply: framed now, or framed by the parked future when it completes.
fn reply<T: Send + 'static>(
    outcome: Outcome<T>,
    to_frame: impl FnOnce(T) -> Result<Option<Bytes>, FrameError> + Send + 'static,
) -> Result<Reply, FrameError> {
    match outcome {
        Outcome::Now(t) => to_frame(t).map(Reply::Now),
        Outcome::Later(fut) => Ok(Reply::Later(Box::pin(async move { to_frame(fut.await) }))),
    }
}

/// Kafka's name for a request type in request metrics (Fetch is split by the caller).
fn request_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "FetchConsumer",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::AlterConfigs => "AlterConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::ElectLeaders => "ElectLeaders",
        ApiKey::AlterPartitionReassignments => "AlterPartitionReassignments",
        ApiKey::ListPartitionReassignments => "ListPartitionReassignments",
        ApiKey::DescribeQuorum => "DescribeQuorum",
        ApiKey::UnregisterBroker => "UnregisterBroker",
        ApiKey::DescribeTopicPartitions => "DescribeTopicPartitions",
        ApiKey::DescribeClientQuotas => "DescribeClientQuotas",
        ApiKey::DescribeLogDirs => "DescribeLogDirs",
        ApiKey::UpdateFeatures => "UpdateFeatures",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        ApiKey::AlterClientQuotas => "AlterClientQuotas",
        ApiKey::ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
        ApiKey::ConsumerGroupDescribe => "ConsumerGroupDescribe",
        ApiKey::AddRaftVoter => "AddRaftVoter",
        ApiKey::RemoveRaftVoter => "RemoveRaftVoter",
        _ => "Other",
    }
}
