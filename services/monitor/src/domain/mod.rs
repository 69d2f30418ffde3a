//! The monitor service's rules, without I/O: time, addresses and what a check saw are passed
//! in; nothing here reads a clock, a socket or the database.
//!
//! * `uptime.rs` — a node's check setting, what an answer means for each kind, the streak rule
//!   (down after two failures, up on the first success) and the schedule (MO-01, MO-02, MO-04).
//! * `pinning.rs` — whether a check goes straight to the node's own address or through the
//!   public name (MO-03).
//! * `certificates.rs` — reading a served certificate and the first of its five problems
//!   (MO-08..MO-10).
//!
//! Every number the spec leaves unvalued is a named constant in the file of its rule.

pub mod certificates;
pub mod pinning;
pub mod uptime;

/// A node, as the agent channel numbers it.
pub type NodeId = i64;

/// Input that breaks a rule: what was wrong, naming the field. Nothing is changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidInput {
    pub field: &'static str,
    pub reason: String,
}

impl InvalidInput {
    pub fn new(field: &'static str, reason: impl Into<String>) -> InvalidInput {
        InvalidInput {
            field,
            reason: reason.into(),
        }
    }
}
