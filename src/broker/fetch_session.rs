//! Incremental fetch sessions (KIP-227): the broker's session cache, each session's cached
//! partitions and epoch, and which partitions an incremental response has to carry.
//!
//! Semantics follow Kafka's `FetchManager` / `FetchSession` / `FetchSessionCache`: epoch 0 opens a
//! session with a full fetch, -1 closes one (sessionless), any other epoch is incremental and must
//! equal the session's. An incremental response carries only partitions with records, a changed
//! high watermark or log start offset, or an error; partitions that returned records move to the
//! end of the session so the next fetch starts with the others. Unlike Kafka, which splits the
//! `max.incremental.fetch.session.cache.slots` into 8 shards, one table holds them all.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_response::PartitionData;
use parking_lot::Mutex;
use prometheus::IntCounter;
use rand::Rng;
use uuid::Uuid;

use super::replica_manager::FetchInfo;
use crate::protocol::errors;

pub const INVALID_SESSION_ID: i32 = 0;
pub const INITIAL_EPOCH: i32 = 0;
pub const FINAL_EPOCH: i32 = -1;
/// Fetch v7 brought sessions to the wire; v13 switched them from topic names to topic ids.
pub const MIN_SESSION_VERSION: i16 = 7;
pub const TOPIC_ID_VERSION: i16 = 13;
/// A session unused (or, for size-based eviction, existing) this long may be evicted: Kafka's
/// hard-coded `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`.
pub const EVICTION_AGE: Duration = Duration::from_millis(120_000);

/// The epoch that follows `epoch` (Kafka's `FetchMetadata.nextEpoch`).
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// A partition's identity in a session: by topic id in v13+ sessions (the name is then left
/// empty), by topic name before.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    pub topic_id: Uuid,
    pub topic: String,
    pub partition: i32,
}

impl PartitionKey {
    pub fn new(uses_topic_ids: bool, topic_id: Uuid, topic: &str, partition: i32) -> Self {
        if uses_topic_ids {
            PartitionKey {
                topic_id,
                topic: String::new(),
                partition,
            }
        } else {
            PartitionKey {
                topic_id: Uuid::nil(),
                topic: topic.to_string(),
                partition,
            }
        }
    }
}

/// One partition a fetch reads: its key, its resolved topic name (empty when a topic id is
/// unknown) and id, and what is asked of it.
#[derive(Clone, Debug)]
pub struct FetchTarget {
    pub key: PartitionKey,
    pub topic: String,
    pub topic_id: Uuid,
    pub info: FetchInfo,
}

/// A session's memory of one partition: the last request parameters and what the last response
/// told the client.
#[derive(Clone, Debug)]
struct CachedPartition {
    target: FetchTarget,
    high_watermark: i64,
    log_start_offset: i64,
}

impl CachedPartition {
    fn new(target: FetchTarget) -> Self {
        CachedPartition {
            target,
            high_watermark: -1,
            log_start_offset: -1,
        }
    }

    /// Kafka's `maybeUpdateResponseData`: whether the client must hear about this partition,
    /// remembering what it is told.
    fn must_respond(&mut self, data: &PartitionData) -> bool {
        let mut must = data.records.as_ref().is_some_and(|r| !r.is_empty());
        if self.high_watermark != data.high_watermark {
            must = true;
            self.high_watermark = data.high_watermark;
        }
        if self.log_start_offset != data.log_start_offset {
            must = true;
            self.log_start_offset = data.log_start_offset;
        }
        if data.preferred_read_replica.0 != -1 || data.diverging_epoch.epoch >= 0 {
            must = true;
        }
        if data.error_code != errors::NONE {
            // So that the partition is sent again once the error is gone.
            self.high_watermark = -1;
            must = true;
        }
        must
    }
}

/// One incremental fetch session.
pub struct FetchSession {
    pub id: i32,
    epoch: i32,
    uses_topic_ids: bool,
    /// In fetch order; `index` maps a key to its place.
    partitions: Vec<CachedPartition>,
    index: HashMap<PartitionKey, usize>,
}

impl FetchSession {
    /// Points `index` at each partition's place again after a reorder or removal (the keys
    /// stay; only the numbers change).
    fn renumber(&mut self) {
        for (i, p) in self.partitions.iter().enumerate() {
            if let Some(slot) = self.index.get_mut(&p.target.key) {
                *slot = i;
            }
        }
    }

