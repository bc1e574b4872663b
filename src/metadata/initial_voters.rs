//! The voters a dynamic quorum starts with, given at format time as `kafka-storage format` takes
//! them (`--standalone`, `--initial-controllers id@host:port:directory-id,...`, or
//! `--no-initial-controllers` for a controller that waits to be added), kept in the log directory.

use std::path::Path;

use crate::storage::checkpoint::write_atomic;
use crate::storage::{KafkaUuid, StorageError};

/// The file's name in the log directory: one `id@host:port:directory-id` per line; empty for a
/// controller formatted with `--no-initial-controllers`.
pub const FILE: &str = "evenkeel-initial-voters";

/// One voter of a new dynamic quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialVoter {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub directory_id: KafkaUuid,
}

impl std::fmt::Display for InitialVoter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}@{}:{}:{}",
            self.id, self.host, self.port, self.directory_id
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InitialVotersError {
    #[error("{0:?} is not id@host:port:directory-id (the directory id as kafka-storage random-uuid prints it)")]
    Malformed(String),
    #[error("node {0} is listed twice")]
    Duplicate(i32),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write the initial voters: {0}")]
    Write(#[from] StorageError),
}

/// Parses Kafka's `--initial-controllers` value: `id@host:port:directory-id`, comma-separated.
pub fn parse(text: &str) -> Result<Vec<InitialVoter>, InitialVotersError> {
    let mut out: Vec<InitialVoter> = Vec::new();
    for item in text
        .split([',', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let bad = || InitialVotersError::Malformed(item.to_string());
        let (id, rest) = item.split_once('@').ok_or_else(bad)?;
        let (addr, dir) = rest.rsplit_once(':').ok_or_else(bad)?;
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        let v = InitialVoter {
            id: id.parse().ok().filter(|i: &i32| *i >= 0).ok_or_else(bad)?,
            host: host.trim_matches(['[', ']']).to_string(),
            port: port.parse().ok().filter(|p: &u16| *p > 0).ok_or_else(bad)?,
            directory_id: KafkaUuid::parse(dir)
                .filter(|d| *d != KafkaUuid::ZERO)
                .ok_or_else(bad)?,
        };
        if host.is_empty() {
            return Err(bad());
        }
        if out.iter().any(|o| o.id == v.id) {
            return Err(InitialVotersError::Duplicate(v.id));
        }
        out.push(v);
    }
    Ok(out)
}

/// Writes `voters` into `dir` (none: the node waits to be added).
pub fn write(dir: &Path, voters: &[InitialVoter]) -> Result<(), InitialVotersError> {
    let text: String = voters.iter().map(|v| format!("{v}\n")).collect();
    Ok(write_atomic(&dir.join(FILE), text.as_bytes())?)
}

/// The voters `dir` was formatted with; `None` when it was formatted without any of the
/// flags (the quorum is then as its configuration says).
pub fn read(dir: &Path) -> Result<Option<Vec<InitialVoter>>, InitialVotersError> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(InitialVotersError::Read {
            path: path.display().to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_initial_controllers_value_survives_the_file() {
        let (a, b) = (KafkaUuid::random(), KafkaUuid::random());
        let voters = parse(&format!("1@c1:9093:{a},2@[::1]:9094:{b}")).unwrap();
        assert_eq!(voters.len(), 2);
        assert_eq!((voters[1].host.as_str(), voters[1].port), ("::1", 9094));
        assert_eq!(voters[0].directory_id, a);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), &voters).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(voters));
        write(dir.path(), &[]).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(Vec::new()));
    }

    #[test]
    fn a_bad_voter_is_named() {
        let d = KafkaUuid::random();
        for bad in [
            "1@c1:9093".to_string(),
            format!("x@c1:9093:{d}"),
            format!("1@c1:0:{d}"),
            "1@c1:9093:AAAAAAAAAAAAAAAAAAAAAA".to_string(),
            format!("1@:9093:{d}"),
        ] {
            let e = parse(&bad).unwrap_err().to_string();
            assert!(e.contains("is not id@host:port:directory-id"), "{bad}: {e}");
        }
        let e = parse(&format!("1@a:1:{d},1@b:2:{d}")).unwrap_err();
        assert!(matches!(e, InitialVotersError::Duplicate(1)));
    }
}
