//! The provisioning service's SQL, one file per thing it keeps: our cloud accounts (tokens
//! sealed, `accounts.rs`). Rows are read into the contract's words; an unknown word fails the
//! read.

mod accounts;

pub use accounts::*;
