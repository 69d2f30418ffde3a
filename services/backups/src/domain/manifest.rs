//! Whether a finished `backup_run`'s manifest is the node's own (issue 14): the node reports
//! the manifest's exact bytes, their signature and its public key; the plane trusts them only
//! when that key is the one the node was approved with (its fingerprint) and the signature
//! over those bytes verifies, and the manifest is of the run the plane asked for.

use base64::{engine::general_purpose::STANDARD, Engine as _};
use capstan_events::backups::rpc::RunKind;
use capstan_events::Word as _;
use capstan_signing::PublicKey;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

/// What the plane records of a run that landed.
#[derive(Debug, Clone, PartialEq)]
pub struct Trusted {
    pub seq: i64,
    pub kind: RunKind,
    pub full_seq: i64,
    pub previous_seq: Option<i64>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// The stored bytes of its artifacts.
    pub bytes: i64,
    /// The manifest as signed.
    pub manifest: Value,
}

#[derive(Deserialize)]
struct Artifact {
    bytes: u64,
}

#[derive(Deserialize)]
struct Manifest {
    node_fingerprint: String,
    seq: i64,
    kind: String,
    full_seq: i64,
    previous_seq: Option<i64>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    artifacts: Vec<Artifact>,
}

/// Why a `backup_run` result is not trusted, in words for the run's record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotTrusted(pub String);

impl From<String> for NotTrusted {
    fn from(why: String) -> NotTrusted {
        NotTrusted(why)
    }
}

impl From<&str> for NotTrusted {
    fn from(why: &str) -> NotTrusted {
        NotTrusted(why.to_string())
    }
}

fn text<'a>(result: &'a Value, name: &str) -> Result<&'a str, NotTrusted> {
    result
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| NotTrusted(format!("the result carries no {name}")))
}

/// Checks a `backup_run` result against the node's approved key `fingerprint` and the seq the
/// plane asked for. `Err` names why it is not trusted.
pub fn trust(result: &Value, asked_seq: i64, fingerprint: &str) -> Result<Trusted, NotTrusted> {
    let bytes = text(result, "manifest_text")?;
    let signature = STANDARD
        .decode(text(result, "manifest_sig")?.trim())
        .map_err(|_| "the manifest's signature is not base64".to_string())?;
    let key = PublicKey::from_base64(text(result, "node_key")?)
        .map_err(|error| format!("the node's key does not read: {error}"))?;
    if key.fingerprint().as_str() != fingerprint {
        return Err("the manifest is signed by a key that is not the node's".into());
    }
    key.verify(bytes.as_bytes(), &signature)
        .map_err(|_| "the manifest's signature does not verify with the node's key".to_string())?;
    let manifest: Manifest = serde_json::from_str(bytes)
        .map_err(|error| format!("the manifest does not read: {error}"))?;
    if manifest.node_fingerprint != fingerprint {
        return Err("the manifest names another node's key".into());
    }
    if manifest.seq != asked_seq {
        return Err(NotTrusted(format!(
            "the manifest is of run {}, not the run {asked_seq} asked for",
            manifest.seq
        )));
    }
    let kind = RunKind::parse(&manifest.kind)
        .ok_or_else(|| format!("{:?} is not a run kind", manifest.kind))?;
    if (kind == RunKind::Full) != manifest.previous_seq.is_none() {
        return Err("a full extends nothing and an incremental extends a run".into());
    }
    let stored: u64 = manifest
        .artifacts
        .iter()
        .map(|artifact| artifact.bytes)
        .sum();
    Ok(Trusted {
        seq: manifest.seq,
        kind,
        full_seq: manifest.full_seq,
        previous_seq: manifest.previous_seq,
        started_at: manifest.started_at,
        finished_at: manifest.finished_at,
        bytes: i64::try_from(stored).unwrap_or(i64::MAX),
        manifest: serde_json::from_str(bytes).unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_signing::NodeKey;
    use serde_json::json;

    fn signed(key: &NodeKey, seq: i64, kind: &str, previous: Option<i64>) -> Value {
        let fingerprint = key.public_key().fingerprint().to_string();
        let manifest = json!({
            "format": 1, "node_fingerprint": fingerprint, "seq": seq, "kind": kind,
            "full_seq": 1, "previous_seq": previous,
            "started_at": "2026-03-10T10:00:00Z", "finished_at": "2026-03-10T10:05:00Z",
            "recipients": [], "artifacts": [{"name": "files-2.tar.zst.age", "what": "files",
                "bytes": 300, "sha256": "00", "parts": []},
                {"name": "database-2.age", "what": "database", "bytes": 45, "sha256": "00",
                "parts": []}],
            "files": {"count": 1, "bytes": 1, "removed": 0}, "database": null
        });
        let text = serde_json::to_string(&manifest).unwrap();
        json!({
            "seq": seq, "kind": kind,
            "manifest_text": text,
            "manifest_sig": STANDARD.encode(key.sign(text.as_bytes())),
            "node_key": key.public_key().to_base64(),
        })
    }

    #[test]
    fn bk_14_a_manifest_signed_by_the_nodes_key_is_trusted_with_its_facts() {
        let key = NodeKey::generate();
        let fingerprint = key.public_key().fingerprint().to_string();
        let trusted = trust(&signed(&key, 2, "incremental", Some(1)), 2, &fingerprint).unwrap();
        assert_eq!(trusted.kind, RunKind::Incremental);
        assert_eq!(trusted.previous_seq, Some(1));
        assert_eq!(trusted.bytes, 345);
    }

    #[test]
    fn bk_14_another_key_a_changed_byte_or_another_run_is_not_trusted() {
        let key = NodeKey::generate();
        let fingerprint = key.public_key().fingerprint().to_string();
        let stranger = NodeKey::generate();
        let error = trust(&signed(&stranger, 2, "full", None), 2, &fingerprint).unwrap_err();
        assert!(error.0.contains("not the node's"), "{error}");
        let mut changed = signed(&key, 2, "full", None);
        let text = changed["manifest_text"]
            .as_str()
            .unwrap()
            .replace("300", "301");
        changed["manifest_text"] = json!(text);
        let error = trust(&changed, 2, &fingerprint).unwrap_err();
        assert!(error.0.contains("does not verify"), "{error}");
        let error = trust(&signed(&key, 3, "full", None), 2, &fingerprint).unwrap_err();
        assert!(error.0.contains("not the run 2"), "{error}");
        let error = trust(&json!({"seq": 2}), 2, &fingerprint).unwrap_err();
        assert!(error.0.contains("manifest_text"), "{error}");
    }
}
