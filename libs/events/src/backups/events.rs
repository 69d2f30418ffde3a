//! What the backups service tells the world.

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
/// transaction that stored it. The incidents service's `plane:backup_*` sources are fed by it;
/// one older (by `judged_at`) than the newest applied changes nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HealthChanged {
    pub node_id: i64,
    #[serde(flatten)]
    pub health: BackupHealth,
    pub judged_at: DateTime<Utc>,
}
crate::message!(Domain::Backups, Event, HealthChanged, "health_changed");
