//! The rollouts service's rules, without I/O.

pub mod engine;
pub mod plan;
pub mod releases;
pub mod site_releases;
pub mod verdict;
