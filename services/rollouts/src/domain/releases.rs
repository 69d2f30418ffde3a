//! Publishing a release (issue 15; RO-03, RO-05): what an upload must be, and when it is
//! refused. The plane holds no signing key, so it cannot judge a signature; it checks that
//! the metadata is well formed and unexpired, that every artifact it names arrived with the
//! size and sha256 it names, and that the release reuses neither a version nor a sequence.
//! The agents verify the signatures against their own keys.

use capstan_events::rollouts::rpc::{AgentArtifactKind, Arch};
use capstan_events::Word as _;
use capstan_signing::{
    release::{sha256_hex, SignedRelease},
    statement::{self, agent_artifact, SUPPORT_BUNDLE_ARTIFACT},
};
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
    /// The release's `RELEASE_STATEMENT` for the public log, when uploaded with it, checked
    /// by [`check_statement`].
    pub statement: Option<Statement>,
}

/// A release statement as uploaded: its bytes (served to agents as they are) and their sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub bytes: Vec<u8>,
    pub sha256: String,
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
/// for its size and sha256, and the release statement when one came with it
/// ([`check_statement`]). Metadata already expired at `now` is refused: no agent would take it.
pub fn read_upload(
    metadata: &[u8],
    body: &[u8],
    statement: Option<&[u8]>,
    now: DateTime<Utc>,
) -> Result<Upload, Refusal> {
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
    let statement = statement
        .map(|bytes| check_statement(&document, bytes))
        .transpose()?;
    Ok(Upload {
        statement,
        metadata_sha256: sha256_hex(metadata),
        metadata: metadata.to_vec(),
        expires_at,
        document,
        parts,
    })
}

/// AG-27, RO-07: a statement uploaded with a release must be about it. The plane holds no
/// statement or log key, so it cannot verify the statement's signatures or its place in the
/// log (each agent does, before installing); it checks what the statement claims: the
/// document reads, it is for this release's version, and it records every artifact the
/// release carries (`agent/<arch>` for each binary, `support_bundle` for the bundle's archive)
/// with the sha256 the metadata names. A statement that does not is refused, naming why: an
/// agent holding log keys would refuse the release as `unlogged`.
pub fn check_statement(document: &SignedRelease, bytes: &[u8]) -> Result<Statement, Refusal> {
    let refuse = |why: String| Refusal::Invalid(format!("the release statement {why}"));
    let claimed =
        statement::claimed(bytes).map_err(|error| refuse(format!("cannot be read: {error}")))?;
    let release = &document.signed;
    if claimed.version != release.version {
        return Err(refuse(format!(
            "is for version {}, not {}",
            claimed.version, release.version
        )));
    }
    let mut carried: Vec<(String, &str)> = release
        .binaries
        .iter()
        .map(|(arch, artifact)| (agent_artifact(arch), artifact.sha256.as_str()))
        .collect();
    if let Some(bundle) = &release.support_bundle {
        carried.push((
            SUPPORT_BUNDLE_ARTIFACT.to_string(),
            bundle.archive.sha256.as_str(),
        ));
    }
    for (name, sha256) in carried {
        match claimed.artifacts.get(&name) {
            Some(recorded) if recorded == sha256 => {}
            Some(recorded) => {
                return Err(refuse(format!(
                    "records {name} with sha256 {recorded}, the metadata says {sha256}"
                )))
            }
            None => return Err(refuse(format!("does not record {name}"))),
        }
    }
    Ok(Statement {
        sha256: sha256_hex(bytes),
        bytes: bytes.to_vec(),
    })
}

/// A release already stored, as far as a publish needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub version: String,
    pub sequence: i64,
    pub metadata_sha256: String,
    /// The sha256 of its stored statement, if it has one.
    pub statement_sha256: Option<String>,
}

/// What a publish does against what is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Store,
    /// The very same metadata was published before: nothing to do (a retried upload).
    AlreadyPublished,
    /// The very same metadata, now with a statement other than the one stored (none, or an
    /// older proof): the statement is stored. A publish writes the binaries before the
    /// statement that records them (RO-07), so the statement may come second.
    Statement,
}

