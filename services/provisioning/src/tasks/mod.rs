//! Periodic work, one replica per run: each task looks every [`LOOK_EVERY`] whether its
//! interval has passed since it last ran to its end (`task_runs`), under a transaction-scoped
//! advisory lock, so a daily task runs once a day however many replicas there are and
//! whenever they were started. The daily transfer watch (`transfer.rs`) and the hourly
//! test-cloud cleanup (`cleanup.rs`, PV-55).
//!
//! The plane's own node: where a condition about the plane itself is raised
//! (`plane:test_cloud_cleanup`). The plane has no node of its own by nature; the setting
//! `provisioning.plane_node` names one (the node whose agent runs on the plane's machine, by its
//! node name), looked up in this service's node projection ([`plane_node`]). Incidents keeps
//! incidents only on nodes it knows, so with the setting unset, or naming a node not heard of,
//! the condition is recorded here and logged as a warning, and not published.

pub mod cleanup;
pub mod transfer;

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
