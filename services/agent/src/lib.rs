//! `capstan-agent`: the node agent. It joins a management node with an Ed25519 key (sending only
//! the public half), long-polls for jobs over signed HTTPS, and runs only the primitives
//! compiled into it, each checked against its declared shape and the node's own policy.
//!
//! Rooms: `domain/` (pure rules: policy, vocabulary and judgement, redaction, backoff, join
//! schedule, file trust), `state` (the state directory), `plane` (the wire), `join` and `run`
//! (the two conversations), `update` (self-update), `jobs` (one job's life), `words/` (the
//! primitives on Linux), `recipes/` (the loop that repairs the host on its own clock), `cli`.
#![forbid(unsafe_code)]

pub mod backups;
pub mod cli;
pub mod config;
pub mod domain;
pub mod jobs;
pub mod join;
pub mod plane;
pub mod recipes;
pub mod run;
pub mod script_trust;
pub mod site_release;
pub mod state;
pub mod update;
pub mod words;
