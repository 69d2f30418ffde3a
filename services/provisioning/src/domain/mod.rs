//! The provisioning service's rules, without I/O: time is passed in, nothing here reads a
//! clock, a database, a provider or the bus. What lives where:
//!
//! * `accounts.rs` — a cloud account as an operator adds it (PV-12, PV-58).
//! * `request.rs` — an operator's ask for a server, checked field by field (PV-03).
//! * `bootstrap.rs` — the SSH bootstrap's files, its one fixed command, the key line it prints
//!   and the masking of its output (PV-05, PV-06, AC-10).
//! * `install.rs` — a node's install state and whether it is operational (PV-01); a
//!   provision's steps and their transitions, `install_failed` with its reason and Retry (PV-02).
//! * `offer.rs` — a size not sold in the region is refused before anything is made, naming the
//!   ones that are (PV-23, issue 29).
//! * `approval.rs` — the auto-approval verdict over a join, the provisions, the provider's
//!   report and the nodes (AC-08..AC-13), and the second-join alarm (AC-11).
//! * `cleanup.rs` — what the test-cloud cleanup may delete (PV-55).
//! * `machines.rs` — adopting a cloud server for a node (PV-52), the inventory (PV-53) and its
//!   colours (PV-54).
//! * `placement.rs` — placement records, host delete and host-scope routing (PV-14..PV-17).
//! * `transfer.rs` — the daily transfer watch: an instance of ours that left its account or
//!   changed address (`plane:machine_transfer`).
//!
//! Every number the spec leaves unvalued is a named constant in the file of its rule.

pub mod accounts;
pub mod approval;
pub mod bootstrap;
pub mod cleanup;
pub mod install;
pub mod machines;
pub mod offer;
pub mod placement;
pub mod request;
pub mod transfer;

pub use capstan_events::NodeId;
