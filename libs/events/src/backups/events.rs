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
