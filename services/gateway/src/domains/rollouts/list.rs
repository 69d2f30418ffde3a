//! The rollouts list and the start form: the release's version, the stages one a line (the
//! nodes' ids, comma-separated), an error budget and a soak for every stage, and up to five
//! pages to check. A rollout from the form with one node a line goes one node at a time.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::rollouts::staged::{
    ListRollouts, RolloutView, Rollouts, StageRequest, StartRollout,
};
use capstan_events::NodeId;

use super::{ask, state_words};
use crate::{
    error::ApiError,
    state::AppState,
    ui::{
        acted,
        format::{ago, Ago},
        guard::FormFields,
        render, Chrome, UiError, UiSession,
    },
};

/// The most lines (stages) the form takes.
const MAX_STAGE_LINES: usize = 20;

pub struct Row {
    pub id: i64,
    pub kind: String,
    pub version: String,
    pub state: String,
    pub state_words: &'static str,
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
    pub total: u32,
    pub started: Ago,
    pub started_by: String,
}

fn row(view: &RolloutView) -> Row {
    Row {
        id: view.id,
        kind: view.kind.to_string(),
        version: view.version.clone(),
        state: view.state.to_string(),
        state_words: state_words(view.state),
        passed: view.passed,
        failed: view.failed,
        skipped: view.skipped,
        total: view.total,
        started: ago(view.started_at),
        started_by: view.started_by.clone(),
    }
}

#[derive(Template)]
#[template(path = "rollouts.html")]
struct ListPage {
    chrome: Chrome,
    rows: Vec<Row>,
    can_start: bool,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let answer: Rollouts = ask(
        &state,
        &ListRollouts {
            actor: session.actor(),
        },
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let page = ListPage {
        chrome: Chrome::signed_in(&session, &headers, "Rollouts", "rollouts"),
        rows: answer.rollouts.iter().map(row).collect(),
        can_start: session.level >= capstan_events::rpc::Level::Change,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// The stages a form's lines name: each line the node ids of one stage, comma- or
/// space-separated, with the form's budget and soak on every stage.
fn stages(fields: &FormFields) -> Result<Vec<StageRequest>, ApiError> {
    let number = |name: &'static str| -> Result<Option<u32>, ApiError> {
        match fields
            .get(name)
            .map(str::trim)
            .filter(|text| !text.is_empty())
        {
            None => Ok(None),
            Some(text) => text
                .parse::<u32>()
                .map(Some)
                .map_err(|_| ApiError::invalid(name, "must be a whole number")),
        }
    };
    let max_failed = number("max_failed")?;
    let soak_secs = number("soak_minutes")?.map(|minutes| minutes.saturating_mul(60));
    let mut stages = Vec::new();
    for (index, line) in fields
        .get("stages")
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .enumerate()
    {
        if index >= MAX_STAGE_LINES {
            return Err(ApiError::invalid(
                "stages",
                format!("at most {MAX_STAGE_LINES} lines (stages)"),
            ));
        }
        let nodes = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|word| !word.is_empty())
            .map(|word| {
                word.parse::<NodeId>()
                    .ok()
                    .filter(|id| id.get() > 0)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "stages",
                            format!("line {}: {word:?} is not a node id", index + 1),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        stages.push(StageRequest {
            nodes,
            max_failed,
            max_failed_percent: None,
            soak_secs,
        });
    }
    Ok(stages)
}

pub async fn start(
    State(state): State<AppState>,
    session: UiSession,
    fields: FormFields,
) -> Response {
    let stages = match stages(&fields) {
        Ok(stages) => stages,
        Err(refusal) => return acted("/ui/rollouts", Err(refusal)),
    };
    let request = StartRollout {
        actor: session.actor(),
        kind: fields.get("kind").map(str::to_string),
        version: fields.get("version").map(|v| v.trim().to_string()),
        stages,
        all: fields.get("all") == Some("on"),
        pages: fields.get("pages").map(str::to_string),
    };
    let answer: Result<RolloutView, ApiError> = ask(&state, &request).await;
    match answer {
        Ok(view) => acted(
            &format!("/ui/rollouts/{}", view.id),
            Ok(format!("Rollout {} started.", view.id)),
        ),
        Err(refusal) => acted("/ui/rollouts", Err(refusal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> FormFields {
        FormFields::of(pairs)
    }

    #[test]
    fn each_line_is_a_stage_of_node_ids_with_the_forms_budget_and_soak() {
        let read = stages(&form(&[
            ("stages", "3\n\n4, 5 6\n"),
            ("max_failed", "1"),
            ("soak_minutes", "2"),
        ]))
        .unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].nodes, vec![NodeId(3)]);
        assert_eq!(read[1].nodes, vec![NodeId(4), NodeId(5), NodeId(6)]);
        assert_eq!(read[1].max_failed, Some(1));
        assert_eq!(read[1].soak_secs, Some(120));
        assert!(stages(&form(&[("stages", "3\nweb-1")])).is_err());
        assert!(stages(&form(&[("stages", "1"), ("max_failed", "x")])).is_err());
    }
}
