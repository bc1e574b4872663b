//! What the controller decides about brokers, as Kafka's ClusterControlManager and
//! BrokerHeartbeatManager do: registrations (epochs, duplicates, other clusters), heartbeat
//! sessions, fencing on timeout, unfencing once caught up, and controlled shutdown.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::replication::{self, TopicDefaults};
use super::ControllerError;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{BrokerEndpoint, BrokerFeature, BrokerRegistration, MetadataRecord};
use crate::protocol::errors;
use crate::storage::KafkaUuid;

/// The live contact of one broker with the active controller (soft state, not in the log).
#[derive(Debug, Clone)]
struct Session {
    epoch: i64,
    last_contact: Instant,
    metadata_offset: i64,
    /// The offset at which the broker's controlled shutdown was written.
    controlled_shutdown_offset: Option<i64>,
}

/// Heartbeat sessions of the brokers, kept by the active controller.
#[derive(Debug, Default)]
pub struct BrokerSessions {
    sessions: HashMap<i32, Session>,
}

/// A BrokerRegistration request.
#[derive(Debug, Clone)]
pub struct RegistrationRequest {
    pub broker_id: i32,
    pub cluster_id: String,
    pub incarnation_id: KafkaUuid,
    pub endpoints: Vec<BrokerEndpoint>,
    pub features: Vec<BrokerFeature>,
    pub rack: Option<String>,
}

/// A BrokerHeartbeat request.
#[derive(Debug, Clone, Copy)]
pub struct Heartbeat {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub current_metadata_offset: i64,
    pub want_fence: bool,
    pub want_shut_down: bool,
}

/// The heartbeat answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

/// Where a broker's heartbeat takes it (Kafka's `BrokerControlState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerState {
    Fenced,
    Unfenced,
    ControlledShutdown,
    ShutdownNow,
}

impl BrokerState {
    fn reply(self, caught_up: bool) -> HeartbeatReply {
        let (is_fenced, should_shut_down) = match self {
            BrokerState::Fenced => (true, false),
            BrokerState::Unfenced | BrokerState::ControlledShutdown => (false, false),
            BrokerState::ShutdownNow => (true, true),
        };
        HeartbeatReply {
            is_caught_up: caught_up,
            is_fenced,
            should_shut_down,
        }
    }
}

/// What a heartbeat decided: records to commit, the answer, and the state it leads to.
#[derive(Debug)]
pub struct HeartbeatOutcome {
    pub records: Vec<MetadataRecord>,
    pub reply: HeartbeatReply,
    pub next: BrokerState,
}

fn fence_records(
    image: &MetadataImage,
    broker: i32,
    epoch: i64,
    defaults: &TopicDefaults,
) -> Vec<MetadataRecord> {
    let mut recs = replication::remove_from_isrs(image, broker, defaults);
    recs.push(MetadataRecord::BrokerRegistrationChange {
        broker_id: broker,
        broker_epoch: epoch,
        fenced: 1,
        in_controlled_shutdown: 0,
    });
    recs
}

fn leads_any(image: &MetadataImage, broker: i32) -> bool {
    image
        .topics()
        .any(|t| t.partitions.values().any(|p| p.leader == broker))
}

impl BrokerSessions {
    /// A new active controller gives every unfenced broker a fresh session.
    pub fn activate(&mut self, image: &MetadataImage, now: Instant) {
        self.sessions.clear();
        for b in image.brokers().filter(|b| !b.fenced) {
            self.sessions.insert(
                b.id,
                Session {
                    epoch: b.epoch,
                    last_contact: now,
                    metadata_offset: -1,
                    controlled_shutdown_offset: None,
                },
            );
        }
    }

    fn has_valid_session(&self, id: i32, epoch: i64, now: Instant, timeout: Duration) -> bool {
        self.sessions.get(&id).is_some_and(|s| {
            s.epoch == epoch && now.saturating_duration_since(s.last_contact) <= timeout
        })
    }

