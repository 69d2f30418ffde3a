//! The agent channel's rules, without I/O: how joins are decided, what a claim says, how
//! signatures are checked in order, when a job may be created, handed out or given up on, and
//! how requests are metered. Every constant the spec leaves unvalued is named here.

pub mod auth;
pub mod claims;
pub mod conditions;
pub mod fleet;
pub mod jobs;
pub mod joins;
pub mod provisioned;
pub mod rate;
pub mod updates;
pub mod version;

use std::time::Duration;

/// A pending join expires this long after it was lodged or last renewed (AC-03).
pub const JOIN_TTL: Duration = Duration::from_secs(3600);
/// A rejected key may be reopened for this long, then it is retired (decision 6.2-1).
pub const REJECTED_REOPENABLE_FOR: Duration = Duration::from_secs(24 * 3600);
/// Pending joins one source network may hold at once (AC-02 caps them; the value is ours). A
/// network is an IPv4 address or an IPv6 /64 ([`rate::source_network`]): whoever holds a /64
/// holds every address in it.
pub const MAX_PENDING_PER_NETWORK: i64 = 8;
/// Pending joins the plane holds at once. Far above one network's share, so a flood from one
/// network leaves room for everyone else ([`joins::pending_cap`]).
pub const MAX_PENDING_TOTAL: i64 = 1_000;
/// Signatures older or newer than this are refused (AC-15, PROTOCOL.md); the one value, from
/// the signing library.
pub const MAX_CLOCK_SKEW_SECONDS: i64 = capstan_signing::MAX_CLOCK_SKEW_SECONDS;
/// What the nonce window adds to the span a signature may be taken in, for the rounding of
/// `created` to whole seconds and a replica whose clock is a little off.
pub const NONCE_WINDOW_MARGIN: Duration = Duration::from_secs(60);
/// A nonce may not be used twice by one key within this window. A signature is taken while
/// `created` is within the skew of the plane's clock either way, so for up to twice the skew;
/// the nonce must be remembered longer than that, or a request first sent early could be
/// replayed late ([`nonce_window_outlives_every_signature`]). Both checks use the same clock:
/// the agent channel's, passed to the SQL as a parameter.
pub const NONCE_WINDOW: Duration =
    Duration::from_secs(2 * MAX_CLOCK_SKEW_SECONDS as u64 + NONCE_WINDOW_MARGIN.as_secs());
/// `claim_bytes` when the node reports none (AC-16).
pub const DEFAULT_CLAIM_BYTES: u64 = 64 * 1024;
/// A node heard from within this window is online (AC-60 leaves the threshold open).
pub const ONLINE_WINDOW: Duration = Duration::from_secs(90);
/// A claim that changes nothing still stamps `last_seen_at`, but at most this often, so a
/// fleet polling every few seconds does not write on every poll.
pub const LAST_SEEN_RESOLUTION: Duration = Duration::from_secs(30);
/// Rate limits' defaults (PROTOCOL.md "Limits"; `agent_channel.*_requests_per_minute` tune
/// them): per source network for requests that prove no node, per node for every request whose
/// signature proves one (successful claims and replays too).
pub const NETWORK_REQUESTS_PER_MINUTE: u32 = 120;
pub const NODE_REQUESTS_PER_MINUTE: u32 = 600;

/// Whether a nonce recorded at the first moment a signature could be taken is still
/// remembered at the last: the window must exceed twice the skew (by a margin).
pub const fn nonce_window_outlives_every_signature(window: Duration, skew_seconds: i64) -> bool {
    window.as_secs() > 2 * skew_seconds as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nonce_window_is_more_than_twice_the_skew_plus_a_margin() {
        let span_a_signature_is_taken = 2 * MAX_CLOCK_SKEW_SECONDS as u64;
        assert!(
            NONCE_WINDOW.as_secs() >= span_a_signature_is_taken + NONCE_WINDOW_MARGIN.as_secs()
        );
        assert!(NONCE_WINDOW_MARGIN.as_secs() > 0);
        assert!(nonce_window_outlives_every_signature(
            NONCE_WINDOW,
            MAX_CLOCK_SKEW_SECONDS
        ));
        // The window PROTOCOL.md first named (600 s, exactly twice the skew) is the edge case
        // the rule refuses: a request signed 300 s ahead, seen at once, and replayed 600 s
        // later still passes the clock check.
        assert!(!nonce_window_outlives_every_signature(
            Duration::from_secs(600),
            MAX_CLOCK_SKEW_SECONDS
        ));
    }
}
