//! AC-45: a claim's `recipes` report, kept to its closed sets.

use super::*;

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
