//! When a periodic watch is due (one run per interval across replicas and restarts, kept in
//! `task_runs`), and the plane's own node those about the plane itself are raised on.

use std::time::Duration;

use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};

use crate::store::{machines, watch};

/// How often a task looks whether it is due.
pub const LOOK_EVERY: Duration = Duration::from_secs(300);

/// Whether `task` is due at `now`: it never ran, or ran `every` ago or longer.
pub async fn due(
    connection: &mut PgConnection,
    task: &str,
    every: chrono::Duration,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    Ok(watch::last_run(connection, task)
        .await?
        .is_none_or(|ran| now - ran >= every))
}

/// The plane's own node, by the `provisioning.plane_node` setting.
pub async fn plane_node(
    connection: &mut PgConnection,
    name: Option<&str>,
) -> Result<Option<NodeId>, StoreError> {
    match name {
        None => Ok(None),
        Some(name) => machines::node_named(connection, name.trim()).await,
    }
}
