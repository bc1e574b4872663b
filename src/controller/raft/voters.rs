//! Who votes in the metadata quorum: a voter's controller address and directory id (the quorum's
//! node type), and Kafka's checks for AddRaftVoter and RemoveRaftVoter (KIP-853 dynamic voters).

use std::collections::BTreeSet;
use std::fmt;

use openraft::Membership;
use serde::{Deserialize, Serialize};

use super::NodeId;
use crate::protocol::errors;
use crate::storage::KafkaUuid;

/// A voter as the membership stores it: where its controller listener is and the directory id
/// of its metadata log (zero in a static quorum, whose voters are known by id alone).
///
/// It travels between voters as one string, `host:port` (openraft's `BasicNode` carried the
/// same), with `/<directory id>` after it when there is one: a static quorum's entries read the
/// same to a node of an earlier release.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub struct VoterNode {
    pub addr: String,
    pub directory_id: KafkaUuid,
}

impl VoterNode {
    pub fn new(addr: impl Into<String>, directory_id: KafkaUuid) -> VoterNode {
        VoterNode {
            addr: addr.into(),
            directory_id,
        }
    }

    /// `(host, port)` of the address; port 0 when it has none.
    pub fn host_port(&self) -> (String, u16) {
        match self.addr.rsplit_once(':') {
            Some((h, p)) => (
                h.trim_matches(['[', ']']).to_string(),
                p.parse().unwrap_or(0),
            ),
            None => (self.addr.clone(), 0),
        }
    }
}

impl From<VoterNode> for String {
    fn from(n: VoterNode) -> String {
        n.to_string()
    }
}

impl From<String> for VoterNode {
    fn from(s: String) -> VoterNode {
        match s.rsplit_once('/') {
            Some((addr, dir)) => VoterNode {
                addr: addr.to_string(),
                directory_id: KafkaUuid::parse(dir).unwrap_or_default(),
            },
            None => VoterNode {
                addr: s,
                directory_id: KafkaUuid::ZERO,
            },
        }
    }
}

impl fmt::Display for VoterNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.directory_id == KafkaUuid::ZERO {
            true => f.write_str(&self.addr),
            false => write!(f, "{}/{}", self.addr, self.directory_id),
        }
    }
}

/// One voter of the current membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterInfo {
    pub id: i32,
    pub node: VoterNode,
}

/// Kafka's ReplicaKey as its messages print it.
pub fn replica_key(id: i32, directory_id: KafkaUuid) -> String {
    match directory_id == KafkaUuid::ZERO {
        true => format!("ReplicaKey(id={id}, directoryId=<undefined>)"),
        false => format!("ReplicaKey(id={id}, directoryId={directory_id})"),
    }
}

/// The voters of `m` (both sides of a joint membership), by id.
pub fn voters_of(m: &Membership<NodeId, VoterNode>) -> Vec<VoterInfo> {
    let ids: BTreeSet<NodeId> = m.voter_ids().collect();
    m.nodes()
        .filter(|(id, _)| ids.contains(id))
        .map(|(id, node)| VoterInfo {
            id: *id as i32,
            node: node.clone(),
        })
        .collect()
}

/// `(id, host:port)` of `voters`.
pub fn addresses(voters: &[VoterInfo]) -> Vec<(i32, String)> {
    voters.iter().map(|v| (v.id, v.node.addr.clone())).collect()
}

fn voter_set_text(voters: &[VoterInfo]) -> String {
    let keys: Vec<String> = voters
        .iter()
        .map(|v| replica_key(v.id, v.node.directory_id))
        .collect();
    format!("[{}]", keys.join(", "))
}

/// Where the quorum may be reached: the configured controllers, then the voters the log names
/// that none of them is (by address; an id learnt from the log replaces a bootstrap server's -1).
pub fn contacts(configured: &[(i32, String)], voters: &[(i32, String)]) -> Vec<(i32, String)> {
    let mut out: Vec<(i32, String)> = configured
        .iter()
        .map(|(id, addr)| {
            let named = voters.iter().find(|(_, a)| a == addr).map(|(v, _)| *v);
            (
                if *id < 0 { named.unwrap_or(*id) } else { *id },
                addr.clone(),
            )
        })
        .collect();
    for v in voters {
        if !out
            .iter()
            .any(|(id, a)| a == &v.1 || (*id >= 0 && *id == v.0))
        {
            out.push(v.clone());
        }
    }
    out
}

/// Why a voter change was refused: Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct VoterChangeError {
    pub code: i16,
    pub message: String,
}

impl VoterChangeError {
    pub fn new(code: i16, message: impl Into<String>) -> VoterChangeError {
        VoterChangeError {
            code,
            message: message.into(),
        }
    }

