//! Publishing a release (issue 15; RO-03, RO-05): what an upload must be, and when it is
//! refused. The plane holds no signing key, so it cannot judge a signature; it checks that
//! the metadata is well formed and unexpired, that every artifact it names arrived with the
//! size and sha256 it names, and that the release reuses neither a version nor a sequence.
//! The agents verify the signatures against their own keys.

use capstan_signing::release::{sha256_hex, SignedRelease};
use chrono::{DateTime, TimeZone as _, Utc};

/// Why an upload is refused, in words for the person publishing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Invalid(String),
    #[error("version {version} is already published (sequence {sequence}); a release's version is used once")]
    VersionTaken { version: String, sequence: i64 },
    #[error("sequence {sequence} is already published (version {version}); a release's sequence is used once")]
    SequenceTaken { version: String, sequence: i64 },
    #[error("sequence {sequence} is not higher than {highest}, the highest published: a sequence only grows (a downgrade is a new, higher sequence naming the older binary)")]
    SequenceNotHigher { sequence: i64, highest: i64 },
}

/// The kind of a stored artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactKind {
    Binary,
    SupportBundle,
}

impl ArtifactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Binary => "binary",
            ArtifactKind::SupportBundle => "support_bundle",
        }
    }
}

/// One artifact of an upload, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub kind: ArtifactKind,
    /// The architecture of a binary; empty for the support bundle.
    pub arch: String,
    pub sha256: String,
    pub bytes: Vec<u8>,
}

/// An upload that passed every check that needs no stored release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub document: SignedRelease,
    pub metadata: Vec<u8>,
    pub metadata_sha256: String,
    pub expires_at: DateTime<Utc>,
    pub parts: Vec<Part>,
}

impl Upload {
    pub fn version(&self) -> &str {
        &self.document.signed.version
    }

    pub fn sequence(&self) -> i64 {
        self.document.signed.sequence as i64
    }
}

/// Reads an upload: the metadata document and the artifacts it names, concatenated in its
/// order (the binaries by architecture, then the support bundle's archive), each checked
/// for its size and sha256. Metadata already expired at `now` is refused: no agent would
/// take it.
pub fn read_upload(metadata: &[u8], body: &[u8], now: DateTime<Utc>) -> Result<Upload, Refusal> {
    let document =
        SignedRelease::parse(metadata).map_err(|error| Refusal::Invalid(error.to_string()))?;
    let release = &document.signed;
    let expires_at = Utc
        .timestamp_opt(release.expires_at, 0)
        .single()
        .ok_or_else(|| Refusal::Invalid("expires_at is not a time".into()))?;
    if expires_at <= now {
        return Err(Refusal::Invalid(format!(
            "the metadata expired at {}; sign it again with a later expiry",
            expires_at.to_rfc3339()
        )));
    }
    let mut named: Vec<(ArtifactKind, String, &capstan_signing::release::Artifact)> = release
        .binaries
        .iter()
        .map(|(arch, artifact)| (ArtifactKind::Binary, arch.clone(), artifact))
        .collect();
    if let Some(bundle) = &release.support_bundle {
        named.push((ArtifactKind::SupportBundle, String::new(), &bundle.archive));
    }
    let expected: u64 = named.iter().map(|(_, _, artifact)| artifact.size).sum();
    if body.len() as u64 != expected {
        return Err(Refusal::Invalid(format!(
            "the artifacts are {} bytes together; the metadata names {expected}",
            body.len()
        )));
    }
    let mut parts = Vec::with_capacity(named.len());
    let mut offset = 0usize;
    for (kind, arch, artifact) in named {
        let end = offset + artifact.size as usize;
        let bytes = &body[offset..end];
        offset = end;
        let what = match kind {
            ArtifactKind::Binary => format!("the {arch} binary"),
            ArtifactKind::SupportBundle => "the support bundle".to_string(),
        };
        let sha256 = sha256_hex(bytes);
        if sha256 != artifact.sha256 {
            return Err(Refusal::Invalid(format!(
                "{what} has sha256 {sha256}, the metadata says {}",
                artifact.sha256
            )));
        }
        parts.push(Part {
            kind,
            arch,
            sha256,
            bytes: bytes.to_vec(),
        });
    }
    Ok(Upload {
        metadata_sha256: sha256_hex(metadata),
        metadata: metadata.to_vec(),
        expires_at,
        document,
        parts,
    })
}

