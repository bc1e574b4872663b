//! The broker's lifecycle with the controller (Kafka's BrokerLifecycleManager): register with
//! its listeners, rack and incarnation; heartbeat with the metadata offset it has applied;
//! become unfenced once caught up; and on shutdown ask the controller to move its leaderships
//! away before the process exits.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest};
use tokio::sync::watch;

use super::controller_channel::{is_not_controller, ControllerChannel};
use crate::metadata::features;
use crate::metadata::image::MetadataImage;
use crate::protocol::errors;
use crate::storage::KafkaUuid;

/// Where the broker is in its life (Kafka's BrokerState, as the lifecycle sees it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LifecycleState {
    /// Not yet registered, or registered and catching up with the metadata.
    Starting,
    /// Caught up, fenced until the controller lets it in.
    Recovery,
    /// Unfenced: serving.
    Running,
    /// Asked the controller to move its leaderships away.
    PendingControlledShutdown,
    /// The controller said it may go (or it gave up waiting).
    ShuttingDown,
}

/// What registration needs to say about this broker.
#[derive(Debug, Clone)]
pub struct Registration {
    pub node_id: i32,
    pub cluster_id: String,
    /// `(listener name, host, port, security protocol id)` as advertised.
    pub listeners: Vec<(String, String, u16, i16)>,
    pub rack: Option<String>,
    pub heartbeat_interval: Duration,
    /// How long to keep trying to register before giving up (Kafka's
    /// `initial.broker.registration.timeout.ms`).
    pub registration_timeout: Duration,
}

pub struct Lifecycle {
    reg: Registration,
    incarnation: KafkaUuid,
    channel: Arc<ControllerChannel>,
    epoch: AtomicI64,
    state: watch::Sender<LifecycleState>,
    caught_up: watch::Sender<bool>,
    /// The images the broker has applied: the offset of the last metadata record in them goes
    /// with every heartbeat, and the broker serves only once its own image shows it unfenced
    /// (the controller's answer can arrive before the broker has applied the change).
    published: watch::Receiver<Arc<MetadataImage>>,
    /// Why the broker must stop, when the controller will not have it.
    fatal: watch::Sender<Option<String>>,
}

use crate::protocol::str_bytes as sb;

impl Lifecycle {
    pub fn new(
        reg: Registration,
        channel: Arc<ControllerChannel>,
        published: watch::Receiver<Arc<MetadataImage>>,
    ) -> Arc<Lifecycle> {
        Arc::new(Lifecycle {
            reg,
            incarnation: KafkaUuid::random(),
            channel,
            epoch: AtomicI64::new(-1),
            state: watch::channel(LifecycleState::Starting).0,
            caught_up: watch::channel(false).0,
            published,
            fatal: watch::channel(None).0,
        })
    }

    /// Whether the image the broker has applied shows it unfenced.
    fn unfenced_locally(&self) -> bool {
        self.published
            .borrow()
            .broker(self.reg.node_id)
            .is_some_and(|b| !b.fenced)
    }

    /// This broker's registration epoch, or -1 before it registered.
    pub fn epoch(&self) -> i64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn state(&self) -> LifecycleState {
        *self.state.borrow()
    }

    /// Whether the controller has seen this broker apply its own registration.
    pub fn is_caught_up(&self) -> bool {
        *self.caught_up.borrow()
    }

    /// Set when the broker cannot go on; the reason, one line.
    pub fn fatal(&self) -> watch::Receiver<Option<String>> {
        self.fatal.subscribe()
    }

    fn set_state(&self, s: LifecycleState) {
        self.state.send_if_modified(|cur| {
            // Shutting down never goes back.
            if *cur == s || *cur >= LifecycleState::PendingControlledShutdown && s < *cur {
                return false;
            }
            *cur = s;
            true
        });
    }

    /// Waits until the controller unfences this broker, or the broker cannot start.
    pub async fn wait_running(&self) -> Result<(), String> {
        let mut state = self.state.subscribe();
        let mut fatal = self.fatal.subscribe();
        loop {
            if let Some(f) = fatal.borrow().clone() {
                return Err(f);
            }
            if *state.borrow_and_update() >= LifecycleState::Running {
                return Ok(());
            }
            tokio::select! {
                r = state.changed() => if r.is_err() { return Err("the lifecycle stopped".into()) },
                r = fatal.changed() => if r.is_err() { return Err("the lifecycle stopped".into()) },
            }
        }
    }

    /// Asks the controller to move this broker's leaderships away and waits until it lets
    /// the broker go, at most `timeout`.
    pub async fn controlled_shutdown(&self, timeout: Duration) -> bool {
        if self.state() < LifecycleState::Running {
            self.set_state(LifecycleState::ShuttingDown);
            return true;
        }
        self.set_state(LifecycleState::PendingControlledShutdown);
        let mut state = self.state.subscribe();
        let wait = async {
            loop {
                if *state.borrow_and_update() == LifecycleState::ShuttingDown {
                    return;
                }
                if state.changed().await.is_err() {
                    return;
                }
            }
        };
        let done = tokio::time::timeout(timeout, wait).await.is_ok();
        if !done {
            tracing::warn!("timed out waiting for the controller to approve controlled shutdown");
        }
        self.set_state(LifecycleState::ShuttingDown);
        done
    }

