//! How the leader changes a dynamic quorum's voters (KIP-853's AddRaftVoter and RemoveRaftVoter)
//! with openraft: a new voter is caught up as a learner, then joins through a joint membership;
//! a removed voter stays a learner (Kafka's goes on as an observer), so it keeps the log, except
//! a leader removing itself, which leaves the membership so that it steps down.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::ChangeMembers;

use super::voters::{
    self, voters_of, AddVoter, LeaderView, VoterChangeError, VoterInfo, VoterNode,
};
use super::{NodeId, Quorum};
use crate::protocol::errors;
use crate::storage::KafkaUuid;

/// How long a voter change waits for the previous one to be applied before it is refused.
const SETTLE_WAIT: Duration = Duration::from_secs(2);
/// The longest one membership change may take to commit before the request is answered
/// REQUEST_TIMED_OUT (the change may still commit; the next request finds it).
const COMMIT_WAIT: Duration = Duration::from_secs(30);

impl Quorum {
    /// The finalized `kraft.version`: 1 for a dynamic quorum whose voters have directory ids,
    /// 0 for a static one (and for one formed before evenkeel kept directory ids, from Kafka's
    /// quickstart file, which stays as it was).
    pub fn kraft_version(&self) -> i16 {
        let with_directories = self
            .voters()
            .iter()
            .any(|v| v.node.directory_id != KafkaUuid::ZERO);
        i16::from(self.dynamic && with_directories)
    }

    /// The voters of the membership this node knows (both sides while it is joint).
    pub fn voters(&self) -> Vec<VoterInfo> {
        voters_of(self.raft.metrics().borrow().membership_config.membership())
    }

    /// The voters' controller addresses, `(id, host:port)`.
    pub fn voter_addresses(&self) -> Vec<(i32, String)> {
        voters::addresses(&self.voters())
    }

    /// Whether the membership in force is committed (applied here) and whether it is joint.
    fn membership_state(&self) -> (bool, bool) {
        let m = self.raft.metrics().borrow().clone();
        let stored = &m.membership_config;
        let committed = stored.log_id().as_ref() <= m.last_applied.as_ref();
        (committed, stored.membership().get_joint_config().len() > 1)
    }

    /// Ends a change a leader left half done (it died or lost the leadership between openraft's
    /// two steps): a committed joint membership is replaced by its new voter set. Called by a
    /// new active controller and before every voter change; nothing to do otherwise.
    pub async fn finish_voter_change(&self) {
        if !self.is_leader() || self.membership_state() != (true, true) {
            return;
        }
        tracing::info!("finishing a voter change a previous leader left joint");
        if let Err(e) = self
            .change(ChangeMembers::AddVoterIds(BTreeSet::new()), true)
            .await
        {
            tracing::warn!(error = %e, "cannot finish the voter change");
        }
    }