/// A release already stored, as far as a publish needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub version: String,
    pub sequence: i64,
    pub metadata_sha256: String,
}

/// What a publish does against what is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Store,
    /// The very same metadata was published before: nothing to do (a retried upload).
    AlreadyPublished,
}

/// Refuses a reused version or sequence, and a sequence not higher than every published one;
/// the same metadata again is the same publish.
pub fn decide(upload: &Upload, published: &[Published]) -> Result<Decision, Refusal> {
    if let Some(same) = published
        .iter()
        .find(|release| release.version == upload.version())
    {
        if same.metadata_sha256 == upload.metadata_sha256 {
            return Ok(Decision::AlreadyPublished);
        }
        return Err(Refusal::VersionTaken {
            version: same.version.clone(),
            sequence: same.sequence,
        });
    }
    if let Some(same) = published
        .iter()
        .find(|release| release.sequence == upload.sequence())
    {
        return Err(Refusal::SequenceTaken {
            version: same.version.clone(),
            sequence: same.sequence,
        });
    }
    if let Some(highest) = published.iter().map(|release| release.sequence).max() {
        if upload.sequence() < highest {
            return Err(Refusal::SequenceNotHigher {
                sequence: upload.sequence(),
                highest,
            });
        }
    }
    Ok(Decision::Store)
}

/// The artifact kinds an agent may ask for (PROTOCOL.md "artifact") that this plane serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// The release on offer's metadata.
    Manifest,
    /// A binary: of `version`, or of the release on offer.
    Binary {
        arch: String,
        version: Option<String>,
    },
    /// The support bundle's archive, likewise.
    SupportBundle { version: Option<String> },
    /// A kind this plane keeps nothing for (a site release's files).
    NotKept(String),
}

