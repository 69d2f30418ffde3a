//! What a pending join's card shows when the join matches a provision (AC-09, AC-11): the
//! provision's name (a link to its page), its instance and age, and why the join is still
//! pending in the plane's words, a key that differs from the one the install printed in red,
//! and a second join from the address after the node's agent was admitted. The agent
//! channel's dashboard and joins page ask for these with a short wait; a join from a machine
//! the plane did not provision has none, and without an answer the cards show nothing more.

use capstan_events::agent_channel::rpc::JoinView;
use capstan_events::provisioning::provisions::{JoinVerdicts, VerdictView, JOIN_VERDICTS_MAX};
use capstan_events::rpc::Actor;
use std::collections::HashMap;
use std::time::Duration;
use uuid::Uuid;

use crate::{
    state::AppState,
    ui::format::{ago, clip, Ago},
};

/// The longest a joins page waits for the verdicts.
const VERDICTS_WAIT: Duration = Duration::from_millis(1500);

/// A join's provision, as its card shows it.
#[derive(Debug, Clone)]
pub struct JoinProvision {
    pub provision_id: i64,
    pub name: String,
    pub instance: Option<String>,
    pub age: Ago,
    pub approved: bool,
    pub reasons: Vec<String>,
    pub key_differs: bool,
    pub second_join: bool,
}

fn card(verdict: &VerdictView) -> JoinProvision {
    JoinProvision {
        provision_id: verdict.provision_id,
        name: clip(&verdict.provision_name, 64),
        instance: verdict.instance_id.as_deref().map(|id| clip(id, 100)),
        age: ago(verdict.provision_requested_at),
        approved: verdict.approved,
        reasons: verdict
            .reasons
            .iter()
            .map(|reason| clip(reason, 300))
            .collect(),
        key_differs: verdict.key_differs,
        second_join: verdict.second_join,
    }
}

/// The cards of those of `joins` that match a provision, by join id.
pub async fn join_cards(
    state: &AppState,
    actor: &Actor,
    joins: &[JoinView],
) -> HashMap<Uuid, JoinProvision> {
    if joins.is_empty() {
        return HashMap::new();
    }
    let request = JoinVerdicts {
        actor: actor.clone(),
        join_ids: joins
            .iter()
            .take(JOIN_VERDICTS_MAX)
            .map(|join| join.id)
            .collect(),
    };
    match state
        .bus
        .ask(&request, VERDICTS_WAIT.min(state.rpc_timeout))
        .await
    {
        Ok(verdicts) => verdicts
            .verdicts
            .iter()
            .map(|verdict| (verdict.join_id, card(verdict)))
            .collect(),
        Err(error) => {
            tracing::debug!(error = %error.message, "no provisioning verdicts for these joins");
            HashMap::new()
        }
    }
}
