//! A node's stored facts after a claim (AC-43, AC-51), and its last refused update.

use super::*;

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
