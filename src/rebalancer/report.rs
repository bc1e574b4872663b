//! Telling Kubernetes what the rebalancer did: an Event on its KafkaCluster for each action and
//! `status.rebalance` (last action, moves, skew before and after) shown by `kubectl describe kc`.

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;

use crate::operator::crd::{KafkaCluster, RebalanceStatus};

/// Field manager of the rebalancer's status writes (the operator's is `evenkeel-operator`).
pub const FIELD_MANAGER: &str = "evenkeel-rebalancer";

/// The KafkaCluster a sidecar reports to.
pub struct KubeReporter {
    api: Api<KafkaCluster>,
    recorder: Recorder,
    name: String,
}

impl KubeReporter {
    /// Reports to KafkaCluster `name` in `namespace`, with the pod's service account.
    pub async fn connect(name: &str, namespace: &str) -> Result<KubeReporter, kube::Error> {
        let client = Client::try_default().await?;
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Ok(KubeReporter {
            api: Api::namespaced(client.clone(), namespace),
            recorder: Recorder::new(client, reporter),
            name: name.to_string(),
        })
    }

    /// Publishes the Event and writes `status.rebalance`; failures are logged, never fatal (the
    /// rebalancing itself has happened).
    pub async fn report(&self, status: &RebalanceStatus, warning: bool) {
        let kc = match self.api.get(&self.name).await {
            Ok(kc) => kc,
            Err(e) => {
                tracing::warn!(error = %e, cluster = %self.name, "cannot read the KafkaCluster to report to");
                return;
            }
        };
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: status.last_action.clone(),
            note: Some(status.message.chars().take(1000).collect()),
            action: "Rebalance".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &kc.object_ref(&())).await {
            tracing::warn!(error = %e, "could not publish the rebalance event");
        }
        let patch = json!({ "status": { "rebalance": status } });
        if let Err(e) = self
            .api
            .patch_status(
                &self.name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(error = %e, "could not write status.rebalance");
        }
    }
}
