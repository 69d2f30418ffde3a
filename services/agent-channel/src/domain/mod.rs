//! The agent channel's rules, without I/O: how joins are decided, what a claim says, how
//! signatures are checked in order, when a job may be created, handed out or given up on, and
//! how requests are metered. Every constant the spec leaves unvalued is named here.

pub mod auth;
pub mod claims;
pub mod fleet;
pub mod jobs;
pub mod joins;
pub mod rate;
pub mod version;

use std::time::Duration;

/// A pending join expires this long after it was lodged or last renewed (AC-03).
pub const JOIN_TTL: Duration = Duration::from_secs(3600);
/// A rejected key may be reopened for this long, then it is retired (decision 6.2-1).
pub const REJECTED_REOPENABLE_FOR: Duration = Duration::from_secs(24 * 3600);
/// Pending joins one source address may hold at once (AC-02 caps them; the value is ours).
pub const MAX_PENDING_PER_ADDRESS: i64 = 8;
/// Pending joins the plane holds at once.
pub const MAX_PENDING_TOTAL: i64 = 1_000;
/// Signatures older or newer than this are refused (AC-15, PROTOCOL.md).
pub const MAX_CLOCK_SKEW_SECONDS: i64 = 300;
/// A nonce may not be used twice by one key within this window (PROTOCOL.md).
pub const NONCE_WINDOW: Duration = Duration::from_secs(600);
/// `claim_bytes` when the node reports none (AC-16).
pub const DEFAULT_CLAIM_BYTES: u64 = 64 * 1024;
/// The longest long poll a claim may ask for.
pub const MAX_WAIT_SECONDS: u64 = 30;
/// A node heard from within this window is online (AC-60 leaves the threshold open).
pub const ONLINE_WINDOW: Duration = Duration::from_secs(90);
/// A claim that changes nothing still stamps `last_seen_at`, but at most this often, so a
/// fleet polling every few seconds does not write on every poll.
pub const LAST_SEEN_RESOLUTION: Duration = Duration::from_secs(30);
/// Rate limits (PROTOCOL.md "Limits"): per address for requests that prove no node, per node
/// for the rest; a claim that succeeds is not counted.
pub const ADDRESS_REQUESTS_PER_MINUTE: u32 = 120;
pub const NODE_REQUESTS_PER_MINUTE: u32 = 600;
