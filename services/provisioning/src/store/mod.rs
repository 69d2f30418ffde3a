//! The provisioning service's SQL, one file per thing it keeps: our cloud accounts (tokens
//! sealed, `accounts.rs`), the machines inventory and adoptions (`machines.rs`), the hosts'
//! placement records (`hosts.rs`) and what the periodic watches keep (`watch.rs`). Rows are
//! read into the contract's words; an unknown word fails the read.

mod accounts;
pub mod hosts;
pub mod machines;
pub mod watch;

pub use accounts::*;
