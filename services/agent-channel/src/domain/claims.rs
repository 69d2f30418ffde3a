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

/// AC-45: keep entries whose mode and verdict are in the closed sets; strip a verdict from
/// `not-applicable`; drop the rest. An entry's `hold` (issue 27: `none`, `held`, `ignored`, the
/// agent's `recipes` words) is kept when in its closed set, with `hold_reason` (bounded, or
/// null) for an ignored hold; an entry without one (an older agent) is kept without.
pub fn normalise_recipes(value: &Value) -> Result<Value, AgentError> {
    let Value::Array(entries) = value else {
        return Err(invalid("recipes must be a list"));
    };
    let kept = entries.iter().filter_map(|entry| {
        let name = word(entry.get("name")?)?;
        let mode = RecipeMode::parse(entry.get("mode")?.as_str()?)?;
        let verdict = match (mode, entry.get("verdict").unwrap_or(&Value::Null)) {
            (RecipeMode::NotApplicable, _) | (_, Value::Null) => Value::Null,
            (_, Value::String(verdict))
                if ["pass", "fail", "unknown"].contains(&verdict.as_str()) =>
            {
                Value::String(verdict.clone())
            }
            _ => return None,
        };
        let hold = entry
            .get("hold")
            .and_then(Value::as_str)
            .and_then(RecipeHold::parse);
        let mut kept = serde_json::json!({"name": name, "mode": mode.as_str(), "verdict": verdict});
        if let Some(hold) = hold {
            kept["hold"] = hold.as_str().into();
            kept["hold_reason"] = match entry.get("hold_reason").and_then(Value::as_str) {
                Some(reason) if hold == RecipeHold::Ignored => {
                    clipped(reason, MAX_HOLD_REASON_BYTES).into()
                }
                _ => Value::Null,
            };
        }
        Some(kept)
    });
    Ok(Value::Array(kept.collect()))
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
    let vocabulary = match fields.get("vocabulary") {
        None | Some(Value::Null) => None,
        Some(Value::Array(words)) if words.len() <= MAX_VOCABULARY => Some(
            words
                .iter()
                .map(|entry| {
                    word(entry).ok_or_else(|| {
                        invalid(format!("vocabulary: {entry} is not a primitive name"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(invalid(format!(
                "vocabulary must be a list of at most {MAX_VOCABULARY} names"
            )))
        }
    };
    let claim_bytes = match fields.get("claim_bytes") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(bytes) if (1024..=MAX_CLAIM_BYTES).contains(&bytes) => Some(bytes),
            _ => {
                return Err(invalid(format!(
                    "claim_bytes must be a whole number from 1024 to {MAX_CLAIM_BYTES}"
                )))
            }
        },
    };
    // The site the node's `site.json` names, so a node set up without `--site-root` at its
    // join still takes site releases (issue 27). Null says nothing: the root known stands.
    let site_root = match fields.get("site_root") {
        None => None,
        Some(value) => super::joins::read_site_root(value)?,
    };
    let mut facts = Map::new();
    for (field, value) in &fields {
        let checked = match field.as_str() {
            "recipes" => normalise_recipes(value)?,
            "update_state" => match value.as_str() {
                Some(state) if UPDATE_STATES.contains(&state) => value.clone(),
                _ => {
                    return Err(invalid(format!(
                        "update_state must be one of {}",
                        UPDATE_STATES.join(", ")
                    )))
                }
            },
            "update_offered" => match value {
                Value::Null => value.clone(),
                Value::String(text) if text.len() <= 64 => value.clone(),
                _ => return Err(invalid("update_offered must be a version string")),
            },
            // Why the agent refused the release on offer, in its words (issue 15; an addition
            // to PROTOCOL.md's claim, documented in docs/agent-channel.md).
            "update_reason" => match value {
                Value::Null => value.clone(),
                Value::String(text) if text.len() <= MAX_UPDATE_REASON_BYTES => value.clone(),
                _ => {
                    return Err(invalid(format!(
                    "update_reason must be at most {MAX_UPDATE_REASON_BYTES} bytes of text or null"
                )))
                }
            },
            // The version the agent runs on trial, or null (AG-29; issue 15, documented in
            // docs/agent-channel.md).
            "update_trial" => match value {
                Value::Null => value.clone(),
                Value::String(text) if !text.is_empty() && text.len() <= 64 => value.clone(),
                _ => return Err(invalid("update_trial must be a version string or null")),
            },
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
            // Script trust and the support bundle (issue 15; AG-32, AG-39, AC-49; additions to
            // PROTOCOL.md's claim, documented in docs/agent-channel.md).
            "script_trust" => match value.as_str() {
                Some(state) if SCRIPT_TRUST_STATES.contains(&state) => value.clone(),
                _ => {
                    return Err(invalid(format!(
                        "script_trust must be one of {}",
                        SCRIPT_TRUST_STATES.join(", ")
                    )))
                }
            },
            "script_trust_files" => match value {
                Value::Array(files)
                    if files.len() <= MAX_SCRIPT_TRUST_FILES
                        && files.iter().all(|file| {
                            file.as_str().is_some_and(|path| {
                                !path.is_empty() && path.len() <= MAX_SCRIPT_TRUST_PATH
                            })
                        }) =>
                {
                    value.clone()
                }
                _ => {
                    return Err(invalid(format!(
                        "script_trust_files must be a list of at most {MAX_SCRIPT_TRUST_FILES} paths of 1 to {MAX_SCRIPT_TRUST_PATH} characters"
                    )))
                }
            },
            "bundle_state" => match value.as_str() {
                Some(state) if BUNDLE_STATES.contains(&state) => value.clone(),
                _ => {
                    return Err(invalid(format!(
                        "bundle_state must be one of {}",
                        BUNDLE_STATES.join(", ")
                    )))
                }
            },
            "script_trust_reason" | "bundle_reason" => match value {
                Value::Null => value.clone(),
                Value::String(text) if text.len() <= MAX_UPDATE_REASON_BYTES => value.clone(),
                _ => {
                    return Err(invalid(format!(
                        "{field} must be at most {MAX_UPDATE_REASON_BYTES} bytes of text or null"
                    )))
                }
            },
            _ => continue,
        };
        facts.insert(field.clone(), checked);
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

/// The fact the plane keeps of a node's last refused update (issue 15: the node's Agent tab,
/// the Versions view): `{"state", "offered", "reason", "at"}`. Not a claim field: a claim
/// naming it is set aside like any unknown field, so only the plane writes it.
pub const LAST_UPDATE_REFUSAL: &str = "last_update_refusal";

/// The refusal `facts` report now (`update_state` one of [`UPDATE_REFUSALS`]), without its time.
fn refusal_reported(facts: &Map<String, Value>) -> Option<Value> {
    let state = facts.get("update_state")?.as_str()?;
    UPDATE_REFUSALS.contains(&state).then(|| {
        serde_json::json!({
            "state": state,
            "offered": facts.get("update_offered").cloned().unwrap_or(Value::Null),
            "reason": facts.get("update_reason").cloned().unwrap_or(Value::Null),
        })
    })
}

/// Keeps the node's last refused update: when the facts report a refusal other than the one
/// kept (another state, version or reason), it is kept with `now`; the same refusal reported
/// again keeps its first time; a state that is no refusal leaves the last one as it was.
fn remember_refusal(facts: &mut Map<String, Value>, now: DateTime<Utc>) {
    let Some(mut reported) = refusal_reported(facts) else {
        return;
    };
    let kept = facts.get(LAST_UPDATE_REFUSAL).map(|kept| {
        let mut kept = kept.clone();
        if let Some(kept) = kept.as_object_mut() {
            kept.remove("at");
        }
        kept
    });
    if kept.as_ref() != Some(&reported) {
        reported["at"] = Value::String(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        facts.insert(LAST_UPDATE_REFUSAL.into(), reported);
    }
}

/// The node's facts after `claim` at `now`, or `None` when the claim changes nothing (then
/// nothing is written). A fact the claim does not mention keeps its last value (AC-43, AC-51);
/// a refused update is also kept as [`LAST_UPDATE_REFUSAL`].
pub fn apply(current: &NodeFacts, claim: &Claim, now: DateTime<Utc>) -> Option<NodeFacts> {
    let mut next = current.clone();
    next.agent_version = Some(claim.agent_version.clone());
    if let Some(vocabulary) = &claim.vocabulary {
        next.vocabulary = vocabulary.clone();
    }
    if claim.claim_bytes.is_some() {
        next.claim_bytes = claim.claim_bytes;
    }
    if claim.site_root.is_some() {
        next.site_root = claim.site_root.clone();
    }
    for (field, value) in &claim.facts {
        next.facts.insert(field.clone(), value.clone());
    }
    remember_refusal(&mut next.facts, now);
    (next != *current).then_some(next)
}

/// What the plane knows of a node at a glance, when a claim arrives.
#[derive(Debug, Clone)]
pub struct Glimpse {
    pub paired: bool,
    pub facts: NodeFacts,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub has_pending: bool,
    pub has_running: bool,
    /// A running job has outlived its claim budget (AC-29).
    pub has_stale: bool,
}

/// What a claim (or, with `None`, a long poll looking again) needs beyond its first read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: it is answered "no job" and nothing is written.
    Nothing,
    /// Only its heartbeat stamped (`last_seen_at`, at most every [`LAST_SEEN_RESOLUTION`]):
    /// one statement, no transaction and no lock. A fleet long-polling every 20 to 25 seconds
    /// needs this on about every other claim.
    Heartbeat,
    /// The transaction on the locked node: facts that changed, jobs lost, a job handed out.
    Work,
}

/// Whether a node last heard from at `last_seen_at` is due its heartbeat stamp: never heard
/// from, or not for [`LAST_SEEN_RESOLUTION`].
pub fn heartbeat_due(last_seen_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    last_seen_at.is_none_or(|seen| {
        now.signed_duration_since(seen).to_std().unwrap_or_default() >= LAST_SEEN_RESOLUTION
    })
}

/// What a claim needs: nothing when its facts change nothing, its heartbeat is fresh, no job
/// waits, and nothing running is lost, neither by an idle claim (AC-28) nor by its budget
/// (AC-29); only its heartbeat when that alone is due; otherwise the locked work.
pub fn needs(node: &Glimpse, claim: Option<&Claim>, now: DateTime<Utc>) -> Needs {
    let unchanged = claim.is_none_or(|claim| apply(&node.facts, claim, now).is_none());
    let heard_lately = !heartbeat_due(node.last_seen_at, now);
    let idle_with_running = claim.is_some_and(|claim| claim.idle) && node.has_running;
    let quiet =
        node.paired && unchanged && !node.has_pending && !node.has_stale && !idle_with_running;
    match (quiet, heard_lately || claim.is_none()) {
        (false, _) => Needs::Work,
        (true, true) => Needs::Nothing,
        (true, false) => Needs::Heartbeat,
    }
}

/// Which way an agent request waits for a slot to do its database work. In a restart storm a
/// whole fleet renews its long polls in the same few seconds; a request that moves a job along
/// must not wait behind all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Ahead of plain requests: it reaches a slot kept for work ([`plain_slots`]) and never
    /// waits behind the plain requests queued for theirs.
    Work,
    /// Behind the plain requests before it: at most [`plain_slots`] of them do their database
    /// work at once.
    Plain,
}

/// What an agent request is, as far as its place in line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asking {
    /// A claim; `work_waiting` when a job waits for its node (queued, or rung for since the
    /// node's last claim looked).
    Claim { work_waiting: bool },
    /// A long poll its node's bell woke: a job was queued for it.
    Woken,
    /// A job's result: it ends a job someone waits for, and frees the node for its next one.
    Result,
    /// Anything else (job_status, leave, artifact; a long poll whose wait ran out).
    Other,
}

/// The priority rule: a request goes in the work lane when it moves a job along (a claim for a
/// node with a job waiting, a long poll woken for one, a result) and its signature has proved
/// its node before it waits; everything else (a quiet node renewing its poll, a request whose
/// key is not yet known) is plain. So a stranger never jumps the line, and the work lane holds
/// at most a request or two per job.
pub fn lane(proven: bool, asking: Asking) -> Lane {
    let moves_a_job = matches!(
        asking,
        Asking::Claim { work_waiting: true } | Asking::Woken | Asking::Result
    );
    if proven && moves_a_job {
        Lane::Work
    } else {
        Lane::Plain
    }
}

/// How a node-signed request is taken in, before its signature is checked: at once, or in
/// turn with the rest of a burst (`rpc::INTAKE_PERMITS` at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// Past the turn: it moves a job along.
    AtOnce,
    /// In turn; `unless_rung` when a job queued for its node while it waits lets it go at
    /// once (a claim: it will hand that job out).
    InTurn { unless_rung: bool },
}

/// The intake's rule, [`lane`]'s with the node only named, not yet proven: a request whose key
/// names a node this replica knows and that moves a job along (a result, a claim with work
/// waiting) goes at once; a claim of a known node waits its turn unless its node is rung for;
/// anything else (a stranger's key, a renewal of a node nobody rings for, a status) waits its
/// turn. The key is checked after, and the slots are chosen again then, so a forger naming a
/// busy node gains only an earlier refusal.
pub fn intake(named: bool, asking: Asking) -> Intake {
    match lane(named, asking) {
        Lane::Work => Intake::AtOnce,
        Lane::Plain => Intake::InTurn {
            unless_rung: named && matches!(asking, Asking::Claim { .. }),
        },
    }
}

/// Of `slots` agent slots, how many plain requests may hold at once: a quarter (at least one)
/// is kept for the work lane whenever there are two or more, so a storm of renewals never holds
/// every slot.
pub fn plain_slots(slots: usize) -> usize {
    if slots < 2 {
        return slots.max(1);
    }
    slots - (slots / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(body: Value) -> Result<Claim, AgentError> {
        parse_claim(&serde_json::to_vec(&body).unwrap())
    }

    #[test]
    fn ac_17_unknown_fields_are_set_aside_and_named_and_the_rest_is_taken() {
        let claim = claim(json!({
            "agent_version": "1.2.3", "vocabulary": ["check_status"], "teleport": true, "aardvark": 1
        }))
        .unwrap();
        assert_eq!(claim.ignored_fields, vec!["aardvark", "teleport"]);
        assert_eq!(claim.vocabulary, Some(vec!["check_status".to_string()]));
    }

    #[test]
    fn a_known_field_of_the_wrong_shape_is_refused_naming_it() {
        let cases = [
            (json!({}), "agent_version"),
            (json!({"agent_version": "1", "idle": "yes"}), "idle"),
            (
                json!({"agent_version": "1", "vocabulary": "check_status"}),
                "vocabulary",
            ),
            (
                json!({"agent_version": "1", "vocabulary": ["rm -rf"]}),
                "vocabulary",
            ),
            (
                json!({"agent_version": "1", "claim_bytes": 12}),
                "claim_bytes",
            ),
            (
                json!({"agent_version": "1", "update_state": "sideways"}),
                "update_state",
            ),
            (
                json!({"agent_version": "1", "update_reason": "x".repeat(1025)}),
                "update_reason",
            ),
            (
                json!({"agent_version": "1", "update_reason": 7}),
                "update_reason",
            ),
            (
                json!({"agent_version": "1", "log_access": true}),
                "log_access",
            ),
            (
                json!({"agent_version": "1", "recipes": "disk:armed:pass"}),
                "recipes",
            ),
        ];
        for (body, field) in cases {
            let error = claim(body.clone()).unwrap_err();
            assert!(error.to_string().contains(field), "{body}: {error}");
        }
        assert!(parse_claim(b"[1]").is_err());
    }

    #[test]
    fn ac_49_ag_39_script_trust_and_the_bundle_are_read_from_their_closed_sets_and_bounds() {
        let taken = claim(json!({
            "agent_version": "1", "script_trust": "untrusted_file",
            "script_trust_files": ["bin/host_report.sh"], "script_trust_reason": "modified",
            "bundle_state": "verify_failed", "bundle_reason": null
        }))
        .unwrap();
        assert!(
            taken.ignored_fields.is_empty(),
            "{:?}",
            taken.ignored_fields
        );
        assert_eq!(
            taken.facts["script_trust_files"],
            json!(["bin/host_report.sh"])
        );
        assert_eq!(taken.facts["bundle_state"], "verify_failed");
        // an empty list is the agent saying it looked and every file matches
        let looked = claim(json!({"agent_version": "1", "script_trust": "trusted",
            "script_trust_files": []}))
        .unwrap();
        assert_eq!(looked.facts["script_trust_files"], json!([]));
        let too_many: Vec<String> = (0..65).map(|n| format!("f{n}")).collect();
        for (body, field) in [
            (
                json!({"agent_version": "1", "script_trust": "fine"}),
                "script_trust",
            ),
            (
                json!({"agent_version": "1", "script_trust_files": "bin/a.sh"}),
                "script_trust_files",
            ),
            (
                json!({"agent_version": "1", "script_trust_files": too_many}),
                "script_trust_files",
            ),
            (
                json!({"agent_version": "1", "script_trust_files": [""]}),
                "script_trust_files",
            ),
            (
                json!({"agent_version": "1", "bundle_state": "meh"}),
                "bundle_state",
            ),
            (
                json!({"agent_version": "1", "script_trust_reason": "x".repeat(1025)}),
                "script_trust_reason",
            ),
        ] {
            let error = claim(body.clone()).unwrap_err();
            assert!(error.to_string().contains(field), "{body}: {error}");
        }
    }

    #[test]
    fn ac_45_recipes_keep_only_closed_set_entries() {
        let recipes = normalise_recipes(&json!([
            {"name": "disk_headroom", "mode": "armed", "verdict": "pass"},
            {"name": "tls_expiry", "mode": "report-only", "verdict": "maybe"},
            {"name": "swap", "mode": "not-applicable", "verdict": "fail"},
            {"name": "dns", "mode": "sometimes", "verdict": "pass"},
            {"name": "ntp", "mode": "armed", "verdict": null}
        ]))
        .unwrap();
        assert_eq!(
            recipes,
            json!([
                {"name": "disk_headroom", "mode": "armed", "verdict": "pass"},
                {"name": "swap", "mode": "not-applicable", "verdict": null},
                {"name": "ntp", "mode": "armed", "verdict": null}
            ])
        );
    }

    #[test]
    fn a_recipes_hold_is_kept_in_the_agents_words_with_why_an_ignored_one_is_ignored() {
        let long = "x".repeat(600);
        let recipes = normalise_recipes(&json!([
            {"name": "service_health", "mode": "armed", "verdict": "fail", "hold": "held",
             "hold_reason": "not asked"},
            {"name": "fail2ban", "mode": "armed", "verdict": "fail", "hold": "ignored",
             "hold_reason": "the hold directory has mode 770"},
            {"name": "disk_headroom", "mode": "armed", "verdict": "pass", "hold": "none"},
            {"name": "ntp", "mode": "armed", "verdict": "pass", "hold": "paused"},
            {"name": "swap", "mode": "armed", "verdict": "pass", "hold": "ignored",
             "hold_reason": long},
        ]))
        .unwrap();
        assert_eq!(recipes[0]["hold"], "held");
        assert_eq!(
            recipes[0]["hold_reason"],
            Value::Null,
            "only an ignored hold says why"
        );
        assert_eq!(recipes[1]["hold"], "ignored");
        assert_eq!(recipes[1]["hold_reason"], "the hold directory has mode 770");
        assert_eq!(recipes[2]["hold"], "none");
        assert!(
            recipes[3].get("hold").is_none(),
            "a word outside the set is not kept: {}",
            recipes[3]
        );
        assert_eq!(recipes[3]["verdict"], "pass", "the rest of the entry is");
        assert_eq!(
            recipes[4]["hold_reason"].as_str().unwrap().len(),
            MAX_HOLD_REASON_BYTES
        );
    }

    #[test]
    fn a_claim_that_changes_nothing_writes_nothing_and_absent_facts_stand() {
        let first = claim(json!({
            "agent_version": "1.2.3", "vocabulary": ["check_status"], "log_access": "on",
            "claim_bytes": 1048576
        }))
        .unwrap();
        let stored = apply(&NodeFacts::default(), &first, t0()).unwrap();
        assert_eq!(stored.claim_limit(), 1_048_576);
        assert_eq!(
            apply(&stored, &first, t0()),
            None,
            "the same claim again changes nothing"
        );
        let quieter = claim(json!({"agent_version": "1.2.3", "idle": true})).unwrap();
        assert_eq!(
            apply(&stored, &quieter, t0()),
            None,
            "absent vocabulary and log_access keep their values"
        );
        let upgraded = claim(json!({"agent_version": "1.3.0"})).unwrap();
        let next = apply(&stored, &upgraded, t0()).unwrap();
        assert_eq!(next.agent_version.as_deref(), Some("1.3.0"));
        assert_eq!(next.facts["log_access"], "on");
    }

    #[test]
    fn a_claim_naming_its_site_root_moves_the_nodes_root_and_a_claim_without_one_leaves_it() {
        let joined_siteless = NodeFacts::default();
        let from_site_json =
            claim(json!({"agent_version": "1.2.3", "site_root": "/var/www/site"})).unwrap();
        assert!(from_site_json.ignored_fields.is_empty());
        assert!(
            !from_site_json.facts.contains_key("site_root"),
            "the root is the node's, not one of its other facts"
        );
        let rooted = apply(&joined_siteless, &from_site_json, t0()).unwrap();
        assert_eq!(rooted.site_root.as_deref(), Some("/var/www/site"));
        assert_eq!(apply(&rooted, &from_site_json, t0()), None);
        for silent in [
            json!({"agent_version": "1.2.3"}),
            json!({"agent_version": "1.2.3", "site_root": null}),
        ] {
            let silent = claim(silent).unwrap();
            assert_eq!(apply(&rooted, &silent, t0()), None, "the root known stands");
        }
        let moved = claim(json!({"agent_version": "1.2.3", "site_root": "/srv/shop"})).unwrap();
        let moved = apply(&rooted, &moved, t0()).unwrap();
        assert_eq!(moved.site_root.as_deref(), Some("/srv/shop"));
        for bad in [
            json!("var/www"),
            json!(7),
            json!(format!("/{}", "a".repeat(4096))),
        ] {
            let error = claim(json!({"agent_version": "1", "site_root": bad})).unwrap_err();
            assert!(error.to_string().contains("site_root"), "{bad}: {error}");
        }
    }

    fn t0() -> DateTime<Utc> {
        chrono::TimeZone::timestamp_opt(&Utc, 1_800_000_000, 0).unwrap()
    }

    #[test]
    fn ag_29_update_trial_is_a_version_or_null_and_nothing_else() {
        let on_trial = claim(json!({"agent_version": "1.3.0", "update_trial": "1.3.0"})).unwrap();
        assert_eq!(on_trial.facts["update_trial"], "1.3.0");
        assert!(on_trial.ignored_fields.is_empty());
        let trusted = claim(json!({"agent_version": "1.3.0", "update_trial": null})).unwrap();
        assert_eq!(trusted.facts["update_trial"], Value::Null);
        for bad in [json!(7), json!(""), json!("x".repeat(65))] {
            let error = claim(json!({"agent_version": "1", "update_trial": bad})).unwrap_err();
            assert!(error.to_string().contains("update_trial"), "{error}");
        }
    }

    #[test]
    fn ac_43_a_refused_update_is_kept_with_when_it_was_first_reported_until_another_replaces_it() {
        let refusal = |state: &str, offered: &str, reason: &str| {
            claim(json!({"agent_version": "1.2.0", "update_state": state,
                "update_offered": offered, "update_reason": reason}))
            .unwrap()
        };
        let later = t0() + chrono::Duration::minutes(5);
        let refused = apply(
            &NodeFacts::default(),
            &refusal("verify_failed", "1.3.0", "bad signature"),
            t0(),
        )
        .unwrap();
        assert_eq!(
            refused.facts[LAST_UPDATE_REFUSAL],
            json!({"state": "verify_failed", "offered": "1.3.0", "reason": "bad signature",
                "at": "2027-01-15T08:00:00Z"})
        );
        // The same refusal again changes nothing, its first time stands.
        assert_eq!(
            apply(
                &refused,
                &refusal("verify_failed", "1.3.0", "bad signature"),
                later
            ),
            None
        );
        // Another reason is another refusal, kept with its own time.
        let again = apply(
            &refused,
            &refusal("verify_failed", "1.3.0", "wrong hash"),
            later,
        )
        .unwrap();
        assert_eq!(again.facts[LAST_UPDATE_REFUSAL]["reason"], "wrong hash");
        assert_eq!(
            again.facts[LAST_UPDATE_REFUSAL]["at"],
            "2027-01-15T08:05:00Z"
        );
        // A state that is no refusal leaves the last refusal to read.
        let current = apply(&again, &refusal("current", "1.4.0", ""), later).unwrap();
        assert_eq!(current.facts["update_state"], "current");
        assert_eq!(current.facts[LAST_UPDATE_REFUSAL]["reason"], "wrong hash");
        // A claim cannot write the kept refusal itself.
        let forged =
            claim(json!({"agent_version": "1", LAST_UPDATE_REFUSAL: {"state": "x"}})).unwrap();
        assert_eq!(forged.ignored_fields, vec![LAST_UPDATE_REFUSAL.to_string()]);
        assert!(!forged.facts.contains_key(LAST_UPDATE_REFUSAL));
    }

    #[test]
    fn ac_16_the_claim_limit_is_64_kib_when_not_reported() {
        assert_eq!(NodeFacts::default().claim_limit(), 64 * 1024);
    }

    fn quiet_node(claim: &Claim, now: DateTime<Utc>) -> Glimpse {
        Glimpse {
            paired: true,
            facts: apply(&NodeFacts::default(), claim, now).unwrap(),
            last_seen_at: Some(now - chrono::Duration::seconds(5)),
            has_pending: false,
            has_running: false,
            has_stale: false,
        }
    }

    #[test]
    fn a_quiet_claim_with_nothing_waiting_needs_no_write() {
        let now = Utc::now();
        let same =
            claim(json!({"agent_version": "1.0.0", "vocabulary": ["check_status"]})).unwrap();
        let node = quiet_node(&same, now);
        assert_eq!(needs(&node, Some(&same), now), Needs::Nothing);
        assert_eq!(
            needs(&node, None, now),
            Needs::Nothing,
            "a long poll looking again"
        );
    }

    #[test]
    fn a_quiet_claim_whose_heartbeat_is_due_only_stamps_it() {
        let now = Utc::now();
        let same = claim(json!({"agent_version": "1.0.0"})).unwrap();
        let due = Glimpse {
            last_seen_at: Some(now - chrono::Duration::seconds(30)),
            ..quiet_node(&same, now)
        };
        assert_eq!(needs(&due, Some(&same), now), Needs::Heartbeat);
        let never = Glimpse {
            last_seen_at: None,
            ..due.clone()
        };
        assert_eq!(needs(&never, Some(&same), now), Needs::Heartbeat);
        // A long poll looking again is the same request: its claim stamped it already.
        assert_eq!(needs(&due, None, now), Needs::Nothing);
        // Due, and something else to do: the locked work stamps it too.
        let waiting = Glimpse {
            has_pending: true,
            ..due
        };
        assert_eq!(needs(&waiting, Some(&same), now), Needs::Work);
    }

    #[test]
    fn anything_to_write_hand_out_or_lose_takes_the_locked_path() {
        let now = Utc::now();
        let same = claim(json!({"agent_version": "1.0.0"})).unwrap();
        let quiet = quiet_node(&same, now);
        let newer = claim(json!({"agent_version": "1.1.0"})).unwrap();
        assert_eq!(
            needs(&quiet, Some(&newer), now),
            Needs::Work,
            "facts changed"
        );
        let pending = Glimpse {
            has_pending: true,
            ..quiet.clone()
        };
        assert_eq!(
            needs(&pending, Some(&same), now),
            Needs::Work,
            "a job waits"
        );
        assert_eq!(needs(&pending, None, now), Needs::Work, "woken for a job");
        let stale = Glimpse {
            has_stale: true,
            ..quiet.clone()
        };
        assert_eq!(needs(&stale, Some(&same), now), Needs::Work, "AC-29");
        let idle = claim(json!({"agent_version": "1.0.0", "idle": true})).unwrap();
        let running = Glimpse {
            has_running: true,
            ..quiet.clone()
        };
        assert_eq!(
            needs(&running, Some(&idle), now),
            Needs::Work,
            "AC-28: an idle claim loses what runs"
        );
        assert_eq!(
            needs(&running, Some(&same), now),
            Needs::Nothing,
            "a busy node claiming is told no job"
        );
        let unpaired = Glimpse {
            paired: false,
            ..quiet
        };
        assert_eq!(needs(&unpaired, Some(&same), now), Needs::Work);
    }

    /// A claim for a node with a job waiting, and a quiet node's renewal.
    const WAITING: Asking = Asking::Claim { work_waiting: true };
    const QUIET: Asking = Asking::Claim {
        work_waiting: false,
    };

    // Issue 10, "a restart storm does not bury work": the claims that move a job go ahead of a
    // fleet renewing its polls; a request proves its node before it may go ahead.
    #[test]
    fn work_goes_ahead_of_plain_renewals_and_only_for_a_proven_node() {
        assert_eq!(lane(true, WAITING), Lane::Work, "a job waits for its node");
        assert_eq!(lane(true, Asking::Woken), Lane::Work, "woken for a job");
        assert_eq!(lane(true, Asking::Result), Lane::Work, "a job ends");
        assert_eq!(lane(true, QUIET), Lane::Plain, "a quiet node's renewal");
        assert_eq!(lane(true, Asking::Other), Lane::Plain);
        for asking in [WAITING, Asking::Woken, Asking::Result, QUIET, Asking::Other] {
            assert_eq!(
                lane(false, asking),
                Lane::Plain,
                "{asking:?}: not proven before it waits"
            );
        }
    }

    // Issue 10's storm, at the intake (before a signature is checked): a renewal waits its turn
    // behind the storm, a request that moves a job does not, and a key nobody knows never goes
    // ahead.
    #[test]
    fn a_known_node_moving_a_job_is_taken_in_at_once_and_a_renewal_waits_its_turn_unless_rung() {
        assert_eq!(intake(true, WAITING), Intake::AtOnce, "a job waits for it");
        assert_eq!(intake(true, Asking::Result), Intake::AtOnce, "a job ends");
        assert_eq!(
            intake(true, QUIET),
            Intake::InTurn { unless_rung: true },
            "a quiet node's renewal waits, until a job is queued for it"
        );
        assert_eq!(
            intake(true, Asking::Other),
            Intake::InTurn { unless_rung: false },
            "a status or a leave waits its turn, rung or not"
        );
        for asking in [WAITING, Asking::Result, QUIET, Asking::Other] {
            assert_eq!(
                intake(false, asking),
                Intake::InTurn { unless_rung: false },
                "{asking:?}: a key this replica does not know waits its turn"
            );
        }
    }

    #[test]
    fn plain_requests_never_hold_every_slot_when_there_are_two() {
        assert_eq!(
            plain_slots(13),
            10,
            "the benchmark's pool of 16: 13 agent slots"
        );
        assert_eq!(plain_slots(4), 3);
        assert_eq!(plain_slots(2), 1);
        assert_eq!(plain_slots(1), 1, "one slot is shared: nothing to keep");
        assert_eq!(plain_slots(0), 1);
        for slots in 2..64 {
            let plain = plain_slots(slots);
            assert!(plain >= 1 && plain < slots, "{slots}: {plain}");
        }
    }
}