    /// Adds or updates the requested partitions, then drops the forgotten ones (so a partition
    /// named in both ends up dropped, as in Kafka).
    fn update(&mut self, targets: &[FetchTarget], forgotten: &[PartitionKey]) {
        for t in targets {
            match self.index.get(&t.key) {
                Some(&i) => {
                    let cached = &mut self.partitions[i].target;
                    cached.info = t.info.clone();
                    if !t.topic.is_empty() {
                        cached.topic.clone_from(&t.topic);
                    }
                }
                None => {
                    self.index.insert(t.key.clone(), self.partitions.len());
                    self.partitions.push(CachedPartition::new(t.clone()));
                }
            }
        }
        if !forgotten.is_empty() {
            for key in forgotten {
                self.index.remove(key);
            }
            self.partitions
                .retain(|p| !forgotten.contains(&p.target.key));
            self.renumber();
        }
    }

    /// What this fetch reads: every partition of the session, in session order.
    pub fn targets(&self) -> Vec<FetchTarget> {
        self.partitions.iter().map(|p| p.target.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Keeps the partitions the client must hear about (in `read` order) and moves those that
    /// returned records to the end of the session, so the next fetch serves the others first.
    pub fn filter_response(
        &mut self,
        read: Vec<(FetchTarget, PartitionData)>,
    ) -> Vec<(FetchTarget, PartitionData)> {
        let mut out = Vec::new();
        let mut moved = Vec::new();
        for (t, data) in read {
            let Some(&i) = self.index.get(&t.key) else {
                continue;
            };
            let cached = &mut self.partitions[i];
            if cached.must_respond(&data) {
                if data.records.as_ref().is_some_and(|r| !r.is_empty()) {
                    moved.push(i);
                }
                out.push((t, data));
            }
        }
        if !moved.is_empty() {
            let mut is_moved = vec![false; self.partitions.len()];
            for &i in &moved {
                is_moved[i] = true;
            }
            let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut self.partitions)
                .into_iter()
                .enumerate()
                .partition(|(i, _)| is_moved[*i]);
            self.partitions = stay.into_iter().chain(go).map(|(_, p)| p).collect();
            self.renumber();
        }
        out
    }
}

/// How the broker answers one Fetch request, chosen from its session id and epoch; it comes
/// with the partitions to read.
pub enum FetchContext {
    /// No session: the request's partitions, answered with session id 0.
    Sessionless,
    /// Epoch 0: the request's partitions, then a session opened holding them.
    Full {
        privileged: bool,
        uses_topic_ids: bool,
    },
    /// Every partition of the session, answering only what changed. `epoch` is what the
    /// session must still expect when the response is built (else a duplicate overtook it).
    Incremental {
        session: Arc<Mutex<FetchSession>>,
        epoch: i32,
    },
}

/// Eviction bookkeeping, kept beside the session so the cache never locks a session to choose.
struct Entry {
    session: Arc<Mutex<FetchSession>>,
    privileged: bool,
    size: usize,
    created: Instant,
    last_used: Instant,
}

/// The broker's fetch sessions, at most `max.incremental.fetch.session.cache.slots`.
pub struct FetchSessionCache {
    max_slots: usize,
    sessions: Mutex<HashMap<i32, Entry>>,
    /// Kafka's IncrementalFetchSessionEvictions, counted where they happen.
    evictions: IntCounter,
}

/// Gauges for `/metrics` (Kafka's FetchSessionCache metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub sessions: usize,
    pub partitions_cached: usize,
    pub evictions: u64,
}

impl FetchSessionCache {
    pub fn new(max_slots: usize, evictions: IntCounter) -> Self {
        FetchSessionCache {
            max_slots,
            sessions: Mutex::new(HashMap::new()),
            evictions,
        }
    }

