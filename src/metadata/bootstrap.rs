//! The records a new cluster starts with, given at format time (`evenkeel format --add-scram`,
//! as `kafka-storage format --add-scram`): kept in the log directory beside `meta.properties`
//! and written by the first active controller, with `metadata.version`, into an empty log.

use std::path::{Path, PathBuf};

use super::records::MetadataRecord;

/// The file's name in the log directory.
pub const FILE: &str = "evenkeel-bootstrap.records";

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
}

/// Writes `records` (each as its metadata record value, after a 4-byte length) into `dir`,
/// through a temporary file so that a crash leaves the old file or the new one.
pub fn write(dir: &Path, records: &[MetadataRecord]) -> Result<(), BootstrapError> {
    let path = dir.join(FILE);
    let mut bytes = Vec::new();
    for r in records {
        let value = r.encode();
        bytes.extend_from_slice(&(value.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&value);
    }
    let tmp = dir.join(format!("{FILE}.tmp"));
    let err = |source| BootstrapError::Write {
        path: path.clone(),
        source,
    };
    std::fs::write(&tmp, &bytes).map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)
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
    fn a_damaged_file_is_an_error_not_a_partial_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), [0, 0, 0, 9, 1]).unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("truncated record"), "{e}");
    }
}
