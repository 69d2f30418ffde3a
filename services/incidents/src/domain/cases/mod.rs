//! Intake of an agent's cases (AC-47, IN-11): the claim's `cases` field (PROTOCOL.md), keyed
//! by source (`recipe:<name>`), holds each source's most recent case. The agent channel caps the
//! field; this service owns the case records and decides, per source: a new id is stored, a
//! known id appended to (note count, newest note, a body when one rides), a reported close
//! recorded; a closed id never reopens; one open case per source per node — a higher id closes
//! the older with "close not heard", a lower id is refused; at most
//! [`MAX_OPEN_CASES_PER_NODE`] open; the source must be a recipe the node reports. A refusal
//! costs the claim nothing else, and a claim that changes nothing writes nothing.
//! `incidents.rs` turns the outcomes into incident effects.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::reconcile::LAST_SEEN_RESTAMP;
use super::sources::RecipeName;

/// At most this many cases may be open on one node (AC-47 names the cap, not its value).
pub const MAX_OPEN_CASES_PER_NODE: usize = 16;
/// PROTOCOL.md: a case's summary is at most 512 characters.
pub const MAX_CASE_SUMMARY_CHARS: usize = 512;
/// PROTOCOL.md: a case's last note is at most 1 KiB.
pub const MAX_CASE_NOTE_BYTES: usize = 1024;
/// PROTOCOL.md: a case's body is at most 32 KiB as JSON.
pub const MAX_CASE_BODY_BYTES: usize = 32 * 1024;

/// A case's state, the node's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseState {
    Open,
    Closed,
}

/// One case as a claim reports it, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportedCase {
    pub id: i64,
    pub state: CaseState,
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub summary: String,
    pub notes: u32,
    pub last_note: Option<String>,
    /// The body as JSON text, while it rides.
    pub body: Option<String>,
}

/// One source's entry in a claim: its key (`recipe:<name>`) and its case, or why the case could
/// not be read.
pub type SourceReport = (String, Result<ReportedCase, CaseRefusal>);

/// A case as this service holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCase {
    pub source: RecipeName,
    pub id: i64,
    pub state: CaseState,
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub summary: String,
    pub notes: u32,
    pub last_note: Option<String>,
    pub body: Option<String>,
    pub last_seen_at: DateTime<Utc>,
}

/// Why a case was refused; logged, and the claim is otherwise taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaseRefusal {
    #[error("the case is malformed: {0}")]
    Malformed(String),
    #[error("the source is not a recipe this node reports")]
    UnknownSource,
    #[error("a closed case never reopens")]
    ClosedNeverReopens,
    #[error("a newer case ({newest}) is already held for this source")]
    LowerId { newest: i64 },
    #[error("the node already has {MAX_OPEN_CASES_PER_NODE} open cases")]
    TooManyOpen,
}

/// What intake decided for one source.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseOutcome {
    /// A new id, stored (open, or first heard already closed).
    Stored(StoredCase),
    /// A known open id: notes, body, last seen and, when the node reports it, its close.
    Updated {
        source: RecipeName,
        id: i64,
        notes: u32,
        last_note: Option<String>,
        /// A body riding for the first time.
        body: Option<String>,
        last_seen_at: DateTime<Utc>,
        closed_at: Option<DateTime<Utc>>,
    },
    /// The older open case of a source, closed because a higher id arrived.
    CloseNotHeard {
        source: RecipeName,
        id: i64,
        at: DateTime<Utc>,
    },
    Refused {
        source: String,
        id: Option<i64>,
        reason: CaseRefusal,
    },
}

#[derive(Deserialize)]
struct WireCase {
    id: i64,
    state: CaseState,
    opened_at: String,
    closed_at: Option<String>,
    summary: String,
    #[serde(default)]
    notes: u32,
    last_note: Option<String>,
    body: Option<Value>,
}

fn utc_time(field: &str, text: &str) -> Result<DateTime<Utc>, CaseRefusal> {
    let parsed = DateTime::parse_from_rfc3339(text)
        .map_err(|_| CaseRefusal::Malformed(format!("{field} is not an RFC 3339 time")))?;
    if parsed.offset().local_minus_utc() != 0 {
        return Err(CaseRefusal::Malformed(format!("{field} must be in UTC")));
    }
    Ok(parsed.with_timezone(&Utc))
}

fn check(wire: WireCase) -> Result<ReportedCase, CaseRefusal> {
    let malformed = |reason: &str| Err(CaseRefusal::Malformed(reason.to_string()));
    if wire.id <= 0 {
        return malformed("id must be a positive integer");
    }
    if wire.summary.chars().count() > MAX_CASE_SUMMARY_CHARS {
        return malformed("summary is longer than 512 characters");
    }
    if wire
        .last_note
        .as_ref()
        .is_some_and(|note| note.len() > MAX_CASE_NOTE_BYTES)
    {
        return malformed("last_note is longer than 1 KiB");
    }
    let body = match wire.body {
        None | Some(Value::Null) => None,
        Some(body @ Value::Object(_)) => {
            let text = body.to_string();
            if text.len() > MAX_CASE_BODY_BYTES {
                return malformed("body is larger than 32 KiB");
            }
            Some(text)
        }
        Some(_) => return malformed("body must be an object"),
    };
    let opened_at = utc_time("opened_at", &wire.opened_at)?;
    let closed_at = wire
        .closed_at
        .as_deref()
        .map(|text| utc_time("closed_at", text))
        .transpose()?;
    match (wire.state, closed_at) {
        (CaseState::Open, Some(_)) => return malformed("an open case has no closed_at"),
        (CaseState::Closed, None) => return malformed("a closed case needs closed_at"),
        (CaseState::Closed, Some(closed)) if closed < opened_at => {
            return malformed("closed_at is before opened_at")
        }
        _ => {}
    }
    Ok(ReportedCase {
        id: wire.id,
        state: wire.state,
        opened_at,
        closed_at,
        summary: wire.summary,
        notes: wire.notes,
        last_note: wire.last_note,
        body,
    })
}

