//! A rollout's page: its state (and, halted, the node and the reason), its stages with their
//! budgets and soaks, every node's step — phase, verdict, reason, why it waits — with the pages
//! it checked before and after the apply side by side, and the acts at level 8.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::rollouts::staged::{
    ActOnRollout, GetRollout, ProbeAnswer, RolloutView, StageView, StepPhase, StepVerdict,
};
use capstan_events::NodeId;

use super::{ask, state_words, under_way};
use crate::{
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{
        acted,
        format::{ago, Ago},
        guard::{FormFields, PathId},
        render, Chrome, UiError, UiSession,
    },
};

/// Seconds between refreshes of a rollout under way.
const REFRESH_SECS: u32 = 5;

/// The acts, with their button words, in the order the page offers them.
const ACTS: [(&str, &str); 4] = [
    ("pause", "Pause"),
    ("resume", "Resume"),
    ("retry", "Retry failed nodes"),
    ("stop", "Stop now"),
];

struct Probe {
    page: String,
    before: String,
    after: String,
}

fn probe_words(answer: Option<&ProbeAnswer>) -> String {
    match answer {
        None => "not checked".into(),
        Some(answer) => {
            let status = answer
                .status
                .map(|status| status.to_string())
                .unwrap_or_else(|| "no answer".into());
            let mut words = format!("{status}, {} errors", answer.errors);
            if !answer.failed_assets.is_empty() {
                words.push_str(&format!(
                    ", failed: {}",
                    crate::ui::format::clip(&answer.failed_assets.join(" "), 300)
                ));
            }
            words
        }
    }
}

struct Step {
    id: i64,
    node_id: NodeId,
    node: String,
    machine: String,
    stage: u32,
    phase: StepPhase,
    verdict: StepVerdict,
    reason: String,
    waiting_on: String,
    attempt: u32,
    probes: Vec<Probe>,
}

struct Stage {
    number: u32,
    budget: String,
    soak: String,
}

fn stage(view: &StageView) -> Stage {
    Stage {
        number: view.stage + 1,
        budget: match (view.max_failed, view.max_failed_percent) {
            (Some(0), _) | (None, None) => "the first miss halts".into(),
            (Some(nodes), _) => format!("halts past {nodes} failed nodes"),
            (None, Some(percent)) => format!("halts past {percent}% failed"),
        },
        soak: if view.soak_secs == 0 {
            "no soak".into()
        } else {
            format!("soak {} min", view.soak_secs.div_ceil(60))
        },
    }
}

#[derive(Template)]
#[template(path = "rollout.html")]
struct RolloutPage {
    chrome: Chrome,
    id: i64,
    kind: String,
    version: String,
    state: String,
    state_words: &'static str,
    live: bool,
    refresh_secs: u32,
    halted_at: Option<NodeId>,
    halt_reason: String,
    stage: u32,
    stages: Vec<Stage>,
    pages: Vec<String>,
    soak_until: Option<Ago>,
    started: Ago,
    started_by: String,
    finished: Option<Ago>,
    passed: u32,
    failed: u32,
    skipped: u32,
    total: u32,
    steps: Vec<Step>,
    left_out: Vec<(NodeId, String, String)>,
    can_act: bool,
    acts: &'static [(&'static str, &'static str)],
}

fn page_of(session: &UiSession, headers: &HeaderMap, view: RolloutView) -> RolloutPage {
    let steps = view
        .steps
        .iter()
        .map(|step| Step {
            id: step.step_id,
            node_id: step.node_id,
            node: if step.node_name.is_empty() {
                format!("node {}", step.node_id)
            } else {
                step.node_name.clone()
            },
            machine: step.machine.clone(),
            stage: step.stage + 1,
            phase: step.phase,
            verdict: step.verdict,
            reason: step.reason.clone().unwrap_or_default(),
            waiting_on: step.waiting_on.clone().unwrap_or_default(),
            attempt: step.attempt,
            probes: step
                .probes
                .iter()
                .map(|probe| Probe {
                    page: format!("{} {}", probe.viewer, probe.path),
                    before: probe_words(probe.before.as_ref()),
                    after: probe_words(probe.after.as_ref()),
                })
                .collect(),
        })
        .collect();
    RolloutPage {
        chrome: Chrome::signed_in(session, headers, format!("Rollout {}", view.id), "rollouts"),
        id: view.id,
        kind: view.kind.to_string(),
        version: view.version.clone(),
        state_words: state_words(view.state),
        live: under_way(view.state),
        refresh_secs: REFRESH_SECS,
        state: view.state.to_string(),
        halted_at: view.halted_at_node,
        halt_reason: view.halt_reason.clone().unwrap_or_default(),
        stage: view.stage + 1,
        stages: view.stages.iter().map(stage).collect(),
        pages: view.pages.clone(),
        soak_until: view.soak_until.map(ago),
        started: ago(view.started_at),
        started_by: view.started_by.clone(),
        finished: view.finished_at.map(ago),
        passed: view.passed,
        failed: view.failed,
        skipped: view.skipped,
        total: view.total,
        steps,
        left_out: view
            .left_out
            .iter()
            .map(|left| (left.node_id, left.name.clone(), left.reason.clone()))
            .collect(),
        can_act: session.level >= capstan_events::rpc::Level::Change,
        acts: &ACTS,
    }
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    PathId(id): PathId,
) -> Result<Response, UiError> {
    let request = GetRollout {
        actor: session.actor(),
        rollout_id: id,
    };
    let view: RolloutView = ask(&state, &request)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let page = page_of(&session, &headers, view);
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// One of the act buttons: `do` is stop, pause, resume or retry.
pub async fn act(
    State(state): State<AppState>,
    session: UiSession,
    PathId(id): PathId,
    fields: FormFields,
) -> Response {
    let back = format!("/ui/rollouts/{id}");
    let act = fields.get("do").unwrap_or_default().to_string();
    let request = ActOnRollout {
        actor: session.actor(),
        rollout_id: id,
        act: act.clone(),
    };
    let answer: Result<RolloutView, ApiError> = ask(&state, &request).await;
    let outcome = answer.map(|view| {
        format!(
            "Rollout {id} is {}.",
            state_words(view.state).to_lowercase()
        )
    });
    let mut response = acted(&back, outcome);
    response
        .extensions_mut()
        .insert(AuditDetail(serde_json::json!({"do": act})));
    response
}
