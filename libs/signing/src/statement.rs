//! The public log of releases (issue 15; AG-27, AG-28, RO-07): a release statement — the
//! version and the sha256 of every artifact it ships, by name (`agent/<platform>`,
//! `support_bundle`) — signed by a statement key and appended to a transparency log, and the
//! offline proof that it was: the log's signed checkpoint (its size and root hash) and the
//! Merkle inclusion proof of the statement's entry (RFC 9162 section 2.1.3). An agent holding
//! statement and log keys installs a binary only when all of it verifies and the statement
//! records that binary's sha256; a release kept out of the public log is `unlogged`.
//!
//! `RELEASE_STATEMENT` is JSON; every field is read by its exact name and no other is
//! allowed:
//!
//! ```json
//! {"statement": "<base64 of the statement's bytes>",
//!  "signatures": [{"keyid": "SHA256:...", "sig": "<base64>"}],
//!  "log": {"index": 5, "checkpoint": {"origin": "...", "size": 8, "root_hash": "<hex>"},
//!          "checkpoint_signatures": [{"keyid": "SHA256:...", "sig": "<base64>"}],
//!          "proof": ["<hex>", ...]}}
//! ```
//!
//! The statement's bytes are `{"version": ..., "artifacts": {"agent/linux-amd64": "<hex>",
//! ...}}`; its signatures cover [`STATEMENT_CONTEXT`] and those bytes; the log's entry is
//! exactly those bytes, so its leaf hash binds the entry to the statement; a checkpoint's
//! signatures cover [`CHECKPOINT_CONTEXT`] and `origin\nsize\nroot_hash\n`. No I/O here.

use std::collections::BTreeMap;

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::{release::KeySignature, NodeKey, PublicKey, SIGNATURE_LENGTH};

/// What a statement signature covers, before the statement's bytes.
pub const STATEMENT_CONTEXT: &[u8] = b"capstan-release-statement-v1\n";
/// What a checkpoint signature covers, before the checkpoint's text.
pub const CHECKPOINT_CONTEXT: &[u8] = b"capstan-log-checkpoint-v1\n";
/// The file's name beside a release.
pub const STATEMENT_FILE: &str = "RELEASE_STATEMENT";
/// The most a statement document may be.
pub const MAX_STATEMENT_BYTES: usize = 256 * 1024;
/// The longest inclusion proof read (a log of 2^64 entries needs 64).
pub const MAX_PROOF_HASHES: usize = 64;

/// The name a statement records an agent binary under (AG-27: `agent/<platform>`).
pub fn agent_artifact(platform: &str) -> String {
    format!("agent/{platform}")
}

/// The name a statement records the support bundle under (AG-32).
pub const SUPPORT_BUNDLE_ARTIFACT: &str = "support_bundle";

/// What a release statement says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    pub version: String,
    /// Artifact name → lowercase hex sha256.
    pub artifacts: BTreeMap<String, String>,
}

impl Statement {
    /// The statement's bytes (compact JSON, keys sorted).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a statement always serializes")
    }

    /// Whether it records `sha256` under `artifact`.
    pub fn records(&self, artifact: &str, sha256: &str) -> bool {
        self.artifacts.get(artifact).map(String::as_str) == Some(sha256)
    }
}

/// A log's signed state: how many entries, and the Merkle root over them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    /// Lowercase hex.
    pub root_hash: String,
}

impl Checkpoint {
    fn signed_text(&self) -> Vec<u8> {
        let mut text = CHECKPOINT_CONTEXT.to_vec();
        text.extend_from_slice(
            format!("{}\n{}\n{}\n", self.origin, self.size, self.root_hash).as_bytes(),
        );
        text
    }
}

/// Where the statement sits in the log, and the proof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogProof {
    pub index: u64,
    pub checkpoint: Checkpoint,
    pub checkpoint_signatures: Vec<KeySignature>,
    /// Lowercase hex hashes, leaf to root.
    pub proof: Vec<String>,
}

/// `RELEASE_STATEMENT`, as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatementDocument {
    /// Base64 of the statement's bytes.
    pub statement: String,
    pub signatures: Vec<KeySignature>,
    pub log: LogProof,
}

/// Why a statement does not prove a release logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    #[error("the release statement cannot be read: {0}")]
    Unreadable(String),
    #[error("the release statement is not signed by a held statement key")]
    StatementSignature,
    #[error("the log checkpoint is not signed by a held log key")]
    CheckpointSignature,
    #[error("the inclusion proof does not lead to the checkpoint's root: {0}")]
    NotIncluded(String),
    #[error("the release statement does not record {artifact} with sha256 {sha256}")]
    NotRecorded { artifact: String, sha256: String },
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// RFC 9162's leaf hash: SHA-256 of 0x00 and the entry.
pub fn leaf_hash(entry: &[u8]) -> [u8; 32] {
    sha256(&[&[0], entry])
}

