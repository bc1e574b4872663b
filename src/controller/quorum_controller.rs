//! The active controller: the quorum leader turns requests into metadata records, one change
//! at a time, validated against the image that every earlier change produced, and commits them
//! through the quorum. While active it also fences brokers whose sessions time out and moves
//! leadership back to preferred replicas (`auto.leader.rebalance.enable`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;

use super::cluster::{BrokerSessions, BrokerState, Heartbeat, HeartbeatReply, RegistrationRequest};
use super::partition_change::Election;
use super::raft::{Applied, Quorum, QuorumStatus, WriteError};
use super::replication::{
    self, CreatedTopic, ElectionOutcome, IsrChange, ReassignmentSpec, TopicDefaults, TopicSpec,
};
use super::{acls, client_quotas, scram, validate_topic_configs, ControllerError};
use crate::metadata::features::{self, METADATA_VERSION_LEVEL};
use crate::metadata::image::{MetadataImage, PartitionImage};
use crate::metadata::records::{MetadataRecord, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::protocol::errors;
use crate::security::acl::{AclBinding, AclBindingFilter};

/// Kafka's `MAX_ELECTIONS_PER_IMBALANCE`.
const MAX_ELECTIONS_PER_RUN: usize = 1000;
/// Producer ids per AllocateProducerIds block.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// Timers and policies of the active controller.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    pub session_timeout: Duration,
    pub auto_leader_rebalance: bool,
    pub leader_imbalance_check_interval: Duration,
    pub topics: TopicDefaults,
    /// What a new cluster starts with besides `metadata.version` (`format --add-scram`).
    pub bootstrap: Vec<MetadataRecord>,
}

/// A config change asked for (AlterConfigs and IncrementalAlterConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    Set(String),
    Delete,
    Append(String),
    Subtract(String),
}

pub struct QuorumController {
    quorum: Arc<Quorum>,
    settings: ControllerSettings,
    /// One change at a time: validate against the image, commit, see it applied.
    writes: tokio::sync::Mutex<()>,
    sessions: parking_lot::Mutex<BrokerSessions>,
    rng: parking_lot::Mutex<rand::rngs::StdRng>,
    /// The term this node has finished taking over in, if it leads.
    active_term: parking_lot::Mutex<Option<i32>>,
}

fn not_controller(leader: Option<i32>) -> ControllerError {
    ControllerError::new(
        errors::NOT_CONTROLLER,
        match leader {
            Some(l) => format!("The active controller appears to be node {l}."),
            None => "No controller appears to be active.".into(),
        },
    )
}

impl QuorumController {
    /// Starts the controller over `quorum`; it acts only while this node leads.
    pub fn start(quorum: Arc<Quorum>, settings: ControllerSettings) -> Arc<QuorumController> {
        let c = Arc::new(QuorumController {
            quorum,
            settings,
            writes: tokio::sync::Mutex::new(()),
            sessions: parking_lot::Mutex::new(BrokerSessions::default()),
            rng: parking_lot::Mutex::new(rand::rngs::StdRng::from_entropy()),
            active_term: parking_lot::Mutex::new(None),
        });
        tokio::spawn(watch_leadership(Arc::downgrade(&c)));
        tokio::spawn(periodic(Arc::downgrade(&c)));
        c
    }

    pub fn quorum(&self) -> &Arc<Quorum> {
        &self.quorum
    }

    pub fn cluster_id(&self) -> &str {
        self.quorum.cluster_id()
    }

    pub fn settings(&self) -> &ControllerSettings {
        &self.settings
    }

    /// Whether this node is the active controller and has caught up with its term.
    pub fn is_active(&self) -> bool {
        self.quorum.is_leader() && *self.active_term.lock() == Some(self.quorum.epoch())
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.quorum.image()
    }

