//! Replica placement for new partitions, as Kafka's StripedReplicaPlacer does it: replicas
//! striped across racks, each partition's first replica (its leader) on an unfenced broker,
//! leaders rotating over brokers and racks so they spread evenly.

use std::collections::HashMap;

/// The random source of placement (injectable so tests are exact).
pub trait PlacementRandom {
    /// A number in `0..bound` (`bound` > 0).
    fn next_int(&mut self, bound: usize) -> usize;
    /// Shuffles `v` in place.
    fn shuffle(&mut self, v: &mut [i32]);
    fn shuffle_racks(&mut self, v: &mut [Option<String>]);
}

impl<R: rand::Rng> PlacementRandom for R {
    fn next_int(&mut self, bound: usize) -> usize {
        self.gen_range(0..bound)
    }
    fn shuffle(&mut self, v: &mut [i32]) {
        rand::seq::SliceRandom::shuffle(v, self);
    }
    fn shuffle_racks(&mut self, v: &mut [Option<String>]) {
        rand::seq::SliceRandom::shuffle(v, self);
    }
}

/// A broker placement may use: brokers in controlled shutdown are left out by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableBroker {
    pub id: i32,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// Why replicas cannot be placed (Kafka's InvalidReplicationFactorException messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlacementError(pub String);

#[derive(Debug, Default)]
struct BrokerList {
    brokers: Vec<i32>,
    index: usize,
    offset: usize,
    epoch: usize,
}

impl BrokerList {
    fn initialize(&mut self, rng: &mut dyn PlacementRandom) {
        if !self.brokers.is_empty() {
            self.brokers.sort_unstable();
            self.offset = rng.next_int(self.brokers.len());
        }
    }

    fn initialize_after(&mut self, previous_offset: usize) {
        if !self.brokers.is_empty() {
            self.brokers.sort_unstable();
            self.offset = (previous_offset + 1) % self.brokers.len();
        }
    }

    fn next(&mut self, epoch: usize) -> Option<i32> {
        if self.brokers.is_empty() {
            return None;
        }
        if self.epoch != epoch {
            self.epoch = epoch;
            self.index = 0;
            self.offset = (self.offset + 1) % self.brokers.len();
        }
        if self.index >= self.brokers.len() {
            return None;
        }
        let b = self.brokers[(self.index + self.offset) % self.brokers.len()];
        self.index += 1;
        Some(b)
    }
}

#[derive(Debug, Default)]
struct Rack {
    fenced: BrokerList,
    unfenced: BrokerList,
}

impl Rack {
    fn next_unfenced(&mut self, epoch: usize) -> Option<i32> {
        self.unfenced.next(epoch)
    }
    fn next(&mut self, epoch: usize) -> Option<i32> {
        self.unfenced
            .next(epoch)
            .or_else(|| self.fenced.next(epoch))
    }
}

/// The racks to stripe over, carried from one partition to the next.
pub struct RackList<'a> {
    rng: &'a mut dyn PlacementRandom,
    racks: HashMap<Option<String>, Rack>,
    /// Sorted with the unnamed rack first (Kafka's `OptionalStringComparator`).
    rack_names: Vec<Option<String>>,
    total: usize,
    unfenced: usize,
    epoch: usize,
    offset: usize,
}

