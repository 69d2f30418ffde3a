//! The node page's Recipes tab (spec "Recipes": "The Agent box on the node page lists them,
//! one line each, so a person can see whether a node acts and whether its check passes"): each
//! recipe the node's last claim reported, with its mode and verdict (AC-45's normalised
//! `recipes`), and the recipe's most recent case from the claim's `cases` (its summary, notes
//! and newest note). Everything shown is the node's own words, clipped and escaped.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::ui::format::{ago, clip, Ago};

/// One recipe's line.
pub struct RecipeRow {
    pub name: String,
    /// `armed`, `report-only`, or `not here` for a recipe that does not apply.
    pub mode: String,
    /// `pass`, `fail`, `unknown`, or `not checked yet`.
    pub verdict: String,
    pub case: Option<CaseRow>,
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
            let mode = match recipe["mode"].as_str()? {
                "not-applicable" => "not here".to_string(),
                other => clip(other, 20),
            };
            Some(RecipeRow {
                name: clip(name, 64),
                mode,
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
                {"name": "disk_headroom", "mode": "armed", "verdict": "pass"},
                {"name": "service_health", "mode": "armed", "verdict": "fail"},
                {"name": "fail2ban", "mode": "not-applicable", "verdict": null},
                {"name": "agent_supervision", "mode": "report-only", "verdict": null},
            ],
            "cases": {"recipe:service_health": {
                "id": 3, "state": "open", "opened_at": "2026-12-01T12:00:00Z", "closed_at": null,
                "summary": "the web server (nginx) does not answer", "notes": 2,
                "last_note": "still down"}},
        });
        let rows = recipe_rows(&facts);
        let lines: Vec<(&str, &str, &str)> = rows
            .iter()
            .map(|row| (row.name.as_str(), row.mode.as_str(), row.verdict.as_str()))
            .collect();
        assert_eq!(
            lines,
            [
                ("disk_headroom", "armed", "pass"),
                ("service_health", "armed", "fail"),
                ("fail2ban", "not here", "not checked yet"),
                ("agent_supervision", "report-only", "not checked yet"),
            ]
        );
        let case = rows[1].case.as_ref().unwrap();
        assert!(case.open);
        assert_eq!((case.id, case.notes), (3, 2));
        assert_eq!(case.last_note, "still down");
        assert!(case.opened.is_some() && case.closed.is_none());
        assert!(rows[0].case.is_none());
        assert!(recipe_rows(&json!({})).is_empty());
    }
}