    /// Takes over after winning an election: everything committed before is applied, brokers
    /// get fresh sessions, and a new cluster gets its `metadata.version` and the records it was
    /// formatted with, in one batch.
    async fn activate(&self) -> Result<(), ControllerError> {
        let term = self.quorum.epoch();
        self.quorum
            .ensure_leader()
            .await
            .map_err(|_| not_controller(self.quorum.leader()))?;
        // A voter change the previous leader left half done is finished first.
        self.quorum.finish_voter_change().await;
        let _w = self.writes.lock().await;
        let img = self.quorum.image();
        self.sessions.lock().activate(&img, Instant::now());
        let mut records = Vec::new();
        if img.feature("metadata.version").is_none() {
            // A new cluster runs the consumer group protocol, as Kafka 4's `format` sets
            // group.version 1.
            records = vec![
                MetadataRecord::FeatureLevel {
                    name: "metadata.version".into(),
                    level: METADATA_VERSION_LEVEL,
                },
                MetadataRecord::FeatureLevel {
                    name: "group.version".into(),
                    level: 1,
                },
            ];
            records.extend(self.settings.bootstrap.iter().cloned());
        }
        // A dynamic quorum says so, as Kafka's format finalizes kraft.version 1 for one.
        let kraft = self.quorum.kraft_version();
        if kraft > 0 && img.feature(features::KRAFT_VERSION).is_none() {
            records.push(MetadataRecord::FeatureLevel {
                name: features::KRAFT_VERSION.into(),
                level: kraft,
            });
        }
        if !records.is_empty() {
            self.quorum.write(&records).await.map_err(write_error)?;
        }
        *self.active_term.lock() = Some(term);
        tracing::info!(
            node = self.quorum.node_id(),
            epoch = term,
            "became the active controller"
        );
        Ok(())
    }