impl<'a> RackList<'a> {
    /// `existing` are the current replica lists of the topic (for CreatePartitions), so new
    /// partitions continue the rotation where the old ones stopped.
    pub fn new(
        rng: &'a mut dyn PlacementRandom,
        brokers: &[UsableBroker],
        existing: &[Vec<i32>],
    ) -> RackList<'a> {
        let mut racks: HashMap<Option<String>, Rack> = HashMap::new();
        let mut rack_names = Vec::new();
        let mut rack_of: HashMap<i32, Option<String>> = HashMap::new();
        let (mut total, mut unfenced) = (0, 0);
        for b in brokers {
            rack_of.insert(b.id, b.rack.clone());
            let rack = racks.entry(b.rack.clone()).or_insert_with(|| {
                rack_names.push(b.rack.clone());
                Rack::default()
            });
            if b.fenced {
                rack.fenced.brokers.push(b.id);
            } else {
                rack.unfenced.brokers.push(b.id);
                unfenced += 1;
            }
            total += 1;
        }
        rack_names.sort();
        for name in &rack_names {
            let Some(rack) = racks.get_mut(name) else {
                continue;
            };
            rack.unfenced.brokers.sort_unstable();
            match previous_broker_offset(&rack_of, existing, name, &rack.unfenced.brokers) {
                Some(prev) => {
                    rack.fenced.initialize(rng);
                    rack.unfenced.initialize_after(prev);
                }
                None => {
                    rack.fenced.initialize(rng);
                    rack.unfenced.initialize(rng);
                }
            }
        }
        let offset = match previous_rack_offset(&rack_of, existing, &rack_names) {
            Some(prev) => (prev + 1) % rack_names.len(),
            None if rack_names.is_empty() => 0,
            None => rng.next_int(rack_names.len()),
        };
        RackList {
            rng,
            racks,
            rack_names,
            total,
            unfenced,
            epoch: 0,
            offset,
        }
    }

    /// Checks that `rf` replicas can be placed at all.
    pub fn check(&self, rf: i32) -> Result<(), PlacementError> {
        if rf <= 0 {
            return Err(PlacementError(format!(
                "Invalid replication factor {rf}: the replication factor must be positive."
            )));
        }
        if rf as usize > self.total {
            return Err(PlacementError(format!(
                "The target replication factor of {rf} cannot be reached because only {} broker(s) are registered and unfenced.",
                self.total
            )));
        }
        if self.unfenced == 0 {
            return Err(PlacementError("All brokers are currently fenced.".into()));
        }
        Ok(())
    }

    /// The replicas of the next partition; the first is its leader.
    pub fn place(&mut self, rf: i32) -> Result<Vec<i32>, PlacementError> {
        self.check(rf)?;
        if self.epoch == self.unfenced && self.unfenced > 1 {
            self.rng.shuffle_racks(&mut self.rack_names);
            for rack in self.racks.values_mut() {
                self.rng.shuffle(&mut rack.fenced.brokers);
                self.rng.shuffle(&mut rack.unfenced.brokers);
            }
            self.epoch = 0;
        }
        let n = self.rack_names.len();
        if self.offset == n {
            self.offset = 0;
        }
        let mut out = Vec::with_capacity(rf as usize);
        let mut first_rack = Some(self.offset);
        loop {
            let i = first_rack.unwrap_or(0);
            let rack = self
                .racks
                .get_mut(&self.rack_names[i])
                .expect("rack of its name");
            if let Some(b) = rack.next_unfenced(self.epoch) {
                out.push(b);
                break;
            }
            first_rack = Some((i + 1) % n);
        }
        let mut rack_index = self.offset;
        for _ in 1..rf {
            loop {
                let mut got = None;
                if Some(rack_index) == first_rack {
                    first_rack = None;
                } else {
                    let rack = self
                        .racks
                        .get_mut(&self.rack_names[rack_index])
                        .expect("rack of its name");
                    got = rack.next(self.epoch);
                }
                rack_index = (rack_index + 1) % n;
                if let Some(b) = got {
                    out.push(b);
                    break;
                }
            }
        }
        self.epoch += 1;
        self.offset += 1;
        Ok(out)
    }
}

fn previous_rack_offset(
    rack_of: &HashMap<i32, Option<String>>,
    existing: &[Vec<i32>],
    rack_names: &[Option<String>],
) -> Option<usize> {
    let leader = existing.last()?.first()?;
    let rack = rack_of.get(leader)?;
    rack_names.iter().position(|r| r == rack)
}

fn previous_broker_offset(
    rack_of: &HashMap<i32, Option<String>>,
    existing: &[Vec<i32>],
    rack: &Option<String>,
    unfenced: &[i32],
) -> Option<usize> {
    for replicas in existing.iter().rev() {
        for b in replicas {
            match rack_of.get(b) {
                Some(r) if r == rack => return unfenced.iter().position(|u| u == b),
                _ => continue,
            }
        }
    }
    None
}