    pub fn timed_out(message: impl Into<String>) -> VoterChangeError {
        VoterChangeError::new(errors::REQUEST_TIMED_OUT, message)
    }
}

/// AddRaftVoter's request as the leader checks it.
#[derive(Debug, Clone)]
pub struct AddVoter {
    pub id: i32,
    pub directory_id: KafkaUuid,
    /// The new voter's listeners: `(name, host, port)`.
    pub listeners: Vec<(String, String, u16)>,
}

/// What a leader must know of itself to judge a voter change.
pub struct LeaderView<'a> {
    /// The first of `controller.listener.names`: the one voters dial.
    pub default_listener: &'a str,
    /// The finalized `kraft.version`: 0 for a static quorum.
    pub kraft_version: i16,
    /// The membership in force and whether it is still joint or uncommitted.
    pub voters: &'a [VoterInfo],
    pub settled: bool,
}

/// The checks the leader makes before it adds a voter, in Kafka's order (the leadership and the
/// cluster id are checked before); the new voter's address for the default listener.
pub fn check_add(req: &AddVoter, view: &LeaderView<'_>) -> Result<VoterNode, VoterChangeError> {
    if req.id < 0 || req.directory_id == KafkaUuid::ZERO {
        return Err(VoterChangeError::new(
            errors::INVALID_REQUEST,
            "Add voter request didn't include a valid voter",
        ));
    }
    let Some((_, host, port)) = req
        .listeners
        .iter()
        .find(|(name, _, _)| name == view.default_listener)
    else {
        let names: Vec<String> = req
            .listeners
            .iter()
            .map(|(n, h, p)| format!("{n}://{h}:{p}"))
            .collect();
        return Err(VoterChangeError::new(
            errors::INVALID_REQUEST,
            format!(
                "Add voter request didn't include the endpoint ({}) for the default listener {}",
                names.join(", "),
                view.default_listener
            ),
        ));
    };
    check_kraft_version(view, "adding")?;
    check_settled(view)?;
    if view.voters.iter().any(|v| v.id == req.id) {
        return Err(VoterChangeError::new(
            errors::DUPLICATE_VOTER,
            format!(
                "The voter id for {} is already part of the set of voters {}.",
                replica_key(req.id, req.directory_id),
                voter_set_text(view.voters)
            ),
        ));
    }
    let host = match host.contains(':') && !host.starts_with('[') {
        true => format!("[{host}]"),
        false => host.clone(),
    };
    Ok(VoterNode::new(format!("{host}:{port}"), req.directory_id))
}

/// The checks before a voter is removed: it must be a voter with that directory id, and not
/// the last one.
pub fn check_remove(
    id: i32,
    directory_id: KafkaUuid,
    view: &LeaderView<'_>,
) -> Result<(), VoterChangeError> {
    if id < 0 || directory_id == KafkaUuid::ZERO {
        return Err(VoterChangeError::new(
            errors::INVALID_REQUEST,
            "Remove voter request didn't include a valid voter",
        ));
    }
    check_kraft_version(view, "removing")?;
    check_settled(view)?;
    let present = view
        .voters
        .iter()
        .any(|v| v.id == id && v.node.directory_id == directory_id);
    if !present || view.voters.len() <= 1 {
        return Err(VoterChangeError::new(
            errors::VOTER_NOT_FOUND,
            format!(
                "Cannot remove voter {} from the set of voters {}",
                replica_key(id, directory_id),
                voter_set_text(view.voters)
            ),
        ));
    }
    Ok(())
}

fn check_kraft_version(view: &LeaderView<'_>, what: &str) -> Result<(), VoterChangeError> {
    if view.kraft_version < 1 {
        return Err(VoterChangeError::new(
            errors::UNSUPPORTED_VERSION,
            format!("Cluster doesn't support {what} voter because the kraft.version feature is 0"),
        ));
    }
    Ok(())
}

