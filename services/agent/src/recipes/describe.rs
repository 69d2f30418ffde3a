//! `capstan-agent recipes`: each recipe as its ledger tells it, for a person at the machine.

use capstan_events::agent_channel::recipes::{RecipeHold, RecipeMode};
use capstan_events::Word as _;

use super::{applies, files::Ledgers, placement};
use crate::{
    config::Config,
    domain::recipes::{registry::RECIPES, Mode, Verdict},
    state::StateDir,
};

/// What `capstan-agent recipes` prints: each recipe's mode, last verdict, attempts in this
/// run, open case and hold, read from the ledgers.
pub fn describe(state: &StateDir, config: &Config) -> Vec<String> {
    let ledgers = Ledgers::new(state, config.site_root.as_deref());
    let placement = placement(config);
    let mut lines = Vec::new();
    for recipe in RECIPES {
        if let Err(reason) = applies(recipe, &placement) {
            lines.push(format!(
                "{}: {} ({reason})",
                recipe.name,
                RecipeMode::NotApplicable.as_str()
            ));
            continue;
        }
        let kind = if recipe.check_only() {
            "check-only"
        } else {
            "repairs"
        };
        let memory = match ledgers.read(recipe.name) {
            Ok(memory) => memory,
            Err(why) => {
                lines.push(format!("{}: the ledger cannot be read: {why}", recipe.name));
                continue;
            }
        };
        let verdict = memory.verdict.map_or("not checked yet", Verdict::as_str);
        lines.push(format!(
            "{}: {} ({kind}), last check: {verdict}",
            recipe.name,
            Mode::compiled().reported().as_str()
        ));
        if !recipe.check_only() {
            let attempts: Vec<String> = memory
                .attempts
                .iter()
                .map(|record| {
                    format!(
                        "#{} {} {}",
                        record.attempt,
                        record.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        record.outcome.map_or("running", |outcome| outcome.as_str())
                    )
                })
                .collect();
            lines.push(format!(
                "  attempts in this run: {} of 3{}",
                memory.attempts.len(),
                if attempts.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", attempts.join(", "))
                }
            ));
        }
        match memory.open_case() {
            Some(case) => lines.push(format!(
                "  open case: {} since {}, {} notes: {}",
                case.id,
                case.opened_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                case.notes,
                case.summary
            )),
            None => lines.push("  open case: none".into()),
        }
        // The hold's word is the claim's (`RecipeHold`), so the Recipes tab says the same.
        let hold = match ledgers.hold(recipe.name).reported() {
            (hold @ RecipeHold::Held, _) => format!(
                "{} (repairs nothing until hold/{} is removed)",
                hold.as_str(),
                recipe.name
            ),
            (hold, Some(why)) => format!("{}: {why}", hold.as_str()),
            (hold, None) => hold.as_str().to_string(),
        };
        lines.push(format!("  hold: {hold}"));
    }
    lines
}
