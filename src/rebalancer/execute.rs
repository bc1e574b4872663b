//! Carrying out a plan so that it sticks: each new leader is put first in its partition's replica
//! list (a reassignment to the same replicas), then a PREFERRED election makes it leader.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::client::admin::{AdminClient, Reassignment};
use crate::protocol::errors;

use super::plan::{self, LeaderMove};
use super::scrape::{self, Layout, ScrapeError};

/// How long a batch's leaders may take to show in Metadata after the election.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a reorder (a reassignment that adds and removes nothing) may stay listed.
const REORDER_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(200);

/// Batch limits, after Cruise Control's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub moves_per_batch: usize,
    pub moves_per_broker: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            moves_per_batch: 1000,
            moves_per_broker: 250,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error("{0}")]
    Scrape(#[from] ScrapeError),
    #[error("{0}")]
    Client(#[from] crate::client::ClientError),
}

/// What an execution did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Execution {
    /// Leadership changes seen in Metadata afterwards.
    pub made: usize,
    /// Partitions whose replica list was reordered (moved ones and kept leaders alike).
    pub reordered: usize,
    /// Moves that did not happen, with why.
    pub failed: Vec<(String, i32, String)>,
    /// Why the rest of the plan was given up, if it was.
    pub abandoned: Option<String>,
}

/// Runs the plan batch by batch. Before each batch the layout is read again: if a broker the
/// plan counts on has gone, a partition's leader changed under us, or a reassignment has
/// started, the rest is abandoned (a later round plans again from what is there).
pub async fn execute(
    admin: &AdminClient,
    before: &Layout,
    moves: &[LeaderMove],
    limits: Limits,
) -> Result<Execution, ExecuteError> {
    let mut out = Execution::default();
    for batch in plan::batches(moves, limits.moves_per_batch, limits.moves_per_broker) {
        let now = scrape::layout(admin).await?;
        if let Some(why) = changed_under_us(before, &now, &batch) {
            out.abandoned = Some(why);
            return Ok(out);
        }
        // Someone else (the operator's scaling moves, a person) started moving data: leave
        // the cluster to them; our own reorders are done before the next batch.
        let ongoing = admin.list_partition_reassignments().await?;
        if let Some(r) = ongoing.first() {
            out.abandoned = Some(format!(
                "a reassignment started mid-way ({}-{})",
                r.topic, r.partition
            ));
            return Ok(out);
        }
        run_batch(admin, &now, &batch, &mut out).await?;
    }
    // Leaders the plan kept but that are not first in their replica list would be moved back by
    // the controller's automatic preferred-leader election: pin them too.
    let now = scrape::layout(admin).await?;
    let pins = pins(&now);
    if !pins.is_empty() {
        reorder(admin, &pins).await?;
        out.reordered += pins.len();
    }
    Ok(out)
}

/// Why the batch can no longer be trusted: a broker in it died, or a partition's leader moved.
fn changed_under_us(before: &Layout, now: &Layout, batch: &[LeaderMove]) -> Option<String> {
    let leaders: BTreeMap<(&str, i32), i32> = now
        .partitions
        .iter()
        .map(|p| ((p.topic.as_str(), p.partition), p.leader))
        .collect();
    let lost: BTreeSet<i32> = before
        .brokers
        .keys()
        .filter(|b| !now.brokers.contains_key(b))
        .copied()
        .collect();
    if !lost.is_empty() {
        let ids: Vec<String> = lost.iter().map(i32::to_string).collect();
        return Some(format!(
            "broker(s) {} left the cluster mid-way",
            ids.join(", ")
        ));
    }
    batch.iter().find_map(|m| {
        let leader = leaders.get(&(m.topic.as_str(), m.partition));
        (leader != Some(&m.from)).then(|| {
            format!(
                "{}-{} is now led by {:?}, not {} as planned",
                m.topic, m.partition, leader, m.from
            )
        })
    })
}

async fn run_batch(
    admin: &AdminClient,
    now: &Layout,
    batch: &[LeaderMove],
    out: &mut Execution,
) -> Result<(), ExecuteError> {
    let replicas: BTreeMap<(&str, i32), &[i32]> = now
        .partitions
        .iter()
        .map(|p| ((p.topic.as_str(), p.partition), p.replicas.as_slice()))
        .collect();
    let reorders: Vec<Reassignment> = batch
        .iter()
        .filter_map(|m| {
            let current = replicas.get(&(m.topic.as_str(), m.partition))?;
            let wanted = plan::replica_order(current, m.to);
            (wanted.as_slice() != *current).then(|| Reassignment {
                topic: m.topic.clone(),
                partition: m.partition,
                replicas: Some(wanted),
            })
        })
        .collect();
    reorder(admin, &reorders).await?;
    out.reordered += reorders.len();
    let targets: Vec<(String, i32)> = batch
        .iter()
        .map(|m| (m.topic.clone(), m.partition))
        .collect();
    let results = admin.elect_leaders(true, Some(&targets)).await?;
    let mut refused: BTreeMap<(String, i32), String> = BTreeMap::new();
    for (topic, partition, code) in results {
        if code != errors::NONE && code != errors::ELECTION_NOT_NEEDED {
            refused.insert((topic, partition), errors::error_name(code).to_string());
        }
    }
    verify(admin, batch, refused, out).await
}

