//! The provisioning service's SQL, one file per thing it keeps: our cloud accounts (tokens
//! sealed, `accounts.rs`), provisions and their steps (`provisions.rs`), the agent channel's
//! joins with auto-approval's verdicts (`joins.rs`), the machines inventory and adoptions
//! (`machines.rs`), the hosts' placement records (`hosts.rs`) and what the periodic watches keep
//! (`watch.rs`). Rows are read into the contract's words; an unknown word fails the read. The
//! node projection is the kit's (`capstan_store::nodes`).

mod accounts;
pub mod hosts;
mod joins;
pub mod machines;
mod provisions;
pub mod watch;

pub use accounts::*;
pub use joins::*;
pub use provisions::*;