/// Reads the claim's `cases` field: each source key with its case or why it was refused. A
/// field that is not an object is refused whole.
pub fn parse_cases(field: &Value) -> Result<Vec<SourceReport>, CaseRefusal> {
    let Value::Object(entries) = field else {
        return Err(CaseRefusal::Malformed("cases must be an object".into()));
    };
    Ok(entries
        .iter()
        .map(|(source, value)| {
            let case = serde_path_to_error::deserialize::<_, WireCase>(value.clone())
                .map_err(|error| CaseRefusal::Malformed(error.to_string()))
                .and_then(check);
            (source.clone(), case)
        })
        .collect())
}

/// The recipe a case source names, if the node reports that recipe.
fn known_recipe(source: &str, node_recipes: &[String]) -> Option<RecipeName> {
    let recipe = RecipeName::parse(source.strip_prefix("recipe:")?).ok()?;
    node_recipes
        .iter()
        .any(|reported| reported == recipe.as_str())
        .then_some(recipe)
}

/// AC-47 for one claim: `reported` against the node's `stored` cases and the recipes it
/// reports. Sources are taken in key order; nothing is returned for a source whose report
/// changes nothing.
pub fn intake(
    node_recipes: &[String],
    stored: &[StoredCase],
    reported: Vec<SourceReport>,
    now: DateTime<Utc>,
) -> Vec<CaseOutcome> {
    let mut reported = reported;
    reported.sort_by(|a, b| a.0.cmp(&b.0));
    let mut open_count = stored
        .iter()
        .filter(|case| case.state == CaseState::Open)
        .count();
    let mut outcomes = Vec::new();
    for (key, case) in reported {
        let refuse = |id, reason| CaseOutcome::Refused {
            source: key.clone(),
            id,
            reason,
        };
        let case = match case {
            Ok(case) => case,
            Err(reason) => {
                outcomes.push(refuse(None, reason));
                continue;
            }
        };
        let Some(recipe) = known_recipe(&key, node_recipes) else {
            outcomes.push(refuse(Some(case.id), CaseRefusal::UnknownSource));
            continue;
        };
        let of_source: Vec<&StoredCase> = stored.iter().filter(|s| s.source == recipe).collect();
        if let Some(same) = of_source.iter().find(|s| s.id == case.id) {
            match (same.state, case.state) {
                (CaseState::Closed, CaseState::Open) => {
                    outcomes.push(refuse(Some(case.id), CaseRefusal::ClosedNeverReopens))
                }
                // a closed summary rides until the next case replaces it; never written again
                (CaseState::Closed, CaseState::Closed) => {}
                (CaseState::Open, _) => {
                    if case.state == CaseState::Closed {
                        open_count -= 1;
                    }
                    outcomes.extend(append(same, recipe, case, now));
                }
            }
            continue;
        }
        if let Some(newest) = of_source
            .iter()
            .map(|s| s.id)
            .max()
            .filter(|&n| n > case.id)
        {
            outcomes.push(refuse(Some(case.id), CaseRefusal::LowerId { newest }));
            continue;
        }
        let older_open = of_source.iter().find(|s| s.state == CaseState::Open);
        let open_after_close = open_count - usize::from(older_open.is_some());
        if case.state == CaseState::Open && open_after_close >= MAX_OPEN_CASES_PER_NODE {
            outcomes.push(refuse(Some(case.id), CaseRefusal::TooManyOpen));
            continue;
        }
        if let Some(older) = older_open {
            outcomes.push(CaseOutcome::CloseNotHeard {
                source: recipe.clone(),
                id: older.id,
                at: now,
            });
        }
        open_count = open_after_close + usize::from(case.state == CaseState::Open);
        outcomes.push(CaseOutcome::Stored(first_heard(recipe, case, now)));
    }
    outcomes
}

/// A case heard for the first time, as it is kept.
fn first_heard(source: RecipeName, case: ReportedCase, now: DateTime<Utc>) -> StoredCase {
    StoredCase {
        source,
        id: case.id,
        state: case.state,
        opened_at: case.opened_at,
        closed_at: case.closed_at,
        summary: case.summary,
        notes: case.notes,
        last_note: case.last_note,
        body: case.body,
        last_seen_at: now,
    }
}

/// A known open case reported again. A note is taken when the node's count is higher or its
/// newest note differs (a node whose ledger was trimmed restarts its count lower and still lands
/// its newest note); the stored count never goes down. Seen again, it is re-stamped at most
/// every [`LAST_SEEN_RESTAMP`].
fn append(
    same: &StoredCase,
    source: RecipeName,
    case: ReportedCase,
    now: DateTime<Utc>,
) -> Option<CaseOutcome> {
    let newer_note =
        case.notes > same.notes || (case.last_note.is_some() && case.last_note != same.last_note);
    let new_body = case.body.is_some() && same.body.is_none();
    let closes = case.state == CaseState::Closed;
    let restamp = now - same.last_seen_at >= LAST_SEEN_RESTAMP;
    if !(newer_note || new_body || closes || restamp) {
        return None;
    }
    Some(CaseOutcome::Updated {
        source,
        id: same.id,
        notes: same.notes.max(case.notes),
        last_note: if newer_note {
            case.last_note
        } else {
            same.last_note.clone()
        },
        body: if new_body { case.body } else { None },
        last_seen_at: now,
        closed_at: case.closed_at.filter(|_| closes),
    })
}

pub mod incidents;

#[cfg(test)]
pub(crate) mod tests;