/// Waits until Metadata shows each move's new leader; counts what happened and what did not.
async fn verify(
    admin: &AdminClient,
    batch: &[LeaderMove],
    mut refused: BTreeMap<(String, i32), String>,
    out: &mut Execution,
) -> Result<(), ExecuteError> {
    let deadline = Instant::now() + VERIFY_TIMEOUT;
    loop {
        let now = scrape::layout(admin).await?;
        let leaders: BTreeMap<(&str, i32), i32> = now
            .partitions
            .iter()
            .map(|p| ((p.topic.as_str(), p.partition), p.leader))
            .collect();
        let pending: Vec<&LeaderMove> = batch
            .iter()
            .filter(|m| {
                !refused.contains_key(&(m.topic.clone(), m.partition))
                    && leaders.get(&(m.topic.as_str(), m.partition)) != Some(&m.to)
            })
            .collect();
        if pending.is_empty() || Instant::now() >= deadline {
            for m in &pending {
                refused.insert(
                    (m.topic.clone(), m.partition),
                    "the new leader did not show in Metadata".into(),
                );
            }
            let failed = batch
                .iter()
                .filter(|m| refused.contains_key(&(m.topic.clone(), m.partition)))
                .count();
            out.made += batch.len() - failed;
            out.failed.extend(
                refused
                    .into_iter()
                    .map(|((topic, partition), why)| (topic, partition, why)),
            );
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Partitions led by a broker that is not first in their replica list, with the list that
/// puts it first.
fn pins(layout: &Layout) -> Vec<Reassignment> {
    layout
        .partitions
        .iter()
        .filter(|p| p.leader >= 0 && p.replicas.first() != Some(&p.leader))
        .filter(|p| p.replicas.contains(&p.leader))
        .map(|p| Reassignment {
            topic: p.topic.clone(),
            partition: p.partition,
            replicas: Some(plan::replica_order(&p.replicas, p.leader)),
        })
        .collect()
}

/// Sends reorders and waits until none of them is listed as ongoing.
async fn reorder(admin: &AdminClient, reorders: &[Reassignment]) -> Result<(), ExecuteError> {
    if reorders.is_empty() {
        return Ok(());
    }
    admin.alter_partition_reassignments(reorders).await?;
    let wanted: BTreeSet<(&str, i32)> = reorders
        .iter()
        .map(|r| (r.topic.as_str(), r.partition))
        .collect();
    let deadline = Instant::now() + REORDER_TIMEOUT;
    while Instant::now() < deadline {
        let ongoing = admin.list_partition_reassignments().await?;
        if !ongoing
            .iter()
            .any(|o| wanted.contains(&(o.topic.as_str(), o.partition)))
        {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::scrape::PartitionState;
    use super::*;

    fn layout(brokers: &[i32], parts: &[(i32, &[i32])]) -> Layout {
        Layout {
            brokers: brokers.iter().map(|b| (*b, format!("h:{b}"))).collect(),
            controller: brokers[0],
            partitions: parts
                .iter()
                .enumerate()
                .map(|(i, (leader, replicas))| PartitionState {
                    topic: "t".into(),
                    partition: i as i32,
                    leader: *leader,
                    replicas: replicas.to_vec(),
                    isr: replicas.to_vec(),
                })
                .collect(),
        }
    }

    fn mv(partition: i32, from: i32, to: i32) -> LeaderMove {
        LeaderMove {
            topic: "t".into(),
            partition,
            from,
            to,
        }
    }

    #[test]
    fn a_lost_broker_or_a_moved_leader_abandons_the_batch() {
        let before = layout(&[1, 2, 3], &[(1, &[1, 2, 3]), (1, &[1, 3, 2])]);
        let batch = [mv(0, 1, 2), mv(1, 1, 3)];
        assert_eq!(changed_under_us(&before, &before, &batch), None);
        let lost = layout(&[1, 2], &[(1, &[1, 2, 3]), (1, &[1, 3, 2])]);
        assert!(changed_under_us(&before, &lost, &batch)
            .unwrap()
            .contains("broker(s) 3 left"));
        let moved = layout(&[1, 2, 3], &[(1, &[1, 2, 3]), (2, &[1, 3, 2])]);
        assert!(changed_under_us(&before, &moved, &batch)
            .unwrap()
            .contains("t-1"));
    }

    #[test]
    fn kept_leaders_that_are_not_first_are_pinned() {
        let l = layout(
            &[1, 2, 3],
            &[(1, &[1, 2, 3]), (3, &[1, 2, 3]), (-1, &[2, 3])],
        );
        let p = pins(&l);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].partition, 1);
        assert_eq!(p[0].replicas, Some(vec![3, 1, 2]));
    }
}