    /// BrokerRegistration: the records registering the broker (fenced) and its epoch.
    pub fn register(
        &mut self,
        image: &MetadataImage,
        req: &RegistrationRequest,
        cluster_id: &str,
        now: Instant,
        timeout: Duration,
        defaults: &TopicDefaults,
    ) -> Result<(Vec<MetadataRecord>, i64), ControllerError> {
        if req.cluster_id != cluster_id {
            return Err(ControllerError::new(
                errors::INCONSISTENT_CLUSTER_ID,
                format!(
                    "Expected cluster ID {cluster_id}, but got cluster ID {}",
                    req.cluster_id
                ),
            ));
        }
        let existing = image.broker(req.broker_id);
        let mut recs = Vec::new();
        let (epoch, fenced, in_controlled_shutdown) = match existing {
            Some(b) if b.incarnation_id == req.incarnation_id => {
                (b.epoch, b.fenced, b.in_controlled_shutdown)
            }
            Some(b) => {
                if self.has_valid_session(b.id, b.epoch, now, timeout) {
                    return Err(ControllerError::new(
                        errors::DUPLICATE_BROKER_REGISTRATION,
                        "Another broker is registered with that broker id. If the broker was recently restarted this should self-resolve once the heartbeat manager expires the broker's session.",
                    ));
                }
                // The old incarnation is gone: it leaves every ISR before the new one registers.
                recs.extend(replication::remove_from_isrs(image, b.id, defaults));
                (image.next_offset(), true, false)
            }
            None => (image.next_offset(), true, false),
        };
        recs.push(MetadataRecord::RegisterBroker(BrokerRegistration {
            broker_id: req.broker_id,
            incarnation_id: req.incarnation_id,
            broker_epoch: epoch,
            endpoints: req.endpoints.clone(),
            features: req.features.clone(),
            rack: req.rack.clone(),
            fenced,
            in_controlled_shutdown,
        }));
        self.sessions.insert(
            req.broker_id,
            Session {
                epoch,
                last_contact: now,
                metadata_offset: -1,
                controlled_shutdown_offset: None,
            },
        );
        Ok((recs, epoch))
    }

