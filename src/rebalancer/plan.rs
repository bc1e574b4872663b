//! Plans leadership moves: from each partition's leader, ISR and load and the brokers that may lead,
//! it finds the fewest leader changes that bring every broker's leader count into the balance band.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Cruise Control's balance margin: the band is drawn at 90 % of the configured threshold.
const BALANCE_MARGIN: f64 = 0.9;
/// The most tie-break levels one partition's load is mapped onto.
const MAX_TIE_LEVELS: i128 = 1 << 20;
/// Bound on `levels × (partitions + 2)²`, so every cost fits an `i64` with room to spare.
const COST_ROOM: i128 = 1 << 52;
/// Distance of a node the shortest-path search has not reached.
const UNREACHED: i64 = i64::MAX;

/// One partition as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionLayout {
    /// Topic name.
    pub topic: String,
    /// Partition index within the topic.
    pub partition: i32,
    /// Current leader's broker id; -1 when the partition has no leader.
    pub leader: i32,
    /// Replica broker ids in assignment order.
    pub replicas: Vec<i32>,
    /// In-sync replica broker ids.
    pub isr: Vec<i32>,
    /// Relative load, >= 0: 1.0 is an ordinary partition, higher is busier (e.g. covered by
    /// many wide fetches). Only breaks ties: busier partitions move first.
    pub load: f64,
}

/// A broker and whether it may receive leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerState {
    /// Broker id.
    pub id: i32,
    /// May receive leadership: unfenced, not shutting down, no overload symptoms.
    pub eligible: bool,
}

/// The allowed leader count per broker, both ends inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Band {
    /// Fewest leaders an eligible broker should hold (ineligible brokers may hold none).
    pub lower: usize,
    /// Most leaders any broker should hold.
    pub upper: usize,
}

/// One leadership change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderMove {
    /// Topic name.
    pub topic: String,
    /// Partition index within the topic.
    pub partition: i32,
    /// Broker that leads now.
    pub from: i32,
    /// Broker that should lead; one of the partition's ISR members and eligible.
    pub to: i32,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The band the plan aims for.
    pub band: Band,
    /// The leadership changes, sorted by (topic, partition).
    pub moves: Vec<LeaderMove>,
    /// Leader count per listed broker now, zeros included.
    pub before: BTreeMap<i32, usize>,
    /// Leader count per listed broker once the moves are made, zeros included.
    pub after: BTreeMap<i32, usize>,
    /// Every broker is within its bounds after the plan.
    pub in_band: bool,
}

/// Cruise Control's band for `leaders` leaders over `brokers` brokers: with
/// mean = leaders / brokers and margin = 0.9 × (threshold − 1),
/// upper = ceil(mean × (1 + margin)) and lower = floor(mean × max(0, 1 − margin)).
/// A threshold below 1 (or NaN) is taken as 1; no brokers gives an empty band at 0.
pub fn band(leaders: usize, brokers: usize, threshold: f64) -> Band {
    if brokers == 0 {
        return Band { lower: 0, upper: 0 };
    }
    let threshold = if threshold > 1.0 { threshold } else { 1.0 };
    let mean = leaders as f64 / brokers as f64;
    let margin = (threshold - 1.0) * BALANCE_MARGIN;
    let upper = (mean * (1.0 + margin)).ceil() as usize;
    let lower = (mean * (1.0 - margin).max(0.0)).floor() as usize;
    Band {
        lower: lower.min(upper),
        upper,
    }
}

/// The most leaders an ineligible broker should keep: an overloaded broker sheds down to the
/// mean (rounded down), or to the band's top if that is lower.
fn overloaded_cap(leaders: usize, brokers: usize, band: Band) -> usize {
    if brokers == 0 {
        return 0;
    }
    (leaders / brokers).min(band.upper)
}

/// The fewest leadership changes that bring every listed broker's leader count into
/// [`band`]`(counted leaders, listed brokers, threshold)`; an ineligible broker's lower bound is
/// 0 and its upper bound the mean rounded down (an overloaded broker sheds, it never gains).
///
/// Only partitions led by a listed broker count and move; a partition's new leader is one of its
/// ISR members that is a listed, eligible broker. The objective is lexicographic: least total band
/// violation, then fewest moves, then (ties only) the busiest partitions move.
///
/// Method: an exact min-cost flow over the changes from the current layout. Each listed broker
/// has a "shed" edge from a source and a "receive" edge to a sink whose unit costs are the
/// marginal violation (−BIG, 0, +BIG, convex), and broker b reaches b' through any partition p now
/// on b that b' may lead, at cost c(p, b') − c(p, b), where c is 0 at p's original leader and
/// SCALE minus a load tie-break elsewhere. Successive shortest paths (Dijkstra on reduced costs,
/// potentials from one Bellman–Ford) augment one unit at a time until the cheapest path costs
/// ≥ 0, which is the global minimum because the flow cost is convex in the number of units;
/// BIG exceeds any plan's total move cost and the tie-breaks sum below SCALE.
pub fn plan(partitions: &[PartitionLayout], brokers: &[BrokerState], threshold: f64) -> Plan {
    let model = Model::new(partitions, brokers, threshold);
    let mut solver = Solver::new(&model);
    solver.run();
    model.finish(partitions, &solver.at)
}

/// Max leader count over mean leader count (1.0 when there are no leaders).
pub fn skew(counts: &BTreeMap<i32, usize>) -> f64 {
    let total: usize = counts.values().sum();
    if total == 0 {
        return 1.0;
    }
    let mean = total as f64 / counts.len() as f64;
    let max = counts.values().copied().max().unwrap_or(0);
    max as f64 / mean
}

/// Splits `moves` into batches of at most `max_per_batch` moves in which no broker appears (as
/// `from` or `to`) in more than `max_per_broker` moves. Each move goes into the first batch it
/// fits, so batches keep the input order and earlier moves land in earlier batches; every move
/// appears exactly once. Limits of 0 are taken as 1.
pub fn batches(
    moves: &[LeaderMove],
    max_per_batch: usize,
    max_per_broker: usize,
) -> Vec<Vec<LeaderMove>> {
    let limits = (max_per_batch.max(1), max_per_broker.max(1));
    let mut out: Vec<Batch> = Vec::new();
    let mut first_open = 0;
    for m in moves {
        while out
            .get(first_open)
            .is_some_and(|b| b.moves.len() >= limits.0)
        {
            first_open += 1;
        }
        match out[first_open..].iter().position(|b| b.fits(m, limits)) {
            Some(i) => out[first_open + i].add(m),
            None => out.push(Batch::with(m)),
        }
    }
    out.into_iter().map(|b| b.moves).collect()
}