    /// Judges a voter change as Kafka's leader does, with the membership in force. A change
    /// answered a moment ago may not be applied yet: that is waited for, up to the quorum's
    /// request timeout (Kafka answers a change once it is committed, so a client's next change
    /// finds it settled).
    async fn with_leader_view<T>(
        &self,
        judge: impl FnOnce(&LeaderView<'_>) -> Result<T, VoterChangeError>,
    ) -> Result<T, VoterChangeError> {
        if !self.is_leader() {
            return Err(VoterChangeError::new(
                errors::NOT_LEADER_OR_FOLLOWER,
                "this controller is not the leader of the metadata quorum",
            ));
        }
        self.finish_voter_change().await;
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        while self.membership_state() != (true, false) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let voters = self.voters();
        judge(&LeaderView {
            default_listener: &self.listener,
            kraft_version: self.kraft_version(),
            voters: &voters,
            settled: self.membership_state() == (true, false),
        })
    }

    /// A membership change, bounded by `COMMIT_WAIT`; with `retain`, a voter it removes stays a
    /// learner.
    async fn change(
        &self,
        change: ChangeMembers<NodeId, VoterNode>,
        retain: bool,
    ) -> Result<(), VoterChangeError> {
        match tokio::time::timeout(COMMIT_WAIT, self.raft.change_membership(change, retain)).await {
            Ok(r) => r.map(|_| ()).map_err(change_error),
            Err(_) => Err(VoterChangeError::timed_out(
                "Request timed out waiting for the voter change to commit",
            )),
        }
    }

    /// AddRaftVoter: the new voter catches up as a learner (within `timeout`), then a joint
    /// membership makes it a voter. A learner that does not catch up in time is dropped again.
    pub async fn add_voter(
        &self,
        req: AddVoter,
        timeout: Duration,
    ) -> Result<(), VoterChangeError> {
        let _one = self
            .changing
            .try_lock()
            .map_err(|_| previous_change_pending())?;
        let node = self
            .with_leader_view(|view| voters::check_add(&req, view))
            .await?;
        let id = req.id as NodeId;
        let key = voters::replica_key(req.id, req.directory_id);
        // A learner of that id left from before (removed, or an add that timed out) keeps its
        // old address and directory until it is replaced: openraft's add never overwrites.
        let known = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .cloned();
        if known.as_ref().is_some_and(|n| *n != node) {
            let set = ChangeMembers::SetNodes(BTreeMap::from([(id, node.clone())]));
            self.change(set, true).await?;
        }
        tracing::info!(voter = %key, addr = %node.addr, "adding a voter: catching it up as a learner");
        match tokio::time::timeout(timeout, self.raft.add_learner(id, node, true)).await {
            Ok(r) => r.map(|_| ()).map_err(change_error)?,
            Err(_) => {
                // A removed voter that was a learner already stays one.
                let dropped = match known {
                    Some(_) => Ok(()),
                    None => {
                        self.change(ChangeMembers::RemoveNodes([id].into()), true)
                            .await
                    }
                };
                if let Err(e) = dropped {
                    tracing::warn!(voter = %key, error = %e, "cannot drop the learner that did not catch up");
                }
                return Err(VoterChangeError::timed_out(format!(
                    "Request timed out waiting for the new voter {key} to catch up with the leader"
                )));
            }
        }
        self.change(ChangeMembers::AddVoterIds([id].into()), true)
            .await?;
        tracing::info!(voter = %key, "voter added");
        Ok(())
    }

    /// RemoveRaftVoter: a joint membership without voter `id`, which stays a learner and keeps
    /// receiving the log. A leader removing itself leaves the membership altogether: openraft
    /// keeps a leader that is still a learner leading (it counts any member), so only a leader
    /// that is no member at all steps down once the change is committed.
    pub async fn remove_voter(
        &self,
        id: i32,
        directory_id: KafkaUuid,
    ) -> Result<(), VoterChangeError> {
        let _one = self
            .changing
            .try_lock()
            .map_err(|_| previous_change_pending())?;
        self.with_leader_view(|view| voters::check_remove(id, directory_id, view))
            .await?;
        let itself = id == self.node_id;
        self.change(ChangeMembers::RemoveVoters([id as NodeId].into()), !itself)
            .await?;
        tracing::info!(voter = %voters::replica_key(id, directory_id), "voter removed");
        Ok(())
    }
}

fn previous_change_pending() -> VoterChangeError {
    VoterChangeError::timed_out(
        "Request timed out waiting for leader to handle previous voter change request",
    )
}

/// A membership change openraft refused or could not finish. A leadership lost on the way is
/// REQUEST_TIMED_OUT, not NOT_LEADER_OR_FOLLOWER: the change may have been made (openraft's
/// second step can find the leadership gone after the first committed), and a broker sends a
/// change again only to a controller that refused it before proposing anything.
fn change_error(e: RaftError<NodeId, ClientWriteError<NodeId, VoterNode>>) -> VoterChangeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => VoterChangeError::timed_out(
            "this controller lost the leadership of the metadata quorum during the change; \
             it may have been made",
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            VoterChangeError::timed_out(format!(
                "Request timed out waiting for voters to commit the latest voter change ({e})"
            ))
        }
        RaftError::Fatal(e) => VoterChangeError::new(errors::UNKNOWN_SERVER_ERROR, e.to_string()),
    }
}
