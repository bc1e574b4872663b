//! Securing or unsecuring a running cluster, one rolling restart per step: which step
//! (`SecurityStage`) the StatefulSet is at, the next one once its roll is done, and the spec a
//! step runs (`staged`). Brokers on either side of each roll still replicate from each other.
//!
//! Securing: the internal listener is added (`internal`), the brokers move their replication
//! onto it (`inter-broker`), then the spec's TLS, SASL and authorizer come (`secured`). Unsecuring
//! walks the same steps back. The controller listener moves to mutual TLS (or back) alongside,
//! a step per roll (`controller_move`), in the same rolls where it can.

use k8s_openapi::api::apps::v1::StatefulSet;

use super::certs;
use super::controller_move::{self, ControllerLayout};
use super::crd::{KafkaCluster, SecurityStage};
use super::resources::{BuildError, QuorumShape, INTERNAL_LISTENER, INTERNAL_PORT};

/// StatefulSet annotation: the `SecurityStage` its pod template runs.
pub const SECURITY_STAGE_ANNOTATION: &str = "kafka.evenkeel.dev/security-stage";

impl SecurityStage {
    /// Where the spec wants the cluster: `secured` when a listener has TLS or authentication, or
    /// `spec.authorization` is set; else `unsecured`.
    pub fn target(kc: &KafkaCluster) -> SecurityStage {
        if certs::wants_certificates(kc) || kc.spec.authorization.is_some() {
            SecurityStage::Secured
        } else {
            SecurityStage::Unsecured
        }
    }

    /// Whether the brokers have the internal listener (and the operator makes the CAs).
    pub fn has_internal_listener(self) -> bool {
        self != SecurityStage::Unsecured
    }

    /// Whether the brokers replicate on the internal listener, and the operator, the rebalancer
    /// sidecar and the producer proxy reach them on it with their certificates.
    pub fn internal_listener_in_use(self) -> bool {
        self >= SecurityStage::InterBroker
    }

    /// The annotation's and the status's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityStage::Unsecured => "unsecured",
            SecurityStage::Internal => "internal",
            SecurityStage::InterBroker => "inter-broker",
            SecurityStage::Secured => "secured",
        }
    }

    /// Every stage, in the order securing takes them.
    const ORDER: [SecurityStage; 4] = [
        SecurityStage::Unsecured,
        SecurityStage::Internal,
        SecurityStage::InterBroker,
        SecurityStage::Secured,
    ];

    fn parse(s: &str) -> Option<SecurityStage> {
        Self::ORDER.into_iter().find(|stage| stage.as_str() == s)
    }

    /// One step from `self` toward `target`.
    fn toward(self, target: SecurityStage) -> SecurityStage {
        let at = Self::ORDER.iter().position(|s| *s == self).unwrap_or(0);
        match self.cmp(&target) {
            std::cmp::Ordering::Less => Self::ORDER[at + 1],
            std::cmp::Ordering::Greater => Self::ORDER[at - 1],
            std::cmp::Ordering::Equal => self,
        }
    }

    /// What the step does, for events and conditions.
    fn describe(self) -> &'static str {
        match self {
            SecurityStage::Unsecured => "the internal listener is removed",
            SecurityStage::Internal => {
                "the internal listener is there; the brokers replicate on the first listener"
            }
            SecurityStage::InterBroker => {
                "the brokers replicate on the internal listener; the listeners are PLAINTEXT \
                 and the authorizer off"
            }
            SecurityStage::Secured => {
                "the spec's listeners and authorization; the brokers replicate on the internal \
                 listener"
            }
        }
    }
}

/// The stage `kc` runs at: its status's (the cluster reconciler writes it, and sets it on the
/// view it builds from, `staged`), else the spec's target (a cluster not reconciled yet).
pub fn stage_of(kc: &KafkaCluster) -> SecurityStage {
    kc.status
        .as_ref()
        .and_then(|s| s.security_stage)
        .unwrap_or_else(|| SecurityStage::target(kc))
}

/// The stage the existing StatefulSet runs: its annotation, else (an earlier operator made it)
/// `secured` when its brokers have the internal listener, `unsecured` when not. `None` without one.
pub fn recorded(existing: Option<&StatefulSet>) -> Option<SecurityStage> {
    let sts = existing?;
    let annotated = sts
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SECURITY_STAGE_ANNOTATION))
        .and_then(|v| SecurityStage::parse(v));
    Some(annotated.unwrap_or(if has_internal_port(sts) {
        SecurityStage::Secured
    } else {
        SecurityStage::Unsecured
    }))
}