/// Refuses a reused version or sequence, and a sequence not higher than every published one;
/// the same metadata again is the same publish, which may bring the release's statement.
pub fn decide(upload: &Upload, published: &[Published]) -> Result<Decision, Refusal> {
    if let Some(same) = published
        .iter()
        .find(|release| release.version == upload.version())
    {
        if same.metadata_sha256 == upload.metadata_sha256 {
            return Ok(match &upload.statement {
                Some(statement) if same.statement_sha256.as_ref() != Some(&statement.sha256) => {
                    Decision::Statement
                }
                _ => Decision::AlreadyPublished,
            });
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
    /// The release statement for the public log (AG-27), likewise.
    Statement { version: Option<String> },
    /// A kind this plane keeps nothing for (a site release's files).
    NotKept(AgentArtifactKind),
}

/// An agent's request that cannot be answered as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAsk {
    #[error("a binary request names its arch")]
    NoArch,
}

/// Reads an agent's request (kind and arch already checked by the agent channel).
pub fn asked(
    kind: AgentArtifactKind,
    arch: Option<Arch>,
    version: Option<&str>,
) -> Result<Asked, BadAsk> {
    let version = version.map(str::to_string);
    match kind {
        AgentArtifactKind::Manifest => Ok(Asked::Manifest),
        AgentArtifactKind::Binary => match arch {
            Some(arch) => Ok(Asked::Binary {
                arch: arch.as_str().to_string(),
                version,
            }),
            None => Err(BadAsk::NoArch),
        },
        AgentArtifactKind::SupportBundle => Ok(Asked::SupportBundle { version }),
        AgentArtifactKind::ReleaseStatement => Ok(Asked::Statement { version }),
        AgentArtifactKind::ReleaseManifest
        | AgentArtifactKind::ReleaseFile
        | AgentArtifactKind::ReleaseArchive => Ok(Asked::NotKept(kind)),
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
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", None, now()).unwrap();
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
        let error = read_upload(&metadata, b"AMDARM64BUNDL", None, now()).unwrap_err();
        assert!(error.to_string().contains("bytes together"), "{error}");
        let error = read_upload(&metadata, b"AMDARM64BUNDLF", None, now())
            .unwrap_err()
            .to_string();
        assert!(error.contains("the support bundle has sha256"), "{error}");
        let error = read_upload(&metadata, b"AMXARM64BUNDLE", None, now())
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
        let error = read_upload(&metadata, b"AMDARM64BUNDLE", None, later).unwrap_err();
        assert!(error.to_string().contains("expired"), "{error}");
        assert!(read_upload(b"{}", b"", None, now()).is_err());
    }

    fn published(version: &str, sequence: i64, sha: &str) -> Published {
        Published {
            version: version.into(),
            sequence,
            metadata_sha256: sha.into(),
            statement_sha256: None,
        }
    }

    #[test]
    fn ro_05_publishing_the_same_metadata_again_changes_nothing() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", None, now()).unwrap();
        let stored = [published("1.3.0", 4, &upload.metadata_sha256)];
        assert_eq!(decide(&upload, &stored), Ok(Decision::AlreadyPublished));
        assert_eq!(decide(&upload, &[]), Ok(Decision::Store));
    }

    #[test]
    fn a_reused_version_or_sequence_or_a_lower_sequence_is_refused() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", None, now()).unwrap();
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

    /// The statement of `version` recording the artifacts of [`signed`]'s release, logged.
    fn statement_of(version: &str, artifacts: &[(&str, &[u8])]) -> Vec<u8> {
        let mut recorded = BTreeMap::new();
        for (name, bytes) in artifacts {
            recorded.insert(name.to_string(), sha256_hex(bytes));
        }
        let mut log = capstan_signing::statement::MemoryLog::new("log.example");
        log.publish(
            &capstan_signing::statement::Statement {
                version: version.into(),
                artifacts: recorded,
            },
            &NodeKey::from_secret_bytes(&[4; 32]).unwrap(),
            &NodeKey::from_secret_bytes(&[5; 32]).unwrap(),
        )
    }

    const CARRIED: &[(&str, &[u8])] = &[
        ("agent/linux-amd64", b"AMD"),
        ("agent/linux-arm64", b"ARM64"),
        ("support_bundle", b"BUNDLE"),
    ];

    #[test]
    fn ag_27_a_statement_recording_every_artifact_of_the_release_is_kept_with_it() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let statement = statement_of("1.3.0", CARRIED);
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", Some(&statement), now()).unwrap();
        let kept = upload.statement.unwrap();
        assert_eq!(kept.bytes, statement, "kept exactly as uploaded");
        assert_eq!(kept.sha256, sha256_hex(&statement));
    }

    #[test]
    fn ag_27_a_statement_for_another_version_or_missing_or_misrecording_an_artifact_is_refused() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let refused = |statement: Vec<u8>| {
            read_upload(&metadata, b"AMDARM64BUNDLE", Some(&statement), now())
                .unwrap_err()
                .to_string()
        };
        let error = refused(statement_of("1.3.1", CARRIED));
        assert!(error.contains("is for version 1.3.1, not 1.3.0"), "{error}");
        let error = refused(statement_of("1.3.0", &CARRIED[..2]));
        assert!(error.contains("does not record support_bundle"), "{error}");
        let error = refused(statement_of(
            "1.3.0",
            &[
                ("agent/linux-amd64", b"AMX"),
                ("agent/linux-arm64", b"ARM64"),
                ("support_bundle", b"BUNDLE"),
            ],
        ));
        assert!(
            error.contains("records agent/linux-amd64 with sha256"),
            "{error}"
        );
        let error = refused(b"{\"statement\": 1}".to_vec());
        assert!(error.contains("cannot be read"), "{error}");
    }

    #[test]
    fn ro_07_the_same_metadata_again_with_a_new_statement_stores_the_statement() {
        let metadata = signed("1.3.0", 4, b"AMD", b"ARM64", b"BUNDLE");
        let statement = statement_of("1.3.0", CARRIED);
        let upload = read_upload(&metadata, b"AMDARM64BUNDLE", Some(&statement), now()).unwrap();
        let mut stored = published("1.3.0", 4, &upload.metadata_sha256);
        assert_eq!(decide(&upload, &[stored.clone()]), Ok(Decision::Statement));
        stored.statement_sha256 = Some(sha256_hex(&statement));
        assert_eq!(
            decide(&upload, &[stored.clone()]),
            Ok(Decision::AlreadyPublished)
        );
        // Without a statement, the same metadata leaves the stored one alone.
        let bare = read_upload(&metadata, b"AMDARM64BUNDLE", None, now()).unwrap();
        assert_eq!(decide(&bare, &[stored]), Ok(Decision::AlreadyPublished));
    }

    #[test]
    fn an_agent_asks_by_kind_never_by_path() {
        assert_eq!(
            asked(AgentArtifactKind::ReleaseStatement, None, Some("1.3.0")),
            Ok(Asked::Statement {
                version: Some("1.3.0".into())
            })
        );
        assert_eq!(
            asked(AgentArtifactKind::Manifest, None, None),
            Ok(Asked::Manifest)
        );
        assert_eq!(
            asked(
                AgentArtifactKind::Binary,
                Some(Arch::LinuxArm64),
                Some("1.3.0")
            ),
            Ok(Asked::Binary {
                arch: "linux-arm64".into(),
                version: Some("1.3.0".into())
            })
        );
        assert!(asked(AgentArtifactKind::Binary, None, None).is_err());
        assert_eq!(
            asked(AgentArtifactKind::ReleaseFile, None, None),
            Ok(Asked::NotKept(AgentArtifactKind::ReleaseFile))
        );
    }
}
