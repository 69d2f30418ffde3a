//! The operator JSON API of each domain after the agent channel, one file per domain; each
//! contributes its rows to the one route table (`routes.rs`) and its handlers here. A handler
//! extracts and validates input, asks the owning service with [`crate::ask::ask_of`], and maps
//! the answer: no domain rule lives here.

pub mod backups;
pub mod incidents;
pub mod monitor;
pub mod releases;
pub mod rollouts;
