//! Each domain's folder: its operator JSON API (`api.rs`) and its pages together, the agent
//! channel's agent endpoints included. Each folder contributes its rows to the one route table
//! (`routes.rs`). A handler extracts and validates input, asks the owning service, and maps the
//! answer: no domain rule lives here.

pub mod agent_channel;
pub mod backups;
pub mod incidents;
pub mod monitor;
pub mod rollouts;