/// RFC 9162's interior node hash: SHA-256 of 0x01, the left and the right child.
pub fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    sha256(&[&[1], left, right])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(bytes)
}

/// RFC 9162 section 2.1.3.2: whether `proof` shows the leaf `leaf` at `index` in a tree of
/// `size` leaves whose root is `root`.
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &[u8; 32],
    proof: &[[u8; 32]],
    root: &[u8; 32],
) -> Result<(), String> {
    if index >= size {
        return Err(format!(
            "entry {index} is not inside a log of {size} entries"
        ));
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return Err("the proof is longer than the tree is deep".into());
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err("the proof is shorter than the tree is deep".into());
    }
    if &r != root {
        return Err(format!(
            "it leads to {}, the checkpoint says {}",
            hex(&r),
            hex(root)
        ));
    }
    Ok(())
}

/// RFC 9162's Merkle tree hash of `leaves` (leaf hashes), for a log kept in memory: the
/// publisher's side and the tests'.
pub fn merkle_root(leaves: &[[u8; 32]]) -> [u8; 32] {
    match leaves.len() {
        0 => sha256(&[]),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&merkle_root(&leaves[..k]), &merkle_root(&leaves[k..]))
        }
    }
}

/// The largest power of two smaller than `n` (RFC 9162's split point).
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// RFC 9162's inclusion proof of leaf `index` among `leaves`.
pub fn inclusion_proof(leaves: &[[u8; 32]], index: usize) -> Vec<[u8; 32]> {
    if leaves.len() <= 1 {
        return Vec::new();
    }
    let k = split(leaves.len());
    if index < k {
        let mut proof = inclusion_proof(&leaves[..k], index);
        proof.push(merkle_root(&leaves[k..]));
        proof
    } else {
        let mut proof = inclusion_proof(&leaves[k..], index - k);
        proof.push(merkle_root(&leaves[..k]));
        proof
    }
}

fn signed_by(signatures: &[KeySignature], input: &[u8], keys: &[PublicKey]) -> bool {
    signatures.iter().take(8).any(|signature| {
        let Some(sig) = STANDARD
            .decode(&signature.sig)
            .ok()
            .and_then(|sig| <[u8; SIGNATURE_LENGTH]>::try_from(sig).ok())
        else {
            return false;
        };
        keys.iter().any(|key| {
            key.fingerprint().as_str() == signature.keyid && key.verify(input, &sig).is_ok()
        })
    })
}

fn sign_with(key: &NodeKey, input: &[u8]) -> KeySignature {
    KeySignature {
        keyid: key.public_key().fingerprint().to_string(),
        sig: STANDARD.encode(key.sign(input)),
    }
}

/// AG-27's checks, offline and in order: the document reads; the statement is signed by one
/// of `statement_keys`; the checkpoint by one of `log_keys`; the entry (the statement's bytes,
/// so the entry is bound to the statement) is included under the checkpoint's root at its
/// index; and the statement records `sha256` under `artifact`. Returns the statement.
pub fn verify(
    document: &[u8],
    statement_keys: &[PublicKey],
    log_keys: &[PublicKey],
    artifact: &str,
    sha256: &str,
) -> Result<Statement, LogError> {
    if document.len() > MAX_STATEMENT_BYTES {
        return Err(LogError::Unreadable(format!(
            "it is larger than {MAX_STATEMENT_BYTES} bytes"
        )));
    }
    let document: StatementDocument = serde_json::from_slice(document)
        .map_err(|error| LogError::Unreadable(error.to_string()))?;
    let bytes = STANDARD
        .decode(&document.statement)
        .map_err(|_| LogError::Unreadable("statement is not base64".into()))?;
    let mut input = STATEMENT_CONTEXT.to_vec();
    input.extend_from_slice(&bytes);
    if !signed_by(&document.signatures, &input, statement_keys) {
        return Err(LogError::StatementSignature);
    }
    let statement: Statement = serde_json::from_slice(&bytes)
        .map_err(|error| LogError::Unreadable(format!("statement: {error}")))?;
    let log = &document.log;
    if !signed_by(
        &log.checkpoint_signatures,
        &log.checkpoint.signed_text(),
        log_keys,
    ) {
        return Err(LogError::CheckpointSignature);
    }
    if log.proof.len() > MAX_PROOF_HASHES {
        return Err(LogError::Unreadable(format!(
            "the proof holds more than {MAX_PROOF_HASHES} hashes"
        )));
    }
    let root = unhex(&log.checkpoint.root_hash)
        .ok_or_else(|| LogError::Unreadable("checkpoint.root_hash is not a sha256".into()))?;
    let proof = log
        .proof
        .iter()
        .map(|hash| unhex(hash))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| LogError::Unreadable("a proof hash is not a sha256".into()))?;
    verify_inclusion(
        log.index,
        log.checkpoint.size,
        &leaf_hash(&bytes),
        &proof,
        &root,
    )
    .map_err(LogError::NotIncluded)?;
    if !statement.records(artifact, sha256) {
        return Err(LogError::NotRecorded {
            artifact: artifact.to_string(),
            sha256: sha256.to_string(),
        });
    }
    Ok(statement)
}

