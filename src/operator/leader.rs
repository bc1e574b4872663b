//! Leader election on a `coordination.k8s.io/v1` Lease, so two operator replicas never reconcile
//! at once: acquire when free or expired, renew while leading, give up when renewal fails.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::Client;

/// Seconds a Lease stays valid without renewal.
pub const LEASE_SECONDS: i32 = 15;
const RENEW_EVERY: Duration = Duration::from_secs(5);
/// Give up leading when no renewal succeeded for this long (well inside `LEASE_SECONDS`).
const RENEW_DEADLINE: Duration = Duration::from_secs(10);

pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    Leading,
    HeldBy(String),
}

impl LeaseLock {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) -> Result<(), kube::Error> {
        loop {
            match self.try_acquire().await {
                Ok(Attempt::Leading) => return Ok(()),
                Ok(Attempt::HeldBy(holder)) => {
                    tracing::debug!(%holder, "lease held by another replica")
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
            tokio::time::sleep(RENEW_EVERY).await;
        }
    }

    /// Renews the Lease until a renewal fails or does not finish within `RENEW_DEADLINE` of the
    /// last good one (client-go's renewDeadline): a hung API call must not let this replica go
    /// on leading after the Lease has expired for the others. Returns why it stopped.
    pub async fn hold(&self) -> String {
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            let left = RENEW_DEADLINE.saturating_sub(last_renewed.elapsed());
            match tokio::time::timeout(left, self.try_acquire()).await {
                Ok(Ok(Attempt::Leading)) => last_renewed = tokio::time::Instant::now(),
                Ok(Ok(Attempt::HeldBy(holder))) => return format!("taken over by {holder}"),
                Ok(Err(e)) => return e.to_string(),
                Err(_) => return format!("no renewal within {RENEW_DEADLINE:?}"),
            }
        }
    }

    /// Gives the Lease up if this replica holds it (client-go's ReleaseOnCancel): no holder and
    /// a 1 s duration, so a standby takes over at its next try instead of waiting for the Lease
    /// to expire. Returns whether there was anything to give up.
    pub async fn release(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        lease.spec = Some(spec);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(true)
    }

    /// One round: create the Lease, renew ours, or take over an expired one. Uses the
    /// resourceVersion for optimistic concurrency, so two replicas cannot both win.
    pub async fn try_acquire(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            self.api.create(&PostParams::default(), &lease).await?;
            return Ok(Attempt::Leading);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let renewed = spec.renew_time.as_ref().map(|t| t.0);
        let duration = i64::from(spec.lease_duration_seconds.unwrap_or(LEASE_SECONDS));
        let expired = renewed.is_none_or(|r| r + SignedDuration::from_secs(duration) < now);
        let new_spec = if holder == self.identity {
            let acquired = spec.acquire_time.map_or(now, |t| t.0);
            self.spec(acquired, now, spec.lease_transitions.unwrap_or(0))
        } else if holder.is_empty() || expired {
            self.spec(now, now, spec.lease_transitions.unwrap_or(0) + 1)
        } else {
            return Ok(Attempt::HeldBy(holder));
        };
        lease.spec = Some(new_spec);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(Attempt::Leading)
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;
    use crate::operator::testing::FakeApiServer;

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/evenkeel-operator";

    fn lease(holder: &str, renewed: Timestamp) -> serde_json::Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "evenkeel-operator", "namespace": "ops", "resourceVersion": "41"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "renewTime": MicroTime(renewed), "acquireTime": MicroTime(renewed),
                     "leaseTransitions": 2},
        })
    }

    #[tokio::test]
    async fn a_missing_lease_is_created_and_held() {
        let s = FakeApiServer::default();
        let lock = LeaseLock::new(s.client(), "ops", "evenkeel-operator", "pod-a");
        assert_eq!(lock.try_acquire().await.unwrap(), Attempt::Leading);
        let created = s.calls_to(Method::POST, "/leases");
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].body["spec"]["holderIdentity"], "pod-a");
    }

    #[tokio::test]
    async fn a_live_lease_of_another_replica_is_respected() {
        let s = FakeApiServer::default();
        s.put(LEASE, lease("pod-b", Timestamp::now()));
        let lock = LeaseLock::new(s.client(), "ops", "evenkeel-operator", "pod-a");
        assert_eq!(
            lock.try_acquire().await.unwrap(),
            Attempt::HeldBy("pod-b".into())
        );
        assert!(s.calls_to(Method::PUT, "/leases").is_empty());
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_with_its_resource_version() {
        let s = FakeApiServer::default();
        let old = Timestamp::now() - SignedDuration::from_secs(60);
        s.put(LEASE, lease("pod-b", old));
        let lock = LeaseLock::new(s.client(), "ops", "evenkeel-operator", "pod-a");
        assert_eq!(lock.try_acquire().await.unwrap(), Attempt::Leading);
        let put = s.calls_to(Method::PUT, "/leases/evenkeel-operator");
        assert_eq!(put.len(), 1);
        assert_eq!(put[0].body["spec"]["holderIdentity"], "pod-a");
        assert_eq!(put[0].body["spec"]["leaseTransitions"], 3);
        assert_eq!(
            put[0].body["metadata"]["resourceVersion"], "41",
            "optimistic concurrency"
        );
    }

    #[tokio::test]
    async fn a_released_lease_is_taken_at_once_and_only_its_holder_releases_it() {
        let s = FakeApiServer::default();
        s.put(LEASE, lease("pod-a", Timestamp::now()));
        let b = LeaseLock::new(s.client(), "ops", "evenkeel-operator", "pod-b");
        assert!(!b.release().await.unwrap(), "pod-b does not hold it");
        assert!(s.calls_to(Method::PUT, "/leases").is_empty());
        let a = LeaseLock::new(s.client(), "ops", "evenkeel-operator", "pod-a");
        assert!(a.release().await.unwrap());
        let put = s.calls_to(Method::PUT, "/leases/evenkeel-operator");
        assert_eq!(put.len(), 1);
        assert!(
            put[0].body["spec"].get("holderIdentity").is_none(),
            "{}",
            put[0].body
        );
        assert_eq!(put[0].body["metadata"]["resourceVersion"], "41");
        s.put(LEASE, put[0].body.clone());
        assert_eq!(b.try_acquire().await.unwrap(), Attempt::Leading);
    }

    #[tokio::test]
    async fn a_lost_race_is_a_conflict_not_a_lead() {
        let s = FakeApiServer::default();
        s.put(
            LEASE,
            lease("pod-b", Timestamp::now() - SignedDuration::from_secs(60)),
        );
        s.route(|c| {
            (c.method == Method::PUT).then(|| {
                (
                    http::StatusCode::CONFLICT,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "Conflict", "code": 409, "message": "the object has been modified"}),
                )
            })
        });
        let lock = LeaseLock::new(s.client(), "ops", "evenkeel-operator", "pod-a");
        let err = lock.try_acquire().await.unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref e) if e.code == 409),
            "{err}"
        );
    }
}