    async fn require_active(&self) -> Result<(), ControllerError> {
        if !self.quorum.is_leader() {
            return Err(not_controller(self.quorum.leader()));
        }
        // Just elected: wait a moment for the takeover to finish.
        for _ in 0..40 {
            if self.is_active() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(not_controller(self.quorum.leader()))
    }

    /// Runs `decide` on the current image under the write lock and commits its records.
    async fn commit<T>(
        &self,
        decide: impl FnOnce(&MetadataImage) -> Result<(Vec<MetadataRecord>, T), ControllerError>,
    ) -> Result<(T, Option<Applied>), ControllerError> {
        self.require_active().await?;
        let _w = self.writes.lock().await;
        if !self.is_active() {
            return Err(not_controller(self.quorum.leader()));
        }
        let img = self.quorum.image();
        let (recs, out) = decide(&img)?;
        if recs.is_empty() {
            return Ok((out, None));
        }
        let applied = self.quorum.write(&recs).await.map_err(write_error)?;
        Ok((out, Some(applied)))
    }

    /// BrokerRegistration: the new broker epoch.
    pub async fn register_broker(&self, req: RegistrationRequest) -> Result<i64, ControllerError> {
        let cluster_id = self.cluster_id().to_string();
        let timeout = self.settings.session_timeout;
        let topics = self.settings.topics.clone();
        let (epoch, _) = self
            .commit(|img| {
                self.sessions.lock().register(
                    img,
                    &req,
                    &cluster_id,
                    Instant::now(),
                    timeout,
                    &topics,
                )
            })
            .await?;
        tracing::info!(broker = req.broker_id, epoch, "registered broker");
        Ok(epoch)
    }

    /// BrokerHeartbeat.
    pub async fn heartbeat(&self, hb: Heartbeat) -> Result<HeartbeatReply, ControllerError> {
        let topics = self.settings.topics.clone();
        let ((reply, next), applied) = self
            .commit(|img| {
                self.sessions
                    .lock()
                    .heartbeat(img, &hb, Instant::now(), &topics)
                    .map(|o| (o.records, (o.reply, o.next)))
            })
            .await?;
        match next {
            BrokerState::ControlledShutdown => {
                if let Some(a) = applied {
                    self.sessions
                        .lock()
                        .controlled_shutdown_written(hb.broker_id, a.last_offset);
                    tracing::info!(broker = hb.broker_id, "broker in controlled shutdown");
                }
            }
            BrokerState::ShutdownNow => self.sessions.lock().remove(hb.broker_id),
            BrokerState::Unfenced if applied.is_some() => {
                tracing::info!(broker = hb.broker_id, "unfenced broker")
            }
            _ => {}
        }
        Ok(reply)
    }

    /// UnregisterBroker: the broker leaves every ISR and its registration goes.
    pub async fn unregister_broker(&self, broker: i32) -> Result<(), ControllerError> {
        let topics = self.settings.topics.clone();
        self.commit(|img| {
            let Some(b) = img.broker(broker) else {
                return Err(ControllerError::new(
                    errors::BROKER_ID_NOT_REGISTERED,
                    format!("Broker ID {broker} is not currently registered"),
                ));
            };
            let mut recs = replication::remove_from_isrs(img, broker, &topics);
            recs.push(MetadataRecord::UnregisterBroker {
                broker_id: broker,
                broker_epoch: b.epoch,
            });
            Ok((recs, ()))
        })
        .await?;
        self.sessions.lock().remove(broker);
        Ok(())
    }

    /// AllocateProducerIds: a block of `PRODUCER_ID_BLOCK` ids, recorded so none repeats.
    pub async fn allocate_producer_ids(
        &self,
        broker: i32,
        broker_epoch: i64,
    ) -> Result<i64, ControllerError> {
        let (start, _) = self
            .commit(|img| {
                BrokerSessions::check_epoch(img, broker, broker_epoch)?;
                let start = img.next_producer_id;
                if start > i64::MAX - PRODUCER_ID_BLOCK {
                    return Err(ControllerError::new(
                        errors::UNKNOWN_SERVER_ERROR,
                        "Exhausted all producerIds as the next block's end producerId would exceed the maximum",
                    ));
                }
                Ok((
                    vec![MetadataRecord::ProducerIds {
                        broker_id: broker,
                        broker_epoch,
                        next_producer_id: start + PRODUCER_ID_BLOCK,
                    }],
                    start,
                ))
            })
            .await?;
        Ok(start)
    }

    /// CreateTopics, one topic per change (each all or nothing). `internal_ok` lets the
    /// broker's own `__consumer_offsets` through.
    pub async fn create_topics(
        &self,
        specs: Vec<TopicSpec>,
        validate_only: bool,
        internal_ok: bool,
    ) -> Vec<Result<CreatedTopic, ControllerError>> {
        // One commit for the whole request, as Kafka's controller does: each topic is decided on
        // its own (one topic's error does not fail the others), their records go in one write.
        let topics = &self.settings.topics;
        let decided = self
            .commit(|img| {
                let mut rng = self.rng.lock();
                let mut recs = Vec::new();
                let mut results = Vec::with_capacity(specs.len());
                let mut seen = std::collections::HashSet::new();
                for spec in &specs {
                    let r = if !seen.insert(spec.name.as_str()) {
                        Err(ControllerError::new(
                            errors::INVALID_REQUEST,
                            format!("Duplicate topic name {} in the request", spec.name),
                        ))
                    } else {
                        replication::create_topic(img, spec, topics, &mut *rng, internal_ok)
                    };
                    results.push(r.map(|(topic_recs, created)| {
                        if !validate_only {
                            recs.extend(topic_recs);
                        }
                        created
                    }));
                }
                Ok((recs, results))
            })
            .await;
        match decided {
            Ok((results, _)) => {
                for (spec, r) in specs.iter().zip(&results) {
                    if let (Ok(c), false) = (r, validate_only) {
                        tracing::info!(topic = %spec.name, partitions = c.num_partitions, rf = c.replication_factor, "created topic");
                    }
                }
                results
            }
            Err(e) => specs.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    /// DeleteTopics by name.
    pub async fn delete_topic(
        &self,
        name: &str,
    ) -> Result<crate::storage::KafkaUuid, ControllerError> {
        let (id, _) = self
            .commit(|img| {
                let (rec, id) = replication::delete_topic(img, name)?;
                Ok((vec![rec], id))
            })
            .await?;
        tracing::info!(topic = name, "deleted topic");
        Ok(id)
    }

    /// CreateAcls: one result per binding, in order.
    pub async fn create_acls(
        &self,
        bindings: Vec<AclBinding>,
    ) -> Result<Vec<Result<(), ControllerError>>, ControllerError> {
        self.commit(|img| Ok(acls::create_acls(img, &bindings)))
            .await
            .map(|(results, _)| results)
    }

    /// DeleteAcls: for each filter, the ACLs it removed.
    pub async fn delete_acls(
        &self,
        filters: Vec<AclBindingFilter>,
    ) -> Result<Vec<Result<Vec<AclBinding>, ControllerError>>, ControllerError> {
        self.commit(|img| Ok(acls::delete_acls(img, &filters)))
            .await
            .map(|(results, _)| results)
    }

    /// AlterUserScramCredentials: each user's result.
    pub async fn alter_scram_credentials(
        &self,
        changes: Vec<scram::ScramChange>,
    ) -> Result<scram::UserResults, ControllerError> {
        self.commit(|img| Ok(scram::alter_credentials(img, &changes)))
            .await
            .map(|(results, _)| results)
    }

    /// AlterClientQuotas: each entity's result; nothing is written with `validate_only`.
    pub async fn alter_client_quotas(
        &self,
        alterations: Vec<client_quotas::QuotaAlteration>,
        validate_only: bool,
    ) -> Result<Vec<Result<(), ControllerError>>, ControllerError> {
        self.commit(|img| {
            let (records, results) = client_quotas::alter_client_quotas(img, &alterations);
            Ok((if validate_only { Vec::new() } else { records }, results))
        })
        .await
        .map(|(results, _)| results)
    }

    /// UpdateFeatures, judged as Kafka's FeatureControlManager judges it: the new levels are
    /// committed unless `validate_only`; one refused update refuses all (INVALID_UPDATE_VERSION).
    pub async fn update_features(
        &self,
        updates: Vec<features::FeatureUpdate>,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let node = self.quorum.node_id();
        self.commit(|img| {
            let records = features::plan(&updates, img, node)
                .map_err(|m| ControllerError::new(errors::INVALID_UPDATE_VERSION, m))?;
            Ok((if validate_only { Vec::new() } else { records }, ()))
        })
        .await
        .map(|_| ())
    }

    /// CreatePartitions.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        self.commit(|img| {
            let mut rng = self.rng.lock();
            let recs = replication::create_partitions(
                img,
                name,
                count,
                assignments.as_deref(),
                &mut *rng,
            )?;
            Ok((if validate_only { Vec::new() } else { recs }, ()))
        })
        .await
        .map(|_| ())
    }

