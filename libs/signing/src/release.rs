//! Signed release metadata (issue 15; ARCHITECTURE.md "Agent updates"; spec RO-03, RO-05,
//! AG-24): what a release is, how it is written so the same inputs give the same bytes, and how
//! its signatures are checked. The signing key lives where `capstan release` runs, never on the
//! plane; the agent checks the metadata against the key compiled into it and the keys it holds.
//!
//! A document is `{"signed": {...}, "signatures": [{"keyid": ..., "sig": ...}]}`. The signed
//! part is read with every field required and no other allowed, and a signature covers
//! [`SIGNED_CONTEXT`] followed by its canonical bytes: serde's field order, maps sorted, no
//! whitespace. Reading a document and writing it again gives the same bytes, so a signature is
//! checked over exactly what was parsed, never over bytes the parser skipped. Ed25519 is
//! deterministic, so signing the same inputs with the same key gives byte-identical metadata
//! (RO-05). Each artifact's own signature is over its raw bytes (RO-03).

use std::collections::BTreeMap;

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde::{Deserialize, Serialize};

pub use crate::{digest::sha256_hex, keys::KeySignature};
use crate::{manifest::FileManifest, NodeKey, PublicKey, SIGNATURE_LENGTH};

/// What a metadata signature covers, before the canonical bytes: a signature made for
/// anything else (a request, an artifact) can never pass as one over release metadata.
pub const SIGNED_CONTEXT: &[u8] = b"capstan-release-metadata-v1\n";
/// The architectures a release may carry binaries for (PROTOCOL.md "artifact").
pub const ARCHES: [&str; 2] = ["linux-amd64", "linux-arm64"];
/// The most a metadata document may be (the agent reads no more).
pub const MAX_METADATA_BYTES: usize = 256 * 1024;

/// Why metadata or an artifact is not acceptable, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    #[error("the release metadata cannot be read: {0}")]
    Unreadable(String),
    #[error("the release metadata is not valid: {field} {problem}")]
    Invalid { field: String, problem: String },
    #[error("the release metadata is not signed by a trusted key (signed by {signers})")]
    UntrustedSignature { signers: String },
    #[error("{what} is {actual} bytes, the metadata says {expected}")]
    WrongSize {
        what: String,
        expected: u64,
        actual: u64,
    },
    #[error("{what} has sha256 {actual}, the metadata says {expected}")]
    WrongHash {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what} is not signed by a trusted key")]
    BadArtifactSignature { what: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ReleaseError {
    ReleaseError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// One file of a release: its name, size, SHA-256 (lowercase hex) and the Ed25519 signature
/// over its raw bytes (standard base64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    pub filename: String,
    pub size: u64,
    pub sha256: String,
    pub signature: String,
}

/// The support bundle: the archive, and the manifest of what it holds (every file's path,
/// size, sha256 and mode; [`crate::manifest`]), so a machine can check every file it unpacks
/// and refuse one not listed (AG-32). The archive also carries the same manifest as
/// `RELEASE_MANIFEST` with its `RELEASE_MANIFEST.sig`, which land beside the tree for the
/// scripts' own checks (AG-33).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupportBundle {
    pub archive: Artifact,
    pub manifest: FileManifest,
}

/// The signed part of a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Release {
    /// The agent version the binaries answer `--version` with.
    pub version: String,
    /// Grows with every release; an agent never accepts a lower one than it has accepted
    /// (TUF's rollback protection). A deliberate downgrade is a higher sequence naming an
    /// older binary.
    pub sequence: u64,
    /// Unix seconds after which no agent accepts this metadata (TUF's freeze protection).
    pub expires_at: i64,
    /// The binaries, by architecture.
    pub binaries: BTreeMap<String, Artifact>,
    pub support_bundle: Option<SupportBundle>,
    /// The key that will sign the next releases (standard base64), vouched for by this
    /// metadata's signature: rotation without a new binary.
    pub next_key: Option<String>,
}

/// A release and its signatures, as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedRelease {
    pub signed: Release,
    pub signatures: Vec<KeySignature>,
}

/// A version: 1 to 64 characters of letters, digits, `.`, `-` and `+`, starting with a digit.
pub fn valid_version(version: &str) -> bool {
    !version.is_empty()
        && version.len() <= 64
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
}

