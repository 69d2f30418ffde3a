//! The monitor service's rules, without I/O: time, addresses and what a check saw are passed
//! in; nothing here reads a clock, a socket or the database.
//!
//! * `uptime.rs` — a node's check setting, what an answer means for each kind, the streak rule
//!   (down after two failures, up on the first success) and the schedule (MO-01, MO-02, MO-04).
//! * `pinning.rs` — whether a check goes straight to the node's own address or through the
//!   public name (MO-03).
//! * `certificates.rs` — reading a served certificate and the first of its five problems
//!   (MO-08..MO-10).
//! * `conditions.rs` — the conditions it publishes for incidents: `plane:site_down` and
//!   `plane:cert_problem` (MO-04, MO-09).
//! * `cadence.rs` — which nodes a status pass asks for `check_status` and `host_report`, by the
//!   job table's cover rule (MO-05, MO-06).
//! * `health.rs` — a node's health dot from its latest `check_status` (MO-07).
//! * `edge.rs` — edge versus direct: what a stall is, each path's figures and the verdict
//!   (MO-11, MO-12).
//! * `security.rs` — the fleet security view's rows and colours (MO-16, MO-17).
//!
//! Every number the spec leaves unvalued is a named constant in the file of its rule.

pub mod cadence;
pub mod certificates;
pub mod conditions;
pub mod edge;
pub mod health;
pub mod pinning;
pub mod security;
pub mod uptime;

/// A node, as the agent channel numbers it.
pub use capstan_events::NodeId;

/// Input that breaks a rule (the contract's one type for it).
pub use capstan_events::rpc::InvalidInput;