    /// Topic config changes (broker configs are read-only here), validated as a whole.
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        ops: Vec<(String, ConfigOp)>,
        incremental: bool,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let defaults = self.settings.topics.log.clone();
        self.commit(|img| {
            if img.topic(name).is_none() {
                return Err(ControllerError::new(
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("Topic {name} does not exist."),
                ));
            }
            let current = img.topic_configs(name);
            let changes = resolve_config_ops(&current, &defaults, ops, incremental)?;
            let mut after = if incremental {
                current.clone()
            } else {
                BTreeMap::new()
            };
            for (k, v) in &changes {
                match v {
                    Some(v) => after.insert(k.clone(), v.clone()),
                    None => after.remove(k),
                };
            }
            validate_topic_configs(&after, &defaults)?;
            if validate_only {
                return Ok((Vec::new(), ()));
            }
            let recs = config_records(RESOURCE_TOPIC, name, &current, changes, incremental);
            Ok((recs, ()))
        })
        .await
        .map(|_| ())
    }

    /// AlterConfigs / IncrementalAlterConfigs on a broker resource: `name` is a broker id, or
    /// "" for the cluster-wide default. Only the configs a running broker reads again can be
    /// changed (Kafka's per-broker dynamic replication throttles); the rest live in
    /// server.properties.
    pub async fn alter_broker_configs(
        &self,
        name: &str,
        ops: Vec<(String, ConfigOp)>,
        incremental: bool,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        if !name.is_empty() && name.parse::<i32>().is_err() {
            return Err(ControllerError::new(
                errors::INVALID_REQUEST,
                format!("Invalid broker id {name}"),
            ));
        }
        let defaults = self.settings.topics.log.clone();
        self.commit(|img| {
            let current = img.broker_configs(name).cloned().unwrap_or_default();
            let changes = resolve_config_ops(&current, &defaults, ops, incremental)?;
            validate_dynamic_broker_configs(&changes)?;
            if validate_only {
                return Ok((Vec::new(), ()));
            }
            let recs = config_records(RESOURCE_BROKER, name, &current, changes, incremental);
            Ok((recs, ()))
        })
        .await
        .map(|_| ())
    }

    /// ElectLeaders.
    pub async fn elect_leaders(
        &self,
        election: Election,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionOutcome>, ControllerError> {
        let (outcomes, _) = self
            .commit(|img| {
                let (outcomes, recs) =
                    replication::elect_leaders(img, election, partitions.as_deref());
                Ok((recs, outcomes))
            })
            .await?;
        Ok(outcomes)
    }

    /// AlterPartitionReassignments (the metadata side).
    pub async fn alter_reassignments(
        &self,
        specs: Vec<ReassignmentSpec>,
    ) -> Result<Vec<ElectionOutcome>, ControllerError> {
        let topics = self.settings.topics.clone();
        let (outcomes, _) = self
            .commit(|img| {
                let (outcomes, recs) = replication::alter_reassignments(img, &specs, &topics);
                Ok((recs, outcomes))
            })
            .await?;
        Ok(outcomes)
    }

    /// ListPartitionReassignments, from the committed image.
    pub async fn list_reassignments(
        &self,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<(String, Vec<(i32, PartitionImage)>)>, ControllerError> {
        self.require_active().await?;
        Ok(replication::list_reassignments(
            &self.image(),
            topics.as_deref(),
        ))
    }

    /// AlterPartition from a partition leader.
    pub async fn alter_partition(
        &self,
        broker: i32,
        broker_epoch: i64,
        changes: Vec<IsrChange>,
    ) -> Result<Vec<(i16, Option<PartitionImage>)>, ControllerError> {
        let (results, _) = self
            .commit(|img| {
                BrokerSessions::check_epoch(img, broker, broker_epoch)?;
                let (results, recs) = replication::alter_isr(img, broker, &changes);
                Ok((recs, results))
            })
            .await?;
        Ok(results)
    }

    /// DescribeQuorum.
    pub fn describe_quorum(&self) -> Result<QuorumStatus, ControllerError> {
        self.quorum
            .status()
            .ok_or_else(|| not_controller(self.quorum.leader()))
    }

    /// Fences one broker whose session expired; `true` if it did, so the caller checks again.
    async fn fence_one_stale_broker(&self) -> bool {
        let timeout = self.settings.session_timeout;
        let topics = self.settings.topics.clone();
        let r = self
            .commit(|img| {
                let expired =
                    self.sessions
                        .lock()
                        .expire_one(img, Instant::now(), timeout, &topics);
                Ok(match expired {
                    Some((_, recs)) => (recs, true),
                    None => (Vec::new(), false),
                })
            })
            .await;
        matches!(r, Ok((true, _)))
    }

    /// Unclean elections for leaderless partitions whose topic allows them.
    async fn elect_unclean_leaders(&self) {
        let topics = self.settings.topics.clone();
        let n = self
            .commit_elections(|img| {
                replication::unclean_elections(img, &topics, MAX_ELECTIONS_PER_RUN)
            })
            .await;
        if n > 0 {
            tracing::warn!(
                partitions = n,
                "unclean leader election: replicas outside the ISR now lead; records only the lost ISR had are gone"
            );
        }
    }

    async fn rebalance_leaders(&self) {
        let n = self
            .commit_elections(|img| {
                replication::rebalance_preferred_leaders(img, MAX_ELECTIONS_PER_RUN)
            })
            .await;
        if n > 0 {
            tracing::info!(
                partitions = n,
                "moved leadership back to preferred replicas"
            );
        }
    }

    /// Commits the elections `decide` finds in the current image; how many partitions changed
    /// (0 when none did or the commit failed, which the next periodic run retries).
    async fn commit_elections(
        &self,
        decide: impl FnOnce(&MetadataImage) -> Vec<MetadataRecord>,
    ) -> usize {
        let r = self
            .commit(|img| {
                let recs = decide(img);
                let n = recs.len();
                Ok((recs, n))
            })
            .await;
        r.map_or(0, |(n, _)| n)
    }
}

fn write_error(e: WriteError) -> ControllerError {
    match e {
        WriteError::NotLeader(l) => not_controller(l),
        WriteError::Fatal(m) => ControllerError::new(errors::UNKNOWN_SERVER_ERROR, m),
    }
}

/// The ConfigRecords of one AlterConfigs resource: its changes, and for a whole-set
/// AlterConfigs (not incremental) a deletion of every current key it does not name.
fn config_records(
    resource_type: i8,
    name: &str,
    current: &BTreeMap<String, String>,
    changes: Vec<(String, Option<String>)>,
    incremental: bool,
) -> Vec<MetadataRecord> {
    let record = |key: &str, value: Option<String>| MetadataRecord::Config {
        resource_type,
        resource_name: name.to_string(),
        name: key.to_string(),
        value,
    };
    let mut recs: Vec<MetadataRecord> = Vec::new();
    if !incremental {
        for k in current
            .keys()
            .filter(|k| !changes.iter().any(|(c, _)| c == *k))
        {
            recs.push(record(k, None));
        }
    }
    for (k, v) in changes {
        recs.push(record(&k, v));
    }
    recs
}

/// The broker configs that can change while the brokers run: the replication throttles, in
/// bytes per second (Kafka's DynamicReplicationConfig).
pub const DYNAMIC_BROKER_CONFIGS: [&str; 3] = [
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
];

fn validate_dynamic_broker_configs(
    changes: &[(String, Option<String>)],
) -> Result<(), ControllerError> {
    let fixed: Vec<&str> = changes
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !DYNAMIC_BROKER_CONFIGS.contains(k))
        .collect();
    if !fixed.is_empty() {
        return Err(ControllerError::new(
            errors::INVALID_REQUEST,
            format!(
                "Cannot update these configs dynamically: [{}]; set them in server.properties",
                fixed.join(", ")
            ),
        ));
    }
    for (k, v) in changes {
        if let Some(v) = v {
            if !v.trim().parse::<i64>().is_ok_and(|n| n >= 0) {
                return Err(ControllerError::new(
                    errors::INVALID_CONFIG,
                    format!("Invalid value {v} for configuration {k}: Value must be at least 0"),
                ));
            }
        }
    }
    Ok(())
}