fn valid_filename(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

fn valid_sha256(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

fn decode_signature(text: &str) -> Option<[u8; SIGNATURE_LENGTH]> {
    STANDARD.decode(text).ok()?.try_into().ok()
}

impl Artifact {
    /// Describes `bytes` as `filename`, signed by `key`.
    pub fn describe(filename: &str, bytes: &[u8], key: &NodeKey) -> Artifact {
        Artifact {
            filename: filename.to_string(),
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
            signature: STANDARD.encode(key.sign(bytes)),
        }
    }

    fn check_shape(&self, field: &str) -> Result<(), ReleaseError> {
        if !valid_filename(&self.filename) {
            return Err(invalid(
                format!("{field}.filename"),
                "must be 1 to 128 letters, digits, '.', '-' or '_', not starting with '.'",
            ));
        }
        if self.size == 0 {
            return Err(invalid(format!("{field}.size"), "must be more than 0"));
        }
        if !valid_sha256(&self.sha256) {
            return Err(invalid(
                format!("{field}.sha256"),
                "must be 64 lowercase hex digits",
            ));
        }
        if decode_signature(&self.signature).is_none() {
            return Err(invalid(
                format!("{field}.signature"),
                "must be a base64 Ed25519 signature",
            ));
        }
        Ok(())
    }

    /// The checks on fetched bytes, in order: size, sha256, then the signature over the raw
    /// bytes by one of `trusted` (AG-24).
    pub fn check(
        &self,
        what: &str,
        bytes: &[u8],
        trusted: &[PublicKey],
    ) -> Result<(), ReleaseError> {
        if bytes.len() as u64 != self.size {
            return Err(ReleaseError::WrongSize {
                what: what.to_string(),
                expected: self.size,
                actual: bytes.len() as u64,
            });
        }
        let actual = sha256_hex(bytes);
        if actual != self.sha256 {
            return Err(ReleaseError::WrongHash {
                what: what.to_string(),
                expected: self.sha256.clone(),
                actual,
            });
        }
        let signature = decode_signature(&self.signature).ok_or_else(|| {
            ReleaseError::BadArtifactSignature {
                what: what.to_string(),
            }
        })?;
        if trusted
            .iter()
            .any(|key| key.verify(bytes, &signature).is_ok())
        {
            Ok(())
        } else {
            Err(ReleaseError::BadArtifactSignature {
                what: what.to_string(),
            })
        }
    }
}

impl Release {
    /// The canonical bytes a signature covers (after [`SIGNED_CONTEXT`]).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a release always serializes")
    }

    fn signing_input(&self) -> Vec<u8> {
        let mut input = SIGNED_CONTEXT.to_vec();
        input.extend_from_slice(&self.canonical_bytes());
        input
    }

    /// Every field within its bounds.
    pub fn check_shape(&self) -> Result<(), ReleaseError> {
        if !valid_version(&self.version) {
            return Err(invalid(
                "version",
                "must be 1 to 64 letters, digits, '.', '-' or '+', starting with a digit",
            ));
        }
        if self.sequence == 0 || self.sequence > i64::MAX as u64 {
            return Err(invalid("sequence", "must be a whole number from 1"));
        }
        if self.expires_at <= 0 {
            return Err(invalid("expires_at", "must be a time in Unix seconds"));
        }
        if self.binaries.is_empty() {
            return Err(invalid("binaries", "must name at least one architecture"));
        }
        for (arch, artifact) in &self.binaries {
            if !ARCHES.contains(&arch.as_str()) {
                return Err(invalid(
                    "binaries",
                    format!("names {arch:?}; architectures are {}", ARCHES.join(", ")),
                ));
            }
            artifact.check_shape(&format!("binaries.{arch}"))?;
        }
        if let Some(bundle) = &self.support_bundle {
            bundle.archive.check_shape("support_bundle.archive")?;
            bundle
                .manifest
                .check_shape()
                .map_err(|error| invalid("support_bundle.manifest", error.to_string()))?;
        }
        if let Some(next) = &self.next_key {
            PublicKey::from_base64(next)
                .map_err(|error| invalid("next_key", format!("is not a public key: {error}")))?;
        }
        Ok(())
    }

    /// Signs this release with `key`, giving the document to publish. The same release and
    /// key give the same bytes (RO-05).
    pub fn sign(self, key: &NodeKey) -> Result<SignedRelease, ReleaseError> {
        self.check_shape()?;
        let signature = key.sign(&self.signing_input());
        Ok(SignedRelease {
            signatures: vec![KeySignature {
                keyid: key.public_key().fingerprint().to_string(),
                sig: STANDARD.encode(signature),
            }],
            signed: self,
        })
    }

    /// The binary for `arch`, if the release has one.
    pub fn binary(&self, arch: &str) -> Option<&Artifact> {
        self.binaries.get(arch)
    }

    /// The key this release vouches for, if any.
    pub fn next_public_key(&self) -> Option<PublicKey> {
        self.next_key
            .as_deref()
            .and_then(|key| PublicKey::from_base64(key).ok())
    }
}

impl SignedRelease {
    /// Reads a document: valid JSON of exactly this shape, every field within its bounds, at
    /// most [`MAX_METADATA_BYTES`]. Nothing is trusted yet: see [`SignedRelease::signed_by`].
    pub fn parse(bytes: &[u8]) -> Result<SignedRelease, ReleaseError> {
        if bytes.len() > MAX_METADATA_BYTES {
            return Err(ReleaseError::Unreadable(format!(
                "it is larger than {MAX_METADATA_BYTES} bytes"
            )));
        }
        let document: SignedRelease = serde_json::from_slice(bytes)
            .map_err(|error| ReleaseError::Unreadable(error.to_string()))?;
        document.signed.check_shape()?;
        if document.signatures.is_empty() || document.signatures.len() > 8 {
            return Err(invalid("signatures", "must hold 1 to 8 signatures"));
        }
        Ok(document)
    }

    /// The canonical document: what `capstan release sign` writes and the plane stores.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a release always serializes");
        bytes.push(b'\n');
        bytes
    }

    /// The first of `trusted` whose signature over the canonical signed part verifies; a
    /// signature by any other key counts for nothing.
    pub fn signed_by(&self, trusted: &[PublicKey]) -> Result<PublicKey, ReleaseError> {
        let input = self.signed.signing_input();
        for signature in &self.signatures {
            let Some(sig) = decode_signature(&signature.sig) else {
                continue;
            };
            for key in trusted {
                if key.fingerprint().as_str() == signature.keyid && key.verify(&input, &sig).is_ok()
                {
                    return Ok(*key);
                }
            }
        }
        Err(ReleaseError::UntrustedSignature {
            signers: self
                .signatures
                .iter()
                .map(|signature| signature.keyid.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Whether the signatures verify for the keys they name (what the plane can check without
    /// trusting any key): a document damaged in transit or edited after signing is refused at
    /// upload.
    pub fn self_consistent(&self, keys: &[PublicKey]) -> bool {
        self.signed_by(keys).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> NodeKey {
        NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
    }

    fn release(signer: &NodeKey) -> Release {
        let mut binaries = BTreeMap::new();
        binaries.insert(
            "linux-amd64".to_string(),
            Artifact::describe("capstan-agent-linux-amd64", b"binary bytes", signer),
        );
        let manifest =
            FileManifest::describe([("bin/report.sh", 0o755, &b"#!/bin/sh\n"[..])]).unwrap();
        Release {
            version: "1.3.0".into(),
            sequence: 7,
            expires_at: 2_000_000_000,
            binaries,
            support_bundle: Some(SupportBundle {
                archive: Artifact::describe("support_bundle.tar", b"tar bytes", signer),
                manifest,
            }),
            next_key: Some(key(9).public_key().to_base64()),
        }
    }

    #[test]
    fn ro_05_the_same_inputs_give_byte_identical_metadata() {
        let signer = key(1);
        let first = release(&signer).sign(&signer).unwrap().to_bytes();
        let second = release(&signer).sign(&signer).unwrap().to_bytes();
        assert_eq!(first, second);
        // and reading it back and writing it again changes nothing
        assert_eq!(SignedRelease::parse(&first).unwrap().to_bytes(), first);
    }

    #[test]
    fn ro_03_metadata_carries_version_sequence_expiry_and_each_binarys_name_size_hash_and_signature(
    ) {
        let signer = key(1);
        let bytes = release(&signer).sign(&signer).unwrap().to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let signed = &value["signed"];
        assert_eq!(signed["version"], "1.3.0");
        assert_eq!(signed["sequence"], 7);
        assert_eq!(signed["expires_at"], 2_000_000_000);
        let amd64 = &signed["binaries"]["linux-amd64"];
        assert_eq!(amd64["filename"], "capstan-agent-linux-amd64");
        assert_eq!(amd64["size"], 12);
        assert_eq!(amd64["sha256"], sha256_hex(b"binary bytes"));
        assert!(
            signed["support_bundle"]["manifest"]["files"]["bin/report.sh"]["sha256"].is_string()
        );
    }

    #[test]
    fn ag_24_metadata_verifies_only_against_a_trusted_key_and_any_edit_breaks_it() {
        let signer = key(1);
        let document = release(&signer).sign(&signer).unwrap();
        assert_eq!(
            document.signed_by(&[key(2).public_key(), signer.public_key()]),
            Ok(signer.public_key())
        );
        assert!(matches!(
            document.signed_by(&[key(2).public_key()]),
            Err(ReleaseError::UntrustedSignature { .. })
        ));
        let mut edited = document.clone();
        edited.signed.sequence = 8;
        assert!(edited.signed_by(&[signer.public_key()]).is_err());
        // a signature with another key's id is not tried against this one
        let mut relabelled = document.clone();
        relabelled.signatures[0].keyid = key(2).public_key().fingerprint().to_string();
        assert!(relabelled.signed_by(&[signer.public_key()]).is_err());
    }

    #[test]
    fn ag_24_an_artifact_is_checked_for_size_then_hash_then_signature_over_its_raw_bytes() {
        let signer = key(1);
        let artifact = Artifact::describe("a", b"binary bytes", &signer);
        let trusted = [signer.public_key()];
        assert_eq!(
            artifact.check("the binary", b"binary bytes", &trusted),
            Ok(())
        );
        assert!(matches!(
            artifact.check("the binary", b"binary byte", &trusted),
            Err(ReleaseError::WrongSize { .. })
        ));
        assert!(matches!(
            artifact.check("the binary", b"binary bytez", &trusted),
            Err(ReleaseError::WrongHash { .. })
        ));
        // right size and hash, signed by someone else
        let forged = Artifact::describe("a", b"binary bytes", &key(2));
        assert!(matches!(
            forged.check("the binary", b"binary bytes", &trusted),
            Err(ReleaseError::BadArtifactSignature { .. })
        ));
    }

    #[test]
    fn a_metadata_signature_is_never_an_artifact_signature_or_the_other_way_round() {
        let signer = key(1);
        let release = release(&signer);
        // a signature over the canonical bytes without the context does not verify
        let bare = signer.sign(&release.canonical_bytes());
        let mut document = release.clone().sign(&signer).unwrap();
        document.signatures[0].sig = STANDARD.encode(bare);
        assert!(document.signed_by(&[signer.public_key()]).is_err());
    }

    #[test]
    fn unknown_fields_bad_arches_paths_and_versions_are_refused_naming_the_field() {
        let signer = key(1);
        let good = release(&signer).sign(&signer).unwrap().to_bytes();
        let text = String::from_utf8(good).unwrap();
        let extra = text.replacen("\"version\"", "\"extra\": 1, \"version\"", 1);
        assert!(matches!(
            SignedRelease::parse(extra.as_bytes()),
            Err(ReleaseError::Unreadable(_))
        ));
        let mut bad = release(&signer);
        bad.binaries
            .insert("windows".into(), Artifact::describe("w", b"x", &signer));
        assert!(bad
            .sign(&signer)
            .unwrap_err()
            .to_string()
            .contains("binaries"));
        let mut bad = release(&signer);
        bad.support_bundle.as_mut().unwrap().manifest.files.insert(
            "../etc/passwd".into(),
            crate::manifest::FileEntry {
                size: 0,
                sha256: sha256_hex(b""),
                mode: 0o644,
            },
        );
        assert!(bad
            .sign(&signer)
            .unwrap_err()
            .to_string()
            .contains("support_bundle.manifest"));
        for version in ["", "v1", "1 2", &"9".repeat(65)] {
            let mut bad = release(&signer);
            bad.version = version.to_string();
            assert!(bad.sign(&signer).is_err(), "{version:?}");
        }
        let mut bad = release(&signer);
        bad.sequence = 0;
        assert!(bad
            .sign(&signer)
            .unwrap_err()
            .to_string()
            .contains("sequence"));
        assert!(SignedRelease::parse(b"not json").is_err());
    }
}
