//! What bounds a connection: the settings ([`ConnectionLimits`]), the sizes this code reads and
//! copies by, and the count of connections dropped and why.

use std::time::Duration;
use tokio::time::Instant;

/// A head longer than this is not an agent's (theirs are about 1 KiB); hyper reads it instead.
pub(super) const MAX_HEAD: usize = 8 * 1024;
/// Room taken for each read of a head.
pub(super) const READ_ROOM: usize = 2 * 1024;
/// A body up to this size is copied out of the read buffer, so the buffer is let go while the
/// request waits (a long poll: seconds); a larger one keeps the buffer it was read into.
pub(super) const COPIED_BODY: usize = 16 * 1024;
/// At most this much of a refused request's unread body is let through before the connection
/// is dropped (so the refusal reaches a client still sending, rather than a reset).
pub(super) const LINGER_BYTES: usize = 256 * 1024;

/// What bounds a connection (`gateway.*` settings; docs/security.md, "The gateway's
/// connections").
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once; one more is refused at once.
    pub max_connections: usize,
    /// A request head must arrive within this of its first byte (a new connection's first
    /// request, of the connection); hyper's path also closes a connection idle this long.
    pub header_timeout: Duration,
    /// An agent's keep-alive connection idle this long between requests is closed.
    pub idle_timeout: Duration,
    /// The slowest a body or an answer may move, in bytes a second, after a grace of
    /// `header_timeout`.
    pub min_rate: u64,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 20_000,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(75),
            min_rate: 1024,
        }
    }
}

impl ConnectionLimits {
    pub fn from_settings(gateway: &capstan_settings::GatewaySettings) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: gateway.max_connections as usize,
            header_timeout: gateway.header_timeout(),
            idle_timeout: gateway.idle_timeout(),
            min_rate: gateway.min_rate_bytes_per_sec.max(1),
        }
    }

    /// When `moved` bytes of a body or answer begun at `started` must have been followed by
    /// more: the grace, then [`ConnectionLimits::min_rate`].
    pub(super) fn next_byte_by(&self, started: Instant, moved: usize) -> Instant {
        started + self.header_timeout + Duration::from_secs_f64(moved as f64 / self.min_rate as f64)
    }
}

/// Why a connection was dropped, as `capstan_gateway_connections_dropped_total` counts it.
pub(super) fn dropped(reason: &'static str) {
    metrics::counter!("capstan_gateway_connections_dropped_total", "reason" => reason).increment(1);
}