/// The replica list with `leader` first and the others in their original order, so a preferred
/// election makes it leader and Kafka's automatic preferred-leader rebalance keeps it there.
/// When `leader` is not a replica the list is returned unchanged.
pub fn replica_order(replicas: &[i32], leader: i32) -> Vec<i32> {
    if !replicas.contains(&leader) {
        return replicas.to_vec();
    }
    std::iter::once(leader)
        .chain(replicas.iter().copied().filter(|&r| r != leader))
        .collect()
}

/// A batch being filled, with how many of its moves touch each broker.
struct Batch {
    moves: Vec<LeaderMove>,
    per_broker: HashMap<i32, usize>,
}

impl Batch {
    fn with(m: &LeaderMove) -> Batch {
        let mut batch = Batch {
            moves: Vec::new(),
            per_broker: HashMap::new(),
        };
        batch.add(m);
        batch
    }

    fn fits(&self, m: &LeaderMove, (per_batch, per_broker): (usize, usize)) -> bool {
        self.moves.len() < per_batch
            && brokers_of(m).all(|id| self.per_broker.get(&id).copied().unwrap_or(0) < per_broker)
    }

    fn add(&mut self, m: &LeaderMove) {
        for id in brokers_of(m) {
            *self.per_broker.entry(id).or_insert(0) += 1;
        }
        self.moves.push(m.clone());
    }
}

/// The brokers a move involves, each once.
fn brokers_of(m: &LeaderMove) -> impl Iterator<Item = i32> {
    std::iter::once(m.from).chain((m.to != m.from).then_some(m.to))
}

/// A counted partition: led by a listed broker. Brokers are indices into [`Model::ids`].
struct Part {
    /// Index into the caller's partitions.
    input: usize,
    /// The current (original) leader.
    origin: usize,
    /// Possible leaders: the origin first, then eligible listed ISR members.
    dests: Vec<usize>,
    /// Load tie-break in [0, levels): higher for busier partitions.
    tie: i64,
}

/// The problem in index form: brokers numbered 0..n in id order, with their bounds.
struct Model {
    ids: Vec<i32>,
    lower: Vec<usize>,
    upper: Vec<usize>,
    parts: Vec<Part>,
    band: Band,
    /// Tie-break levels per partition (see [`tie_levels`]).
    levels: i64,
}

impl Model {
    fn new(partitions: &[PartitionLayout], brokers: &[BrokerState], threshold: f64) -> Model {
        let listed = listed_brokers(brokers);
        let ids: Vec<i32> = listed.keys().copied().collect();
        let eligible: Vec<bool> = listed.values().copied().collect();
        let index: HashMap<i32, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut parts: Vec<Part> = partitions
            .iter()
            .enumerate()
            .filter_map(|(i, p)| counted(i, p, &index, &eligible))
            .collect();
        let levels = tie_levels(parts.len());
        assign_ties(&mut parts, partitions, levels);
        let band = band(parts.len(), ids.len(), threshold);
        let lower = eligible
            .iter()
            .map(|&e| if e { band.lower } else { 0 })
            .collect();
        let cap = overloaded_cap(parts.len(), ids.len(), band);
        Model {
            upper: eligible
                .iter()
                .map(|&e| if e { band.upper } else { cap })
                .collect(),
            ids,
            lower,
            parts,
            band,
            levels,
        }
    }

    /// Leader count per broker index for the given leader of each counted partition.
    fn counts(&self, leaders: impl Iterator<Item = usize>) -> Vec<usize> {
        let mut counts = vec![0; self.ids.len()];
        for b in leaders {
            counts[b] += 1;
        }
        counts
    }

    fn by_id(&self, counts: &[usize]) -> BTreeMap<i32, usize> {
        self.ids
            .iter()
            .copied()
            .zip(counts.iter().copied())
            .collect()
    }

    /// The plan for final leaders `at` (one per counted partition).
    fn finish(&self, partitions: &[PartitionLayout], at: &[usize]) -> Plan {
        let before = self.counts(self.parts.iter().map(|p| p.origin));
        let after = self.counts(at.iter().copied());
        let in_band =
            (0..self.ids.len()).all(|b| self.lower[b] <= after[b] && after[b] <= self.upper[b]);
        Plan {
            band: self.band,
            moves: self.moves(partitions, at),
            before: self.by_id(&before),
            after: self.by_id(&after),
            in_band,
        }
    }

    fn moves(&self, partitions: &[PartitionLayout], at: &[usize]) -> Vec<LeaderMove> {
        let mut moves: Vec<LeaderMove> = self
            .parts
            .iter()
            .zip(at)
            .filter(|(p, &b)| b != p.origin)
            .map(|(p, &b)| LeaderMove {
                topic: partitions[p.input].topic.clone(),
                partition: partitions[p.input].partition,
                from: self.ids[p.origin],
                to: self.ids[b],
            })
            .collect();
        moves.sort_by(|a, b| a.topic.cmp(&b.topic).then(a.partition.cmp(&b.partition)));
        moves
    }
}

/// Listed brokers by id; a broker listed twice is eligible only if every entry says so.
fn listed_brokers(brokers: &[BrokerState]) -> BTreeMap<i32, bool> {
    let mut listed = BTreeMap::new();
    for b in brokers {
        let eligible = listed.entry(b.id).or_insert(true);
        *eligible &= b.eligible;
    }
    listed
}

/// The partition in index form, or None when it has no leader or its leader is not listed.
fn counted(
    input: usize,
    p: &PartitionLayout,
    index: &HashMap<i32, usize>,
    eligible: &[bool],
) -> Option<Part> {
    if p.leader == -1 {
        return None;
    }
    let origin = *index.get(&p.leader)?;
    let mut dests = vec![origin];
    for b in p.isr.iter().filter_map(|id| index.get(id).copied()) {
        if eligible[b] && !dests.contains(&b) {
            dests.push(b);
        }
    }
    Some(Part {
        input,
        origin,
        dests,
        tie: 0,
    })
}

