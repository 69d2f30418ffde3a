//! The case (AG-59, AG-60): when a recipe gives up, its escalation is a case with a node-minted
//! id growing per source, open until the recipe's check passes again (only the node closes
//! it). Its body is composed once, when the escalation opens, every field capped; it rides
//! every claim in `cases`, keyed by `recipe:<name>`, as a summary always and with its body until
//! a claim carrying the body succeeds. The caps are the plane's intake's (PROTOCOL.md "claim").

use capstan_events::Word as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{attempt::AttemptRecord, bounded, Mode};

/// PROTOCOL.md: a summary is at most 512 characters.
pub const MAX_CASE_SUMMARY_CHARS: usize = 512;
/// PROTOCOL.md: a last note is at most 1 KiB.
pub const MAX_CASE_NOTE_BYTES: usize = 1024;
/// PROTOCOL.md: a body is at most 32 KiB as JSON.
pub const MAX_CASE_BODY_BYTES: usize = 32 * 1024;
/// The plane's intake takes the whole `cases` field up to 64 KiB as JSON (its
/// `MAX_CASES_BYTES`); a larger field would cost the claim, so bodies wait their turn.
pub const MAX_CASES_BYTES: usize = 64 * 1024;
/// AC-46: the attempts a body lists, and the detail each keeps.
pub const MAX_CASE_ATTEMPTS: usize = 8;
pub const MAX_CASE_ATTEMPT_DETAIL: usize = 512;
/// Free text elsewhere in the body (the check's last words).
pub const MAX_CASE_TEXT: usize = 1024;

/// A case as the node keeps it (in its escalation line) and reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub id: i64,
    pub opened_at: DateTime<Utc>,
    #[serde(default)]
    pub closed_at: Option<DateTime<Utc>>,
    pub summary: String,
    #[serde(default)]
    pub notes: u32,
    #[serde(default)]
    pub last_note: Option<String>,
    #[serde(default)]
    pub noted_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub body: Option<Value>,
}

/// The summary of a case, capped to what the plane takes.
pub fn summary(text: &str) -> String {
    let clean = bounded(text, MAX_CASE_SUMMARY_CHARS * 4);
    clean.chars().take(MAX_CASE_SUMMARY_CHARS).collect()
}

fn utc(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Case {
    /// A new open case. `summary` is capped here.
    pub fn open(id: i64, at: DateTime<Utc>, text: String, body: Option<Value>) -> Case {
        Case {
            id,
            opened_at: at,
            closed_at: None,
            summary: summary(&text),
            notes: 0,
            last_note: None,
            noted_at: None,
            body,
        }
    }

    pub fn is_open(&self) -> bool {
        self.closed_at.is_none()
    }

    pub fn close(&mut self, at: DateTime<Utc>) {
        // A clock that went back never closes a case before it opened.
        self.closed_at = Some(at.max(self.opened_at));
    }

    /// The case as its escalation line wrote it: open, no notes.
    pub fn as_opened(&self) -> Case {
        Case {
            closed_at: None,
            notes: 0,
            last_note: None,
            noted_at: None,
            ..self.clone()
        }
    }

    /// The case on the wire (PROTOCOL.md "claim"), with its body when `with_body`.
    pub fn wire(&self, with_body: bool) -> Value {
        let mut case = json!({
            "id": self.id,
            "state": if self.is_open() { "open" } else { "closed" },
            "opened_at": utc(self.opened_at),
            "closed_at": self.closed_at.map(utc),
            "summary": summary(&self.summary),
            "notes": self.notes,
            "last_note": self.last_note.as_deref().map(|note| bounded(note, MAX_CASE_NOTE_BYTES)),
        });
        if let (true, Some(body)) = (with_body, &self.body) {
            case["body"] = body.clone();
        }
        case
    }
}

/// The note a failing tick appends to an open case, capped.
pub fn note(detail: &str) -> String {
    bounded(detail, MAX_CASE_NOTE_BYTES)
}

/// What a case's body is made of (AG-59).
#[derive(Debug, Clone)]
pub struct BodyParts<'a> {
    pub recipe: &'a str,
    pub mode: Mode,
    /// What the check said when the recipe gave up.
    pub check: &'a str,
    /// The attempts that spent the budget (none for a check-only recipe).
    pub attempts: &'a [AttemptRecord],
    /// A fresh host report.
    pub host_report: Value,
    pub vocabulary: Vec<&'a str>,
    /// The recipe list as the claim reports it.
    pub recipes: Value,
}

