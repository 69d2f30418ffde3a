//! Each domain's folder: its operator JSON API (`api.rs`) and its pages together, the agent
//! channel's agent endpoints included. Each folder contributes its rows to the one route table
//! (`routes.rs`). A handler extracts and validates input, asks the owning service, and maps the
//! answer: no domain rule lives here.

pub mod agent_channel;
pub mod backups;
pub mod incidents;
pub mod machines;
pub mod monitor;
pub mod rollouts;

use crate::{route::Route, ui::header_parts::HeaderPart};

/// Every domain's rows of the route table (`routes.rs` adds the gateway's own).
pub fn routes() -> Vec<Route> {
    [
        agent_channel::routes(),
        incidents::routes(),
        monitor::routes(),
        rollouts::routes(),
        backups::routes(),
        machines::routes(),
    ]
    .concat()
}

/// The parts of every page's header, in the order they are drawn (`ui/header.rs`).
pub const HEADER_PARTS: &[HeaderPart] = &[incidents::HEADER_PART];
