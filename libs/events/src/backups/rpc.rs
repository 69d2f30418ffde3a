//! The questions asked of the backups service (`capstan.rpc.backups.*`): the operator's
//! (targets, from the gateway; each carries the [`Actor`], targets are level 10, BK-04) and the
//! broker's (`backup_urls`, asked by the agent channel for a node whose signed request it
//! verified, so it carries the node, not an operator).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Provider;
use crate::rpc::Actor;

/// The rpc names under `capstan.rpc.backups.`.
pub mod ops {
    pub const LIST_TARGETS: &str = "list_targets";
    pub const CREATE_TARGET: &str = "create_target";
    pub const SET_DEFAULT_TARGET: &str = "set_default_target";
    /// The broker: presigned URLs for a node's running backup job (the agent channel asks).
    pub const BACKUP_URLS: &str = "backup_urls";
}

/// `GET /api/v1/backups/targets` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListTargets {
    pub actor: Actor,
}

/// A target as the API shows it: never its credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TargetView {
    pub id: i64,
    pub name: String,
    pub provider: Provider,
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    pub folder: String,
    /// Whether new backups go here ("Where new backups go").
    pub is_default: bool,
    pub created_at: DateTime<Utc>,
}

/// `GET /api/v1/backups/targets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Targets {
    pub targets: Vec<TargetView>,
}

/// `POST /api/v1/backups/targets` (level 10, audited). The keys are sealed at rest and never
/// shown again; they are left out of this type's `Debug`.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateTarget {
    pub actor: Actor,
    pub name: String,
    /// One of [`Provider`]'s spellings.
    pub provider: String,
    /// `https://host[:port]` (plain `http://` only for a loopback address).
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    /// The prefix every object of this target is under; may be empty.
    pub folder: String,
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for CreateTarget {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CreateTarget")
            .field("actor", &self.actor)
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("bucket", &self.bucket)
            .field("folder", &self.folder)
            .field("access_key", &"<redacted>")
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// `POST /api/v1/backups/targets/{id}/default` (level 10, audited): new backups go there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetDefaultTarget {
    pub actor: Actor,
    pub target_id: i64,
}

/// rpc `backup_urls`: a node's request to the broker, after the agent channel verified its
/// signature and that `job_id` is this node's and running. The backups service checks the rest
/// (the word allows `op`, the keys are the job's own) and presigns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackupUrls {
    pub node_id: i64,
    pub job_id: i64,
    /// The job's word (`backup_run`, `verify_backup`, `restore_database`, `restore_project`).
    pub primitive: String,
    /// The job's params as the plane queued them.
    pub params: serde_json::Value,
    /// `put` or `get`, as the node sent it.
    pub op: String,
    /// `<seq>/<name>`, 1..=64 of them.
    pub keys: Vec<String>,
}

/// One presigned URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PresignedUrl {
    pub key: String,
    /// `PUT` or `GET`.
    pub method: String,
    pub url: String,
    /// Headers the request must carry (they are signed): `if-none-match: *` on a PUT where the
    /// target supports conditional writes.
    pub headers: BTreeMap<String, String>,
    pub expires_at: DateTime<Utc>,
}

/// The answer to [`BackupUrls`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackupUrlsAnswer {
    pub urls: Vec<PresignedUrl>,
}
