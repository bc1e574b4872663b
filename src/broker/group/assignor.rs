//! The server-side assignors of consumer groups (KIP-848): `uniform` spreads every subscribed
//! partition evenly and keeps partitions where they were; `range` gives each member contiguous
//! ranges of each topic it subscribes to.

use std::collections::{BTreeMap, BTreeSet};

use crate::storage::checkpoint::KafkaUuid;

/// Partitions by topic id.
pub type Assignment = BTreeMap<KafkaUuid, BTreeSet<i32>>;

/// What an assignor sees of one member.
pub struct MemberSpec<'a> {
    /// The topics the member subscribes to (names and regex resolved).
    pub topics: BTreeSet<KafkaUuid>,
    /// The member's current target, for stickiness.
    pub current: Option<&'a Assignment>,
}

/// The target assignment of every member of `members` over topics of `partitions` partitions
/// each, by the assignor `name` (one of `config::consumer_groups::ASSIGNORS`).
pub fn assign(
    name: &str,
    members: &BTreeMap<String, MemberSpec<'_>>,
    partitions: &BTreeMap<KafkaUuid, i32>,
) -> BTreeMap<String, Assignment> {
    match name {
        "range" => range(members, partitions),
        _ => uniform(members, partitions),
    }
}

/// Every member, with an empty assignment.
fn empty(members: &BTreeMap<String, MemberSpec<'_>>) -> BTreeMap<String, Assignment> {
    members
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect()
}

/// Per topic, the members that subscribe to it in id order share its partitions in contiguous
/// ranges, the first members one more when they do not divide evenly.
fn range(
    members: &BTreeMap<String, MemberSpec<'_>>,
    partitions: &BTreeMap<KafkaUuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out = empty(members);
    for (topic, count) in partitions {
        let subscribers: Vec<&String> = members
            .iter()
            .filter(|(_, m)| m.topics.contains(topic))
            .map(|(id, _)| id)
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        let (each, extra) = (
            *count as usize / subscribers.len(),
            *count as usize % subscribers.len(),
        );
        let mut next = 0i32;
        for (i, id) in subscribers.iter().enumerate() {
            let n = (each + usize::from(i < extra)) as i32;
            if n > 0 {
                let set = out.entry((*id).clone()).or_default();
                set.insert(*topic, (next..next + n).collect());
            }
            next += n;
        }
    }
    out
}

/// Balanced and sticky: a partition stays with its member while the member still subscribes
/// to its topic, the rest go to the least loaded subscriber, then partitions move from the
/// most to the least loaded subscribers until no two that could swap differ by more than one.
fn uniform(
    members: &BTreeMap<String, MemberSpec<'_>>,
    partitions: &BTreeMap<KafkaUuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut owner: BTreeMap<(KafkaUuid, i32), String> = BTreeMap::new();
    let mut load: BTreeMap<String, usize> = members.keys().map(|m| (m.clone(), 0)).collect();
    for (id, m) in members {
        for (topic, ps) in m.current.into_iter().flatten() {
            let Some(count) = partitions.get(topic) else {
                continue;
            };
            if !m.topics.contains(topic) {
                continue;
            }
            for p in ps.iter().filter(|p| **p < *count) {
                if let std::collections::btree_map::Entry::Vacant(e) = owner.entry((*topic, *p)) {
                    e.insert(id.clone());
                    *load.entry(id.clone()).or_default() += 1;
                }
            }
        }
    }
    for (topic, count) in partitions {
        for p in 0..*count {
            if owner.contains_key(&(*topic, p)) {
                continue;
            }
            if let Some(id) = least_loaded(members, &load, topic) {
                owner.insert((*topic, p), id.clone());
                *load.entry(id).or_default() += 1;
            }
        }
    }
    balance(members, &mut owner, &mut load);
    let mut out = empty(members);
    for ((topic, p), id) in owner {
        if let Some(a) = out.get_mut(&id) {
            a.entry(topic).or_default().insert(p);
        }
    }
    out
}

/// The subscriber of `topic` with the fewest partitions (the smallest id on a tie).
fn least_loaded(
    members: &BTreeMap<String, MemberSpec<'_>>,
    load: &BTreeMap<String, usize>,
    topic: &KafkaUuid,
) -> Option<String> {
    members
        .iter()
        .filter(|(_, m)| m.topics.contains(topic))
        .min_by_key(|(id, _)| load.get(*id).copied().unwrap_or(0))
        .map(|(id, _)| id.clone())
}

