//! What an operator's start of a rollout may ask, read into the engine's types: the release's
//! version as releases spell it, and each stage's error budget and soak (beyond the spec:
//! hawkBit's error threshold, Argo's pause between steps). Each refusal says what was wrong;
//! the rpc names the field.

use chrono::Duration;

use super::engine::{Budget, StagePolicy};

/// The longest soak a stage may ask for.
pub const MAX_SOAK_SECS: u32 = 7 * 24 * 3600;
/// The longest version a release may have.
pub const MAX_VERSION_CHARS: usize = 64;

/// A version as releases spell it: a digit first, then at most [`MAX_VERSION_CHARS`] of
/// letters, digits, `.`, `+` and `-` (so it is never a path or an option).
pub fn version_ok(version: &str) -> bool {
    let mut chars = version.chars();
    chars.next().is_some_and(|c| c.is_ascii_digit())
        && version.len() <= MAX_VERSION_CHARS
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-'))
}

/// A stage's rules from what the operator asked: a budget of `max_failed` nodes or
/// `max_failed_percent` of the stage (not both; by default none, so the first miss halts as
/// RO-14 has it), and a soak of at most [`MAX_SOAK_SECS`].
pub fn stage_policy(
    max_failed: Option<u32>,
    max_failed_percent: Option<u8>,
    soak_secs: Option<u32>,
) -> Result<StagePolicy, String> {
    let budget = match (max_failed, max_failed_percent) {
        (Some(_), Some(_)) => {
            return Err("a stage takes max_failed or max_failed_percent, not both".into())
        }
        (Some(nodes), None) => Budget::Nodes(nodes),
        (None, Some(percent)) if percent <= 100 => Budget::Percent(percent),
        (None, Some(percent)) => {
            return Err(format!("max_failed_percent is 0 to 100, not {percent}"))
        }
        (None, None) => Budget::NONE,
    };
    let soak = soak_secs.unwrap_or(0);
    if soak > MAX_SOAK_SECS {
        return Err(format!("soak_secs is at most {MAX_SOAK_SECS}, not {soak}"));
    }
    Ok(StagePolicy {
        budget,
        soak: Duration::seconds(i64::from(soak)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ro_14_a_stage_that_asks_for_no_budget_halts_on_the_first_miss() {
        let policy = stage_policy(None, None, None).unwrap();
        assert_eq!(policy, StagePolicy::default());
        assert_eq!(policy.budget, Budget::NONE);
        assert!(!policy.budget.allows(1, 10));
        assert_eq!(policy.soak, Duration::zero());
    }

    #[test]
    fn a_stage_takes_a_budget_in_nodes_or_in_percent_but_not_both() {
        assert_eq!(
            stage_policy(Some(2), None, Some(60)).unwrap(),
            StagePolicy {
                budget: Budget::Nodes(2),
                soak: Duration::seconds(60)
            }
        );
        assert_eq!(
            stage_policy(None, Some(10), None).unwrap().budget,
            Budget::Percent(10)
        );
        assert_eq!(
            stage_policy(None, Some(100), None).unwrap().budget,
            Budget::Percent(100)
        );
        let both = stage_policy(Some(1), Some(10), None).unwrap_err();
        assert!(both.contains("not both"), "{both}");
        let over = stage_policy(None, Some(101), None).unwrap_err();
        assert!(over.contains("0 to 100, not 101"), "{over}");
    }

    #[test]
    fn a_soak_is_at_most_a_week() {
        assert_eq!(
            stage_policy(None, None, Some(MAX_SOAK_SECS)).unwrap().soak,
            Duration::days(7)
        );
        let long = stage_policy(None, None, Some(MAX_SOAK_SECS + 1)).unwrap_err();
        assert!(long.contains("at most 604800"), "{long}");
    }

    #[test]
    fn a_version_is_spelled_as_releases_spell_it() {
        assert!(version_ok("2.1.0"));
        assert!(version_ok("2.1.0-rc.1+build5"));
        assert!(version_ok(&"9".repeat(MAX_VERSION_CHARS)));
        assert!(!version_ok(&"9".repeat(MAX_VERSION_CHARS + 1)));
        assert!(!version_ok(""));
        assert!(!version_ok("v2"));
        assert!(!version_ok("-2"));
        assert!(!version_ok("2.1/../x"));
        assert!(!version_ok("2.1 --force"));
        assert!(!version_ok("2.1é"));
    }
}
