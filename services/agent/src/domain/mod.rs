//! The agent's rules, without I/O: which jobs it runs (vocabulary and policy), what leaves the
//! node (redaction, output caps), how it waits (backoff, join schedule), and which files it
//! trusts. Every constant the spec leaves unvalued is named here.

/// Declares a named refusal of outside input: the person-facing sentence saying what was wrong
/// with a file, a parameter or a setting, kept whole because it is the message (it goes on the
/// wire or to the operator as it is), but a type of its own so a caller sees which input was
/// refused.
macro_rules! refusal {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        #[error("{0}")]
        pub struct $name(pub String);

        impl From<String> for $name {
            fn from(message: String) -> $name {
                $name(message)
            }
        }

        impl From<&str> for $name {
            fn from(message: &str) -> $name {
                $name(message.to_string())
            }
        }

        /// The message, read as text.
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }
    };
}
pub(crate) use refusal;

pub mod backoff;
pub mod backup;
pub mod certificates;
pub mod confinement;
pub mod join;
pub mod nginx;
pub mod output;
pub mod packages;
pub mod patching;
pub mod policy;
pub mod public_log;
pub mod recipes;
pub mod redact;
pub mod release_files;
pub mod script_trust;
pub mod site;
pub mod site_release;
pub mod trust;
pub mod update;
pub mod vocabulary;

use std::time::Duration;

/// The version this binary reports in every claim and join and answers `--version` with: the
/// crate's, unless `CAPSTAN_AGENT_VERSION` was set when it was built (a release build, or a
/// test's second build).
pub const AGENT_VERSION: &str = match option_env!("CAPSTAN_AGENT_VERSION") {
    Some(version) => version,
    None => env!("CARGO_PKG_VERSION"),
};
/// The most a claim answer may hold, as reported in `claim_bytes` (AG-16, AG-19: 1 MiB).
pub const CLAIM_BYTES: usize = 1024 * 1024;
/// The most an ordinary plane answer is read to (AG-19: 64 KiB).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The longest long poll a claim asks for (PROTOCOL.md allows 0..30; this leaves room under
/// proxies that cut idle requests at 30 seconds).
pub const CLAIM_WAIT_SECONDS: u64 = 25;
/// The shortest: each claim waits between this and [`CLAIM_WAIT_SECONDS`] (see [`claim_wait`]).
pub const CLAIM_WAIT_SHORTEST: u64 = 20;

/// The `wait` of one claim, from `jitter` in `0.0..=1.0` (the caller's randomness): between 20
/// and 25 seconds. A fleet that came back at the same moment (a plane restart) would otherwise
/// renew every long poll in the same second, every 25 seconds, for as long as it runs; with a
/// few seconds of jitter the renewals spread out within a few rounds.
pub fn claim_wait(jitter: f64) -> u64 {
    let spread = (CLAIM_WAIT_SECONDS - CLAIM_WAIT_SHORTEST) as f64;
    CLAIM_WAIT_SHORTEST + (jitter.clamp(0.0, 1.0) * spread).round() as u64
}
/// The most a result's `output` carries (PROTOCOL.md "result": at most 1 MiB).
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// How long `join` waits for an operator's answer unless `--no-wait` (AG-06: five minutes).
pub const JOIN_WAIT: Duration = Duration::from_secs(5 * 60);
/// How often a rejected key asks again (AG-11: every five minutes).
pub const REJECTED_REASK: Duration = Duration::from_secs(5 * 60);
/// A pending join expires an hour after it was lodged or renewed; the agent renews it well
/// before that ("the agent renews its own while it waits").
pub const JOIN_RENEW_AFTER: Duration = Duration::from_secs(45 * 60);
/// How often a pending join asks `join_status` (the plane counts these against the address,
/// 120 a minute, so this stays far below).
pub const JOIN_STATUS_EVERY: Duration = Duration::from_secs(3);
/// How often a job waiting for the node's approval asks the plane whether it is still wanted
/// (AG-23: every 30 seconds).
pub const APPROVAL_CHECK_EVERY: Duration = Duration::from_secs(30);
/// How often the running agent looks at its state directory (identity, leave, switches): a
/// `leave` is noticed "within seconds" (AG-08).
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_waits_between_twenty_and_twenty_five_seconds_spread_by_jitter() {
        assert_eq!(claim_wait(0.0), 20);
        assert_eq!(claim_wait(1.0), 25);
        assert_eq!(claim_wait(0.5), 23);
        // Out-of-range randomness is held to the bounds.
        assert_eq!(claim_wait(-3.0), 20);
        assert_eq!(claim_wait(7.0), 25);
        let waits: std::collections::BTreeSet<u64> = (0..=100)
            .map(|step| claim_wait(step as f64 / 100.0))
            .collect();
        assert_eq!(waits, (20..=25).collect());
    }
}
