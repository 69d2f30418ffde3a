//! The backups service's contract: the words shared by the service's domain and the gateway
//! (providers, the broker's operations), its public events, and the rpc questions the gateway
//! (operator API) and the agent channel (the broker, for a node's signed request) ask it.

mod events;
pub mod rpc;

pub use events::*;

use crate::conditions::ConditionKind;
use crate::incidents::Severity;
use crate::Domain;

/// `plane:backup_failed` (BK-21): the node's last backup run failed.
pub const BACKUP_FAILED: ConditionKind = ConditionKind {
    domain: Domain::Backups,
    name: "backup_failed",
    severity: Severity::Critical,
    title: "The last backup failed",
};
/// `plane:backups_stopped` (BK-21): backups are not happening.
pub const BACKUPS_STOPPED: ConditionKind = ConditionKind {
    domain: Domain::Backups,
    name: "backups_stopped",
    severity: Severity::Critical,
    title: "Backups are not happening",
};
/// `plane:backup_unverified` (BK-21): a backup was taken but is not proven whole.
pub const BACKUP_UNVERIFIED: ConditionKind = ConditionKind {
    domain: Domain::Backups,
    name: "backup_unverified",
    severity: Severity::Warning,
    title: "A backup is not proven whole",
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a target's objects live (BK-04): every provider speaks S3 with SigV4.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
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
pub enum Provider {
    Backblaze,
    AmazonS3,
    Linode,
    CloudflareR2,
    Wasabi,
    DigitaloceanSpaces,
    Hetzner,
    /// Any other S3-compatible service, at the endpoint given.
    GenericS3,
}

impl Provider {
    pub const ALL: [Provider; 8] = [
        Provider::Backblaze,
        Provider::AmazonS3,
        Provider::Linode,
        Provider::CloudflareR2,
        Provider::Wasabi,
        Provider::DigitaloceanSpaces,
        Provider::Hetzner,
        Provider::GenericS3,
    ];
}

/// What a node asks the broker for (`POST /api/v1/agent/backup_urls`, `op`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
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
pub enum UrlOp {
    /// Presigned PUTs, only for a running `backup_run`, only new keys under its own seq.
    Put,
    /// Presigned GETs, for a running `verify_backup`, `restore_*` or `backup_run`.
    Get,
}