    /// Kafka's `FetchManager.newContext`: the context and the partitions to read, or the
    /// top-level error to answer with (session id 0, nothing read). `targets` and `forgotten`
    /// are the request's own; `privileged` is true for follower fetches.
    #[allow(clippy::too_many_arguments)]
    pub fn new_context(
        &self,
        version: i16,
        session_id: i32,
        epoch: i32,
        privileged: bool,
        targets: Vec<FetchTarget>,
        forgotten: &[PartitionKey],
        now: Instant,
    ) -> Result<(FetchContext, Vec<FetchTarget>), i16> {
        if version < MIN_SESSION_VERSION {
            return Ok((FetchContext::Sessionless, targets));
        }
        let uses_topic_ids = version >= TOPIC_ID_VERSION;
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            // A full fetch closes the session it names, if any.
            if session_id != INVALID_SESSION_ID {
                self.sessions.lock().remove(&session_id);
            }
            if epoch == FINAL_EPOCH {
                return Ok((FetchContext::Sessionless, targets));
            }
            let full = FetchContext::Full {
                privileged,
                uses_topic_ids,
            };
            return Ok((full, targets));
        }
        let mut sessions = self.sessions.lock();
        let Some(entry) = sessions.get_mut(&session_id) else {
            return Err(errors::FETCH_SESSION_ID_NOT_FOUND);
        };
        let session = entry.session.clone();
        let mut s = session.lock();
        if s.epoch != epoch {
            return Err(errors::INVALID_FETCH_SESSION_EPOCH);
        }
        if s.uses_topic_ids != uses_topic_ids {
            return Err(errors::FETCH_SESSION_TOPIC_ID_ERROR);
        }
        s.update(&targets, forgotten);
        if s.is_empty() {
            drop(s);
            sessions.remove(&session_id);
            return Ok((FetchContext::Sessionless, targets));
        }
        entry.size = s.len();
        entry.last_used = now;
        // The cache is free again; the session's own lock covers the copy of its partitions.
        drop(sessions);
        s.epoch = next_epoch(s.epoch);
        let (targets, epoch) = (s.targets(), s.epoch);
        drop(s);
        Ok((FetchContext::Incremental { session, epoch }, targets))
    }

    /// Opens a session for a full fetch's partitions with what its response told the client;
    /// returns its id, or 0 when no slot could be had.
    pub fn create(
        &self,
        privileged: bool,
        uses_topic_ids: bool,
        read: &[(FetchTarget, PartitionData)],
        now: Instant,
    ) -> i32 {
        // Built before the cache is locked: the copy of every partition is the costly part.
        let mut s = FetchSession {
            id: INVALID_SESSION_ID,
            epoch: next_epoch(INITIAL_EPOCH),
            uses_topic_ids,
            partitions: Vec::with_capacity(read.len()),
            index: HashMap::new(),
        };
        for (t, data) in read {
            if s.index.contains_key(&t.key) {
                continue;
            }
            let mut cached = CachedPartition::new(t.clone());
            cached.must_respond(data);
            s.index.insert(t.key.clone(), s.partitions.len());
            s.partitions.push(cached);
        }
        let size = s.len();
        let mut sessions = self.sessions.lock();
        if sessions.len() >= self.max_slots && !self.try_evict(&mut sessions, privileged, size, now)
        {
            return INVALID_SESSION_ID;
        }
        let mut rng = rand::thread_rng();
        let id = loop {
            let id = rng.gen_range(1..=i32::MAX);
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        s.id = id;
        sessions.insert(
            id,
            Entry {
                session: Arc::new(Mutex::new(s)),
                privileged,
                size,
                created: now,
                last_used: now,
            },
        );
        id
    }

    /// Kafka's `tryEvict`: the least recently used session if it is stale; otherwise, among the
    /// sessions the newcomer may displace, the one that sorts first by (privileged, size, id),
    /// if the newcomer sorts at or after it.
    fn try_evict(
        &self,
        sessions: &mut HashMap<i32, Entry>,
        privileged: bool,
        size: usize,
        now: Instant,
    ) -> bool {
        let old = |t: Instant| now.saturating_duration_since(t) > EVICTION_AGE;
        let stale = sessions
            .iter()
            .min_by_key(|(id, e)| (e.last_used, **id))
            .filter(|(_, e)| old(e.last_used))
            .map(|(id, _)| *id);
        let victim = stale.or_else(|| {
            sessions
                .iter()
                .filter(|(_, e)| {
                    if privileged {
                        !e.privileged || old(e.created)
                    } else {
                        old(e.created)
                    }
                })
                .min_by_key(|(id, e)| (e.privileged, e.size, **id))
                .filter(|(id, e)| (privileged, size, 0) >= (e.privileged, e.size, **id))
                .map(|(id, _)| *id)
        });
        match victim {
            Some(id) => {
                sessions.remove(&id);
                self.evictions.inc();
                true
            }
            None => false,
        }
    }

    pub fn stats(&self) -> CacheStats {
        let sessions = self.sessions.lock();
        CacheStats {
            sessions: sessions.len(),
            partitions_cached: sessions.values().map(|e| e.size).sum(),
            evictions: self.evictions.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn target(topic: &str, partition: i32, offset: i64) -> FetchTarget {
        FetchTarget {
            key: PartitionKey::new(false, Uuid::nil(), topic, partition),
            topic: topic.to_string(),
            topic_id: Uuid::nil(),
            info: FetchInfo {
                fetch_offset: offset,
                max_bytes: 1 << 20,
                current_leader_epoch: -1,
                last_fetched_epoch: -1,
                log_start_offset: -1,
            },
        }
    }

    fn data(hw: i64, records: usize) -> PartitionData {
        PartitionData::default()
            .with_high_watermark(hw)
            .with_log_start_offset(0)
            .with_records(Some(Bytes::from(vec![0u8; records])))
    }

    fn cache(slots: usize) -> FetchSessionCache {
        FetchSessionCache::new(slots, IntCounter::new("evictions", "evictions").unwrap())
    }

    /// The context for a request that names no partitions.
    fn ctx(
        cache: &FetchSessionCache,
        version: i16,
        id: i32,
        epoch: i32,
        now: Instant,
    ) -> Result<FetchContext, i16> {
        cache
            .new_context(version, id, epoch, false, vec![], &[], now)
            .map(|(c, _)| c)
    }

    /// A cache with one session over t-0..t-(n-1), all at high watermark 0.
    fn opened(cache: &FetchSessionCache, n: i32, now: Instant) -> i32 {
        let read: Vec<_> = (0..n).map(|p| (target("t", p, 0), data(0, 0))).collect();
        cache.create(false, false, &read, now)
    }

    fn incremental(
        cache: &FetchSessionCache,
        id: i32,
        epoch: i32,
        targets: Vec<FetchTarget>,
        forgotten: &[PartitionKey],
    ) -> (Arc<Mutex<FetchSession>>, Vec<FetchTarget>) {
        match cache.new_context(12, id, epoch, false, targets, forgotten, Instant::now()) {
            Ok((FetchContext::Incremental { session, .. }, targets)) => (session, targets),
            Err(code) => panic!("error {code}"),
            _ => panic!("not incremental"),
        }
    }

    #[test]
    fn next_epoch_wraps_to_one_and_keeps_final() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(41), 42);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(-1), FINAL_EPOCH);
        assert_eq!(next_epoch(-7), FINAL_EPOCH);
    }

    #[test]
    fn epochs_choose_the_context() {
        let cache = cache(10);
        let now = Instant::now();
        assert!(matches!(
            ctx(&cache, 6, 0, 0, now),
            Ok(FetchContext::Sessionless)
        ));
        assert!(matches!(
            ctx(&cache, 12, 0, FINAL_EPOCH, now),
            Ok(FetchContext::Sessionless)
        ));
        assert!(matches!(
            ctx(&cache, 12, 0, INITIAL_EPOCH, now),
            Ok(FetchContext::Full {
                uses_topic_ids: false,
                privileged: false,
            })
        ));
        assert!(matches!(
            cache
                .new_context(13, 0, INITIAL_EPOCH, true, vec![], &[], now)
                .map(|(c, _)| c),
            Ok(FetchContext::Full {
                uses_topic_ids: true,
                privileged: true,
            })
        ));
        assert!(matches!(
            ctx(&cache, 12, 12345, 1, now),
            Err(errors::FETCH_SESSION_ID_NOT_FOUND)
        ));
    }

    #[test]
    fn incremental_epoch_must_match_and_advances() {
        let cache = cache(10);
        let id = opened(&cache, 3, Instant::now());
        assert_ne!(id, INVALID_SESSION_ID);
        let (_, targets) = incremental(&cache, id, 1, vec![], &[]);
        assert_eq!(
            targets.len(),
            3,
            "an incremental fetch reads the whole session"
        );
        // The same epoch again is a duplicate or a stale request.
        assert!(matches!(
            ctx(&cache, 12, id, 1, Instant::now()),
            Err(errors::INVALID_FETCH_SESSION_EPOCH)
        ));
        incremental(&cache, id, 2, vec![], &[]);
        // A v13 request to a name-based session.
        assert!(matches!(
            ctx(&cache, 13, id, 3, Instant::now()),
            Err(errors::FETCH_SESSION_TOPIC_ID_ERROR)
        ));
    }

    #[test]
    fn full_fetch_closes_the_named_session() {
        let cache = cache(10);
        let id = opened(&cache, 2, Instant::now());
        assert!(matches!(
            ctx(&cache, 12, id, FINAL_EPOCH, Instant::now()),
            Ok(FetchContext::Sessionless)
        ));
        assert_eq!(cache.stats().sessions, 0);
        assert!(matches!(
            ctx(&cache, 12, id, 1, Instant::now()),
            Err(errors::FETCH_SESSION_ID_NOT_FOUND)
        ));
    }

    #[test]
    fn updates_and_forgets_change_what_is_read() {
        let cache = cache(10);
        let id = opened(&cache, 3, Instant::now());
        let forget = [PartitionKey::new(false, Uuid::nil(), "t", 0)];
        let (_, targets) = incremental(
            &cache,
            id,
            1,
            vec![target("t", 1, 5), target("u", 0, 0)],
            &forget,
        );
        let got: Vec<_> = targets
            .iter()
            .map(|t| (t.key.topic.as_str(), t.key.partition, t.info.fetch_offset))
            .collect();
        assert_eq!(got, vec![("t", 1, 5), ("t", 2, 0), ("u", 0, 0)]);
        assert_eq!(cache.stats().partitions_cached, 3);
        // Forgetting everything closes the session.
        let all: Vec<_> = targets.iter().map(|t| t.key.clone()).collect();
        assert!(matches!(
            cache
                .new_context(12, id, 2, false, vec![], &all, Instant::now())
                .map(|(c, _)| c),
            Ok(FetchContext::Sessionless)
        ));
        assert_eq!(cache.stats().sessions, 0);
    }

    #[test]
    fn incremental_response_carries_only_changes_and_rotates_partitions_with_data() {
        let cache = cache(10);
        let id = opened(&cache, 4, Instant::now());
        let (session, targets) = incremental(&cache, id, 1, vec![], &[]);
        let mut s = session.lock();
        // t-1 got records, t-2 only a new high watermark, t-3 an error, t-0 nothing.
        let read = vec![
            (targets[0].clone(), data(0, 0)),
            (targets[1].clone(), data(3, 100)),
            (targets[2].clone(), data(2, 0)),
            (
                targets[3].clone(),
                data(0, 0).with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION),
            ),
        ];
        let out = s.filter_response(read);
        let parts: Vec<i32> = out.iter().map(|(t, _)| t.key.partition).collect();
        assert_eq!(parts, vec![1, 2, 3]);
        let order: Vec<i32> = s.targets().iter().map(|t| t.key.partition).collect();
        assert_eq!(
            order,
            vec![0, 2, 3, 1],
            "the partition that returned records goes last"
        );
        // Nothing changed now, except t-3 whose error reset its cached high watermark.
        let targets = s.targets();
        let read = targets
            .iter()
            .map(|t| {
                let hw = match t.key.partition {
                    1 => 3,
                    2 => 2,
                    _ => 0,
                };
                (t.clone(), data(hw, 0))
            })
            .collect();
        let parts: Vec<i32> = s
            .filter_response(read)
            .iter()
            .map(|(t, _)| t.key.partition)
            .collect();
        assert_eq!(parts, vec![3]);
    }

    #[test]
    fn no_slot_means_no_session_until_one_is_stale() {
        let cache = cache(1);
        let t0 = Instant::now();
        assert_ne!(opened(&cache, 5, t0), INVALID_SESSION_ID);
        // A consumer session cannot evict a young one, whatever its size.
        assert_eq!(opened(&cache, 5, t0), INVALID_SESSION_ID);
        assert_eq!(
            opened(&cache, 3, t0 + Duration::from_secs(1)),
            INVALID_SESSION_ID
        );
        assert_eq!(
            opened(&cache, 10, t0 + Duration::from_secs(1)),
            INVALID_SESSION_ID
        );
        // Unused for longer than the eviction age: anyone may take the slot.
        let later = t0 + EVICTION_AGE + Duration::from_secs(1);
        let id = opened(&cache, 1, later);
        assert_ne!(id, INVALID_SESSION_ID);
        assert_eq!(cache.stats().evictions, 1);
        assert_eq!(cache.stats().sessions, 1);
    }

    #[test]
    fn an_old_smaller_session_gives_way_to_a_bigger_one_and_followers_go_first() {
        let cache = cache(1);
        let t0 = Instant::now();
        let small = opened(&cache, 2, t0);
        // Keep it in use, so it is not stale, but let it grow older than the eviction age.
        let t1 = t0 + EVICTION_AGE + Duration::from_secs(1);
        let _ = ctx(&cache, 12, small, 1, t1);
        let big = opened(&cache, 10, t1);
        assert_ne!(big, INVALID_SESSION_ID);
        assert_eq!(
            cache_id(&cache),
            big,
            "the smaller, older session was evicted"
        );
        assert_eq!(cache.stats().evictions, 1);
        // A follower's (privileged) session displaces a young consumer session.
        let read = vec![(target("t", 0, 0), data(0, 0))];
        let follower = cache.create(true, false, &read, t1);
        assert_ne!(follower, INVALID_SESSION_ID);
        assert_eq!(cache.stats().evictions, 2);
        assert_eq!(cache.stats().partitions_cached, 1);
    }

    fn cache_id(cache: &FetchSessionCache) -> i32 {
        *cache.sessions.lock().keys().next().unwrap_or(&0)
    }
}