/// What a `RELEASE_STATEMENT` claims, read without any key: the document must read and its
/// statement decode. The plane, which holds no statement or log key, checks with this that a
/// statement uploaded beside a release is about that release; the agents verify it ([`verify`]).
pub fn claimed(document: &[u8]) -> Result<Statement, LogError> {
    if document.len() > MAX_STATEMENT_BYTES {
        return Err(LogError::Unreadable(format!(
            "it is larger than {MAX_STATEMENT_BYTES} bytes"
        )));
    }
    let document: StatementDocument = serde_json::from_slice(document)
        .map_err(|error| LogError::Unreadable(error.to_string()))?;
    let bytes = STANDARD
        .decode(&document.statement)
        .map_err(|_| LogError::Unreadable("statement is not base64".into()))?;
    serde_json::from_slice(&bytes)
        .map_err(|error| LogError::Unreadable(format!("statement: {error}")))
}

/// A log kept in memory, as a publisher (or a test) keeps one: statements appended, a
/// checkpoint signed, each entry's proof written as `RELEASE_STATEMENT`.
#[derive(Debug, Default)]
pub struct MemoryLog {
    pub origin: String,
    entries: Vec<Vec<u8>>,
}

impl MemoryLog {
    pub fn new(origin: &str) -> MemoryLog {
        MemoryLog {
            origin: origin.to_string(),
            entries: Vec::new(),
        }
    }

    /// Appends `entry` (a statement's bytes, or anything else), returning its index.
    pub fn append(&mut self, entry: Vec<u8>) -> u64 {
        self.entries.push(entry);
        (self.entries.len() - 1) as u64
    }

    /// The `RELEASE_STATEMENT` of `statement`, signed by `statement_key`, appended to this log
    /// and proved against a checkpoint of the whole log signed by `log_key`.
    pub fn publish(
        &mut self,
        statement: &Statement,
        statement_key: &NodeKey,
        log_key: &NodeKey,
    ) -> Vec<u8> {
        let bytes = statement.to_bytes();
        let mut input = STATEMENT_CONTEXT.to_vec();
        input.extend_from_slice(&bytes);
        let signatures = vec![sign_with(statement_key, &input)];
        let index = self.append(bytes.clone());
        self.document(&bytes, signatures, index, log_key)
    }

