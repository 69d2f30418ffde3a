//! The agent channel's pages: the dashboard, the node list, the joins and the bind listing,
//! the node page (with its recipes tab) and the job page.

pub mod dashboard;
pub mod jobs;
pub mod listing;
pub mod nodes;
mod recipes;
