//! The rollouts service's rules, without I/O.

pub mod engine;
pub mod input;
pub mod plan;
pub mod releases;
pub mod site_releases;
pub mod verdict;
