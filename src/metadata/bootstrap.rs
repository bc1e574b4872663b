//! The records a new cluster starts with, given at format time (`evenkeel format --add-scram`,
//! as `kafka-storage format --add-scram`): kept in the log directory beside `meta.properties`
//! and written by the first active controller, with `metadata.version`, into an empty log.

use std::path::{Path, PathBuf};

use super::records::MetadataRecord;
use crate::storage::checkpoint::write_atomic;
use crate::storage::StorageError;

/// The file's name in the log directory.
pub const FILE: &str = "evenkeel-bootstrap.records";

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the bootstrap records: {0}")]
    Write(#[from] StorageError),
    #[error("{path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
}

/// Writes `records` (each as its metadata record value, after a 4-byte length) into `dir`,
/// through a synced temporary file so that a crash leaves the old file or the new one.
pub fn write(dir: &Path, records: &[MetadataRecord]) -> Result<(), BootstrapError> {
    let mut bytes = Vec::new();
    for r in records {
        let value = r.encode();
        bytes.extend_from_slice(&(value.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&value);
    }
    Ok(write_atomic(&dir.join(FILE), &bytes)?)
}

/// The records in `dir`; none when there is no file.
pub fn read(dir: &Path) -> Result<Vec<MetadataRecord>, BootstrapError> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(BootstrapError::Read { path, source }),
    };
    let damaged = |reason: String| BootstrapError::Damaged {
        path: path.clone(),
        reason,
    };
    let mut out = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let (len, after) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| damaged("a truncated length".into()))?;
        let len = u32::from_be_bytes(*len) as usize;
        let value = after
            .get(..len)
            .ok_or_else(|| damaged("a truncated record".into()))?;
        match MetadataRecord::decode(value).map_err(|e| damaged(e.to_string()))? {
            Some(r) => out.push(r),
            None => return Err(damaged("a record type evenkeel does not know".into())),
        }
        rest = &after[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_records_survive_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        let recs = vec![
            MetadataRecord::RemoveUserScramCredential {
                name: "alice".into(),
                mechanism: 2,
            },
            MetadataRecord::NoOp,
        ];
        write(dir.path(), &recs).unwrap();
        assert_eq!(read(dir.path()).unwrap(), recs);
    }

    #[test]
    fn scram_users_survive_the_file() {
        use crate::metadata::records::ScramCredentialRecord;
        use crate::security::sasl::{ScramCredential, ScramMechanism};
        let dir = tempfile::tempdir().unwrap();
        let recs: Vec<_> = ScramMechanism::ALL
            .into_iter()
            .map(|m| {
                let credential =
                    ScramCredential::from_password(m, "secret", b"salt", 8192).unwrap();
                MetadataRecord::UserScramCredential(ScramCredentialRecord::new(
                    "alice", m, credential,
                ))
            })
            .collect();
        write(dir.path(), &recs).unwrap();
        assert_eq!(read(dir.path()).unwrap(), recs);
        assert!(!dir.path().join(format!("{FILE}.tmp")).exists());
    }

    #[test]
    fn a_damaged_file_is_an_error_not_a_partial_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), [0, 0, 0, 9, 1]).unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("truncated record"), "{e}");
    }
}
