//! Recipes: what the agent does on its own clock (spec "Recipes: what the agent does on its own
//! clock", "The case"; AG-41..AG-61). Each recipe is one check, one repair, verify, retry, hold
//! and escalate for one aspect of the host. These are the rules without I/O: the registry
//! (`registry`), the ledger's lines and what the loop reads back from them (`ledger`), what one
//! tick does (`tick`), the case a recipe opens when it gives up (`case`), and the pure verdicts
//! of the compiled checks (`checks`). The clock and the host's facts are always passed in.

pub mod attempt;
pub mod case;
pub mod checks;
pub mod data_root;
pub mod fail2ban;
pub mod ledger;
pub mod registry;
pub mod supervision;
pub mod tick;

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// AG-48: armed or report-only is a compiled constant (`recipes.ReportOnly`, false: the loop
/// is armed and repairs). Changing it is a release, never a setting.
pub const REPORT_ONLY: bool = false;

/// AG-41: a recipe's check runs every ten minutes (the tick length may be shortened for tests
/// with `CAPSTAN_AGENT_RECIPE_TICK_SECS`).
pub const DEFAULT_TICK: Duration = Duration::from_secs(600);

/// AG-42: a repair runs only after this many consecutive failing ticks.
pub const FAILING_TICKS_BEFORE_REPAIR: u32 = 2;

/// AG-43: at most this many attempts per failing run; the next is an escalation (AG-44).
pub const ATTEMPTS_PER_RUN: usize = 3;

/// AG-43: the second attempt is due ten minutes after the first, the third thirty minutes
/// after the second. At the default tick these are one and three ticks; a shorter tick (tests)
/// shortens them in proportion, so the loop takes the same path in ticks.
pub const ATTEMPT_WAITS: [Duration; ATTEMPTS_PER_RUN - 1] =
    [Duration::from_secs(10 * 60), Duration::from_secs(30 * 60)];

/// A tick may land this fraction of a tick early and still count as "at or after" a wait
/// (AG-43: "even when the timer lands that tick a little early").
pub const EARLY_TICK_TOLERANCE_DIVISOR: u32 = 10;

/// What a check answers (AG-41).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// The check cannot say (no systemd, a container, a fact it cannot read): never repairs
    /// and never counts.
    Unknown,
}

/// A check's answer with a line for a person saying what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub verdict: Verdict,
    pub detail: String,
    /// The unit (or other node-derived target) the repair should act on, when the check
    /// found one: it comes only from the node's own answer (AG-49).
    pub target: Option<String>,
}

impl Check {
    pub fn pass(detail: impl Into<String>) -> Check {
        Check {
            verdict: Verdict::Pass,
            detail: detail.into(),
            target: None,
        }
    }

    pub fn fail(detail: impl Into<String>) -> Check {
        Check {
            verdict: Verdict::Fail,
            detail: detail.into(),
            target: None,
        }
    }

    pub fn unknown(detail: impl Into<String>) -> Check {
        Check {
            verdict: Verdict::Unknown,
            detail: detail.into(),
            target: None,
        }
    }

    /// The same verdict with another line for a person.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Check {
        self.detail = detail.into();
        self
    }

    pub fn targeting(mut self, target: impl Into<String>) -> Check {
        self.target = Some(target.into());
        self
    }
}

/// How the loop runs a recipe (AG-48), as the claim reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Armed,
    ReportOnly,
}

impl Mode {
    /// The compiled mode.
    pub const fn compiled() -> Mode {
        if REPORT_ONLY {
            Mode::ReportOnly
        } else {
            Mode::Armed
        }
    }

    /// Its word, the claim's and the plane's (`RecipeMode`, one enum for every side).
    pub fn reported(self) -> capstan_events::agent_channel::recipes::RecipeMode {
        use capstan_events::agent_channel::recipes::RecipeMode;
        match self {
            Mode::Armed => RecipeMode::Armed,
            Mode::ReportOnly => RecipeMode::ReportOnly,
        }
    }
}

/// The longest detail a ledger line keeps of what a check or repair saw.
pub const MAX_DETAIL_BYTES: usize = 512;

/// `text` cut to at most `max` bytes on a character boundary, with control characters other
/// than newlines dropped.
pub fn bounded(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .filter(|c| *c == '\n' || !c.is_control())
        .collect();
    if clean.len() <= max {
        return clean;
    }
    let mut end = max;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    clean[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ag_48_the_loop_is_armed_by_a_compiled_constant() {
        const { assert!(!REPORT_ONLY) };
        assert_eq!(Mode::compiled(), Mode::Armed);
    }

    #[test]
    fn details_are_bounded_on_a_character_boundary() {
        assert_eq!(bounded("héllo", 2), "h");
        assert_eq!(bounded("a\u{7}b\nc", 10), "ab\nc");
    }
}
