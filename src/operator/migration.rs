//! Securing or unsecuring a running cluster, one rolling restart per step: which step
//! (`SecurityStage`) the StatefulSet is at, the next one once its roll is done, and the spec a
//! step runs (`staged`). Brokers on either side of each roll still replicate from each other.
//!
//! Securing: the internal listener is added (`internal`), the brokers move their replication
//! onto it (`inter-broker`), then the spec's TLS, SASL and authorizer come (`secured`). Unsecuring
//! walks the same steps back. The controller listener keeps what it was created with.

use k8s_openapi::api::apps::v1::StatefulSet;

use super::certs;
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

/// The stage to apply: the target for a new cluster; else the recorded one, a step nearer the
/// target once `rolled_out` (every broker runs the recorded stage and is ready).
pub fn next_stage(
    target: SecurityStage,
    recorded: Option<SecurityStage>,
    rolled_out: bool,
) -> SecurityStage {
    match recorded {
        None => target,
        Some(at) if rolled_out => at.toward(target),
        Some(at) => at,
    }
}

/// What a step under way says, for the Reconciling condition: `None` at the target.
pub fn progress(stage: SecurityStage, target: SecurityStage) -> Option<(String, String)> {
    if stage == target {
        return None;
    }
    let (reason, verb) = match target {
        SecurityStage::Secured => ("Securing", "securing"),
        _ => ("Unsecuring", "unsecuring"),
    };
    Some((
        reason.to_string(),
        format!(
            "{verb} the running cluster, step {}: {}",
            stage.as_str(),
            stage.describe()
        ),
    ))
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

/// Refuses what no sequence of rolls can do: unsecuring a cluster whose controller listener the
/// StatefulSet records as mutual TLS (fixed when it was created), and any cluster whose internal
/// listener an earlier operator made PLAINTEXT (this one makes it mutual TLS).
pub fn check(
    kc: &KafkaCluster,
    existing: Option<&StatefulSet>,
    quorum: QuorumShape,
) -> Result<(), BuildError> {
    let Some(sts) = existing else {
        return Ok(());
    };
    let controller_tls = quorum.tls == Some(true);
    let target = SecurityStage::target(kc);
    if has_internal_port(sts) && !internal_keystore(sts) {
        return Err(BuildError::Invalid(format!(
            "this cluster's internal listener {INTERNAL_LISTENER} on {INTERNAL_PORT} is \
             PLAINTEXT (it was secured by an earlier operator); this operator makes it mutual \
             TLS, and brokers on either side of that roll could not replicate: recreate the \
             cluster (a migration is not done)"
        )));
    }
    if target == SecurityStage::Unsecured && controller_tls {
        return Err(BuildError::Invalid(
            "unsecuring this cluster is not supported: its controller listener has been mutual \
             TLS since it was created, and voters on either side of a change could not reach \
             each other; keep a listener secured or spec.authorization set, or recreate the \
             cluster"
                .into(),
        ));
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

    #[test]
    fn a_stage_moves_one_step_toward_the_target_only_once_rolled_out() {
        assert_eq!(
            next_stage(Secured, None, false),
            Secured,
            "a new cluster starts there"
        );
        assert_eq!(
            next_stage(Secured, Some(Unsecured), false),
            Unsecured,
            "the roll is not done"
        );
        assert_eq!(next_stage(Secured, Some(Unsecured), true), Internal);
        assert_eq!(next_stage(Secured, Some(Internal), true), InterBroker);
        assert_eq!(next_stage(Secured, Some(InterBroker), true), Secured);
        assert_eq!(next_stage(Secured, Some(Secured), true), Secured);
        assert_eq!(next_stage(Unsecured, Some(Secured), true), InterBroker);
        assert_eq!(next_stage(Unsecured, Some(InterBroker), true), Internal);
        assert_eq!(next_stage(Unsecured, Some(Internal), true), Unsecured);
        assert_eq!(next_stage(Unsecured, Some(InterBroker), false), InterBroker);
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
        assert_eq!(progress(Secured, Secured), None);
        let (reason, message) = progress(Internal, Secured).unwrap();
        assert_eq!(reason, "Securing");
        assert!(message.starts_with("securing the running cluster, step internal:"));
        let (reason, message) = progress(InterBroker, Unsecured).unwrap();
        assert_eq!(reason, "Unsecuring");
        assert!(message.contains("step inter-broker"), "{message}");
    }
}