    /// Checks that `epoch` is the broker's current registration.
    pub fn check_epoch(
        image: &MetadataImage,
        broker: i32,
        epoch: i64,
    ) -> Result<(), ControllerError> {
        match image.broker(broker) {
            None => Err(ControllerError::new(
                errors::STALE_BROKER_EPOCH,
                format!("No broker registration found for broker id {broker}"),
            )),
            Some(b) if b.epoch != epoch => Err(ControllerError::new(
                errors::STALE_BROKER_EPOCH,
                format!(
                    "Expected broker epoch {}, but got broker epoch {epoch}",
                    b.epoch
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// The lowest metadata offset any active broker has reported (`i64::MAX` with none).
    fn lowest_active_offset(&self, image: &MetadataImage) -> i64 {
        self.sessions
            .iter()
            .filter(|(id, s)| {
                image.broker(**id).is_some_and(|b| b.is_active())
                    && s.controlled_shutdown_offset.is_none()
            })
            .map(|(_, s)| s.metadata_offset)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// BrokerHeartbeat: moves the broker through fenced, unfenced, controlled shutdown and
    /// shutdown, as Kafka's `calculateNextBrokerState` does.
    pub fn heartbeat(
        &mut self,
        image: &MetadataImage,
        hb: &Heartbeat,
        now: Instant,
        defaults: &TopicDefaults,
    ) -> Result<HeartbeatOutcome, ControllerError> {
        Self::check_epoch(image, hb.broker_id, hb.broker_epoch)?;
        let b = image.broker(hb.broker_id).expect("checked above");
        let session = self.sessions.entry(hb.broker_id).or_insert(Session {
            epoch: hb.broker_epoch,
            last_contact: now,
            metadata_offset: -1,
            controlled_shutdown_offset: None,
        });
        session.epoch = hb.broker_epoch;
        session.last_contact = now;
        session.metadata_offset = hb.current_metadata_offset;
        let cs_offset = session.controlled_shutdown_offset;
        let caught_up = hb.current_metadata_offset >= b.registered_at;
        let current = if b.in_controlled_shutdown {
            BrokerState::ControlledShutdown
        } else if b.fenced {
            BrokerState::Fenced
        } else {
            BrokerState::Unfenced
        };
        let id = hb.broker_id;
        let (next, records) = match current {
            BrokerState::Fenced if hb.want_shut_down => (BrokerState::ShutdownNow, Vec::new()),
            BrokerState::Fenced if !hb.want_fence && caught_up => {
                let mut recs = vec![MetadataRecord::BrokerRegistrationChange {
                    broker_id: id,
                    broker_epoch: b.epoch,
                    fenced: -1,
                    in_controlled_shutdown: 0,
                }];
                recs.extend(replication::elect_with_returning(image, id, defaults));
                (BrokerState::Unfenced, recs)
            }
            BrokerState::Fenced => (BrokerState::Fenced, Vec::new()),
            BrokerState::Unfenced if hb.want_fence && hb.want_shut_down => (
                BrokerState::ShutdownNow,
                fence_records(image, id, b.epoch, defaults),
            ),
            BrokerState::Unfenced if hb.want_fence => (
                BrokerState::Fenced,
                fence_records(image, id, b.epoch, defaults),
            ),
            BrokerState::Unfenced if hb.want_shut_down => {
                if leads_any(image, id) {
                    let mut recs = vec![MetadataRecord::BrokerRegistrationChange {
                        broker_id: id,
                        broker_epoch: b.epoch,
                        fenced: 0,
                        in_controlled_shutdown: 1,
                    }];
                    recs.extend(replication::remove_from_isrs(image, id, defaults));
                    (BrokerState::ControlledShutdown, recs)
                } else {
                    (
                        BrokerState::ShutdownNow,
                        fence_records(image, id, b.epoch, defaults),
                    )
                }
            }
            BrokerState::Unfenced => (BrokerState::Unfenced, Vec::new()),
            BrokerState::ControlledShutdown => {
                let done = !leads_any(image, id)
                    && cs_offset.is_some_and(|o| o <= self.lowest_active_offset(image));
                if done {
                    (
                        BrokerState::ShutdownNow,
                        fence_records(image, id, b.epoch, defaults),
                    )
                } else {
                    (BrokerState::ControlledShutdown, Vec::new())
                }
            }
            BrokerState::ShutdownNow => (BrokerState::ShutdownNow, Vec::new()),
        };
        Ok(HeartbeatOutcome {
            records,
            reply: next.reply(caught_up),
            next,
        })
    }

    /// Notes where the broker's controlled shutdown landed in the log, once committed.
    pub fn controlled_shutdown_written(&mut self, broker: i32, offset: i64) {
        if let Some(s) = self.sessions.get_mut(&broker) {
            s.controlled_shutdown_offset.get_or_insert(offset);
        }
    }

    /// Forgets a broker that shut down or was fenced.
    pub fn remove(&mut self, broker: i32) {
        self.sessions.remove(&broker);
    }

    /// One broker whose session has timed out, with the records that fence it (Kafka fences
    /// one per check and checks again at once).
    pub fn expire_one(
        &mut self,
        image: &MetadataImage,
        now: Instant,
        timeout: Duration,
        defaults: &TopicDefaults,
    ) -> Option<(i32, Vec<MetadataRecord>)> {
        let expired = self
            .sessions
            .iter()
            .find(|(_, s)| now.saturating_duration_since(s.last_contact) > timeout)
            .map(|(id, s)| (*id, s.epoch))?;
        self.sessions.remove(&expired.0);
        let b = image.broker(expired.0)?;
        if b.epoch != expired.1 || b.fenced {
            return Some((expired.0, Vec::new()));
        }
        tracing::info!(
            broker = expired.0,
            epoch = b.epoch,
            "fencing broker {} at epoch {} because its session has timed out",
            expired.0,
            b.epoch
        );
        Some((
            expired.0,
            fence_records(image, expired.0, b.epoch, defaults),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LogConfig;
    use crate::controller::replication::{create_topic, TopicSpec};
    use rand::SeedableRng;

    fn defaults() -> TopicDefaults {
        TopicDefaults {
            log: LogConfig::default(),
            num_partitions: 1,
            default_replication_factor: 1,
        }
    }

    fn apply(img: &mut MetadataImage, recs: &[MetadataRecord]) {
        for r in recs {
            let at = img.next_offset();
            img.apply(r, at);
        }
    }

    fn request(id: i32, incarnation: u8) -> RegistrationRequest {
        RegistrationRequest {
            broker_id: id,
            cluster_id: "c1".into(),
            incarnation_id: KafkaUuid([incarnation; 16]),
            endpoints: vec![],
            features: vec![],
            rack: None,
        }
    }

    const T: Duration = Duration::from_secs(9);

    #[test]
    fn a_broker_registers_fenced_and_is_unfenced_once_caught_up() {
        let mut img = MetadataImage::empty();
        let mut s = BrokerSessions::default();
        let now = Instant::now();
        let (recs, epoch) = s
            .register(&img, &request(1, 1), "c1", now, T, &defaults())
            .unwrap();
        apply(&mut img, &recs);
        let at = img.broker(1).unwrap().registered_at;
        assert!(img.broker(1).unwrap().fenced);
        let hb = |offset| Heartbeat {
            broker_id: 1,
            broker_epoch: epoch,
            current_metadata_offset: offset,
            want_fence: false,
            want_shut_down: false,
        };
        let o = s.heartbeat(&img, &hb(at - 1), now, &defaults()).unwrap();
        assert_eq!(
            (o.next, o.reply.is_caught_up, o.records.len()),
            (BrokerState::Fenced, false, 0)
        );
        let o = s.heartbeat(&img, &hb(at), now, &defaults()).unwrap();
        assert_eq!(o.next, BrokerState::Unfenced);
        apply(&mut img, &o.records);
        assert!(!img.broker(1).unwrap().fenced);
    }

    #[test]
    fn a_second_incarnation_is_refused_while_the_first_lives() {
        let mut img = MetadataImage::empty();
        let mut s = BrokerSessions::default();
        let now = Instant::now();
        let (recs, _) = s
            .register(&img, &request(1, 1), "c1", now, T, &defaults())
            .unwrap();
        apply(&mut img, &recs);
        let e = s
            .register(&img, &request(1, 2), "c1", now, T, &defaults())
            .unwrap_err();
        assert_eq!(e.code, errors::DUPLICATE_BROKER_REGISTRATION);
        // Once its session has expired, a new incarnation takes the id.
        assert!(s
            .register(&img, &request(1, 2), "c1", now + T * 2, T, &defaults())
            .is_ok());
        let e = s
            .register(&img, &request(2, 1), "other", now, T, &defaults())
            .unwrap_err();
        assert_eq!(e.code, errors::INCONSISTENT_CLUSTER_ID);
    }

    #[test]
    fn a_silent_broker_is_fenced_and_loses_its_leaderships() {
        let mut img = MetadataImage::empty();
        let mut s = BrokerSessions::default();
        let now = Instant::now();
        for id in [1, 2] {
            let (recs, epoch) = s
                .register(&img, &request(id, 1), "c1", now, T, &defaults())
                .unwrap();
            apply(&mut img, &recs);
            let o = s
                .heartbeat(
                    &img,
                    &Heartbeat {
                        broker_id: id,
                        broker_epoch: epoch,
                        current_metadata_offset: i64::MAX,
                        want_fence: false,
                        want_shut_down: false,
                    },
                    now,
                    &defaults(),
                )
                .unwrap();
            apply(&mut img, &o.records);
        }
        let spec = TopicSpec {
            name: "t".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: vec![(0, vec![1, 2])],
            ..Default::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (recs, _) = create_topic(&img, &spec, &defaults(), &mut rng, false).unwrap();
        apply(&mut img, &recs);
        assert!(s.expire_one(&img, now + T / 2, T, &defaults()).is_none());
        // Broker 2 keeps beating; broker 1 goes silent.
        let e2 = img.broker(2).unwrap().epoch;
        s.heartbeat(
            &img,
            &Heartbeat {
                broker_id: 2,
                broker_epoch: e2,
                current_metadata_offset: i64::MAX,
                want_fence: false,
                want_shut_down: false,
            },
            now + T,
            &defaults(),
        )
        .unwrap();
        let (id, recs) = s
            .expire_one(&img, now + T + Duration::from_millis(10), T, &defaults())
            .unwrap();
        assert_eq!(id, 1);
        apply(&mut img, &recs);
        let p = img.partition("t", 0).unwrap();
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
        assert!(img.broker(1).unwrap().fenced);
    }

    #[test]
    fn controlled_shutdown_moves_leaders_then_lets_the_broker_go() {
        let mut img = MetadataImage::empty();
        let mut s = BrokerSessions::default();
        let now = Instant::now();
        let mut epochs = HashMap::new();
        for id in [1, 2] {
            let (recs, epoch) = s
                .register(&img, &request(id, 1), "c1", now, T, &defaults())
                .unwrap();
            apply(&mut img, &recs);
            epochs.insert(id, epoch);
            let o = s
                .heartbeat(
                    &img,
                    &Heartbeat {
                        broker_id: id,
                        broker_epoch: epoch,
                        current_metadata_offset: i64::MAX,
                        want_fence: false,
                        want_shut_down: false,
                    },
                    now,
                    &defaults(),
                )
                .unwrap();
            apply(&mut img, &o.records);
        }
        let spec = TopicSpec {
            name: "t".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: vec![(0, vec![1, 2])],
            ..Default::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (recs, _) = create_topic(&img, &spec, &defaults(), &mut rng, false).unwrap();
        apply(&mut img, &recs);
        let hb = |offset| Heartbeat {
            broker_id: 1,
            broker_epoch: epochs[&1],
            current_metadata_offset: offset,
            want_fence: false,
            want_shut_down: true,
        };
        let o = s
            .heartbeat(&img, &hb(img.last_offset), now, &defaults())
            .unwrap();
        assert_eq!(o.next, BrokerState::ControlledShutdown);
        assert!(!o.reply.should_shut_down);
        apply(&mut img, &o.records);
        s.controlled_shutdown_written(1, img.last_offset);
        assert_eq!(img.partition("t", 0).unwrap().leader, 2);
        // Broker 2 has not seen the change yet: broker 1 must wait.
        let lagging = Heartbeat {
            broker_id: 2,
            broker_epoch: epochs[&2],
            current_metadata_offset: img.last_offset - 1,
            want_fence: false,
            want_shut_down: false,
        };
        s.heartbeat(&img, &lagging, now, &defaults()).unwrap();
        let o = s
            .heartbeat(&img, &hb(img.last_offset), now, &defaults())
            .unwrap();
        assert_eq!(o.next, BrokerState::ControlledShutdown);
        let caught_up = Heartbeat {
            current_metadata_offset: img.last_offset,
            ..lagging
        };
        s.heartbeat(&img, &caught_up, now, &defaults()).unwrap();
        let o = s
            .heartbeat(&img, &hb(img.last_offset), now, &defaults())
            .unwrap();
        assert_eq!(o.next, BrokerState::ShutdownNow);
        assert!(o.reply.should_shut_down);
    }
}