/// The stage and the controller listeners to apply: for a new cluster, the spec's; else what
/// the StatefulSet records, each a step nearer the spec once `rolled_out`, in the same roll.
/// A mutual-TLS controller listener needs the brokers' certificates: while the next
/// controller listeners need them the stage does not go below `internal`, and they wait for a
/// stage that has them.
pub fn next_steps(
    kc: &KafkaCluster,
    recorded: Option<SecurityStage>,
    quorum: QuorumShape,
    rolled_out: bool,
) -> (SecurityStage, QuorumShape) {
    let target = SecurityStage::target(kc);
    let Some(at) = recorded else {
        return (target, quorum);
    };
    if !rolled_out {
        return (at, quorum);
    }
    let layout = ControllerLayout {
        tls: quorum.tls == Some(true),
        spare: quorum.spare,
    };
    let want_tls = target == SecurityStage::Secured;
    let stage = at.toward(target);
    let next = controller_move::next_layout(layout, want_tls, controller_move::spare_port(kc));
    let needs_certificates = next.tls || next.spare.is_some_and(|s| s.tls);
    match (
        needs_certificates,
        stage.has_internal_listener(),
        at.has_internal_listener(),
    ) {
        (false, _, _) | (true, true, _) => (stage, quorum.with_layout(next)),
        (true, false, true) => (at, quorum.with_layout(next)),
        (true, false, false) => (stage, quorum),
    }
}

/// What a step under way says, for the Reconciling condition: `None` once the stage is the
/// target and the controller listener is where the target wants it.
pub fn progress(
    stage: SecurityStage,
    target: SecurityStage,
    layout: ControllerLayout,
) -> Option<(String, String)> {
    let want_tls = target == SecurityStage::Secured;
    if stage == target && layout.settled(want_tls) {
        return None;
    }
    let (reason, verb) = match target {
        SecurityStage::Secured => ("Securing", "securing"),
        _ => ("Unsecuring", "unsecuring"),
    };
    let mut message = format!(
        "{verb} the running cluster, step {}: {}",
        stage.as_str(),
        stage.describe()
    );
    if !layout.settled(want_tls) {
        message.push_str(&format!(
            "; moving the controller listener: {}",
            layout.describe()
        ));
    }
    Some((reason.to_string(), message))
}

/// The spec `stage` runs, with the stage in its status. Below `secured` the listeners are PLAINTEXT,
/// the authorizer is off and the proxy has no basic auth: the spec's TLS, SASL and ACLs only
/// come once every broker replicates on the internal listener (a secured spec that arrives
/// while a roll is still under way at `unsecured` waits there, unsecured).
pub fn staged(kc: &KafkaCluster, stage: SecurityStage) -> KafkaCluster {
    let mut view = kc.clone();
    view.status
        .get_or_insert_with(Default::default)
        .security_stage = Some(stage);
    if stage != SecurityStage::Secured {
        for l in &mut view.spec.listeners {
            l.tls = false;
            l.authentication = None;
        }
        view.spec.authorization = None;
        if let Some(proxy) = &mut view.spec.proxy {
            proxy.authentication = None;
        }
    }
    view
}

/// Refuses what no sequence of rolls can do: securing or unsecuring a cluster whose internal
/// listener an earlier operator made PLAINTEXT (this one makes it mutual TLS).
pub fn check(existing: Option<&StatefulSet>) -> Result<(), BuildError> {
    let Some(sts) = existing else {
        return Ok(());
    };
    if has_internal_port(sts) && !internal_keystore(sts) {
        return Err(BuildError::Invalid(format!(
            "this cluster's internal listener {INTERNAL_LISTENER} on {INTERNAL_PORT} is \
             PLAINTEXT (it was secured by an earlier operator); this operator makes it mutual \
             TLS, and brokers on either side of that roll could not replicate: recreate the \
             cluster (a migration is not done)"
        )));
    }
    Ok(())
}

/// The StatefulSet's broker container.
fn broker_container(sts: &StatefulSet) -> Option<&k8s_openapi::api::core::v1::Container> {
    sts.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "broker")
}

/// Whether the StatefulSet's brokers have the internal listener's port.
fn has_internal_port(sts: &StatefulSet) -> bool {
    broker_container(sts)
        .into_iter()
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| p.name.as_deref() == Some(INTERNAL_LISTENER))
}

/// Whether the internal listener has a keystore (mutual TLS): it is on the command line, since
/// each pod has its own certificate.
fn internal_keystore(sts: &StatefulSet) -> bool {
    let keystore = format!("listener.name.{INTERNAL_LISTENER}.ssl.keystore.location=");
    broker_container(sts)
        .into_iter()
        .flat_map(|c| c.args.iter().flatten())
        .any(|a| a.starts_with(&keystore))
}

