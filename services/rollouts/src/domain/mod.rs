//! The rollouts service's rules, without I/O.

pub mod releases;
