//! The questions rollouts answers (`capstan.rpc.rollouts.*`): the gateway publishes and lists
//! releases for operators (each carrying the [`Actor`]); the agent channel asks for an
//! artifact an authenticated agent requested (PROTOCOL.md "artifact"), by kind, never by path.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rpc::Actor;

// The rpcs under `capstan.rpc.rollouts.`: each op's name, request and answer, declared once.
crate::rpc! { crate::Domain::Rollouts;
    // With a body: the artifacts the metadata names.
    "publish_release" [body]: PublishRelease => ReleaseView,
    "list_releases": ListReleases => Releases,
    // The agent channel's question; answered with a body (the bytes) or the metadata.
    "artifact" [body]: ArtifactRequest => ArtifactFound,
    // With a body: the site release's archive (issue 16).
    "publish_site_release" [body]: PublishSiteRelease => SiteReleaseView,
    "list_site_releases": ListSiteReleases => SiteReleases,
}

/// `POST /api/v1/releases` (level 10). The body beside it holds the artifacts the metadata
/// names, one after another: the binaries in architecture order (`linux-amd64`, then
/// `linux-arm64`), then the support bundle's archive, each exactly as long as its `size`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PublishRelease {
    pub actor: Actor,
    /// The signed metadata document, as `capstan release sign` wrote it.
    pub metadata: String,
    /// The release's `RELEASE_STATEMENT` for the public log (AG-27), when there is one yet.
    #[serde(default)]
    pub statement: Option<String>,
}

/// A release as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReleaseView {
    pub version: String,
    pub sequence: i64,
    pub expires_at: DateTime<Utc>,
    pub arches: Vec<String>,
    pub has_support_bundle: bool,
    /// Whether its release statement for the public log is stored (served to agents as
    /// artifact kind `release_statement`).
    #[serde(default)]
    pub has_statement: bool,
    /// The key this release vouches for as the next signer, if any.
    pub next_key: Option<String>,
    /// Fingerprints of the keys that signed the metadata.
    pub signed_by: Vec<String>,
    pub published_at: DateTime<Utc>,
    pub published_by: String,
    /// Whether this is the release agents are offered (the highest sequence).
    pub on_offer: bool,
}

/// `GET /api/v1/releases` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListReleases {
    pub actor: Actor,
}

/// Every release, highest sequence first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Releases {
    pub releases: Vec<ReleaseView>,
}

/// What an agent's `artifact` request asks for (docs/agent-protocol.md "artifact"): a kind,
/// never a path.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AgentArtifactKind {
    /// The release on offer's metadata.
    Manifest,
    Binary,
    SupportBundle,
    /// A site release's manifest, one of its files, or its whole archive (issue 16).
    ReleaseManifest,
    ReleaseFile,
    ReleaseArchive,
    /// A release's RELEASE_STATEMENT for the public log (AG-27).
    ReleaseStatement,
}

impl AgentArtifactKind {
    pub const ALL: [AgentArtifactKind; 7] = [
        AgentArtifactKind::Manifest,
        AgentArtifactKind::Binary,
        AgentArtifactKind::SupportBundle,
        AgentArtifactKind::ReleaseManifest,
        AgentArtifactKind::ReleaseFile,
        AgentArtifactKind::ReleaseArchive,
        AgentArtifactKind::ReleaseStatement,
    ];
}

/// The machines a binary is built for (docs/agent-protocol.md "artifact").
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Arch {
    LinuxAmd64,
    LinuxArm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::LinuxAmd64, Arch::LinuxArm64];
}

/// An agent's `artifact` request, already authenticated by the agent channel, which read
/// `kind` and `arch` from the agent's body (`400 bad_kind`, `400 bad_arch` otherwise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactRequest {
    pub kind: AgentArtifactKind,
    #[serde(default)]
    pub arch: Option<Arch>,
    #[serde(default)]
    pub version: Option<String>,
    /// `release_file`: the file's SHA-256 (lowercase hex).
    #[serde(default)]
    pub sha256: Option<String>,
}

/// The answer's JSON half: for `manifest`, the metadata document; for the others, nothing
/// (the bytes travel beside it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactFound {
    pub metadata: Option<serde_json::Value>,
}

/// `POST /api/v1/site-releases` (level 10). The body beside it is the release's archive,
/// exactly the tar `capstan release site` built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PublishSiteRelease {
    pub actor: Actor,
    pub version: String,
    /// The manifest file (`RELEASE_MANIFEST`), exactly as signed.
    pub manifest: String,
    /// Its signature file (`RELEASE_MANIFEST.sig`).
    pub signatures: String,
    /// RO-23: start the deploy to every node once published.
    #[serde(default)]
    pub deploy_all: bool,
}

/// A site release as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SiteReleaseView {
    pub version: String,
    /// Lowercase hex SHA-256 of the archive.
    pub archive_sha256: String,
    pub archive_bytes: i64,
    pub files: i32,
    /// Fingerprints of the keys that signed the manifest.
    pub signed_by: Vec<String>,
    pub published_at: DateTime<Utc>,
    pub published_by: String,
    pub deploy_all: bool,
    /// `started` or `refused` once decided; none while it waits (RO-16) or was not asked.
    pub deploy_all_outcome: Option<String>,
    pub deploy_all_rollout: Option<i64>,
    pub deploy_all_reason: Option<String>,
}

/// `GET /api/v1/site-releases` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListSiteReleases {
    pub actor: Actor,
}

/// Every site release, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SiteReleases {
    pub releases: Vec<SiteReleaseView>,
}