/// Moves partitions, one at a time, from a member to a subscriber of their topic that holds at
/// least two fewer. Each move lowers the sum of the squared loads, so it ends.
fn balance(
    members: &BTreeMap<String, MemberSpec<'_>>,
    owner: &mut BTreeMap<(KafkaUuid, i32), String>,
    load: &mut BTreeMap<String, usize>,
) {
    loop {
        let mut moved = false;
        let keys: Vec<(KafkaUuid, i32)> = owner.keys().copied().rev().collect();
        for key in keys {
            let Some(from) = owner.get(&key).cloned() else {
                continue;
            };
            let from_load = load.get(&from).copied().unwrap_or(0);
            let Some(to) = least_loaded(members, load, &key.0) else {
                continue;
            };
            if load.get(&to).copied().unwrap_or(0) + 1 < from_load {
                owner.insert(key, to.clone());
                *load.entry(from).or_default() -= 1;
                *load.entry(to).or_default() += 1;
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> KafkaUuid {
        KafkaUuid([n; 16])
    }

    fn spec<'a>(topics: &[u8], current: Option<&'a Assignment>) -> MemberSpec<'a> {
        MemberSpec {
            topics: topics.iter().map(|t| topic(*t)).collect(),
            current,
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(|s| s.len()).sum()
    }

    /// Every partition of `partitions` is in exactly one member's assignment.
    fn assert_exactly_once(
        out: &BTreeMap<String, Assignment>,
        partitions: &BTreeMap<KafkaUuid, i32>,
    ) {
        let mut seen = BTreeSet::new();
        for a in out.values() {
            for (t, ps) in a {
                for p in ps {
                    assert!(seen.insert((*t, *p)), "{t:?}-{p} assigned twice");
                }
            }
        }
        let all: usize = partitions.values().map(|c| *c as usize).sum();
        assert_eq!(seen.len(), all);
    }

    #[test]
    fn uniform_spreads_evenly_and_keeps_partitions_where_they_were() {
        let partitions = BTreeMap::from([(topic(1), 7), (topic(2), 2)]);
        let members = BTreeMap::from([
            ("a".to_string(), spec(&[1, 2], None)),
            ("b".to_string(), spec(&[1, 2], None)),
        ]);
        let first = assign("uniform", &members, &partitions);
        assert_exactly_once(&first, &partitions);
        let loads: Vec<usize> = first.values().map(count).collect();
        assert!(
            loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1,
            "{loads:?}"
        );
        // A third member joins: a and b only give up partitions, they gain none.
        let members = BTreeMap::from([
            ("a".to_string(), spec(&[1, 2], first.get("a"))),
            ("b".to_string(), spec(&[1, 2], first.get("b"))),
            ("c".to_string(), spec(&[1, 2], None)),
        ]);
        let second = assign("uniform", &members, &partitions);
        assert_exactly_once(&second, &partitions);
        for id in ["a", "b"] {
            for (t, ps) in &second[id] {
                assert!(ps.is_subset(&first[id][t]), "{id} gained a partition");
            }
        }
        assert_eq!(count(&second["c"]), 3);
    }

    #[test]
    fn uniform_gives_a_topic_only_to_its_subscribers() {
        let partitions = BTreeMap::from([(topic(1), 4), (topic(2), 4)]);
        let members = BTreeMap::from([
            ("a".to_string(), spec(&[1], None)),
            ("b".to_string(), spec(&[1, 2], None)),
            ("c".to_string(), spec(&[2], None)),
        ]);
        let out = assign("uniform", &members, &partitions);
        assert_exactly_once(&out, &partitions);
        assert!(!out["a"].contains_key(&topic(2)));
        assert!(!out["c"].contains_key(&topic(1)));
        let loads: Vec<usize> = out.values().map(count).collect();
        assert_eq!(loads.iter().sum::<usize>(), 8);
        assert!(loads.iter().all(|l| (2..=3).contains(l)), "{loads:?}");
    }

    #[test]
    fn uniform_drops_partitions_of_unsubscribed_or_shrunk_topics() {
        let partitions = BTreeMap::from([(topic(1), 2)]);
        let old: Assignment = BTreeMap::from([
            (topic(1), BTreeSet::from([0, 1, 5])),
            (topic(9), BTreeSet::from([0])),
        ]);
        let members = BTreeMap::from([("a".to_string(), spec(&[1], Some(&old)))]);
        let out = assign("uniform", &members, &partitions);
        assert_eq!(
            out["a"],
            BTreeMap::from([(topic(1), BTreeSet::from([0, 1]))])
        );
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic() {
        let partitions = BTreeMap::from([(topic(1), 5), (topic(2), 1)]);
        let members = BTreeMap::from([
            ("a".to_string(), spec(&[1, 2], None)),
            ("b".to_string(), spec(&[1, 2], None)),
        ]);
        let out = assign("range", &members, &partitions);
        assert_exactly_once(&out, &partitions);
        assert_eq!(out["a"][&topic(1)], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["b"][&topic(1)], BTreeSet::from([3, 4]));
        assert_eq!(out["a"][&topic(2)], BTreeSet::from([0]));
        assert!(!out["b"].contains_key(&topic(2)));
    }

    #[test]
    fn no_members_or_no_subscribers_assign_nothing() {
        let partitions = BTreeMap::from([(topic(1), 3)]);
        let none: BTreeMap<String, MemberSpec> = BTreeMap::new();
        assert!(assign("uniform", &none, &partitions).is_empty());
        let members = BTreeMap::from([("a".to_string(), spec(&[2], None))]);
        for name in crate::config::consumer_groups::ASSIGNORS {
            assert_eq!(assign(name, &members, &partitions)["a"], Assignment::new());
        }
    }
}