/// Places `partitions` partitions of `rf` replicas each.
pub fn place(
    rng: &mut dyn PlacementRandom,
    brokers: &[UsableBroker],
    existing: &[Vec<i32>],
    partitions: i32,
    rf: i32,
) -> Result<Vec<Vec<i32>>, PlacementError> {
    let mut racks = RackList::new(rng, brokers, existing);
    racks.check(rf)?;
    (0..partitions).map(|_| racks.place(rf)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn brokers(racks: &[(i32, Option<&str>, bool)]) -> Vec<UsableBroker> {
        racks
            .iter()
            .map(|(id, r, fenced)| UsableBroker {
                id: *id,
                rack: r.map(String::from),
                fenced: *fenced,
            })
            .collect()
    }

    fn rng(seed: u64) -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(seed)
    }

    #[test]
    fn replicas_span_every_rack() {
        let bs = brokers(&[
            (1, Some("a"), false),
            (2, Some("a"), false),
            (3, Some("b"), false),
            (4, Some("b"), false),
            (5, Some("c"), false),
            (6, Some("c"), false),
        ]);
        let rack = |id: i32| bs.iter().find(|b| b.id == id).unwrap().rack.clone();
        let placed = place(&mut rng(7), &bs, &[], 30, 3).unwrap();
        for replicas in &placed {
            let mut racks: Vec<_> = replicas.iter().map(|b| rack(*b)).collect();
            racks.sort();
            racks.dedup();
            assert_eq!(racks.len(), 3, "{replicas:?}");
        }
    }

    #[test]
    fn leaders_spread_evenly_and_avoid_fenced_brokers() {
        let bs = brokers(&[
            (1, None, false),
            (2, None, false),
            (3, None, true),
            (4, None, false),
        ]);
        let placed = place(&mut rng(3), &bs, &[], 300, 2).unwrap();
        let mut leaders: HashMap<i32, usize> = HashMap::new();
        for r in &placed {
            *leaders.entry(r[0]).or_default() += 1;
            assert_ne!(r[0], 3, "a fenced broker led {r:?}");
        }
        for id in [1, 2, 4] {
            let n = leaders[&id];
            assert!((90..=110).contains(&n), "broker {id} leads {n} of 300");
        }
    }

    #[test]
    fn too_few_brokers_gets_kafkas_message() {
        let bs = brokers(&[(1, None, false)]);
        let e = place(&mut rng(1), &bs, &[], 1, 3).unwrap_err();
        assert_eq!(
            e.0,
            "The target replication factor of 3 cannot be reached because only 1 broker(s) are registered and unfenced."
        );
        let all_fenced = brokers(&[(1, None, true), (2, None, true)]);
        assert_eq!(
            place(&mut rng(1), &all_fenced, &[], 1, 1).unwrap_err().0,
            "All brokers are currently fenced."
        );
        assert!(place(&mut rng(1), &bs, &[], 1, 0)
            .unwrap_err()
            .0
            .contains("must be positive"));
    }

    #[test]
    fn new_partitions_continue_after_the_existing_ones() {
        let bs = brokers(&[(1, None, false), (2, None, false), (3, None, false)]);
        let existing = vec![vec![2, 3]];
        let next = place(&mut rng(9), &bs, &existing, 1, 2).unwrap();
        assert_eq!(next[0][0], 3, "{next:?}");
    }

    proptest! {
        #[test]
        fn placements_are_distinct_live_first_and_sized(
            seed in any::<u64>(),
            n in 1usize..9,
            fenced_mask in any::<u16>(),
            partitions in 1i32..40,
            rf in 1i32..5,
        ) {
            let bs: Vec<UsableBroker> = (0..n)
                .map(|i| UsableBroker {
                    id: i as i32 + 1,
                    rack: Some(format!("r{}", i % 3)),
                    fenced: fenced_mask & (1 << i) != 0 && i > 0,
                })
                .collect();
            match place(&mut rng(seed), &bs, &[], partitions, rf) {
                Ok(placed) => {
                    prop_assert_eq!(placed.len(), partitions as usize);
                    for r in placed {
                        prop_assert_eq!(r.len(), rf as usize);
                        let mut d = r.clone();
                        d.sort();
                        d.dedup();
                        prop_assert_eq!(d.len(), r.len());
                        prop_assert!(!bs.iter().find(|b| b.id == r[0]).unwrap().fenced);
                    }
                }
                Err(_) => prop_assert!(rf as usize > n),
            }
        }
    }
}
