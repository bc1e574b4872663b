//! Replica placement plans for scaling: drain the brokers being removed, and spread replicas onto
//! new brokers. Pure functions over the cluster's partitions; `cluster` carries them out.

use std::collections::BTreeMap;

use super::kafka::{PartitionState, Reassignment};

fn counts(partitions: &[PartitionState], brokers: &[i32]) -> BTreeMap<i32, usize> {
    let mut c: BTreeMap<i32, usize> = brokers.iter().map(|b| (*b, 0)).collect();
    for p in partitions {
        for r in &p.replicas {
            if let Some(n) = c.get_mut(r) {
                *n += 1;
            }
        }
    }
    c
}

/// Moves every replica off brokers not in `keep`: each one is replaced in place (so replica
/// order, and with it the preferred leader of untouched positions, stays) by the kept broker with
/// the fewest replicas that the partition does not already have.
pub fn plan_drain(
    partitions: &[PartitionState],
    keep: &[i32],
) -> Result<Vec<Reassignment>, String> {
    let mut load = counts(partitions, keep);
    let mut moves = Vec::new();
    for p in partitions {
        if p.replicas.iter().all(|r| keep.contains(r)) {
            continue;
        }
        let mut replicas = p.replicas.clone();
        for i in 0..replicas.len() {
            if keep.contains(&replicas[i]) {
                continue;
            }
            let target = load
                .iter()
                .filter(|(b, _)| !replicas.contains(b))
                .min_by_key(|(b, n)| (**n, **b))
                .map(|(b, _)| *b)
                .ok_or_else(|| {
                    format!(
                        "{}-{} has {} replicas, more than the {} brokers that would remain",
                        p.topic,
                        p.partition,
                        p.replicas.len(),
                        keep.len()
                    )
                })?;
            replicas[i] = target;
            *load.entry(target).or_default() += 1;
        }
        moves.push(Reassignment {
            topic: p.topic.clone(),
            partition: p.partition,
            replicas,
        });
    }
    Ok(moves)
}

/// Evens out replica counts over `brokers` (after a scale-up): while the most loaded broker has
/// two or more replicas more than the least loaded, one replica moves from the first to the second,
/// in place, on a partition that does not have the second yet.
pub fn plan_spread(partitions: &[PartitionState], brokers: &[i32]) -> Vec<Reassignment> {
    let mut load = counts(partitions, brokers);
    let mut placed: Vec<Vec<i32>> = partitions.iter().map(|p| p.replicas.clone()).collect();
    let mut changed = vec![false; partitions.len()];
    while let (Some((&most, &hi)), Some((&least, &lo))) = (
        load.iter().max_by_key(|(b, n)| (**n, -**b)),
        load.iter().min_by_key(|(b, n)| (**n, **b)),
    ) {
        if hi < lo + 2 {
            break;
        }
        // Prefer a partition not yet moved, so one round changes as few partitions as it can.
        let candidate = (0..placed.len())
            .filter(|&i| placed[i].contains(&most) && !placed[i].contains(&least))
            .min_by_key(|&i| changed[i]);
        let Some(i) = candidate else { break };
        for r in placed[i].iter_mut() {
            if *r == most {
                *r = least;
            }
        }
        changed[i] = true;
        *load.entry(most).or_default() -= 1;
        *load.entry(least).or_default() += 1;
    }
    partitions
        .iter()
        .zip(placed)
        .zip(changed)
        .filter(|(_, c)| *c)
        .map(|((p, replicas), _)| Reassignment {
            topic: p.topic.clone(),
            partition: p.partition,
            replicas,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(topic: &str, partition: i32, replicas: &[i32]) -> PartitionState {
        PartitionState {
            topic: topic.into(),
            partition,
            leader: replicas[0],
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
            min_insync_replicas: 1,
        }
    }

    fn after(parts: &[PartitionState], moves: &[Reassignment]) -> Vec<Vec<i32>> {
        parts
            .iter()
            .map(|q| {
                moves
                    .iter()
                    .find(|m| m.topic == q.topic && m.partition == q.partition)
                    .map_or(q.replicas.clone(), |m| m.replicas.clone())
            })
            .collect()
    }

    #[test]
    fn drain_replaces_removed_brokers_in_place_on_the_least_loaded() {
        let parts = vec![
            p("t", 0, &[3, 0, 1]),
            p("t", 1, &[1, 2, 0]),
            p("t", 2, &[2, 3, 0]),
        ];
        let moves = plan_drain(&parts, &[0, 1, 2]).unwrap();
        assert_eq!(
            moves.len(),
            2,
            "only partitions on broker 3 move: {moves:?}"
        );
        let placed = after(&parts, &moves);
        // t-0 had [3,0,1]: broker 2 (fewest replicas, not already there) takes position 0.
        assert_eq!(placed[0], vec![2, 0, 1]);
        // t-2 had [2,3,0]: only broker 1 is free for it.
        assert_eq!(placed[2], vec![2, 1, 0]);
        assert!(placed.iter().flatten().all(|b| *b != 3));
        for r in &placed {
            let mut s = r.clone();
            s.dedup();
            assert_eq!(s.len(), 3, "no broker twice in {r:?}");
        }
    }

    #[test]
    fn drain_is_refused_when_the_replication_factor_does_not_fit() {
        let parts = vec![p("t", 0, &[0, 1, 2])];
        let err = plan_drain(&parts, &[0, 1]).unwrap_err();
        assert_eq!(
            err,
            "t-0 has 3 replicas, more than the 2 brokers that would remain"
        );
    }

    #[test]
    fn spread_fills_a_new_broker_up_to_its_share() {
        // 6 partitions x RF 3 on brokers 0-2 (6 each), then broker 3 joins: 18 / 4 = 4.5 each.
        let parts: Vec<_> = (0..6).map(|i| p("t", i, &[0, 1, 2])).collect();
        let moves = plan_spread(&parts, &[0, 1, 2, 3]);
        let placed = after(&parts, &moves);
        let mut load = BTreeMap::new();
        for r in &placed {
            for b in r {
                *load.entry(*b).or_insert(0) += 1;
            }
            let mut s = r.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 3, "no broker twice in {r:?}");
        }
        let counts: Vec<i32> = load.values().copied().collect();
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "{load:?}"
        );
        assert_eq!(load[&3], 4, "{load:?}");
        assert_eq!(moves.len(), 4, "one replica per moved partition: {moves:?}");
    }

    #[test]
    fn spread_of_a_balanced_cluster_moves_nothing() {
        let parts = vec![p("t", 0, &[0, 1]), p("t", 1, &[1, 2]), p("t", 2, &[2, 0])];
        assert!(plan_spread(&parts, &[0, 1, 2]).is_empty());
    }
}
