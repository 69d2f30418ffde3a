//! What a claim says (PROTOCOL.md "claim"; spec AC-17, AC-18, AC-43, AC-45, AC-51): the fields
//! the plane knows are read and bounded, anything else is set aside unread and named, and the
//! node's stored facts change only when the claim says something new.

use serde_json::{Map, Value};

use chrono::{DateTime, Utc};

use capstan_events::agent_channel::{
    recipes::{RecipeHold, RecipeMode, MAX_HOLD_REASON_BYTES},
    rpc::UPDATE_REFUSALS,
};

use super::{auth::AgentError, DEFAULT_CLAIM_BYTES, LAST_SEEN_RESOLUTION};
use capstan_events::Word as _;

mod facts;
mod lanes;
mod recipes;

pub use facts::{apply, LAST_UPDATE_REFUSAL};
pub use lanes::{
    heartbeat_due, intake, lane, needs, plain_slots, Asking, Glimpse, Intake, Lane, Needs,
};
pub use recipes::normalise_recipes;

#[cfg(test)]
mod tests;

/// Largest job a node may ask for in one claim answer.
pub const MAX_CLAIM_BYTES: u64 = 4 * 1024 * 1024;
/// Words a vocabulary report may hold.
pub const MAX_VOCABULARY: usize = 256;
/// The `cases` field as JSON may be at most this large (AC-46 names the cap, not its value).
pub const MAX_CASES_BYTES: usize = 64 * 1024;

/// The most an `update_reason` may be.
pub const MAX_UPDATE_REASON_BYTES: usize = 1024;

/// AC-43's closed set.
pub const UPDATE_STATES: &[&str] = &[
    "none",
    "current",
    "update_pending",
    "fetch_failed",
    "verify_failed",
    "unlogged",
    "version_rejected",
    "unsigned_build",
    "no_binary",
];

/// `script_trust`'s closed set as this plane reads it (AG-39, AC-49; the spec leaves the
/// full set open: `trusted` is the agent's "looked, all match", `unusable_manifest` the
/// manifest it cannot use).
pub const SCRIPT_TRUST_STATES: &[&str] = &["trusted", "untrusted_file", "unusable_manifest"];
/// The most files a `script_trust_files` report may name, and the longest one.
pub const MAX_SCRIPT_TRUST_FILES: usize = 64;
pub const MAX_SCRIPT_TRUST_PATH: usize = 512;
/// `bundle_state`'s closed set (AG-32; `unlogged` waits for the public log).
pub const BUNDLE_STATES: &[&str] = &["current", "unlogged", "verify_failed"];

/// The claim fields this plane reads; any other is set aside and named.
pub const KNOWN_FIELDS: &[&str] = &[
    "agent_version",
    "idle",
    "vocabulary",
    "recipes",
    "claim_bytes",
    "update_state",
    "update_offered",
    "update_reason",
    "update_trial",
    "log_access",
    "cases",
    "container",
    "script_trust",
    "script_trust_files",
    "script_trust_reason",
    "bundle_state",
    "bundle_reason",
    "site_root",
];

/// A claim, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub agent_version: String,
    pub idle: bool,
    /// `None` when not reported: an absent report is no evidence of any word (AC-18).
    pub vocabulary: Option<Vec<String>>,
    pub claim_bytes: Option<u64>,
    /// The site root the node's `site.json` names (issue 27: a claim field beyond PROTOCOL.md's
    /// list); `None` when not reported, which leaves the root the plane knows standing.
    pub site_root: Option<String>,
    /// The other facts this claim reported, by field.
    pub facts: Map<String, Value>,
    /// Fields this plane does not know, sorted.
    pub ignored_fields: Vec<String>,
}

/// What the plane keeps of a node's reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeFacts {
    pub agent_version: Option<String>,
    pub vocabulary: Vec<String>,
    pub claim_bytes: Option<u64>,
    /// Where the node's site lives: its join's `site_root`, or the latest a claim reported.
    pub site_root: Option<String>,
    pub facts: Map<String, Value>,
}