fn check_settled(view: &LeaderView<'_>) -> Result<(), VoterChangeError> {
    if !view.settled {
        return Err(VoterChangeError::timed_out(
            "Request timed out waiting for voters to commit the latest voter change",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(b: u8) -> KafkaUuid {
        KafkaUuid([b; 16])
    }

    fn voter(id: i32, d: u8) -> VoterInfo {
        VoterInfo {
            id,
            node: VoterNode::new(format!("c{id}:9093"), dir(d)),
        }
    }

    fn view(voters: &[VoterInfo]) -> LeaderView<'_> {
        LeaderView {
            default_listener: "CONTROLLER",
            kraft_version: 1,
            voters,
            settled: true,
        }
    }

    fn add(id: i32, listeners: &[(&str, &str, u16)]) -> AddVoter {
        AddVoter {
            id,
            directory_id: dir(9),
            listeners: listeners
                .iter()
                .map(|(n, h, p)| (n.to_string(), h.to_string(), *p))
                .collect(),
        }
    }

    #[test]
    fn contacts_add_the_voters_the_log_names() {
        let configured = vec![(-1, "c1:9093".to_string())];
        let voters = vec![(1, "c1:9093".to_string()), (2, "c2:9093".to_string())];
        assert_eq!(
            contacts(&configured, &voters),
            vec![(1, "c1:9093".to_string()), (2, "c2:9093".to_string())]
        );
        // A static quorum's configured address wins over the one its first entry recorded.
        let configured = vec![(1, "c1:9094".to_string())];
        assert_eq!(
            contacts(&configured, &voters),
            vec![(1, "c1:9094".to_string()), (2, "c2:9093".to_string())]
        );
        assert_eq!(contacts(&configured, &[]), configured);
    }

    #[test]
    fn a_node_reads_back_as_it_was_written() {
        for n in [
            VoterNode::new("c1:9093", KafkaUuid::ZERO),
            VoterNode::new("c1:9093", KafkaUuid::random()),
        ] {
            let s: String = n.clone().into();
            assert_eq!(VoterNode::from(s), n);
            let b = bincode::serialize(&n).unwrap();
            assert_eq!(bincode::deserialize::<VoterNode>(&b).unwrap(), n);
        }
        // A static quorum's node is the string openraft's BasicNode carried.
        let old = bincode::serialize(&openraft::BasicNode::new("c1:9093")).unwrap();
        assert_eq!(
            bincode::serialize(&VoterNode::new("c1:9093", KafkaUuid::ZERO)).unwrap(),
            old
        );
        assert_eq!(VoterNode::new("h:7", dir(1)).host_port(), ("h".into(), 7));
    }

    #[test]
    fn add_takes_the_default_listener_address() {
        let vs = [voter(1, 1)];
        let n = check_add(
            &add(2, &[("OTHER", "x", 1), ("CONTROLLER", "c2", 9093)]),
            &view(&vs),
        )
        .unwrap();
        assert_eq!(n, VoterNode::new("c2:9093", dir(9)));
    }

    #[test]
    fn add_refusals_follow_kafkas_order() {
        let vs = [voter(1, 1), voter(2, 2)];
        let code = |r: &AddVoter, v: &LeaderView<'_>| check_add(r, v).unwrap_err().code;
        let mut bad = add(3, &[("CONTROLLER", "c3", 9093)]);
        bad.directory_id = KafkaUuid::ZERO;
        assert_eq!(code(&bad, &view(&vs)), errors::INVALID_REQUEST);
        let e = check_add(&add(3, &[("BROKER", "c3", 9092)]), &view(&vs)).unwrap_err();
        assert_eq!(e.code, errors::INVALID_REQUEST);
        assert!(e.message.contains("default listener CONTROLLER"), "{e}");
        let ok = add(3, &[("CONTROLLER", "c3", 9093)]);
        let mut static_quorum = view(&vs);
        static_quorum.kraft_version = 0;
        assert_eq!(code(&ok, &static_quorum), errors::UNSUPPORTED_VERSION);
        let mut joint = view(&vs);
        joint.settled = false;
        assert_eq!(code(&ok, &joint), errors::REQUEST_TIMED_OUT);
        let dup = add(2, &[("CONTROLLER", "c2", 9093)]);
        let e = check_add(&dup, &view(&vs)).unwrap_err();
        assert_eq!(e.code, errors::DUPLICATE_VOTER);
        assert!(e.message.contains("ReplicaKey(id=2"), "{e}");
        assert!(check_add(&ok, &view(&vs)).is_ok());
    }

    #[test]
    fn remove_needs_the_voter_its_directory_and_another_voter() {
        let vs = [voter(1, 1), voter(2, 2)];
        assert!(check_remove(2, dir(2), &view(&vs)).is_ok());
        let code = |id, d, vs: &[VoterInfo]| check_remove(id, d, &view(vs)).unwrap_err().code;
        assert_eq!(code(3, dir(3), &vs), errors::VOTER_NOT_FOUND);
        assert_eq!(code(2, dir(7), &vs), errors::VOTER_NOT_FOUND);
        let last = [voter(1, 1)];
        let e = check_remove(1, dir(1), &view(&last)).unwrap_err();
        assert_eq!(e.code, errors::VOTER_NOT_FOUND);
        assert!(e.message.starts_with("Cannot remove voter"), "{e}");
        assert_eq!(code(1, KafkaUuid::ZERO, &vs), errors::INVALID_REQUEST);
    }
}
