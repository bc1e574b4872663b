//! What the reconcilers need from a Kafka cluster, as a trait: `crate::client::AdminClient`
//! implements it for real brokers; reconcile tests on kube's mock service use an in-memory one.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use crate::client::{
    AdminClient, AlterConfigOp, AlterOpType, ClientError, ClientSecurity, ConfigSource,
};
use crate::protocol::errors;
use crate::security::acl::{AclBinding, AclBindingFilter};
use crate::security::sasl::ScramMechanism;

/// A Kafka-side failure, kept as Kafka names it so it can become a condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {message}")]
pub struct AdminError {
    /// Kafka's error code, when the broker answered with one.
    pub code: Option<i16>,
    /// Kafka's error name (`INVALID_CONFIG`), or `CONNECTION_FAILED` / `TIMEOUT` for transport.
    pub name: String,
    pub message: String,
}

impl AdminError {
    pub fn transport(message: impl Into<String>) -> AdminError {
        AdminError {
            code: None,
            name: "CONNECTION_FAILED".into(),
            message: message.into(),
        }
    }

    /// The error name as a condition reason: `INVALID_CONFIG` → `InvalidConfig`.
    pub fn reason(&self) -> String {
        self.name
            .split('_')
            .map(|w| {
                let mut c = w.chars();
                match c.next() {
                    Some(f) => {
                        f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase()
                    }
                    None => String::new(),
                }
            })
            .collect()
    }
}

/// A topic as the cluster has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicState {
    pub topic_id: String,
    pub partitions: i32,
    pub replication_factor: i32,
    /// Configs set on the topic itself (source DYNAMIC_TOPIC_CONFIG), not defaults.
    pub configs: BTreeMap<String, String>,
}

/// One partition's placement, for restart safety and leader counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub topic: String,
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// The topic's effective `min.insync.replicas`.
    pub min_insync_replicas: i32,
}

/// A partition's new replica list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

/// The cluster as a whole: who is the active controller and where every partition is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterState {
    pub cluster_id: String,
    pub controller_id: i32,
    pub brokers: Vec<i32>,
    pub partitions: Vec<PartitionState>,
}