impl NodeFacts {
    /// The largest job this node takes in one claim answer.
    pub fn claim_limit(&self) -> u64 {
        self.claim_bytes.unwrap_or(DEFAULT_CLAIM_BYTES)
    }
}

fn invalid(message: impl Into<String>) -> AgentError {
    AgentError::InvalidRequest(message.into())
}

fn word(value: &Value) -> Option<String> {
    let text = value.as_str()?;
    let mut chars = text.chars();
    let shaped = matches!(chars.next(), Some(first) if first.is_ascii_lowercase())
        && text.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    shaped.then(|| text.to_string())
}

/// `text` cut to at most `max` bytes on a character boundary.
fn clipped(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Reads a claim body. A known field of the wrong shape is refused naming it; an unknown one
/// is set aside.
pub fn parse_claim(body: &[u8]) -> Result<Claim, AgentError> {
    let Value::Object(fields) = serde_json::from_slice::<Value>(body)
        .map_err(|error| invalid(format!("the claim body is not valid JSON: {error}")))?
    else {
        return Err(invalid("the claim body must be a JSON object"));
    };
    let mut ignored_fields: Vec<String> = fields
        .keys()
        .filter(|field| !KNOWN_FIELDS.contains(&field.as_str()))
        .cloned()
        .collect();
    ignored_fields.sort();
    let agent_version = match fields.get("agent_version").and_then(Value::as_str) {
        Some(version) if !version.is_empty() && version.len() <= 64 => version.to_string(),
        _ => {
            return Err(invalid(
                "agent_version is required: a string of 1 to 64 characters",
            ))
        }
    };
    let idle = match fields.get("idle") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(idle)) => *idle,
        Some(_) => return Err(invalid("idle must be true or false")),
    };
    let vocabulary = vocabulary(fields.get("vocabulary"))?;
    let claim_bytes = claim_bytes(fields.get("claim_bytes"))?;
    // The site the node's `site.json` names, so a node set up without `--site-root` at its
    // join still takes site releases (issue 27). Null says nothing: the root known stands.
    let site_root = match fields.get("site_root") {
        None => None,
        Some(value) => super::joins::read_site_root(value)?,
    };
    let mut facts = Map::new();
    for (field, value) in &fields {
        if let Some(checked) = fact(field, value)? {
            facts.insert(field.clone(), checked);
        }
    }
    Ok(Claim {
        agent_version,
        idle,
        vocabulary,
        claim_bytes,
        site_root,
        facts,
        ignored_fields,
    })
}

/// AC-18: the words a node reports, each a primitive name; `None` when not reported.
fn vocabulary(value: Option<&Value>) -> Result<Option<Vec<String>>, AgentError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(words)) if words.len() <= MAX_VOCABULARY => words
            .iter()
            .map(|entry| {
                word(entry)
                    .ok_or_else(|| invalid(format!("vocabulary: {entry} is not a primitive name")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(invalid(format!(
            "vocabulary must be a list of at most {MAX_VOCABULARY} names"
        ))),
    }
}

/// The largest job the node takes in one claim answer, from 1 KiB to [`MAX_CLAIM_BYTES`].
fn claim_bytes(value: Option<&Value>) -> Result<Option<u64>, AgentError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(bytes) if (1024..=MAX_CLAIM_BYTES).contains(&bytes) => Ok(Some(bytes)),
            _ => Err(invalid(format!(
                "claim_bytes must be a whole number from 1024 to {MAX_CLAIM_BYTES}"
            ))),
        },
    }
}

/// A text of at most `max` bytes, or null.
fn text_or_null(value: &Value, max: usize) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.len() <= max,
        _ => false,
    }
}

