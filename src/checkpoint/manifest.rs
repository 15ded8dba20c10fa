//! The manifest of one checkpoint: which files make up the snapshot of the state store taken
//! at an epoch, where each is in the object store, its size and checksum; and what the
//! checkpoint was taken of (epoch, catalog version, state size).
//!
//! A checkpoint exists once its manifest is in the object store, and the manifest is written
//! last, after every file it names (ADR 11). Its encoding is versioned ([`FORMAT`]) and carries
//! its own checksum, so a truncated or damaged manifest is told apart from a valid one:
//! `<JSON>\n<crc32 of the JSON as 8 hex digits>\n`.

use serde::{Deserialize, Serialize};

use crate::error::{Result, SqlState, WeirError};
use crate::types::Epoch;

/// The manifest encoding this build writes and reads.
pub const FORMAT: u32 = 1;

/// One file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its name in the snapshot directory (what RocksDB opens).
    pub name: String,
    /// Its key in the object store, under the checkpoint root.
    pub object: String,
    pub size: u64,
    pub crc32: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub epoch: Epoch,
    /// When the snapshot was taken (microseconds since the Unix epoch).
    pub taken_at_micros: i64,
    /// A fingerprint of the catalog (relations' ids and names) at the snapshot.
    pub catalog_version: u64,
    /// The life of the local store that took it ([`super::protocol`]): only that life may
    /// reuse the immutable files it uploaded.
    pub incarnation: String,
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// Bytes of state the checkpoint holds (all its files).
    pub fn state_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(self).expect("a manifest serializes");
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(format!("\n{crc:08x}\n").as_bytes());
        out
    }

    /// Decodes a manifest, checking its checksum and format (XX001 when damaged).
    pub fn decode(bytes: &[u8]) -> Result<Manifest> {
        let corrupt = |why: &str| WeirError::new(SqlState::DATA_CORRUPTED, format!("checkpoint manifest {why}"));
        let text = bytes.strip_suffix(b"\n").ok_or_else(|| corrupt("is truncated"))?;
        let split = text.iter().rposition(|b| *b == b'\n').ok_or_else(|| corrupt("has no checksum"))?;
        let (body, crc) = (&text[..split], &text[split + 1..]);
        let crc = std::str::from_utf8(crc)
            .ok()
            .and_then(|c| u32::from_str_radix(c, 16).ok())
            .ok_or_else(|| corrupt("has an unreadable checksum"))?;
        if crc32fast::hash(body) != crc {
            return Err(corrupt("does not match its checksum"));
        }
        let manifest: Manifest = serde_json::from_slice(body).map_err(|e| corrupt(&format!("is not readable: {e}")))?;
        if manifest.format != FORMAT {
            return Err(WeirError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!("checkpoint manifest format {} is not {FORMAT}, the one this build reads", manifest.format),
            ));
        }
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: FORMAT,
            epoch: 42,
            taken_at_micros: 1,
            catalog_version: 7,
            incarnation: "a".into(),
            files: vec![FileEntry {
                name: "000001.sst".into(),
                object: "files/a/000001.sst".into(),
                size: 10,
                crc32: 5,
            }],
        }
    }

    #[test]
    fn a_manifest_round_trips_and_damage_is_detected() {
        let m = sample();
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes).unwrap(), m);
        assert_eq!(m.state_bytes(), 10);
        // Truncated anywhere, or one byte changed: refused as corrupt.
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            assert_eq!(Manifest::decode(&bytes[..cut]).unwrap_err().state, SqlState::DATA_CORRUPTED, "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[10] ^= 1;
        assert_eq!(Manifest::decode(&flipped).unwrap_err().state, SqlState::DATA_CORRUPTED);
        // Another format: refused, not misread.
        let newer = Manifest { format: FORMAT + 1, ..sample() };
        assert_eq!(Manifest::decode(&newer.encode()).unwrap_err().state, SqlState::FEATURE_NOT_SUPPORTED);
    }
}
