//! A provision's page (`/ui/provisioning/provisions/{id}`, level 7): where it stands, each step
//! it entered with its time and note, the instance and its addresses, the install's log as the
//! service gives it (every secret already masked, PV-05), the agent key the install printed
//! (AC-10), the node once it has one, and the auto-approval verdict over its agent's join with
//! its reasons (AC-09; a key that differs red). A failed install has Retry at level 10 (PV-02).
//! While it is under way the page refreshes itself every few seconds (no script).

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::provisioning::{
    provisions::{GetProvision, ProvisionView, RetryProvision, VerdictView},
    ProvisionStep,
};
use capstan_events::rpc::Level;
use capstan_events::{NodeId, Word as _};

use super::{flag_words, in_flight, kind_words, step_words};
use crate::{
    ask::ask,
    state::AppState,
    ui::{
        acted,
        format::{ago, clip, fingerprint_groups, Ago},
        guard::PathId,
        render, Chrome, UiError, UiSession,
    },
};

/// Seconds between refreshes of a provision under way.
const REFRESH_SECS: u32 = 3;

/// The longest install log the page draws (its end, where a failure shows).
const LOG_SHOWN: usize = 64 * 1024;

struct StepLine {
    step: &'static str,
    words: &'static str,
    at: Ago,
    detail: Option<String>,
}

struct Verdict {
    approved: bool,
    reasons: Vec<String>,
    key_differs: bool,
    second_join: bool,
    judged: Ago,
}

fn verdict(view: &VerdictView) -> Verdict {
    Verdict {
        approved: view.approved,
        reasons: view
            .reasons
            .iter()
            .map(|reason| clip(reason, 300))
            .collect(),
        key_differs: view.key_differs,
        second_join: view.second_join,
        judged: ago(view.judged_at),
    }
}

#[derive(Template)]
#[template(path = "provisioning_provision.html")]
struct ProvisionPage {
    chrome: Chrome,
    id: i64,
    name: String,
    kind: &'static str,
    account: String,
    flag: &'static str,
    provider: &'static str,
    region: String,
    size: String,
    image: String,
    step: &'static str,
    step_words: &'static str,
    since: Ago,
    failure: Option<String>,
    retries: u32,
    instance: Option<String>,
    addresses: Vec<String>,
    node_id: Option<NodeId>,
    expected_key: Option<String>,
    password_retired: bool,
    steps: Vec<StepLine>,
    log: String,
    log_clipped: bool,
    verdict: Option<Verdict>,
    requested_by: String,
    requested: Ago,
    can_retry: bool,
    live: bool,
    refresh_secs: u32,
}

/// The end of `log`, at most [`LOG_SHOWN`] bytes, cut at a character's edge.
fn log_end(log: &str) -> (String, bool) {
    if log.len() <= LOG_SHOWN {
        return (log.to_string(), false);
    }
    let mut start = log.len() - LOG_SHOWN;
    while !log.is_char_boundary(start) {
        start += 1;
    }
    (log[start..].to_string(), true)
}

fn page_of(provision: &ProvisionView, session: &UiSession, headers: &HeaderMap) -> ProvisionPage {
    let (log, log_clipped) = log_end(&provision.install_log);
    ProvisionPage {
        chrome: Chrome::signed_in(
            session,
            headers,
            format!("Provision {}", clip(&provision.name, 64)),
            "provisioning",
        ),
        id: provision.id,
        name: clip(&provision.name, 64),
        kind: kind_words(provision.kind),
        account: clip(&provision.account_label, 100),
        flag: flag_words(provision.flag),
        provider: provision.provider.as_str(),
        region: clip(&provision.region, 64),
        size: clip(&provision.size, 64),
        image: clip(&provision.image, 100),
        step: provision.step.as_str(),
        step_words: step_words(provision.step),
        since: ago(provision.step_since),
        failure: provision.failure.as_deref().map(|text| clip(text, 2000)),
        retries: provision.retries,
        instance: provision.instance_id.as_deref().map(|id| clip(id, 100)),
        addresses: provision
            .ipv4
            .iter()
            .chain(&provision.ipv6)
            .map(|address| clip(address, 64))
            .collect(),
        node_id: provision.node_id,
        expected_key: provision.expected_key.as_deref().map(fingerprint_groups),
        password_retired: provision.password_retired,
        steps: provision
            .steps
            .iter()
            .map(|step| StepLine {
                step: step.step.as_str(),
                words: step_words(step.step),
                at: ago(step.at),
                detail: step.detail.as_deref().map(|text| clip(text, 500)),
            })
            .collect(),
        log,
        log_clipped,
        verdict: provision.approval.as_ref().map(verdict),
        requested_by: clip(&provision.requested_by, 64),
        requested: ago(provision.requested_at),
        can_retry: session.level >= Level::Admin && provision.step == ProvisionStep::InstallFailed,
        live: in_flight(provision.step),
        refresh_secs: REFRESH_SECS,
    }
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    PathId(provision_id): PathId,
) -> Result<Response, UiError> {
    let request = GetProvision {
        actor: session.actor(),
        provision_id,
    };
    let provision = ask(&state, &request)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let page = page_of(&provision, &session, &headers);
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// "Retry the install".
pub async fn retry(
    State(state): State<AppState>,
    session: UiSession,
    PathId(provision_id): PathId,
) -> Response {
    let request = RetryProvision {
        actor: session.actor(),
        provision_id,
    };
    let answer = ask(&state, &request).await;
    acted(
        &format!("/ui/provisioning/provisions/{provision_id}"),
        answer.map(|provision| {
            format!(
                "Retrying the install of {}; its steps follow here.",
                clip(&provision.name, 64)
            )
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_log_is_cut_to_its_end_at_a_characters_edge() {
        let short = "installing\nok\n";
        assert_eq!(log_end(short), (short.to_string(), false));
        let long = format!("{}é{}", "a".repeat(LOG_SHOWN), "tail");
        let (end, clipped) = log_end(&long);
        assert!(clipped);
        assert!(end.ends_with("tail"));
        assert!(end.len() <= LOG_SHOWN);
    }
}
