//! The storage check and the witness (BK-15, BK-17): a run's manifest, read from storage with
//! the plane's own credential, is compared with the listing of the node's folder. Every part
//! must be listed at the size the manifest records, and the manifest must carry its envelope
//! (its recipients). The first problem found is the run's one-line shelf problem.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::keys::{manifest_name, parse_node_key, NodeKey};

/// What the plane reads of a manifest (BACKUPS-CONTRACT.md "Manifest"); unknown fields are
/// ignored, as the contract asks of readers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub seq: i64,
    pub kind: String,
    pub full_seq: i64,
    pub previous_seq: Option<i64>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub recipients: Vec<Recipient>,
    pub artifacts: Vec<Artifact>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Recipient {
    pub role: String,
    pub recipient: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Artifact {
    pub name: String,
    pub bytes: u64,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Part {
    pub key: String,
    pub bytes: u64,
}

impl Manifest {
    /// The bytes the run stored: every part.
    pub fn bytes(&self) -> u64 {
        self.artifacts
            .iter()
            .flat_map(|artifact| &artifact.parts)
            .map(|part| part.bytes)
            .sum()
    }
}

/// BK-15: what is wrong with a manifest that is there but does not read, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ManifestProblem(pub String);

/// Reads manifest `seq`'s bytes; the error says what is wrong in one line.
pub fn parse_manifest(bytes: &[u8], seq: i64) -> Result<Manifest, ManifestProblem> {
    let manifest: Manifest = serde_json::from_slice(bytes).map_err(|error| {
        ManifestProblem(format!("{} does not read: {error}", manifest_name(seq)))
    })?;
    if manifest.format != 1 {
        return Err(ManifestProblem(format!(
            "{} is format {}, not 1",
            manifest_name(seq),
            manifest.format
        )));
    }
    if manifest.seq != seq {
        return Err(ManifestProblem(format!(
            "{} names run {}, not {seq}",
            manifest_name(seq),
            manifest.seq
        )));
    }
    if !matches!(manifest.kind.as_str(), "full" | "incremental") {
        return Err(ManifestProblem(format!(
            "{} has kind {:?}",
            manifest_name(seq),
            manifest.kind
        )));
    }
    Ok(manifest)
}

/// BK-15: the first thing wrong with a run whose manifest reads, given what the listing holds
/// for the node (its keys and sizes); `None` when it is whole.
pub fn check(manifest: &Manifest, listed: &BTreeMap<NodeKey, u64>) -> Option<String> {
    if manifest.recipients.is_empty() {
        return Some(format!(
            "run {}: its manifest names no recipient (no envelope)",
            manifest.seq
        ));
    }
    for artifact in &manifest.artifacts {
        let parts_total: u64 = artifact.parts.iter().map(|part| part.bytes).sum();
        if parts_total != artifact.bytes {
            return Some(format!(
                "run {}: {} is {} bytes but its parts add up to {parts_total}",
                manifest.seq, artifact.name, artifact.bytes
            ));
        }
        for part in &artifact.parts {
            let Ok(key) = parse_node_key(&part.key) else {
                return Some(format!(
                    "run {}: the manifest names a part {:?} that is no key",
                    manifest.seq, part.key
                ));
            };
            if key.seq != manifest.seq {
                return Some(format!(
                    "run {}: the manifest names a part {} of another run",
                    manifest.seq, part.key
                ));
            }
            match listed.get(&key) {
                None => {
                    return Some(format!(
                        "run {}: {} is missing from storage",
                        manifest.seq, part.key
                    ))
                }
                Some(size) if *size != part.bytes => {
                    return Some(format!(
                        "run {}: {} is {size} bytes in storage, the manifest says {}",
                        manifest.seq, part.key, part.bytes
                    ))
                }
                Some(_) => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest() -> Vec<u8> {
        serde_json::to_vec(&json!({
            "format": 1, "node_fingerprint": "SHA256:x", "seq": 3, "kind": "full",
            "full_seq": 3, "previous_seq": null,
            "started_at": "2026-12-02T10:00:00Z", "finished_at": "2026-12-02T10:05:00Z",
            "recipients": [{"role": "site", "recipient": "age1abc"}],
            "artifacts": [{"name": "db.dump.zst.age", "what": "database", "bytes": 15,
                "sha256": "00", "parts": [
                    {"key": "3/db.dump.zst.age.000001", "bytes": 10, "sha256": "00"},
                    {"key": "3/db.dump.zst.age.000002", "bytes": 5, "sha256": "00"}]}],
            "files": {"count": 0, "bytes": 0, "removed": 0, "total": 0},
            "database": null, "future": true
        }))
        .unwrap()
    }

    fn listing(sizes: &[(&str, u64)]) -> BTreeMap<NodeKey, u64> {
        sizes
            .iter()
            .map(|(key, size)| (parse_node_key(key).unwrap(), *size))
            .collect()
    }

    #[test]
    fn bk_15_a_run_is_whole_when_every_part_is_listed_at_its_size() {
        let manifest = parse_manifest(&manifest(), 3).unwrap();
        assert_eq!(manifest.bytes(), 15);
        let whole = listing(&[
            ("3/db.dump.zst.age.000001", 10),
            ("3/db.dump.zst.age.000002", 5),
            ("3/manifest-3.json", 700),
        ]);
        assert_eq!(check(&manifest, &whole), None);
    }

    #[test]
    fn bk_15_a_truncated_or_missing_part_is_the_runs_problem() {
        let manifest = parse_manifest(&manifest(), 3).unwrap();
        let truncated = listing(&[
            ("3/db.dump.zst.age.000001", 10),
            ("3/db.dump.zst.age.000002", 4),
        ]);
        assert_eq!(
            check(&manifest, &truncated).unwrap(),
            "run 3: 3/db.dump.zst.age.000002 is 4 bytes in storage, the manifest says 5"
        );
        let missing = listing(&[("3/db.dump.zst.age.000001", 10)]);
        assert!(check(&manifest, &missing).unwrap().contains("missing"));
        let mut bare = manifest.clone();
        bare.recipients.clear();
        assert!(check(&bare, &truncated).unwrap().contains("envelope"));
    }

    #[test]
    fn bk_15_an_unreadable_manifest_says_why() {
        assert!(parse_manifest(b"{", 3)
            .unwrap_err()
            .0
            .contains("manifest-3.json"));
        assert!(parse_manifest(&manifest(), 4)
            .unwrap_err()
            .0
            .contains("names run 3"));
    }
}