pub trait TopicAdmin: Send + Sync {
    /// The topic, or `None` when it does not exist.
    fn describe_topic(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<TopicState>, AdminError>> + Send;
    /// Creates the topic; returns its topic id.
    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<String, AdminError>> + Send;
    fn create_partitions(
        &self,
        name: &str,
        total: i32,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// Sets `set` and removes `delete` (back to the default) in one IncrementalAlterConfigs.
    fn alter_topic_configs(
        &self,
        name: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// Deletes the topic; a topic that is already gone is not an error.
    fn delete_topic(&self, name: &str) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// Cluster id, controller and every partition's leader, replicas and ISR.
    fn cluster_state(&self) -> impl Future<Output = Result<ClusterState, AdminError>> + Send;
    /// Starts moving partitions (AlterPartitionReassignments).
    fn reassign(
        &self,
        moves: &[Reassignment],
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// How many partition reassignments are still in progress.
    fn ongoing_reassignments(&self) -> impl Future<Output = Result<usize, AdminError>> + Send;
}

/// What the KafkaUser reconciler changes in Kafka: a user's SCRAM credentials and the ACLs of
/// its principal.
pub trait UserAdmin: Send + Sync {
    /// The SCRAM mechanisms `user` has a credential for.
    fn scram_mechanisms(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Vec<ScramMechanism>, AdminError>> + Send;
    /// Sets `user`'s credential for `mechanism` to `password`.
    fn set_scram_password(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// Removes `user`'s credentials for `mechanisms`; missing ones are not an error.
    fn delete_scram(
        &self,
        user: &str,
        mechanisms: &[ScramMechanism],
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// Every ACL that names `principal`.
    fn acls_of(
        &self,
        principal: &str,
    ) -> impl Future<Output = Result<Vec<AclBinding>, AdminError>> + Send;
    fn create_acls(
        &self,
        acls: &[AclBinding],
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
    /// Removes exactly these ACLs.
    fn delete_acls(
        &self,
        acls: &[AclBinding],
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
}

/// Opens an admin connection to the brokers of one cluster.
pub trait AdminConnector: Send + Sync + 'static {
    type Admin: TopicAdmin + UserAdmin;
    fn connect(
        &self,
        bootstrap: &str,
        security: ClientSecurity,
    ) -> impl Future<Output = Result<Self::Admin, AdminError>> + Send;
}

impl From<ClientError> for AdminError {
    fn from(e: ClientError) -> AdminError {
        match &e {
            ClientError::Kafka {
                code,
                name,
                message,
                ..
            } => AdminError {
                code: Some(*code),
                name: name.to_string(),
                message: message.clone().unwrap_or_else(|| e.to_string()),
            },
            ClientError::Timeout(_) => AdminError {
                code: None,
                name: "TIMEOUT".into(),
                message: e.to_string(),
            },
            _ => AdminError::transport(e.to_string()),
        }
    }
}

/// Connects `crate::client::AdminClient`s with a fixed timeout.
pub struct ClientConnector {
    pub timeout: Duration,
}

impl AdminConnector for ClientConnector {
    type Admin = AdminClient;
    async fn connect(
        &self,
        bootstrap: &str,
        security: ClientSecurity,
    ) -> Result<AdminClient, AdminError> {
        Ok(AdminClient::connect_with(bootstrap, self.timeout, security).await?)
    }
}

impl TopicAdmin for AdminClient {
    async fn describe_topic(&self, name: &str) -> Result<Option<TopicState>, AdminError> {
        let names = [name.to_string()];
        let Some(t) = self
            .describe_topics(Some(&names))
            .await?
            .into_iter()
            .find(|t| t.name == name)
        else {
            return Ok(None);
        };
        let configs = self
            .describe_topic_configs(name)
            .await?
            .into_iter()
            .filter(|c| c.source == ConfigSource::DynamicTopic)
            .filter_map(|c| Some((c.name, c.value?)))
            .collect();
        Ok(Some(TopicState {
            topic_id: t.topic_id.to_string(),
            partitions: t.partitions.len() as i32,
            replication_factor: t.partitions.first().map_or(0, |p| p.replicas.len() as i32),
            configs,
        }))
    }

    async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: &BTreeMap<String, String>,
    ) -> Result<String, AdminError> {
        let rf = i16::try_from(replication_factor).map_err(|_| AdminError {
            code: None,
            name: "INVALID_REPLICATION_FACTOR".into(),
            message: format!("replication factor {replication_factor} is out of range"),
        })?;
        Ok(
            AdminClient::create_topic(self, name, partitions, rf, configs)
                .await?
                .to_string(),
        )
    }

    async fn create_partitions(&self, name: &str, total: i32) -> Result<(), AdminError> {
        Ok(AdminClient::create_partitions(self, name, total).await?)
    }

    async fn alter_topic_configs(
        &self,
        name: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), AdminError> {
        let mut ops: Vec<AlterConfigOp> = set
            .iter()
            .map(|(k, v)| AlterConfigOp {
                name: k.clone(),
                op: AlterOpType::Set,
                value: Some(v.clone()),
            })
            .collect();
        ops.extend(delete.iter().map(|k| AlterConfigOp {
            name: k.clone(),
            op: AlterOpType::Delete,
            value: None,
        }));
        Ok(AdminClient::alter_topic_configs(self, name, &ops).await?)
    }

    async fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        match AdminClient::delete_topic(self, name).await {
            Err(e) if e.code() == Some(errors::UNKNOWN_TOPIC_OR_PARTITION) => Ok(()),
            other => Ok(other?),
        }
    }

    async fn reassign(&self, moves: &[Reassignment]) -> Result<(), AdminError> {
        let moves: Vec<crate::client::Reassignment> = moves
            .iter()
            .map(|m| crate::client::Reassignment {
                topic: m.topic.clone(),
                partition: m.partition,
                replicas: Some(m.replicas.clone()),
            })
            .collect();
        Ok(self.alter_partition_reassignments(&moves).await?)
    }

    async fn ongoing_reassignments(&self) -> Result<usize, AdminError> {
        Ok(self.list_partition_reassignments().await?.len())
    }

    async fn cluster_state(&self) -> Result<ClusterState, AdminError> {
        let cluster = self.describe_cluster().await?;
        let topics = self.describe_topics(None).await?;
        let mut partitions = Vec::new();
        for t in topics {
            // Only partitions whose restart safety matters need the topic's min.insync.replicas.
            let min_isr = if t.partitions.iter().any(|p| p.replicas.len() > 1) {
                self.describe_topic_configs(&t.name)
                    .await?
                    .into_iter()
                    .find(|c| c.name == "min.insync.replicas")
                    .and_then(|c| c.value?.parse().ok())
                    .unwrap_or(1)
            } else {
                1
            };
            partitions.extend(t.partitions.into_iter().map(|p| PartitionState {
                topic: t.name.clone(),
                partition: p.partition,
                leader: p.leader,
                replicas: p.replicas,
                isr: p.isr,
                min_insync_replicas: min_isr,
            }));
        }
        Ok(ClusterState {
            cluster_id: cluster.cluster_id,
            controller_id: cluster.controller_id,
            brokers: cluster.brokers.iter().map(|b| b.id).collect(),
            partitions,
        })
    }
}

impl UserAdmin for AdminClient {
    async fn scram_mechanisms(&self, user: &str) -> Result<Vec<ScramMechanism>, AdminError> {
        Ok(self.describe_scram_mechanisms(user).await?)
    }

    async fn set_scram_password(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
    ) -> Result<(), AdminError> {
        Ok(self
            .upsert_scram_credential(user, mechanism, password)
            .await?)
    }

    async fn delete_scram(
        &self,
        user: &str,
        mechanisms: &[ScramMechanism],
    ) -> Result<(), AdminError> {
        Ok(self.delete_scram_credentials(user, mechanisms).await?)
    }

    async fn acls_of(&self, principal: &str) -> Result<Vec<AclBinding>, AdminError> {
        let filter = AclBindingFilter {
            principal: Some(principal.to_string()),
            ..AclBindingFilter::any()
        };
        Ok(self.describe_acls(&filter).await?)
    }

    async fn create_acls(&self, acls: &[AclBinding]) -> Result<(), AdminError> {
        Ok(AdminClient::create_acls(self, acls).await?)
    }

    async fn delete_acls(&self, acls: &[AclBinding]) -> Result<(), AdminError> {
        let filters: Vec<AclBindingFilter> = acls.iter().map(AclBindingFilter::exactly).collect();
        AdminClient::delete_acls(self, &filters).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_error_names_become_condition_reasons() {
        let e = AdminError {
            code: Some(40),
            name: "INVALID_CONFIG".into(),
            message: "x".into(),
        };
        assert_eq!(e.reason(), "InvalidConfig");
        assert_eq!(
            AdminError::transport("refused").reason(),
            "ConnectionFailed"
        );
    }
}
