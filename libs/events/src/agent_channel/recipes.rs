//! A recipe as a node reports it (PROTOCOL.md claim `recipes`; issue 27): its mode and its
//! hold, each one enum whose words the agent's `recipes` command, the claim, the plane and the
//! node page's Recipes tab all use, so one state is never called two things; and the shapes
//! of a claim's `recipes` entry and `cases` value as the plane keeps them in a node's facts.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a recipe runs on a node (AC-45's closed set).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum RecipeMode {
    /// Checks, and repairs when a check keeps failing.
    Armed,
    /// Checks and ledgers what it would do, repairing nothing.
    ReportOnly,
    /// Does not apply to this machine (what it checks is not here); checks nothing.
    NotApplicable,
}

impl RecipeMode {
    pub const ALL: [RecipeMode; 3] = [
        RecipeMode::Armed,
        RecipeMode::ReportOnly,
        RecipeMode::NotApplicable,
    ];
}

/// A recipe's hold marker (AG-45) as the agent last found it: `hold/<recipe>` in its state
/// directory stops the recipe's repairs while its check goes on.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum RecipeHold {
    /// No marker: the recipe repairs as its mode allows.
    None,
    /// The marker is honoured: the recipe repairs nothing until it is removed.
    Held,
    /// A marker is present but ignored (its directory could have been written by someone
    /// other than root), and the recipe repairs as if it were absent; `hold_reason` says why.
    Ignored,
}

/// The longest `hold_reason` a recipe entry may carry.
pub const MAX_HOLD_REASON_BYTES: usize = 512;

impl RecipeHold {
    pub const ALL: [RecipeHold; 3] = [RecipeHold::None, RecipeHold::Held, RecipeHold::Ignored];
}

/// One entry of a claim's `recipes`, as the plane keeps it in a node's `facts.recipes` (the
/// claim is read as JSON, `domain/claims.rs`; this type is its documented shape, in the
/// OpenAPI document's components).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReportedRecipe {
    /// The recipe's name (`disk_headroom`, `service_health`, ...).
    pub name: String,
    pub mode: RecipeMode,
    /// `pass`, `fail`, `unknown`, or `null`: not checked yet, and always for `not-applicable`.
    pub verdict: Option<String>,
    /// Absent from an agent that does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<RecipeHold>,
    /// Why an `ignored` hold is ignored (at most 512 bytes); `null` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_reason: Option<String>,
}

/// Whether a case is open: the node closes it when the recipe's check passes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CaseState {
    Open,
    Closed,
}

/// A recipe's most recent case as a claim's `cases` carries it, keyed by `recipe:<name>`
/// (PROTOCOL.md; AC-47 is the plane's intake). The plane keeps the claim's `cases` as the node
/// sent it in `facts.cases`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReportedCase {
    /// A positive integer the node mints, growing per source.
    pub id: i64,
    pub state: CaseState,
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    /// What gave up, at most 512 characters.
    pub summary: String,
    /// The notes the node added while the case stayed open (one a failing tick).
    pub notes: u64,
    /// The newest note, at most 1 KiB.
    pub last_note: Option<String>,
    /// What the node saw when it gave up (at most 32 KiB): the check, the attempts, its host
    /// report, its words and recipes. It rides until a claim carrying it has succeeded, then
    /// is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Map<String, serde_json::Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::Word;

    #[test]
    fn each_mode_and_hold_reads_back_from_its_one_word() {
        for mode in RecipeMode::ALL {
            assert_eq!(RecipeMode::parse(mode.as_str()), Some(mode));
        }
        for hold in RecipeHold::ALL {
            assert_eq!(RecipeHold::parse(hold.as_str()), Some(hold));
        }
        for mode in RecipeMode::ALL {
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                mode.as_str(),
                "one spelling"
            );
        }
        for hold in RecipeHold::ALL {
            assert_eq!(
                serde_json::to_value(hold).unwrap(),
                hold.as_str(),
                "one spelling"
            );
        }
        assert_eq!(RecipeMode::parse("not here"), None);
        assert_eq!(RecipeHold::parse("honoured"), None);
    }
}
