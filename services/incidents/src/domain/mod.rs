//! The incidents service's rules, without I/O: time is passed in, nothing here reads a clock,
//! a database or the bus. What lives where:
//!
//! * `record.rs` — an incident's two answers (the source's status, a person's triage), its
//!   severity, and what is derived on read: the five views and "needs you" (IN-01, IN-02, IN-07).
//! * `timeline.rs` — the entries a change writes (IN-09); never one per tick.
//! * `triage.rs` — a person's acts: the `do` values, snooze choices, notes (IN-06, IN-18, IN-19).
//! * `sources.rs` — `agent:<recipe>` and `plane:<name>`, the registry of this plane's own
//!   detector `plane:agent_silent`, a node's facts, install states and alerts setting (IN-12,
//!   IN-13, IN-15). Other services' conditions (`plane:site_down`, `plane:backup_failed`...)
//!   are judged by those services and arrive as conditions (`capstan_events::conditions`).
//! * `reconcile/` — the pass as a function: held incidents and the conditions that hold now in,
//!   effects out (open, refresh, clear, settle, reopen, unproven; IN-03..IN-07, IN-14).
//! * `cases/` — intake of an agent's cases from the claim's `cases` field (AC-46, AC-47), and
//!   in `cases/incidents.rs` what each intake outcome does to the node's incidents (IN-11).
//! * `signals.rs` — who is told: exactly one signal per opening, reopening or unproven fix, and
//!   why one is held back (alerts off, a silence, grouped under the host; IN-14, IN-15).
//! * `grouping.rs` — a Docker host and its containers, and silences (maintenance windows).
//! * `header.rs` — the header line's counts and colour (IN-16).
//! * `webhooks.rs` — Standard Webhooks signing and the bodies sent.
//! * `delivery.rs` — the retry schedule of a signal's delivery, given up after a day.
//!
//! Every number the spec leaves unvalued is a named constant in the file of its rule.

pub mod cases;
pub mod delivery;
pub mod grouping;
pub mod header;
pub mod mail;
pub mod reconcile;
pub mod record;
pub mod signals;
pub mod sources;
pub mod timeline;
pub mod triage;
pub mod webhooks;

/// A node, as the agent channel numbers it.
pub use capstan_events::NodeId;
/// An incident, as this service numbers it.
pub type IncidentId = i64;

/// Input that breaks a rule (the contract's one type for it).
pub use capstan_events::rpc::InvalidInput;
