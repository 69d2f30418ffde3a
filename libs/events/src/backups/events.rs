//! What the backups service tells the world.

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Provider;
use crate::Domain;

/// A backup target was added, or became where new backups go. Its credentials are never in
/// an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TargetChanged {
    pub target_id: i64,
    pub name: String,
    pub provider: Provider,
    /// Whether new backups go to it now.
    pub is_default: bool,
    pub changed_by: String,
    pub changed_at: DateTime<Utc>,
}
crate::message!(Domain::Backups, Event, TargetChanged, "target_changed");

/// A `backup_run` ended: it landed (`ok`, with its manifest's facts, the signature checked
/// against the node's key) or it did not (`reason`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunFinished {
    pub node_id: NodeId,
    pub job_id: i64,
    /// The seq the plane asked for.
    pub seq: i64,
    /// `full` or `incremental`, as the manifest says (`None` when it did not land).
    pub kind: Option<super::rpc::RunKind>,
    pub ok: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: DateTime<Utc>,
    /// The stored bytes of its artifacts.
    pub bytes: Option<i64>,
    /// Why it did not land: the node's words, or why its manifest was not trusted.
    pub reason: Option<String>,
    /// `service/backups` for the schedule, or the operator who asked.
    pub requested_by: String,
}
crate::message!(Domain::Backups, Event, RunFinished, "run_finished");

/// A `verify_backup` ended (BK-19): passed or not, at which level, of which run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Verified {
    pub node_id: NodeId,
    pub job_id: i64,
    pub seq: i64,
    pub level: u8,
    pub ok: bool,
    pub finished_at: DateTime<Utc>,
    /// What was wrong, in the node's words, or why the job did not run.
    pub problems: Vec<String>,
    pub requested_by: String,
}
crate::message!(Domain::Backups, Event, Verified, "verified");

/// Retention deleted runs of a node from a space (BK-11..BK-13).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Pruned {
    pub node_id: NodeId,
    pub space_id: i64,
    /// The runs deleted, whole chains.
    pub seqs: Vec<i64>,
    pub pruned_at: DateTime<Utc>,
}
crate::message!(Domain::Backups, Event, Pruned, "pruned");
/// One of a node's backup judgements (BK-21): why, in the plane's words, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Judgement {
    pub reason: String,
    pub since: DateTime<Utc>,
}

/// A node's three backup judgements (BK-21), each `None` while it does not hold:
/// `failed` (`plane:backup_failed`, critical), `stopped` (`plane:backups_stopped`, critical)
/// and `unverified` (`plane:backup_unverified`, a warning).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct BackupHealth {
    pub failed: Option<Judgement>,
    pub stopped: Option<Judgement>,
    pub unverified: Option<Judgement>,
}

/// A node's backup health changed (BK-21): the whole judgement each time, sent in the
/// transaction that stored it, with a condition (`capstan.conditions.backups.*`) for each of
/// the three judgements that changed, which incidents turns into `plane:backup_*` incidents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HealthChanged {
    pub node_id: NodeId,
    #[serde(flatten)]
    pub health: BackupHealth,
    pub judged_at: DateTime<Utc>,
}
crate::message!(Domain::Backups, Event, HealthChanged, "health_changed");