/// The body, composed once when the escalation opens; every field capped, and the whole at
/// most [`MAX_CASE_BODY_BYTES`] (the host report gives way first, then the lists).
pub fn compose_body(parts: BodyParts<'_>) -> Value {
    let attempts: Vec<Value> = parts
        .attempts
        .iter()
        .take(MAX_CASE_ATTEMPTS)
        .map(|record| {
            json!({
                "at": utc(record.at),
                "word": bounded(&record.word, 64),
                "target": record.target.as_deref().map(|target| bounded(target, 64)),
                "outcome": record.outcome.map_or("interrupted", |outcome| outcome.as_str()),
                "detail": bounded(&record.detail, MAX_CASE_ATTEMPT_DETAIL),
            })
        })
        .collect();
    let mut body = Map::new();
    body.insert("recipe".into(), json!(parts.recipe));
    body.insert("mode".into(), json!(parts.mode.reported().as_str()));
    body.insert("check".into(), json!(bounded(parts.check, MAX_CASE_TEXT)));
    body.insert("attempts".into(), Value::Array(attempts));
    body.insert("host_report".into(), parts.host_report);
    body.insert("vocabulary".into(), json!(parts.vocabulary));
    body.insert("recipes".into(), parts.recipes);
    let too_large = |body: &Map<String, Value>| {
        Value::Object(body.clone()).to_string().len() > MAX_CASE_BODY_BYTES
    };
    for field in ["host_report", "recipes", "vocabulary"] {
        if too_large(&body) {
            body.insert(
                field.into(),
                json!({"truncated": format!("the {field} did not fit in the case's 32 KiB")}),
            );
        }
    }
    Value::Object(body)
}

/// AG-61: where the case is, for the rendered copy: `management node` once a claim carrying
/// its body succeeded on a paired node, `local` otherwise.
pub fn delivery(paired: bool, body_pending: bool) -> &'static str {
    if paired && !body_pending {
        "management node"
    } else {
        "local"
    }
}

/// AG-61: the rendered case, `{site}/cache/recipes/<recipe>.case.json`: the case with its body,
/// its delivery, and when the agent rendered it (the site's notice says the record may be out
/// of date once that is over a day old).
pub fn rendered(recipe: &str, case: &Case, delivery: &str, at: DateTime<Utc>) -> Value {
    json!({
        "recipe": recipe,
        "case": case.wire(true),
        "delivery": delivery,
        "rendered_at": utc(at),
    })
}

/// One recipe's most recent case, and whether its body still rides.
#[derive(Debug, Clone)]
pub struct Riding<'a> {
    pub recipe: &'a str,
    pub case: &'a Case,
    pub body_pending: bool,
}

