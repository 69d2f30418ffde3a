//! Periodic work, one replica per run: each task looks every [`due::LOOK_EVERY`] whether its
//! interval has passed since it last ran to its end (`task_runs`), under a transaction-scoped
//! advisory lock, so a daily task runs once a day however many replicas there are and
//! whenever they were started. The daily transfer watch (`transfer.rs`) and the hourly
//! test-cloud cleanup (`cleanup.rs`, PV-55); when each is due and the plane's own node (`due.rs`).
//! Beside them, the provisions' own running work (`provisions.rs`): the workflow over the
//! provisions in flight and the auto-approval pass.
//!
//! The plane's own node: where a condition about the plane itself is raised
//! (`plane:test_cloud_cleanup`). The plane has no node of its own by nature; the setting
//! `provisioning.plane_node` names one (the node whose agent runs on the plane's machine, by its
//! node name), looked up in this service's node projection ([`due::plane_node`]). Incidents keeps
//! incidents only on nodes it knows, so with the setting unset, or naming a node not heard of,
//! the condition is recorded here and logged as a warning, and not published.

pub mod cleanup;
pub mod due;
pub mod provisions;
pub mod transfer;