/// Tie-break levels per partition: as many as fit so that BIG = SCALE × (P + 2), with
/// SCALE = (P + 1) × levels, stays far inside an `i64`.
fn tie_levels(parts: usize) -> i64 {
    let room = COST_ROOM / (parts as i128 + 2).pow(2);
    room.clamp(1, MAX_TIE_LEVELS) as i64
}

/// A load the tie-break can order: negative and NaN count as 0.
fn clean_load(load: f64) -> f64 {
    if load > 0.0 {
        load
    } else {
        0.0
    }
}

/// Sets each part's tie-break from the rank of its load among the distinct loads, spread over
/// [0, levels) so that a busier partition never gets a smaller tie-break.
fn assign_ties(parts: &mut [Part], partitions: &[PartitionLayout], levels: i64) {
    let loads: Vec<f64> = parts
        .iter()
        .map(|p| clean_load(partitions[p.input].load))
        .collect();
    let mut distinct = loads.clone();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    let steps = (distinct.len() as i128 - 1).max(1);
    let top = i128::from(levels - 1);
    for (part, load) in parts.iter_mut().zip(&loads) {
        let rank = distinct
            .binary_search_by(|x| x.total_cmp(load))
            .unwrap_or(0) as i128;
        part.tie = (rank * top / steps) as i64;
    }
}

/// Successive-shortest-path min-cost flow over the broker graph (see [`plan`]).
/// Nodes: brokers 0..n, then the source (n) and the sink (n + 1).
struct Solver<'a> {
    model: &'a Model,
    n: usize,
    scale: i64,
    big: i64,
    /// Current leader (broker index) of each counted partition.
    at: Vec<usize>,
    /// Original leader count per broker.
    count: Vec<usize>,
    /// Units sent from the source to each broker (leaders it gave up).
    shed: Vec<usize>,
    /// Units sent from each broker to the sink (leaders it took on).
    taken: Vec<usize>,
    /// For pair (b, x) at `b * n + x`: (hop cost, part) for each part now on b that x may lead.
    pairs: Vec<BTreeSet<(i64, usize)>>,
    /// Cheapest hop cost of each pair, cached from `pairs`.
    best: Vec<Option<i64>>,
    /// Node potentials keeping every residual edge's reduced cost >= 0.
    potential: Vec<i64>,
}