    fn document(
        &self,
        bytes: &[u8],
        signatures: Vec<KeySignature>,
        index: u64,
        log_key: &NodeKey,
    ) -> Vec<u8> {
        let leaves: Vec<[u8; 32]> = self.entries.iter().map(|entry| leaf_hash(entry)).collect();
        let checkpoint = Checkpoint {
            origin: self.origin.clone(),
            size: leaves.len() as u64,
            root_hash: hex(&merkle_root(&leaves)),
        };
        let document = StatementDocument {
            statement: STANDARD.encode(bytes),
            signatures,
            log: LogProof {
                index,
                checkpoint_signatures: vec![sign_with(log_key, &checkpoint.signed_text())],
                checkpoint,
                proof: inclusion_proof(&leaves, index as usize)
                    .iter()
                    .map(|hash| hex(hash))
                    .collect(),
            },
        };
        serde_json::to_vec(&document).expect("a statement document serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> NodeKey {
        NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
    }

    const BINARY: &str = "aa00000000000000000000000000000000000000000000000000000000000000";

    fn statement(version: &str) -> Statement {
        let mut artifacts = BTreeMap::new();
        artifacts.insert(agent_artifact("linux-amd64"), BINARY.to_string());
        Statement {
            version: version.into(),
            artifacts,
        }
    }

    /// A log holding some other entries, then the statement, then more.
    fn logged(statement_key: &NodeKey, log_key: &NodeKey) -> Vec<u8> {
        let mut log = MemoryLog::new("log.example/releases");
        for n in 0..5u8 {
            log.append(vec![n; 3]);
        }
        let document = log.publish(&statement("1.3.0"), statement_key, log_key);
        // proofs are made against the log as it stood; append nothing after
        document
    }

    #[test]
    fn rfc_9162_inclusion_proofs_verify_for_every_leaf_of_every_size_and_fail_when_edited() {
        for size in 1..=17usize {
            let leaves: Vec<[u8; 32]> = (0..size).map(|n| leaf_hash(&[n as u8])).collect();
            let root = merkle_root(&leaves);
            for index in 0..size {
                let proof = inclusion_proof(&leaves, index);
                assert_eq!(
                    verify_inclusion(index as u64, size as u64, &leaves[index], &proof, &root),
                    Ok(()),
                    "size {size} index {index}"
                );
                let other = (index + 1) % size;
                if other != index {
                    assert!(verify_inclusion(
                        other as u64,
                        size as u64,
                        &leaves[index],
                        &proof,
                        &root
                    )
                    .is_err());
                }
                if let Some(first) = proof.first() {
                    let mut bad = proof.clone();
                    bad[0] = node_hash(first, first);
                    assert!(verify_inclusion(
                        index as u64,
                        size as u64,
                        &leaves[index],
                        &bad,
                        &root
                    )
                    .is_err());
                }
            }
        }
    }

    #[test]
    fn ag_27_a_logged_statement_recording_the_binary_verifies() {
        let (statement_key, log_key) = (key(1), key(2));
        let document = logged(&statement_key, &log_key);
        let read = verify(
            &document,
            &[statement_key.public_key()],
            &[log_key.public_key()],
            "agent/linux-amd64",
            BINARY,
        )
        .unwrap();
        assert_eq!(read.version, "1.3.0");
    }

    #[test]
    fn ag_27_what_a_statement_claims_reads_without_a_key_and_anything_else_is_unreadable() {
        let document = logged(&key(1), &key(2));
        assert_eq!(claimed(&document).unwrap(), statement("1.3.0"));
        for broken in [
            &b"not json"[..],
            br#"{"statement": "!!", "signatures": [], "log": {"index": 0, "checkpoint": {"origin": "o", "size": 1, "root_hash": "00"}, "checkpoint_signatures": [], "proof": []}}"#,
        ] {
            assert!(matches!(claimed(broken), Err(LogError::Unreadable(_))));
        }
        assert!(matches!(
            claimed(&vec![b' '; MAX_STATEMENT_BYTES + 1]),
            Err(LogError::Unreadable(_))
        ));
    }

    #[test]
    fn ag_27_each_check_refuses_on_its_own() {
        let (statement_key, log_key) = (key(1), key(2));
        let document = logged(&statement_key, &log_key);
        let keys = [statement_key.public_key()];
        let logs = [log_key.public_key()];
        // the statement signed by a key not held
        assert_eq!(
            verify(
                &document,
                &[key(3).public_key()],
                &logs,
                "agent/linux-amd64",
                BINARY
            ),
            Err(LogError::StatementSignature)
        );
        // the checkpoint signed by a key not held (the statement key is not a log key)
        assert_eq!(
            verify(&document, &keys, &keys, "agent/linux-amd64", BINARY),
            Err(LogError::CheckpointSignature)
        );
        // another binary than the one recorded, or another platform
        assert!(matches!(
            verify(
                &document,
                &keys,
                &logs,
                "agent/linux-amd64",
                &"b".repeat(64)
            ),
            Err(LogError::NotRecorded { .. })
        ));
        assert!(matches!(
            verify(&document, &keys, &logs, "agent/linux-arm64", BINARY),
            Err(LogError::NotRecorded { .. })
        ));
        // an entry the proof does not put under the root: the index moved
        let mut moved: StatementDocument = serde_json::from_slice(&document).unwrap();
        moved.log.index -= 1;
        assert!(matches!(
            verify(
                &serde_json::to_vec(&moved).unwrap(),
                &keys,
                &logs,
                "agent/linux-amd64",
                BINARY
            ),
            Err(LogError::NotIncluded(_))
        ));
        // a statement swapped for another one signed by the same key but never logged
        let mut swapped: StatementDocument = serde_json::from_slice(&document).unwrap();
        let other = statement("1.3.1").to_bytes();
        let mut input = STATEMENT_CONTEXT.to_vec();
        input.extend_from_slice(&other);
        swapped.statement = STANDARD.encode(&other);
        swapped.signatures = vec![sign_with(&statement_key, &input)];
        let swapped = serde_json::to_vec(&swapped).unwrap();
        assert!(matches!(
            verify(&swapped, &keys, &logs, "agent/linux-amd64", BINARY),
            Err(LogError::NotIncluded(_))
        ));
        // unknown fields are refused: every field is read by its exact name
        let text = String::from_utf8(document.clone()).unwrap();
        let extra = text.replacen("\"statement\"", "\"stated\":1,\"statement\"", 1);
        assert!(matches!(
            verify(extra.as_bytes(), &keys, &logs, "agent/linux-amd64", BINARY),
            Err(LogError::Unreadable(_))
        ));
        assert!(matches!(
            verify(b"nope", &keys, &logs, "agent/linux-amd64", BINARY),
            Err(LogError::Unreadable(_))
        ));
    }
}
