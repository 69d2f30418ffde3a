//! The one rule for a long poll's `wait=` (docs/agent-protocol.md, claim: `wait=<0..30>`
//! seconds, default 0), read the same way by the gateway (for how long it lets the agent
//! channel answer) and by the agent channel (for how long it holds the claim open): a whole
//! number of seconds from 0 to [`MAX_WAIT_SECONDS`]; anything else is refused, never clamped.

/// The longest long poll a claim may ask for.
pub const MAX_WAIT_SECONDS: u64 = 30;

/// A `wait=` the rule refuses, with what it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("wait must be a whole number of seconds from 0 to {MAX_WAIT_SECONDS}, not {0:?}")]
pub struct BadWait(pub String);

/// The `wait` of a request's query string (`None`: no query): 0 when absent; the first
/// `wait=` counts.
pub fn wait_of(query: Option<&str>) -> Result<u64, BadWait> {
    let Some(value) = query
        .into_iter()
        .flat_map(|query| query.split('&'))
        .find_map(|pair| pair.strip_prefix("wait="))
    else {
        return Ok(0);
    };
    match value.parse::<u64>() {
        Ok(seconds) if seconds <= MAX_WAIT_SECONDS => Ok(seconds),
        _ => Err(BadWait(value.chars().take(32).collect())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wait_is_no_long_poll() {
        assert_eq!(wait_of(None), Ok(0));
        assert_eq!(wait_of(Some("")), Ok(0));
        assert_eq!(wait_of(Some("x=1")), Ok(0));
    }

    #[test]
    fn a_whole_number_of_seconds_up_to_thirty_is_taken() {
        assert_eq!(wait_of(Some("wait=0")), Ok(0));
        assert_eq!(wait_of(Some("wait=20")), Ok(20));
        assert_eq!(wait_of(Some("x=1&wait=30")), Ok(30));
    }

    #[test]
    fn anything_else_is_refused_naming_what_was_sent() {
        for bad in ["31", "99", "-4", "soon", "2.5", ""] {
            let refused = wait_of(Some(&format!("wait={bad}"))).unwrap_err();
            assert_eq!(refused, BadWait(bad.to_string()));
            assert!(refused.to_string().contains("from 0 to 30"), "{refused}");
        }
    }
}