impl<'a> Solver<'a> {
    fn new(model: &'a Model) -> Solver<'a> {
        let n = model.ids.len();
        let parts = model.parts.len() as i64;
        let scale = (parts + 1).saturating_mul(model.levels);
        let mut solver = Solver {
            model,
            n,
            scale,
            big: scale.saturating_mul(parts + 2),
            at: model.parts.iter().map(|p| p.origin).collect(),
            count: model.counts(model.parts.iter().map(|p| p.origin)),
            shed: vec![0; n],
            taken: vec![0; n],
            pairs: vec![BTreeSet::new(); n * n],
            best: vec![None; n * n],
            potential: Vec::new(),
        };
        for p in 0..model.parts.len() {
            solver.list(p);
        }
        solver.potential = solver.initial_potentials();
        solver
    }

    fn source(&self) -> usize {
        self.n
    }

    fn sink(&self) -> usize {
        self.n + 1
    }

    fn nodes(&self) -> usize {
        self.n + 2
    }

    /// Cost of part `p` being led by broker `b`: 0 at its original leader, else SCALE − tie.
    fn lead_cost(&self, p: usize, b: usize) -> i64 {
        let part = &self.model.parts[p];
        if b == part.origin {
            0
        } else {
            self.scale - part.tie
        }
    }

    fn hop_cost(&self, p: usize, from: usize, to: usize) -> i64 {
        self.lead_cost(p, to) - self.lead_cost(p, from)
    }

    /// Marginal violation of broker `b` giving up one more leader; None when it has none left.
    fn source_cost(&self, b: usize) -> Option<i64> {
        let left = self.count[b] - self.shed[b].min(self.count[b]);
        if left == 0 {
            None
        } else if left > self.model.upper[b] {
            Some(-self.big)
        } else if left > self.model.lower[b] {
            Some(0)
        } else {
            Some(self.big)
        }
    }

    /// Marginal violation of broker `b` taking on one more leader.
    fn sink_cost(&self, b: usize) -> i64 {
        let held = self.count[b] + self.taken[b];
        if held < self.model.lower[b] {
            -self.big
        } else if held < self.model.upper[b] {
            0
        } else {
            self.big
        }
    }

    /// Cost of the residual edge u → w, if there is one.
    fn edge(&self, u: usize, w: usize) -> Option<i64> {
        let n = self.n;
        if u == self.source() && w < n {
            self.source_cost(w)
        } else if u < n && w == self.sink() {
            Some(self.sink_cost(u))
        } else if u < n && w < n && u != w {
            self.best[u * n + w]
        } else {
            None
        }
    }

    /// The pair entries of part `p` where it is now: (pair slot, (hop cost, p)).
    fn entries(&self, p: usize) -> Vec<(usize, (i64, usize))> {
        let at = self.at[p];
        self.model.parts[p]
            .dests
            .iter()
            .filter(|&&to| to != at)
            .map(|&to| (at * self.n + to, (self.hop_cost(p, at, to), p)))
            .collect()
    }

    fn list(&mut self, p: usize) {
        for (slot, key) in self.entries(p) {
            self.pairs[slot].insert(key);
            self.best[slot] = self.pairs[slot].first().map(|e| e.0);
        }
    }

    fn unlist(&mut self, p: usize) {
        for (slot, key) in self.entries(p) {
            self.pairs[slot].remove(&key);
            self.best[slot] = self.pairs[slot].first().map(|e| e.0);
        }
    }

    fn relocate(&mut self, p: usize, to: usize) {
        self.unlist(p);
        self.at[p] = to;
        self.list(p);
    }

    /// Johnson's potentials: Bellman–Ford from a virtual node joined to every node at cost 0.
    /// The initial residual graph has no negative cycle (every hop leaves an original leader).
    fn initial_potentials(&self) -> Vec<i64> {
        let mut potential = vec![0; self.nodes()];
        for _ in 0..self.nodes() {
            if !self.relax_all(&mut potential) {
                break;
            }
        }
        potential
    }

    /// One Bellman–Ford round; whether any distance shrank.
    fn relax_all(&self, dist: &mut [i64]) -> bool {
        let v = self.nodes();
        let mut changed = false;
        for (u, w) in (0..v).flat_map(|u| (0..v).map(move |w| (u, w))) {
            let Some(cost) = self.edge(u, w) else {
                continue;
            };
            if dist[u] + cost < dist[w] {
                dist[w] = dist[u] + cost;
                changed = true;
            }
        }
        changed
    }

    /// Dense Dijkstra on reduced costs from the source, stopping at the sink.
    /// Returns reduced distances and predecessors.
    fn dijkstra(&self) -> (Vec<i64>, Vec<usize>) {
        let v = self.nodes();
        let mut dist = vec![UNREACHED; v];
        let mut prev = vec![usize::MAX; v];
        let mut done = vec![false; v];
        dist[self.source()] = 0;
        while let Some(u) = closest(&dist, &done) {
            done[u] = true;
            if u == self.sink() {
                break;
            }
            self.relax_from(u, &mut dist, &mut prev, &done);
        }
        (dist, prev)
    }

    fn relax_from(&self, u: usize, dist: &mut [i64], prev: &mut [usize], done: &[bool]) {
        for w in (0..dist.len()).filter(|&w| !done[w]) {
            let Some(cost) = self.edge(u, w) else {
                continue;
            };
            let reduced = cost + self.potential[u] - self.potential[w];
            debug_assert!(
                reduced >= 0,
                "negative reduced cost {reduced} on {u} -> {w}"
            );
            let through = dist[u] + reduced;
            if through < dist[w] {
                dist[w] = through;
                prev[w] = u;
            }
        }
    }

    /// Raises potentials by the reduced distances, capped at the sink's, which keeps every
    /// residual edge's reduced cost >= 0 and makes the new path's edges 0.
    fn raise(&mut self, dist: &[i64], reach: i64) {
        for (p, &d) in self.potential.iter_mut().zip(dist) {
            *p += d.min(reach);
        }
    }

    /// The brokers on the path the predecessors describe, source and sink left out.
    fn route(&self, prev: &[usize]) -> Option<Vec<usize>> {
        let mut brokers = Vec::new();
        let mut v = prev[self.sink()];
        while v != self.source() {
            if v >= self.n || brokers.len() > self.n {
                return None;
            }
            brokers.push(v);
            v = prev[v];
        }
        brokers.reverse();
        Some(brokers)
    }

    /// The cheapest part on `from` that `to` may lead.
    fn carrier(&self, from: usize, to: usize) -> Option<usize> {
        self.pairs[from * self.n + to].first().map(|e| e.1)
    }

    /// Sends one unit along `route`: each hop's part moves on. Parts are chosen before any
    /// moves, as the shortest path priced them.
    fn augment(&mut self, route: &[usize]) -> bool {
        let (Some(&first), Some(&last)) = (route.first(), route.last()) else {
            return false;
        };
        let hops: Option<Vec<(usize, usize)>> = route
            .windows(2)
            .map(|w| self.carrier(w[0], w[1]).map(|p| (p, w[1])))
            .collect();
        let Some(hops) = hops else {
            return false;
        };
        for (p, to) in hops {
            self.relocate(p, to);
        }
        self.shed[first] += 1;
        self.taken[last] += 1;
        true
    }

    /// One shortest-path augmentation; false once no path lowers the cost.
    fn step(&mut self) -> bool {
        let (dist, prev) = self.dijkstra();
        let reach = dist[self.sink()];
        if reach == UNREACHED {
            return false;
        }
        let cost = reach + self.potential[self.sink()] - self.potential[self.source()];
        self.raise(&dist, reach);
        if cost >= 0 {
            return false;
        }
        match self.route(&prev) {
            Some(route) => self.augment(&route),
            None => false,
        }
    }

    /// Augments until optimal. Each augmentation takes a leader from some broker's original
    /// count, so there are at most as many as counted partitions.
    fn run(&mut self) {
        while self.step() {}
    }
}

/// The unfinished reached node with the smallest distance.
fn closest(dist: &[i64], done: &[bool]) -> Option<usize> {
    (0..dist.len())
        .filter(|&v| !done[v] && dist[v] != UNREACHED)
        .min_by_key(|&v| dist[v])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn layout(
        topic: &str,
        partition: i32,
        leader: i32,
        replicas: &[i32],
        isr: &[i32],
        load: f64,
    ) -> PartitionLayout {
        PartitionLayout {
            topic: topic.to_string(),
            partition,
            leader,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            load,
        }
    }

    fn eligible(ids: &[i32]) -> Vec<BrokerState> {
        ids.iter()
            .map(|&id| BrokerState { id, eligible: true })
            .collect()
    }

    /// Partition i of topic "t" led by `leaders[i]`, replicas and ISR `replicas` with the
    /// leader first.
    fn led_by(leaders: &[i32], replicas: &[i32]) -> Vec<PartitionLayout> {
        leaders
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let order = replica_order(replicas, l);
                layout("t", i as i32, l, &order, &order, 1.0)
            })
            .collect()
    }

    fn listed(brokers: &[BrokerState]) -> BTreeMap<i32, bool> {
        brokers.iter().map(|b| (b.id, b.eligible)).collect()
    }

    fn is_counted(p: &PartitionLayout, listed: &BTreeMap<i32, bool>) -> bool {
        p.leader != -1 && listed.contains_key(&p.leader)
    }

    /// Each listed broker's (lower, upper), computed independently of the planner.
    fn bounds(
        partitions: &[PartitionLayout],
        brokers: &[BrokerState],
        threshold: f64,
    ) -> BTreeMap<i32, (usize, usize)> {
        let listed = listed(brokers);
        let leaders = partitions.iter().filter(|p| is_counted(p, &listed)).count();
        let band = band(leaders, listed.len(), threshold);
        let cap = (leaders / listed.len().max(1)).min(band.upper);
        listed
            .iter()
            .map(|(&id, &e)| {
                let bounds = if e {
                    (band.lower, band.upper)
                } else {
                    (0, cap)
                };
                (id, bounds)
            })
            .collect()
    }

    /// (excess above upper, deficit below lower), summed over brokers.
    fn misfit(
        counts: &BTreeMap<i32, usize>,
        bounds: &BTreeMap<i32, (usize, usize)>,
    ) -> (usize, usize) {
        counts.iter().fold((0, 0), |(e, d), (id, &c)| {
            let (lo, up) = bounds[id];
            (e + c.saturating_sub(up), d + lo.saturating_sub(c))
        })
    }

    fn violation(counts: &BTreeMap<i32, usize>, bounds: &BTreeMap<i32, (usize, usize)>) -> usize {
        let (excess, deficit) = misfit(counts, bounds);
        excess + deficit
    }

    /// Possible leaders of a counted partition: its leader, then eligible listed ISR members.
    fn destinations(p: &PartitionLayout, listed: &BTreeMap<i32, bool>) -> Vec<i32> {
        let mut out = vec![p.leader];
        for &id in &p.isr {
            if listed.get(&id) == Some(&true) && !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }

    fn advance(choice: &mut [usize], options: &[Vec<i32>]) -> bool {
        for (c, o) in choice.iter_mut().zip(options) {
            *c += 1;
            if *c < o.len() {
                return true;
            }
            *c = 0;
        }
        false
    }

    /// The lexicographically least (violation, moves) over every possible leader assignment.
    fn exhaustive_best(
        partitions: &[PartitionLayout],
        brokers: &[BrokerState],
        threshold: f64,
    ) -> (usize, usize) {
        let listed = listed(brokers);
        let bounds = bounds(partitions, brokers, threshold);
        let counted: Vec<&PartitionLayout> = partitions
            .iter()
            .filter(|p| is_counted(p, &listed))
            .collect();
        let options: Vec<Vec<i32>> = counted.iter().map(|p| destinations(p, &listed)).collect();
        let mut choice = vec![0; options.len()];
        let mut best = (usize::MAX, usize::MAX);
        loop {
            let mut counts: BTreeMap<i32, usize> = listed.keys().map(|&id| (id, 0)).collect();
            let mut moves = 0;
            for (i, p) in counted.iter().enumerate() {
                let to = options[i][choice[i]];
                *counts.get_mut(&to).unwrap() += 1;
                moves += usize::from(to != p.leader);
            }
            best = best.min((violation(&counts, &bounds), moves));
            if !advance(&mut choice, &options) {
                return best;
            }
        }
    }

    /// Checks what every plan must satisfy, whatever the layout.
    fn check_invariants(
        partitions: &[PartitionLayout],
        brokers: &[BrokerState],
        threshold: f64,
        planned: &Plan,
    ) {
        let listed = listed(brokers);
        let bounds = bounds(partitions, brokers, threshold);
        let by_key: HashMap<(&str, i32), &PartitionLayout> = partitions
            .iter()
            .map(|p| ((p.topic.as_str(), p.partition), p))
            .collect();
        let mut before: BTreeMap<i32, usize> = listed.keys().map(|&id| (id, 0)).collect();
        for p in partitions.iter().filter(|p| is_counted(p, &listed)) {
            *before.get_mut(&p.leader).unwrap() += 1;
        }
        assert_eq!(planned.before, before);
        let mut after = before.clone();
        let mut seen = HashSet::new();
        for m in &planned.moves {
            let p = by_key[&(m.topic.as_str(), m.partition)];
            assert!(
                seen.insert((m.topic.clone(), m.partition)),
                "moved twice: {m:?}"
            );
            assert_eq!(m.from, p.leader, "{m:?}");
            assert!(
                is_counted(p, &listed),
                "an uncounted partition moved: {m:?}"
            );
            assert_ne!(m.to, m.from, "{m:?}");
            assert!(p.isr.contains(&m.to), "not in the ISR: {m:?}");
            assert_eq!(listed.get(&m.to), Some(&true), "not eligible: {m:?}");
            *after.get_mut(&m.from).unwrap() -= 1;
            *after.get_mut(&m.to).unwrap() += 1;
        }
        assert_eq!(planned.after, after);
        let sorted = planned
            .moves
            .windows(2)
            .all(|w| (&w[0].topic, w[0].partition) < (&w[1].topic, w[1].partition));
        assert!(sorted, "moves not sorted by (topic, partition)");
        let in_band = after.iter().all(|(id, &c)| {
            let (lo, up) = bounds[id];
            lo <= c && c <= up
        });
        assert_eq!(planned.in_band, in_band);
        let leaders = before.values().sum();
        assert_eq!(planned.band, band(leaders, listed.len(), threshold));
    }

    /// Each move shifts one leader, so it cuts the excess and the deficit by at most one each.
    fn check_lower_bound(
        partitions: &[PartitionLayout],
        brokers: &[BrokerState],
        threshold: f64,
        planned: &Plan,
    ) {
        let bounds = bounds(partitions, brokers, threshold);
        let (excess0, deficit0) = misfit(&planned.before, &bounds);
        let (excess1, deficit1) = misfit(&planned.after, &bounds);
        assert!(excess1 <= excess0 && deficit1 <= deficit0);
        let needed = (excess0 - excess1).max(deficit0 - deficit1);
        assert!(
            planned.moves.len() >= needed,
            "{} < {needed}",
            planned.moves.len()
        );
    }

    #[test]
    fn the_band_follows_cruise_controls_rule() {
        assert_eq!(
            band(100, 10, 1.1),
            Band {
                lower: 9,
                upper: 11
            }
        );
        assert_eq!(
            band(30, 3, 1.0),
            Band {
                lower: 10,
                upper: 10
            }
        );
        assert_eq!(band(10, 3, 1.0), Band { lower: 3, upper: 4 });
        assert_eq!(
            band(20, 1, 1.5),
            Band {
                lower: 11,
                upper: 29
            }
        );
        assert_eq!(
            band(10, 2, 3.0),
            Band {
                lower: 0,
                upper: 14
            }
        );
        assert_eq!(band(10, 0, 1.1), Band { lower: 0, upper: 0 });
        assert_eq!(band(0, 5, 1.1), Band { lower: 0, upper: 0 });
        assert_eq!(band(30, 3, 0.5), band(30, 3, 1.0));
        assert_eq!(band(30, 3, f64::NAN), band(30, 3, 1.0));
    }

    #[test]
    fn a_balanced_cluster_gets_no_moves() {
        let partitions = led_by(&[1, 2, 3, 1, 2, 3, 1, 2, 3], &[1, 2, 3]);
        let brokers = eligible(&[1, 2, 3]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert!(planned.moves.is_empty());
        assert!(planned.in_band);
        assert_eq!(planned.before, planned.after);
    }

    #[test]
    fn thirty_partitions_led_by_one_broker_spread_to_ten_each_in_twenty_moves() {
        let partitions = led_by(&[1; 30], &[1, 2, 3]);
        let brokers = eligible(&[1, 2, 3]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert_eq!(planned.moves.len(), 20);
        assert_eq!(planned.after, BTreeMap::from([(1, 10), (2, 10), (3, 10)]));
        assert!(planned.in_band);
        assert_eq!(skew(&planned.before), 3.0);
        assert_eq!(skew(&planned.after), 1.0);
    }

    #[test]
    fn a_partition_whose_isr_holds_only_its_leader_never_moves() {
        let mut partitions = led_by(&[1, 1, 1, 1], &[1, 2]);
        partitions[0].isr = vec![1];
        partitions[1].isr = vec![1];
        partitions[2].isr = vec![1];
        let brokers = eligible(&[1, 2]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert_eq!(planned.moves.len(), 1);
        assert_eq!(planned.moves[0].partition, 3);
        assert_eq!(planned.after, BTreeMap::from([(1, 3), (2, 1)]));
    }

    #[test]
    fn an_ineligible_broker_never_receives_a_leader() {
        let partitions = led_by(&[1; 12], &[1, 2, 3]);
        let brokers = vec![
            BrokerState {
                id: 1,
                eligible: true,
            },
            BrokerState {
                id: 2,
                eligible: false,
            },
            BrokerState {
                id: 3,
                eligible: true,
            },
        ];
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert!(planned.moves.iter().all(|m| m.to == 3));
        // Band [4, 4]: broker 3 alone cannot take 8 without exceeding it; every split from
        // (4, 0, 8) to (8, 0, 4) violates by 4, and the last takes the fewest moves.
        assert_eq!(planned.after, BTreeMap::from([(1, 8), (2, 0), (3, 4)]));
        assert_eq!(planned.moves.len(), 4);
        assert!(!planned.in_band);
    }

    #[test]
    fn an_ineligible_broker_above_upper_sheds_leaders() {
        let partitions = led_by(&[2, 2, 2, 2, 2, 2], &[1, 2, 3]);
        let brokers = vec![
            BrokerState {
                id: 1,
                eligible: true,
            },
            BrokerState {
                id: 2,
                eligible: false,
            },
            BrokerState {
                id: 3,
                eligible: true,
            },
        ];
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert_eq!(planned.after, BTreeMap::from([(1, 2), (2, 2), (3, 2)]));
        assert_eq!(planned.moves.len(), 4);
        assert!(planned.in_band);
    }

    #[test]
    fn an_overloaded_broker_within_the_band_sheds_to_the_mean() {
        // Within the band at threshold 1.5 (upper 5), but broker 1 shows overload: it keeps at
        // most the mean rounded down (3), in one move.
        let partitions = led_by(&[1, 1, 1, 1, 2, 2, 2, 3, 3, 3], &[1, 2, 3]);
        let mut brokers = eligible(&[1, 2, 3]);
        brokers[0].eligible = false;
        let planned = plan(&partitions, &brokers, 1.5);
        check_invariants(&partitions, &brokers, 1.5, &planned);
        assert_eq!(planned.moves.len(), 1);
        assert_eq!(planned.after[&1], 3);
        assert!(planned.in_band);
        // Healthy, the same layout needs nothing.
        assert!(plan(&partitions, &eligible(&[1, 2, 3]), 1.5)
            .moves
            .is_empty());
    }

    #[test]
    fn a_partition_without_a_leader_is_ignored() {
        let mut partitions = led_by(&[1, 2, 1, 1], &[1, 2]);
        partitions[2].leader = -1;
        partitions[3].leader = -1;
        let brokers = eligible(&[1, 2]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert!(planned.moves.is_empty());
        assert_eq!(planned.before, BTreeMap::from([(1, 1), (2, 1)]));
        assert_eq!(planned.band, Band { lower: 1, upper: 1 });
    }

    #[test]
    fn a_partition_led_by_an_unlisted_broker_is_left_alone() {
        let mut partitions = led_by(&[1, 1, 1, 1], &[1, 2, 9]);
        partitions[0].leader = 9;
        partitions[1].leader = 9;
        let brokers = eligible(&[1, 2]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert_eq!(planned.before, BTreeMap::from([(1, 2), (2, 0)]));
        assert_eq!(planned.after, BTreeMap::from([(1, 1), (2, 1)]));
        assert!(planned.moves.iter().all(|m| m.partition >= 2));
    }

    #[test]
    fn an_unreachable_band_gives_the_least_violation_plan() {
        let mut partitions = led_by(&[1; 10], &[1, 2]);
        for p in &mut partitions[..8] {
            p.isr = vec![1];
        }
        let brokers = eligible(&[1, 2]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert!(!planned.in_band);
        assert_eq!(planned.after, BTreeMap::from([(1, 8), (2, 2)]));
        assert_eq!(planned.moves.len(), 2);
        let bounds = bounds(&partitions, &brokers, 1.0);
        assert_eq!(violation(&planned.after, &bounds), 6);
    }

    #[test]
    fn of_otherwise_equal_candidates_the_busier_partition_moves() {
        let mut partitions = led_by(&[1, 1, 1, 2], &[1, 2]);
        partitions[0].load = 1.0;
        partitions[1].load = 3.0;
        partitions[2].load = 2.0;
        let brokers = eligible(&[1, 2]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        let expected = LeaderMove {
            topic: "t".into(),
            partition: 1,
            from: 1,
            to: 2,
        };
        assert_eq!(planned.moves, vec![expected]);
    }

    #[test]
    fn the_busiest_partitions_leave_an_overloaded_broker() {
        let mut partitions = led_by(&[1; 8], &[1, 2]);
        for (i, p) in partitions.iter_mut().enumerate() {
            p.load = [0.5, 9.0, 1.0, 7.0, 1.0, 8.0, 6.0, 0.0][i];
        }
        let brokers = eligible(&[1, 2]);
        let planned = plan(&partitions, &brokers, 1.0);
        let moved: Vec<i32> = planned.moves.iter().map(|m| m.partition).collect();
        assert_eq!(moved, vec![1, 3, 5, 6]);
    }

    #[test]
    fn a_tie_break_never_costs_an_extra_move() {
        // Moving partition 0 (light) alone fixes the band; the busy ones would need two moves.
        let partitions = vec![
            layout("a", 0, 1, &[1, 3], &[1, 3], 0.0),
            layout("b", 0, 1, &[1, 2], &[1, 2], 50.0),
            layout("b", 1, 2, &[2, 3], &[2, 3], 50.0),
            layout("c", 0, 1, &[1], &[1], 1.0),
            layout("c", 1, 2, &[2], &[2], 1.0),
        ];
        let brokers = eligible(&[1, 2, 3]);
        let planned = plan(&partitions, &brokers, 1.0);
        check_invariants(&partitions, &brokers, 1.0, &planned);
        assert!(planned.in_band);
        assert_eq!(planned.moves.len(), 1);
        assert_eq!(planned.moves[0].topic, "a");
    }

    #[test]
    fn no_brokers_or_no_partitions_plan_nothing() {
        let empty = plan(&[], &[], 1.1);
        assert!(empty.moves.is_empty() && empty.in_band && empty.after.is_empty());
        let idle = plan(&[], &eligible(&[1, 2]), 1.1);
        assert_eq!(idle.after, BTreeMap::from([(1, 0), (2, 0)]));
        assert!(idle.in_band);
        let orphaned = plan(&led_by(&[1, 1], &[1, 2]), &[], 1.1);
        assert!(orphaned.moves.is_empty() && orphaned.before.is_empty());
    }

    #[test]
    fn skew_is_max_over_mean() {
        assert_eq!(skew(&BTreeMap::from([(1, 6), (2, 2), (3, 1)])), 2.0);
        assert_eq!(skew(&BTreeMap::from([(1, 0), (2, 0)])), 1.0);
        assert_eq!(skew(&BTreeMap::new()), 1.0);
    }

    #[test]
    fn replica_order_puts_the_leader_first() {
        assert_eq!(replica_order(&[1, 2, 3], 3), vec![3, 1, 2]);
        assert_eq!(replica_order(&[1, 2, 3], 1), vec![1, 2, 3]);
        assert_eq!(replica_order(&[4, 2, 3], 2), vec![2, 4, 3]);
        assert_eq!(replica_order(&[1, 2, 3], 7), vec![1, 2, 3]);
        assert_eq!(replica_order(&[], 7), Vec::<i32>::new());
    }

    fn leader_move(partition: i32, from: i32, to: i32) -> LeaderMove {
        LeaderMove {
            topic: "t".into(),
            partition,
            from,
            to,
        }
    }

    /// Batch sizes and per-broker limits hold, and every move appears once in input order.
    fn check_batches(
        moves: &[LeaderMove],
        out: &[Vec<LeaderMove>],
        per_batch: usize,
        per_broker: usize,
    ) {
        let mut seen: Vec<&LeaderMove> = Vec::new();
        for batch in out {
            assert!(!batch.is_empty() && batch.len() <= per_batch.max(1));
            let mut load: HashMap<i32, usize> = HashMap::new();
            for m in batch {
                for id in brokers_of(m) {
                    *load.entry(id).or_insert(0) += 1;
                }
            }
            assert!(load.values().all(|&n| n <= per_broker.max(1)), "{load:?}");
            let positions: Vec<usize> = batch
                .iter()
                .map(|m| moves.iter().position(|x| x == m).unwrap())
                .collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "order lost");
            seen.extend(batch);
        }
        seen.sort_by_key(|m| m.partition);
        assert_eq!(seen, moves.iter().collect::<Vec<_>>());
    }

    #[test]
    fn batches_respect_cruise_controls_default_limits() {
        let moves: Vec<LeaderMove> = (0..2000).map(|i| leader_move(i, 1, 2 + i % 4)).collect();
        let out = batches(&moves, 1000, 250);
        check_batches(&moves, &out, 1000, 250);
        assert_eq!(out.len(), 8);
        let spread: Vec<LeaderMove> = (0..2000)
            .map(|i| leader_move(i, 1 + i % 10, 11 + i % 10))
            .collect();
        let out = batches(&spread, 1000, 250);
        check_batches(&spread, &out, 1000, 250);
        assert_eq!(
            out.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1000, 1000]
        );
    }

    #[test]
    fn batches_with_zero_limits_still_hold_every_move() {
        let moves: Vec<LeaderMove> = (0..5).map(|i| leader_move(i, 1, 2)).collect();
        let out = batches(&moves, 0, 0);
        check_batches(&moves, &out, 1, 1);
        assert_eq!(out.len(), 5);
        assert!(batches(&[], 10, 10).is_empty());
    }

    /// `partitions` RF-3 partitions over brokers 1..=`brokers`, `share_in_ten` tenths of them led
    /// by broker 1, the rest by the others; replicas spread over the others, all in sync.
    fn mostly_on_one_broker(
        partitions: i32,
        brokers: i32,
        share_in_ten: i32,
    ) -> Vec<PartitionLayout> {
        let others = brokers - 1;
        (0..partitions)
            .map(|i| {
                let x = 2 + i % others;
                let y = 2 + (i % others + 1 + (i / others) % (others - 1)) % others;
                let replicas = if i % 10 < share_in_ten {
                    vec![1, x, y]
                } else {
                    vec![x, y, 1]
                };
                layout(
                    "t",
                    i,
                    replicas[0],
                    &replicas,
                    &replicas,
                    1.0 + f64::from(i % 7),
                )
            })
            .collect()
    }

    #[test]
    fn three_thousand_partitions_mostly_on_one_broker_plan_in_band() {
        let partitions = mostly_on_one_broker(3000, 10, 8);
        let ids: Vec<i32> = (1..=10).collect();
        let brokers = eligible(&ids);
        let planned = plan(&partitions, &brokers, 1.1);
        check_invariants(&partitions, &brokers, 1.1, &planned);
        assert_eq!(planned.before[&1], 2400);
        assert!(planned.in_band);
        let bounds = bounds(&partitions, &brokers, 1.1);
        let (excess, deficit) = misfit(&planned.before, &bounds);
        assert_eq!(planned.moves.len(), excess.max(deficit));
    }

    #[test]
    fn a_hundred_brokers_plan_in_band() {
        let partitions = mostly_on_one_broker(2000, 100, 5);
        let ids: Vec<i32> = (1..=100).collect();
        let brokers = eligible(&ids);
        let planned = plan(&partitions, &brokers, 1.1);
        check_invariants(&partitions, &brokers, 1.1, &planned);
        assert!(planned.in_band);
        let bounds = bounds(&partitions, &brokers, 1.1);
        let (excess, deficit) = misfit(&planned.before, &bounds);
        assert_eq!(planned.moves.len(), excess.max(deficit));
    }

    /// (replication factor, replica shuffle, ISR mask, leader kind, load in tenths)
    type Spec = (u8, u64, u8, u8, u8);
    type Case = (Vec<PartitionLayout>, Vec<BrokerState>, f64);

    const THRESHOLDS: [f64; 3] = [1.0, 1.1, 1.5];

    fn broker_ids(n: usize) -> Vec<i32> {
        (0..n as i32).map(|i| 100 + 7 * i).collect()
    }

    fn shuffled(ids: &[i32], seed: u64) -> Vec<i32> {
        let mut out = ids.to_vec();
        let mut s = seed;
        for i in (1..out.len()).rev() {
            out.swap(i, (s % (i as u64 + 1)) as usize);
            s = s.rotate_right(13) ^ 0x9e37_79b9_7f4a_7c15;
        }
        out
    }

    /// One partition from its spec: replicas a shuffle of the brokers (broker 0 forced first for
    /// leader kinds >= 128 when `skewed`), the leader usually the first replica but sometimes
    /// -1 or an unlisted broker, the ISR the leader plus a masked subset of the others.
    fn partition_from(
        i: usize,
        ids: &[i32],
        spec: Spec,
        max_rf: usize,
        skewed: bool,
    ) -> PartitionLayout {
        let (rf, seed, mask, kind, load) = spec;
        let rf = 1 + usize::from(rf) % max_rf.min(ids.len());
        let mut replicas = shuffled(ids, seed);
        if skewed && kind >= 128 {
            replicas = replica_order(&replicas, ids[0]);
        }
        replicas.truncate(rf);
        let leader = match kind % 16 {
            0 => -1,
            1 => 999,
            _ => replicas[0],
        };
        let mut isr: Vec<i32> = vec![leader];
        isr.extend(
            replicas
                .iter()
                .enumerate()
                .filter(|&(j, &r)| r != leader && mask & (1 << j) != 0)
                .map(|(_, &r)| r),
        );
        layout(
            "t",
            i as i32,
            leader,
            &replicas,
            &isr,
            f64::from(load) / 10.0,
        )
    }

    fn build(ids: &[i32], specs: &[Spec], max_rf: usize, skewed: bool) -> Vec<PartitionLayout> {
        specs
            .iter()
            .enumerate()
            .map(|(i, &s)| partition_from(i, ids, s, max_rf, skewed))
            .collect()
    }

    fn states(ids: &[i32], eligibility: &[bool]) -> Vec<BrokerState> {
        ids.iter()
            .zip(eligibility)
            .map(|(&id, &eligible)| BrokerState { id, eligible })
            .collect()
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            any::<u8>(),
            any::<u64>(),
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
        )
    }

    fn small_case() -> impl Strategy<Value = Case> {
        (
            2usize..=4,
            prop::collection::vec(spec(), 1..=7),
            prop::collection::vec(any::<bool>(), 4),
            0usize..3,
        )
            .prop_map(|(n, specs, eligibility, t)| {
                let ids = broker_ids(n);
                let partitions = build(&ids, &specs, 3, true);
                (partitions, states(&ids, &eligibility), THRESHOLDS[t])
            })
    }

    fn big_case() -> impl Strategy<Value = Case> {
        (
            2usize..=6,
            prop::collection::vec(spec(), 1..=200),
            prop::collection::vec(prop::bool::weighted(0.8), 6),
            0usize..3,
        )
            .prop_map(|(n, specs, eligibility, t)| {
                let ids = broker_ids(n);
                let partitions = build(&ids, &specs, 3, true);
                (partitions, states(&ids, &eligibility), THRESHOLDS[t])
            })
    }

    /// Every partition replicated on every broker, all in sync, all eligible.
    fn full_isr_case() -> impl Strategy<Value = Case> {
        (
            2usize..=6,
            prop::collection::vec(any::<u8>(), 1..=200),
            0usize..3,
        )
            .prop_map(|(n, picks, t)| {
                let ids = broker_ids(n);
                let partitions = picks
                    .iter()
                    .enumerate()
                    .map(|(i, &k)| {
                        let leader = if k < 128 {
                            ids[0]
                        } else {
                            ids[usize::from(k) % n]
                        };
                        let replicas = replica_order(&ids, leader);
                        layout(
                            "t",
                            i as i32,
                            leader,
                            &replicas,
                            &replicas,
                            f64::from(k % 5),
                        )
                    })
                    .collect();
                (partitions, eligible(&ids), THRESHOLDS[t])
            })
    }

    proptest! {
        #[test]
        fn small_plans_match_the_exhaustive_optimum((partitions, brokers, threshold) in small_case()) {
            let planned = plan(&partitions, &brokers, threshold);
            check_invariants(&partitions, &brokers, threshold, &planned);
            let bounds = bounds(&partitions, &brokers, threshold);
            let got = (violation(&planned.after, &bounds), planned.moves.len());
            prop_assert_eq!(got, exhaustive_best(&partitions, &brokers, threshold));
        }

        #[test]
        fn bigger_plans_keep_the_invariants((partitions, brokers, threshold) in big_case()) {
            let planned = plan(&partitions, &brokers, threshold);
            check_invariants(&partitions, &brokers, threshold, &planned);
            check_lower_bound(&partitions, &brokers, threshold, &planned);
        }

        #[test]
        fn with_full_isrs_the_plan_is_in_band_in_the_fewest_moves(
            (partitions, brokers, threshold) in full_isr_case()
        ) {
            let planned = plan(&partitions, &brokers, threshold);
            check_invariants(&partitions, &brokers, threshold, &planned);
            prop_assert!(planned.in_band);
            let bounds = bounds(&partitions, &brokers, threshold);
            let (excess, deficit) = misfit(&planned.before, &bounds);
            prop_assert_eq!(planned.moves.len(), excess.max(deficit));
        }

        #[test]
        fn batches_keep_their_limits_and_every_move(
            ends in prop::collection::vec((1i32..=5, 1i32..=5), 0..60),
            per_batch in 0usize..8,
            per_broker in 0usize..5,
        ) {
            let moves: Vec<LeaderMove> = ends
                .iter()
                .enumerate()
                .map(|(i, &(from, to))| leader_move(i as i32, from, to))
                .collect();
            let out = batches(&moves, per_batch, per_broker);
            check_batches(&moves, &out, per_batch, per_broker);
        }
    }
}
