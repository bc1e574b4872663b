//! What the producer knows of the cluster: the leaders of the topics it writes to and the
//! brokers' addresses, refreshed when asked (an unknown leader, NOT_LEADER_OR_FOLLOWER) and every
//! `metadata.max.age.ms` (Java's ProducerMetadata).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::Notify;

use super::cluster::{ClusterView, PartitionLeader};
use crate::client::{AdminClient, ClientError, ClientSecurity, TopicDescription};

struct State {
    view: Arc<ClusterView>,
    nodes: HashMap<i32, String>,
    /// Topics the producer has been asked to write to.
    topics: BTreeSet<String>,
}

pub struct ProducerMetadata {
    admin: AdminClient,
    state: RwLock<State>,
    update_requested: AtomicBool,
    /// Notified after each refresh.
    pub updated: Notify,
}

impl ProducerMetadata {
    /// Metadata from the brokers of `bootstrap`, fetched when first needed (each connect and
    /// call bounded by `timeout`): no broker has to answer yet.
    pub fn new(
        bootstrap: &str,
        timeout: Duration,
        security: ClientSecurity,
    ) -> Result<Self, ClientError> {
        let admin = AdminClient::new(bootstrap, timeout)?.with_security(security);
        Ok(ProducerMetadata {
            admin,
            state: RwLock::new(State {
                view: Arc::new(ClusterView::default()),
                nodes: HashMap::new(),
                topics: BTreeSet::new(),
            }),
            update_requested: AtomicBool::new(false),
            updated: Notify::new(),
        })
    }

    /// The current snapshot.
    pub fn view(&self) -> Arc<ClusterView> {
        self.state.read().view.clone()
    }

    pub fn node_address(&self, id: i32) -> Option<String> {
        self.state.read().nodes.get(&id).cloned()
    }

    /// Every broker's address, by id.
    pub fn node_addresses(&self) -> Vec<String> {
        let s = self.state.read();
        let mut ids: Vec<(&i32, &String)> = s.nodes.iter().collect();
        ids.sort();
        ids.into_iter().map(|(_, a)| a.clone()).collect()
    }

    /// Asks for a refresh at the next chance.
    pub fn request_update(&self) {
        self.update_requested.store(true, Ordering::Release);
    }

    /// Takes the pending refresh request, if any.
    pub fn take_update_request(&self) -> bool {
        self.update_requested.swap(false, Ordering::AcqRel)
    }

    /// Fetches the partitions and leaders of every topic in use.
    pub async fn refresh(&self) -> Result<(), ClientError> {
        let topics: Vec<String> = self.state.read().topics.iter().cloned().collect();
        let described = self.admin.describe_topics(Some(&topics)).await?;
        let nodes = self.admin.known_brokers().await;
        let view = ClusterView::new(
            described
                .into_iter()
                .map(|t| {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| PartitionLeader {
                            partition: p.partition,
                            leader: (p.leader >= 0).then_some(p.leader),
                            leader_epoch: (p.leader_epoch >= 0).then_some(p.leader_epoch),
                        })
                        .collect();
                    (t.name, parts)
                })
                .collect(),
        );
        {
            let mut s = self.state.write();
            s.view = Arc::new(view);
            s.nodes = nodes;
        }
        self.updated.notify_waiters();
        Ok(())
    }

    /// The number of partitions of `topic`, fetching its metadata the first time it is asked
    /// for; `None` when the cluster does not have it.
    pub async fn partition_count(&self, topic: &str) -> Result<Option<usize>, ClientError> {
        let n = self.view().partitions_for_topic(topic).len();
        if n > 0 {
            return Ok(Some(n));
        }
        self.state.write().topics.insert(topic.to_string());
        let refreshed = self.refresh().await;
        let n = self.view().partitions_for_topic(topic).len();
        if n == 0 {
            // Not kept: a topic that does not exist (or that this client may not see) is
            // asked for again next time, and not by every refresh meanwhile.
            self.state.write().topics.remove(topic);
        }
        refreshed?;
        Ok((n > 0).then_some(n))
    }

    /// The named topics as Metadata describes them (`None`: all).
    pub async fn describe(
        &self,
        names: Option<&[String]>,
    ) -> Result<Vec<TopicDescription>, ClientError> {
        self.admin.describe_topics(names).await
    }

    /// The cluster id, for clients that address the cluster by it (REST Proxy v3).
    pub async fn cluster_id(&self) -> Result<String, ClientError> {
        Ok(self.admin.describe_cluster().await?.cluster_id)
    }
}
