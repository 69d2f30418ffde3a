//! The node page's Recipes tab (spec "Recipes": "The Agent box on the node page lists them,
//! one line each, so a person can see whether a node acts and whether its check passes"): each
//! recipe the node's last claim reported, with its mode and verdict (AC-45's normalised
//! `recipes`), and the recipe's most recent case from the claim's `cases` (its summary, notes
//! and newest note), and its hold marker when one stops (or failed to stop) its repairs. The
//! mode and the hold are in the agent's own words (`capstan-agent recipes` says the same).
//! Everything shown is the node's own words, clipped and escaped.

use capstan_events::agent_channel::recipes::{RecipeHold, RecipeMode};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::ui::format::{ago, clip, Ago};
use capstan_events::Word as _;

/// One recipe's line.
pub struct RecipeRow {
    pub name: String,
    /// `armed`, `report-only` or `not-applicable`: the agent's own words (`RecipeMode`).
    pub mode: &'static str,
    /// `pass`, `fail`, `unknown`, or `not checked yet`.
    pub verdict: String,
    pub case: Option<CaseRow>,
    /// Its hold marker (`held` or `ignored`, the agent's words), when one is there.
    pub hold: Option<HoldRow>,
}

/// A recipe's hold, as the node last reported it (issue 27).
pub struct HoldRow {
    /// `held` or `ignored` (`RecipeHold`).
    pub word: &'static str,
    /// What it means for the recipe, in a sentence.
    pub says: String,
}

fn hold_row(recipe: &Value, name: &str) -> Option<HoldRow> {
    let hold = RecipeHold::parse(recipe["hold"].as_str()?)?;
    let says = match hold {
        RecipeHold::None => return None,
        RecipeHold::Held => format!(
            "repairs nothing: hold/{name} is in the agent's state directory; remove it to let the recipe repair"
        ),
        RecipeHold::Ignored => format!(
            "the marker hold/{name} is ignored and the recipe repairs: {}",
            clip(
                recipe["hold_reason"]
                    .as_str()
                    .unwrap_or("the agent did not say why"),
                300
            )
        ),
    };
    Some(HoldRow {
        word: hold.as_str(),
        says,
    })
}

/// A recipe's most recent case as the node reported it.
pub struct CaseRow {
    pub id: i64,
    pub open: bool,
    pub opened: Option<Ago>,
    pub closed: Option<Ago>,
    pub summary: String,
    pub notes: u64,
    pub last_note: String,
}

fn time(value: &Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|at| at.with_timezone(&Utc))
}

fn case_row(case: &Value) -> Option<CaseRow> {
    Some(CaseRow {
        id: case["id"].as_i64()?,
        open: case["state"] == "open",
        opened: time(&case["opened_at"]).map(ago),
        closed: time(&case["closed_at"]).map(ago),
        summary: clip(case["summary"].as_str().unwrap_or_default(), 512),
        notes: case["notes"].as_u64().unwrap_or(0),
        last_note: clip(case["last_note"].as_str().unwrap_or_default(), 300),
    })
}

/// The rows of a node's facts (`recipes`, `cases`), in the order the node reported them.
pub fn recipe_rows(facts: &Value) -> Vec<RecipeRow> {
    let Some(recipes) = facts["recipes"].as_array() else {
        return Vec::new();
    };
    recipes
        .iter()
        .filter_map(|recipe| {
            let name = recipe["name"].as_str()?;
            let mode = RecipeMode::parse(recipe["mode"].as_str()?)?.as_str();
            Some(RecipeRow {
                name: clip(name, 64),
                mode,
                hold: hold_row(recipe, name),
                verdict: recipe["verdict"]
                    .as_str()
                    .map_or("not checked yet".to_string(), |verdict| clip(verdict, 20)),
                case: case_row(&facts["cases"][format!("recipe:{name}")]),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ac_45_each_reported_recipe_is_a_line_with_its_mode_verdict_and_case() {
        let facts = json!({
            "recipes": [
                {"name": "disk_headroom", "mode": "armed", "verdict": "pass", "hold": "none"},
                {"name": "service_health", "mode": "armed", "verdict": "fail", "hold": "held"},
                {"name": "fail2ban", "mode": "not-applicable", "verdict": null},
                {"name": "agent_supervision", "mode": "report-only", "verdict": null,
                 "hold": "ignored", "hold_reason": "the hold directory has mode 770"},
                {"name": "swap", "mode": "sometimes", "verdict": null},
            ],
            "cases": {"recipe:service_health": {
                "id": 3, "state": "open", "opened_at": "2026-12-01T12:00:00Z", "closed_at": null,
                "summary": "the web server (nginx) does not answer", "notes": 2,
                "last_note": "still down"}},
        });
        let rows = recipe_rows(&facts);
        let lines: Vec<(&str, &str, &str)> = rows
            .iter()
            .map(|row| (row.name.as_str(), row.mode, row.verdict.as_str()))
            .collect();
        assert_eq!(
            lines,
            [
                ("disk_headroom", "armed", "pass"),
                ("service_health", "armed", "fail"),
                ("fail2ban", "not-applicable", "not checked yet"),
                ("agent_supervision", "report-only", "not checked yet"),
            ],
            "the modes in the agent's words; a mode outside the set is no line"
        );
        assert!(rows[0].hold.is_none(), "no hold, nothing to say");
        let held = rows[1].hold.as_ref().unwrap();
        assert_eq!(held.word, "held");
        assert!(held.says.contains("hold/service_health"), "{}", held.says);
        let ignored = rows[3].hold.as_ref().unwrap();
        assert_eq!(ignored.word, "ignored");
        assert!(ignored.says.contains("mode 770"), "{}", ignored.says);
        let case = rows[1].case.as_ref().unwrap();
        assert!(case.open);
        assert_eq!((case.id, case.notes), (3, 2));
        assert_eq!(case.last_note, "still down");
        assert!(case.opened.is_some() && case.closed.is_none());
        assert!(rows[0].case.is_none());
        assert!(recipe_rows(&json!({})).is_empty());
    }
}