/// One of a closed set's words, or a refusal naming the field and the set.
fn one_of(field: &str, value: &Value, set: &[&str]) -> Result<Value, AgentError> {
    match value.as_str() {
        Some(state) if set.contains(&state) => Ok(value.clone()),
        _ => Err(invalid(format!(
            "{field} must be one of {}",
            set.join(", ")
        ))),
    }
}

/// A fact the claim reports, checked: `None` for a field that is not a fact kept as reported
/// (the fields read above, and unknown ones).
fn fact(field: &str, value: &Value) -> Result<Option<Value>, AgentError> {
    let checked = match field {
        "recipes" => normalise_recipes(value)?,
        "update_state" | "update_offered" | "update_reason" | "update_trial" => {
            update_fact(field, value)?
        }
        "log_access" => match value.as_str() {
            Some("on" | "off") => value.clone(),
            _ => return Err(invalid("log_access must be \"on\" or \"off\"")),
        },
        "cases" => {
            if value.to_string().len() > MAX_CASES_BYTES {
                return Err(invalid(format!(
                    "cases must be at most {MAX_CASES_BYTES} bytes as JSON"
                )));
            }
            value.clone()
        }
        "container" => match value {
            Value::Null => value.clone(),
            Value::String(name) if name.len() <= 128 => value.clone(),
            _ => return Err(invalid("container must be a container name or null")),
        },
        "script_trust"
        | "script_trust_files"
        | "script_trust_reason"
        | "bundle_state"
        | "bundle_reason" => trust_fact(field, value)?,
        _ => return Ok(None),
    };
    Ok(Some(checked))
}

/// AC-43: the agent's update facts.
fn update_fact(field: &str, value: &Value) -> Result<Value, AgentError> {
    let fine = match field {
        "update_state" => return one_of(field, value, UPDATE_STATES),
        "update_offered" => text_or_null(value, 64),
        // Why the agent refused the release on offer, in its words (issue 15; an addition to
        // PROTOCOL.md's claim, documented in docs/agent-channel.md).
        "update_reason" => text_or_null(value, MAX_UPDATE_REASON_BYTES),
        // The version the agent runs on trial, or null (AG-29; issue 15, documented in
        // docs/agent-channel.md).
        _ => {
            value.is_null()
                || value
                    .as_str()
                    .is_some_and(|text| !text.is_empty() && text.len() <= 64)
        }
    };
    if fine {
        return Ok(value.clone());
    }
    Err(invalid(match field {
        "update_offered" => "update_offered must be a version string".to_string(),
        "update_reason" => {
            format!("update_reason must be at most {MAX_UPDATE_REASON_BYTES} bytes of text or null")
        }
        _ => "update_trial must be a version string or null".to_string(),
    }))
}

/// Script trust and the support bundle (issue 15; AG-32, AG-39, AC-49; additions to
/// PROTOCOL.md's claim, documented in docs/agent-channel.md).
fn trust_fact(field: &str, value: &Value) -> Result<Value, AgentError> {
    match field {
        "script_trust" => one_of(field, value, SCRIPT_TRUST_STATES),
        "bundle_state" => one_of(field, value, BUNDLE_STATES),
        "script_trust_files" => match value {
            Value::Array(files)
                if files.len() <= MAX_SCRIPT_TRUST_FILES
                    && files.iter().all(|file| {
                        file.as_str().is_some_and(|path| {
                            !path.is_empty() && path.len() <= MAX_SCRIPT_TRUST_PATH
                        })
                    }) =>
            {
                Ok(value.clone())
            }
            _ => Err(invalid(format!(
                "script_trust_files must be a list of at most {MAX_SCRIPT_TRUST_FILES} paths of 1 to {MAX_SCRIPT_TRUST_PATH} characters"
            ))),
        },
        _ if text_or_null(value, MAX_UPDATE_REASON_BYTES) => Ok(value.clone()),
        _ => Err(invalid(format!(
            "{field} must be at most {MAX_UPDATE_REASON_BYTES} bytes of text or null"
        ))),
    }
}