/// Reads an agent's request (kind and arch already checked by the agent channel).
pub fn asked(kind: &str, arch: Option<&str>, version: Option<&str>) -> Result<Asked, String> {
    let version = version.map(str::to_string);
    match kind {
        "manifest" => Ok(Asked::Manifest),
        "binary" => match arch {
            Some(arch) => Ok(Asked::Binary {
                arch: arch.to_string(),
                version,
            }),
            None => Err("a binary request names its arch".into()),
        },
        "support_bundle" => Ok(Asked::SupportBundle { version }),
        other => Ok(Asked::NotKept(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_signing::{
        release::{Artifact, Release, SupportBundle},
        NodeKey,
    };
    use std::collections::BTreeMap;

    fn key() -> NodeKey {
        NodeKey::from_secret_bytes(&[3; 32]).unwrap()
    }

    fn now() -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).unwrap()
    }

    fn signed(version: &str, sequence: u64, amd64: &[u8], arm64: &[u8], bundle: &[u8]) -> Vec<u8> {
        let key = key();
        let mut binaries = BTreeMap::new();
        binaries.insert(
            "linux-arm64".into(),
            Artifact::describe("a-arm64", arm64, &key),
        );
        binaries.insert(
            "linux-amd64".into(),
            Artifact::describe("a-amd64", amd64, &key),
        );
        let manifest =
            capstan_signing::manifest::FileManifest::describe([("x.sh", 0o755, &b"x"[..])])
                .unwrap();
        Release {
            version: version.into(),
            sequence,
            expires_at: 1_800_000_600,
            binaries,
            support_bundle: Some(SupportBundle {
                archive: Artifact::describe("bundle.tar", bundle, &key),
                manifest,
            }),
            next_key: None,
        }
        .sign(&key)
        .unwrap()
        .to_bytes()
    }

    #[test]
    fn an_upload_is_split_by_the_sizes_the_metadata_names_in_its_order() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", now()).unwrap();
        let parts: Vec<(&str, &str, &[u8])> = upload
            .parts
            .iter()
            .map(|part| {
                (
                    part.kind.as_str(),
                    part.arch.as_str(),
                    part.bytes.as_slice(),
                )
            })
            .collect();
        assert_eq!(
            parts,
            [
                ("binary", "linux-amd64", &b"AMD"[..]),
                ("binary", "linux-arm64", &b"ARM64"[..]),
                ("support_bundle", "", &b"BUNDLE"[..]),
            ]
        );
        assert_eq!(upload.version(), "1.3.0");
        assert_eq!(upload.sequence(), 4);
    }

    #[test]
    fn artifacts_that_are_not_what_the_metadata_names_are_refused_naming_which() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let error = read_upload(&metadata, b"AMDARM64BUNDL", now()).unwrap_err();
        assert!(error.to_string().contains("bytes together"), "{error}");
        let error = read_upload(&metadata, b"AMDARM64BUNDLF", now())
            .unwrap_err()
            .to_string();
        assert!(error.contains("the support bundle has sha256"), "{error}");
        let error = read_upload(&metadata, b"AMXARM64BUNDLE", now())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("the linux-amd64 binary has sha256"),
            "{error}"
        );
    }

    #[test]
    fn metadata_already_expired_or_malformed_is_refused() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let later = Utc.timestamp_opt(1_800_000_600, 0).unwrap();
        let error = read_upload(&metadata, b"AMDARM64BUNDLE", later).unwrap_err();
        assert!(error.to_string().contains("expired"), "{error}");
        assert!(read_upload(b"{}", b"", now()).is_err());
    }

    fn published(version: &str, sequence: i64, sha: &str) -> Published {
        Published {
            version: version.into(),
            sequence,
            metadata_sha256: sha.into(),
        }
    }

    #[test]
    fn ro_05_publishing_the_same_metadata_again_changes_nothing() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", now()).unwrap();
        let stored = [published("1.3.0", 4, &upload.metadata_sha256)];
        assert_eq!(decide(&upload, &stored), Ok(Decision::AlreadyPublished));
        assert_eq!(decide(&upload, &[]), Ok(Decision::Store));
    }

    #[test]
    fn a_reused_version_or_sequence_or_a_lower_sequence_is_refused() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", now()).unwrap();
        assert!(matches!(
            decide(&upload, &[published("1.3.0", 3, "other")]),
            Err(Refusal::VersionTaken { .. })
        ));
        assert!(matches!(
            decide(&upload, &[published("1.2.0", 4, "other")]),
            Err(Refusal::SequenceTaken { .. })
        ));
        let error = decide(&upload, &[published("1.4.0", 9, "other")]).unwrap_err();
        assert!(matches!(
            error,
            Refusal::SequenceNotHigher { highest: 9, .. }
        ));
        assert!(error.to_string().contains("only grows"));
        assert_eq!(
            decide(&upload, &[published("1.2.0", 3, "other")]),
            Ok(Decision::Store)
        );
    }

    #[test]
    fn an_agent_asks_by_kind_never_by_path() {
        assert_eq!(asked("manifest", None, None), Ok(Asked::Manifest));
        assert_eq!(
            asked("binary", Some("linux-arm64"), Some("1.3.0")),
            Ok(Asked::Binary {
                arch: "linux-arm64".into(),
                version: Some("1.3.0".into())
            })
        );
        assert!(asked("binary", None, None).is_err());
        assert_eq!(
            asked("release_file", None, None),
            Ok(Asked::NotKept("release_file".into()))
        );
    }
}