#[cfg(test)]
mod tests {
    use super::SecurityStage::*;
    use super::*;

    fn cluster(secured: bool) -> KafkaCluster {
        let tls = if secured { ", \"tls\": true" } else { "" };
        let spec = format!(
            r#"{{"replicas": 3, "storage": {{"size": "1Gi"}},
               "listeners": [{{"name": "plain", "port": 9092{tls}}}]}}"#
        );
        let spec: serde_json::Value = serde_json::from_str(&spec).unwrap();
        KafkaCluster::new("main", serde_json::from_value(spec).unwrap())
    }

    fn shape(tls: Option<bool>) -> QuorumShape {
        QuorumShape {
            controllers: 3,
            tls,
            spare: None,
        }
    }

    #[test]
    fn a_step_is_taken_only_once_rolled_out() {
        let kc = cluster(true);
        assert_eq!(
            next_steps(&kc, None, shape(None), false),
            (Secured, shape(None)),
            "a new cluster starts where the spec is"
        );
        let plain = shape(Some(false));
        assert_eq!(
            next_steps(&kc, Some(Unsecured), plain, false),
            (Unsecured, plain),
            "the roll is not done"
        );
        let (stage, quorum) = next_steps(&kc, Some(Unsecured), plain, true);
        assert_eq!(stage, Internal);
        assert!(quorum.spare.is_some_and(|s| s.tls && !s.dialled));
        // A cluster created secured, at the spec: nothing moves.
        let tls = shape(Some(true));
        assert_eq!(next_steps(&kc, Some(Secured), tls, true), (Secured, tls));
    }

    #[test]
    fn the_stage_waits_at_internal_while_the_controller_listener_needs_certificates() {
        let kc = cluster(false);
        let dialled_tls = QuorumShape {
            spare: Some(controller_move::SpareListener {
                tls: false,
                port: 9090,
                dialled: true,
            }),
            ..shape(Some(true))
        };
        // Unsecuring: the controller port is still TLS; the next layout turns it PLAINTEXT,
        // which needs no certificate, so the stage may go too.
        let (stage, quorum) = next_steps(&kc, Some(Internal), dialled_tls, true);
        assert_eq!((stage, quorum.tls), (Unsecured, Some(false)));
        // A PLAINTEXT spare to be dialled while 9093 is still mutual TLS: the next layout
        // needs the certificates, so the stage waits at internal.
        let plain_spare = QuorumShape {
            spare: Some(controller_move::SpareListener {
                tls: false,
                port: 9090,
                dialled: false,
            }),
            ..shape(Some(true))
        };
        let (stage, quorum) = next_steps(&kc, Some(Internal), plain_spare, true);
        assert_eq!(stage, Internal, "the stage waits");
        assert!(quorum.spare.is_some_and(|s| s.dialled) && quorum.tls == Some(true));
        // Securing from internal: the stage goes on with a TLS spare.
        let tls_spare = QuorumShape {
            spare: Some(controller_move::SpareListener {
                tls: true,
                port: 9090,
                dialled: false,
            }),
            ..shape(Some(false))
        };
        let (stage, _) = next_steps(&cluster(true), Some(Internal), tls_spare, true);
        assert_eq!(stage, InterBroker);
    }

    #[test]
    fn each_stage_is_spelt_as_its_annotation_reads_back() {
        for stage in [Unsecured, Internal, InterBroker, Secured] {
            assert_eq!(SecurityStage::parse(stage.as_str()), Some(stage));
            let json = serde_json::to_value(stage).unwrap();
            assert_eq!(
                json,
                stage.as_str(),
                "the status spells it as the annotation"
            );
        }
        assert_eq!(SecurityStage::parse("halfway"), None);
    }

    #[test]
    fn progress_names_the_direction_and_the_step() {
        let tls = ControllerLayout {
            tls: true,
            spare: None,
        };
        let plain = ControllerLayout { tls: false, ..tls };
        assert_eq!(progress(Secured, Secured, tls), None);
        let (reason, message) = progress(Internal, Secured, plain).unwrap();
        assert_eq!(reason, "Securing");
        assert!(message.starts_with("securing the running cluster, step internal:"));
        assert!(message.contains("moving the controller listener: controller port 9093 PLAINTEXT"));
        let (reason, message) = progress(InterBroker, Unsecured, plain).unwrap();
        assert_eq!(reason, "Unsecuring");
        assert!(message.contains("step inter-broker"), "{message}");
        assert!(!message.contains("controller"), "{message}");
        let (_, message) = progress(Secured, Secured, plain).unwrap();
        assert!(
            message.contains("moving the controller listener"),
            "{message}"
        );
    }
}
