//! The broker keys of the log cleaner (Kafka's `CleanerConfig`), with Kafka's names, defaults and
//! validation. The per-topic keys (`min.cleanable.dirty.ratio`, …) live in `LogConfig`.

use std::collections::BTreeMap;

use super::{invalid as bad, number, parse_bool, ConfigError};

#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable` (true).
    pub enable: bool,
    /// `log.cleaner.threads` (1); 0 runs no cleaner, as in Kafka.
    pub num_threads: usize,
    /// `log.cleaner.dedupe.buffer.size` (134217728): the offset maps of all threads together.
    pub dedupe_buffer_size: u64,
    /// `log.cleaner.io.buffer.load.factor` (0.9): how full an offset map may get.
    pub dedupe_buffer_load_factor: f64,
    /// `log.cleaner.io.buffer.size` (524288): the read buffer of a cleaner thread.
    pub io_buffer_size: usize,
    /// `log.cleaner.io.max.bytes.per.second` (Double.MAX): read plus written bytes per second.
    pub max_io_bytes_per_second: f64,
    /// `log.cleaner.backoff.ms` (15000): the pause when no log needs cleaning.
    pub backoff_ms: u64,
    /// `producer.id.expiration.ms` (86400000): a producer whose last batch is older than this no
    /// longer has that batch kept by the cleaner (Kafka expires the producer's state then).
    pub producer_id_expiration_ms: i64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            enable: true,
            num_threads: 1,
            dedupe_buffer_size: 128 * 1024 * 1024,
            dedupe_buffer_load_factor: 0.9,
            io_buffer_size: 512 * 1024,
            max_io_bytes_per_second: f64::MAX,
            backoff_ms: 15_000,
            producer_id_expiration_ms: 86_400_000,
        }
    }
}

/// The keys read here, for the broker's list of known keys.
pub const KEYS: &[&str] = &[
    "log.cleaner.enable",
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
    "producer.id.expiration.ms",
];

impl CleanerConfig {
    pub fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let d = CleanerConfig::default();
        let enable = match props.get(KEYS[0]) {
            Some(v) => parse_bool(KEYS[0], v)?,
            None => d.enable,
        };
        let c = CleanerConfig {
            enable,
            num_threads: number(props, KEYS[1], d.num_threads, 0)?,
            dedupe_buffer_size: number(props, KEYS[2], d.dedupe_buffer_size, 0)?,
            dedupe_buffer_load_factor: number(props, KEYS[3], d.dedupe_buffer_load_factor, 0.0)?,
            io_buffer_size: number(props, KEYS[4], d.io_buffer_size, 0)?,
            max_io_bytes_per_second: number(props, KEYS[5], d.max_io_bytes_per_second, 0.0)?,
            backoff_ms: number(props, KEYS[6], d.backoff_ms, 0)?,
            producer_id_expiration_ms: number(props, KEYS[7], d.producer_id_expiration_ms, 1)?,
        };
        // Kafka's Cleaner: "offset map is too small to fit in even a single message".
        if c.enable
            && c.num_threads > 0
            && c.slots_per_thread() as f64 * c.dedupe_buffer_load_factor <= 1.0
        {
            return Err(bad(
                KEYS[2],
                &c.dedupe_buffer_size.to_string(),
                "offset map is too small to fit in even a single message, so log cleaning will \
                 never make progress; increase log.cleaner.dedupe.buffer.size or decrease \
                 log.cleaner.threads",
            ));
        }
        Ok(c)
    }

    /// Bytes of offset map for one thread (Kafka caps it at Int.MaxValue).
    pub fn buffer_per_thread(&self) -> u64 {
        (self.dedupe_buffer_size / self.num_threads.max(1) as u64).min(i32::MAX as u64)
    }

    /// Entries of one thread's offset map: 24 bytes each (a 16-byte key hash and an offset).
    pub fn slots_per_thread(&self) -> usize {
        (self.buffer_per_thread() / 24) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_defaults_and_a_map_too_small_is_refused() {
        let c = CleanerConfig::from_props(&BTreeMap::new()).unwrap();
        assert_eq!(c, CleanerConfig::default());
        assert_eq!(c.slots_per_thread(), 134_217_728 / 24);
        let p = BTreeMap::from([
            ("log.cleaner.threads".to_string(), "2".to_string()),
            ("log.cleaner.backoff.ms".to_string(), "100".to_string()),
        ]);
        let c = CleanerConfig::from_props(&p).unwrap();
        assert_eq!((c.num_threads, c.backoff_ms), (2, 100));
        assert_eq!(c.buffer_per_thread(), 67_108_864);
        let p = BTreeMap::from([(
            "log.cleaner.dedupe.buffer.size".to_string(),
            "24".to_string(),
        )]);
        let e = CleanerConfig::from_props(&p).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
        let p = BTreeMap::from([("log.cleaner.enable".to_string(), "maybe".to_string())]);
        assert!(CleanerConfig::from_props(&p).is_err());
    }
}