    fn registration(&self) -> BrokerRegistrationRequest {
        let metadata_version = features::METADATA_VERSION_RANGE;
        BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(self.reg.node_id))
            .with_cluster_id(sb(self.reg.cluster_id.clone()))
            .with_incarnation_id(uuid::Uuid::from_bytes(self.incarnation.0))
            .with_listeners(
                self.reg
                    .listeners
                    .iter()
                    .map(|(name, host, port, protocol)| {
                        Listener::default()
                            .with_name(sb(name.clone()))
                            .with_host(sb(host.clone()))
                            .with_port(*port)
                            .with_security_protocol(*protocol)
                    })
                    .collect(),
            )
            .with_features(vec![Feature::default()
                .with_name(sb(metadata_version.name))
                .with_min_supported_version(metadata_version.min)
                .with_max_supported_version(metadata_version.max)])
            .with_rack(self.reg.rack.clone().map(sb))
    }

    /// Registers, retrying until `registration_timeout`; `Err` with the reason to stop.
    async fn register(&self) -> Result<i64, String> {
        let started = Instant::now();
        let req = self.registration();
        let mut last;
        loop {
            match self
                .channel
                .call(&req, 0, self.reg.heartbeat_interval, |r| {
                    is_not_controller(r.error_code)
                })
                .await
            {
                Ok(r) if r.error_code == errors::NONE => return Ok(r.broker_epoch),
                Ok(r) if r.error_code == errors::INCONSISTENT_CLUSTER_ID => {
                    return Err(format!(
                        "the controller refused node {}: it belongs to another cluster than {} (this node's meta.properties)",
                        self.reg.node_id, self.reg.cluster_id
                    ))
                }
                Ok(r) => last = errors::error_name(r.error_code).to_string(),
                Err(e) => last = e.to_string(),
            }
            if started.elapsed() >= self.reg.registration_timeout {
                return Err(format!(
                    "node {} could not register with the controller within {} ms: {last}",
                    self.reg.node_id,
                    self.reg.registration_timeout.as_millis()
                ));
            }
            tracing::warn!(node = self.reg.node_id, reason = %last, "registration refused; retrying");
            tokio::time::sleep(self.reg.heartbeat_interval).await;
        }
    }

    /// Registers and heartbeats until the controller lets the broker shut down.
    pub async fn run(self: Arc<Self>) {
        'register: loop {
            let epoch = match self.register().await {
                Ok(e) => e,
                Err(reason) => {
                    tracing::error!("{reason}");
                    self.fatal.send_replace(Some(reason));
                    return;
                }
            };
            self.epoch.store(epoch, Ordering::Release);
            tracing::info!(
                node = self.reg.node_id,
                epoch,
                rack = %self.reg.rack.as_deref().unwrap_or("none"),
                "registered with the controller"
            );
            loop {
                let state = self.state();
                let req = BrokerHeartbeatRequest::default()
                    .with_broker_id(BrokerId(self.reg.node_id))
                    .with_broker_epoch(epoch)
                    .with_current_metadata_offset(self.published.borrow().last_offset)
                    .with_want_fence(false)
                    .with_want_shut_down(state == LifecycleState::PendingControlledShutdown);
                let resp = self
                    .channel
                    .call(&req, 0, self.reg.heartbeat_interval, |r| {
                        is_not_controller(r.error_code)
                    })
                    .await;
                let mut pause = self.reg.heartbeat_interval;
                match resp {
                    Ok(r) if r.error_code == errors::NONE => {
                        self.caught_up.send_if_modified(|c| {
                            let changed = *c != r.is_caught_up;
                            *c = r.is_caught_up;
                            changed
                        });
                        if r.should_shut_down {
                            tracing::info!(
                                "the controller has asked us to exit controlled shutdown"
                            );
                            self.set_state(LifecycleState::ShuttingDown);
                            return;
                        }
                        let serving = !r.is_fenced && self.unfenced_locally();
                        if state < LifecycleState::PendingControlledShutdown {
                            self.set_state(match (r.is_caught_up, serving) {
                                (false, _) => LifecycleState::Starting,
                                (true, false) => LifecycleState::Recovery,
                                (true, true) => LifecycleState::Running,
                            });
                        }
                        if !r.is_caught_up || !serving {
                            // Catching up: beat often so the controller sees it soon.
                            pause = Duration::from_millis(50);
                        }
                    }
                    Ok(r)
                        if matches!(
                            r.error_code,
                            errors::STALE_BROKER_EPOCH | errors::BROKER_ID_NOT_REGISTERED
                        ) =>
                    {
                        tracing::warn!(
                            error = errors::error_name(r.error_code),
                            "the controller lost this broker's registration; registering again"
                        );
                        continue 'register;
                    }
                    Ok(r) => tracing::warn!(
                        error = errors::error_name(r.error_code),
                        "broker {} sent a heartbeat request but received an error",
                        self.reg.node_id
                    ),
                    Err(e) => tracing::debug!(error = %e, "heartbeat failed"),
                }
                if self.state() == LifecycleState::ShuttingDown {
                    return;
                }
                if self.state() == LifecycleState::PendingControlledShutdown {
                    pause = pause.min(Duration::from_millis(200));
                }
                let mut st = self.state.subscribe();
                let _ = tokio::time::timeout(pause, st.changed()).await;
            }
        }
    }
}