/// The claim's `cases` field (AG-60): every source's summary, and the pending bodies that fit
/// within [`MAX_CASES_BYTES`]; also the recipes whose body rides in it.
pub fn cases_field(riding: &[Riding<'_>]) -> (Value, Vec<String>) {
    let mut field = Map::new();
    for entry in riding {
        field.insert(format!("recipe:{}", entry.recipe), entry.case.wire(false));
    }
    let mut size = Value::Object(field.clone()).to_string().len();
    let mut with_body = Vec::new();
    for entry in riding.iter().filter(|entry| entry.body_pending) {
        let Some(body) = &entry.case.body else {
            continue;
        };
        let added = body.to_string().len() + ",\"body\":".len();
        if size + added > MAX_CASES_BYTES {
            continue;
        }
        size += added;
        if let Some(case) = field.get_mut(&format!("recipe:{}", entry.recipe)) {
            case["body"] = body.clone();
        }
        with_body.push(entry.recipe.to_string());
    }
    (Value::Object(field), with_body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::attempt::Outcome;
    use chrono::TimeZone;

    fn at(minute: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap() + chrono::Duration::minutes(minute)
    }

    #[test]
    fn ag_60_a_case_on_the_wire_is_protocol_shaped_with_utc_times() {
        let mut case = Case::open(3, at(0), "x".repeat(600), Some(json!({"recipe": "r"})));
        let wire = case.wire(false);
        assert_eq!(wire["state"], "open");
        assert_eq!(wire["opened_at"], "2026-12-01T12:00:00Z");
        assert_eq!(wire["closed_at"], Value::Null);
        assert_eq!(wire["summary"].as_str().unwrap().chars().count(), 512);
        assert!(wire.get("body").is_none());
        assert_eq!(case.wire(true)["body"], json!({"recipe": "r"}));
        case.close(at(30));
        assert_eq!(case.wire(false)["state"], "closed");
        assert_eq!(case.wire(false)["closed_at"], "2026-12-01T12:30:00Z");
    }

    #[test]
    fn ag_61_the_rendered_case_carries_its_body_its_delivery_and_when_it_was_rendered() {
        let case = Case::open(2, at(0), "full".into(), Some(json!({"recipe": "r"})));
        let rendered = rendered("disk_headroom", &case, delivery(false, false), at(5));
        assert_eq!(rendered["delivery"], "local");
        assert_eq!(rendered["rendered_at"], "2026-12-01T12:05:00Z");
        assert_eq!(rendered["case"]["id"], 2);
        assert_eq!(rendered["case"]["body"]["recipe"], "r");
        assert_eq!(
            delivery(true, true),
            "local",
            "the plane does not have it yet"
        );
        assert_eq!(delivery(true, false), "management node");
    }

    #[test]
    fn ag_59_the_body_lists_the_attempts_capped_and_fits_32_kib() {
        let attempts: Vec<AttemptRecord> = (1..=3)
            .map(|n| AttemptRecord {
                attempt: n,
                at: at(n as i64 * 10),
                word: "restart_unit".into(),
                target: Some("nginx".into()),
                outcome: Some(Outcome::Failed),
                detail: "y".repeat(5000),
            })
            .collect();
        let body = compose_body(BodyParts {
            recipe: "service_health",
            mode: Mode::Armed,
            check: "nginx does not answer",
            attempts: &attempts,
            host_report: json!({"blob": "z".repeat(100_000)}),
            vocabulary: vec!["check_status", "restart_unit"],
            recipes: json!([{"name": "service_health", "mode": "armed", "verdict": "fail"}]),
        });
        assert!(body.to_string().len() <= MAX_CASE_BODY_BYTES);
        assert_eq!(body["attempts"].as_array().unwrap().len(), 3);
        assert_eq!(body["attempts"][0]["outcome"], "failed");
        assert_eq!(
            body["attempts"][0]["detail"].as_str().unwrap().len(),
            MAX_CASE_ATTEMPT_DETAIL
        );
        assert!(body["host_report"]["truncated"].is_string());
        assert_eq!(body["vocabulary"], json!(["check_status", "restart_unit"]));
    }

    #[test]
    fn ag_60_every_summary_rides_and_bodies_only_while_the_field_stays_within_the_cap() {
        let big = json!({"host_report": "b".repeat(30 * 1024)});
        let cases: Vec<Case> = (1..=3)
            .map(|id| Case::open(id, at(0), format!("case {id}"), Some(big.clone())))
            .collect();
        let names = ["a", "b", "c"];
        let riding: Vec<Riding> = cases
            .iter()
            .zip(names)
            .map(|(case, recipe)| Riding {
                recipe,
                case,
                body_pending: true,
            })
            .collect();
        let (field, with_body) = cases_field(&riding);
        assert_eq!(field.as_object().unwrap().len(), 3);
        assert_eq!(
            with_body,
            ["a", "b"],
            "the third body waits for a later claim"
        );
        assert!(field.to_string().len() <= MAX_CASES_BYTES);
        assert!(field["recipe:c"].get("body").is_none());
    }
}