/// Turns config operations into `(key, Some(value) | None)` changes, resolving APPEND and
/// SUBTRACT against the current (or default) list value.
fn resolve_config_ops(
    current: &BTreeMap<String, String>,
    defaults: &crate::config::LogConfig,
    ops: Vec<(String, ConfigOp)>,
    incremental: bool,
) -> Result<Vec<(String, Option<String>)>, ControllerError> {
    let effective = defaults
        .with_overrides(current.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|(c, _)| c)
        .unwrap_or_else(|_| defaults.clone());
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect()
    };
    let mut out = Vec::new();
    for (key, op) in ops {
        let (items, append) = match op {
            ConfigOp::Set(v) => {
                out.push((key, Some(v)));
                continue;
            }
            ConfigOp::Delete => {
                out.push((key, None));
                continue;
            }
            _ if !incremental => {
                return Err(ControllerError::new(
                    errors::INVALID_REQUEST,
                    "APPEND and SUBTRACT are IncrementalAlterConfigs operations",
                ))
            }
            ConfigOp::Append(v) => (list(&v), true),
            ConfigOp::Subtract(v) => (list(&v), false),
        };
        let mut cur = effective
            .value_of(&key)
            .map(|(v, _)| list(&v))
            .unwrap_or_default();
        if append {
            for i in items {
                if !cur.contains(&i) {
                    cur.push(i);
                }
            }
        } else {
            cur.retain(|x| !items.contains(x));
        }
        out.push((key, Some(cur.join(","))));
    }
    Ok(out)
}

/// Follows leadership: takes over when this node becomes the leader.
async fn watch_leadership(c: std::sync::Weak<QuorumController>) {
    let Some(first) = c.upgrade() else { return };
    let mut leaders = first.quorum.leader_changes();
    drop(first);
    loop {
        let Some(c) = c.upgrade() else { return };
        if c.quorum.is_leader() && !c.is_active() {
            if let Err(e) = c.activate().await {
                tracing::debug!(error = %e, "could not take over as the active controller yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        } else if !c.quorum.is_leader() {
            *c.active_term.lock() = None;
        }
        drop(c);
        if tokio::time::timeout(Duration::from_millis(500), leaders.changed())
            .await
            .is_ok_and(|r| r.is_err())
        {
            return;
        }
    }
}

/// Session expiry and unclean elections (every `broker.session.timeout.ms` / 8) and the leader
/// imbalance check.
async fn periodic(c: std::sync::Weak<QuorumController>) {
    let Some(first) = c.upgrade() else { return };
    let step = (first.settings.session_timeout / 8)
        .clamp(Duration::from_millis(10), Duration::from_secs(1));
    drop(first);
    let mut last_rebalance = Instant::now();
    loop {
        tokio::time::sleep(step).await;
        let Some(c) = c.upgrade() else { return };
        if !c.is_active() {
            last_rebalance = Instant::now();
            continue;
        }
        while c.fence_one_stale_broker().await {}
        c.elect_unclean_leaders().await;
        if c.settings.auto_leader_rebalance
            && last_rebalance.elapsed() >= c.settings.leader_imbalance_check_interval
        {
            last_rebalance = Instant::now();
            c.rebalance_leaders().await;
        }
    }
}

/// The resource types AlterConfigs may name, for the APIs layer.
pub fn is_topic_resource(t: i8) -> bool {
    t == RESOURCE_TOPIC
}

pub fn is_broker_resource(t: i8) -> bool {
    t == RESOURCE_BROKER
}
