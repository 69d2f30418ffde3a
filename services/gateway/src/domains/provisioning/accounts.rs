//! The cloud accounts page (`/ui/provisioning/accounts`, level 10, PV-12, PV-57, PV-58): our
//! accounts without their tokens, each flagged Main or Test, a form to add one by its API token
//! (the provider is asked with it first; sealed at rest and never shown again) and a button to
//! forget one. The token goes from the form to the service and nowhere else: not the flash,
//! not the audit row, not a log line.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::provisioning::{
    rpc::{AccountView, Accounts, DeleteAccount, ListAccounts},
    AccountFlag, CloudProvider,
};
use capstan_events::Word as _;
use std::str::FromStr;

use super::{api::AccountBody, api::WriteOnly, flag_words};
use crate::{
    ask::ask,
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{
        acted,
        format::{ago, clip, Ago},
        guard::{FormFields, PathId},
        render, Chrome, UiError, UiSession,
    },
};

/// Where the account forms send the browser back to.
const BACK: &str = "/ui/provisioning/accounts";

struct Line {
    id: i64,
    provider: &'static str,
    label: String,
    flag: &'static str,
    flag_words: &'static str,
    added: Ago,
    added_by: String,
}

fn line(account: &AccountView) -> Line {
    Line {
        id: account.id,
        provider: provider_words(account.provider),
        label: clip(&account.label, 100),
        flag: account.flag.as_str(),
        flag_words: flag_words(account.flag),
        added: ago(account.created_at),
        added_by: clip(&account.created_by, 64),
    }
}

fn provider_words(provider: CloudProvider) -> &'static str {
    match provider {
        CloudProvider::Linode => "Linode",
        CloudProvider::Hetzner => "Hetzner Cloud",
    }
}

#[derive(Template)]
#[template(path = "provisioning_accounts.html")]
struct AccountsPage {
    chrome: Chrome,
    accounts: Vec<Line>,
    seal_key_set: bool,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let listed: Accounts = ask(
        &state,
        &ListAccounts {
            actor: session.actor(),
        },
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let page = AccountsPage {
        chrome: Chrome::signed_in(&session, &headers, "Cloud accounts", "cloud-accounts"),
        accounts: listed.accounts.iter().map(line).collect(),
        seal_key_set: listed.seal_key_set,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// The add form's fields as the API's body, naming the field that is wrong.
fn read(fields: &FormFields) -> Result<AccountBody, ApiError> {
    let provider = fields.get("provider").unwrap_or_default();
    let provider = CloudProvider::from_str(provider)
        .map_err(|_| ApiError::invalid("provider", "must be linode or hetzner"))?;
    let flag = fields.get("flag").unwrap_or_default();
    let flag = AccountFlag::from_str(flag)
        .map_err(|_| ApiError::invalid("flag", "must be main or test"))?;
    Ok(AccountBody {
        provider,
        label: fields.get("label").unwrap_or_default().trim().to_string(),
        flag,
        token: WriteOnly::new(fields.get("token").unwrap_or_default().trim()),
    })
}

/// "Add the account".
pub async fn add(
    State(state): State<AppState>,
    session: UiSession,
    fields: FormFields,
) -> Response {
    let body = match read(&fields) {
        Ok(body) => body,
        Err(refusal) => return acted(BACK, Err(refusal)),
    };
    let detail = body.audited();
    let label = clip(&body.label, 100);
    let answer = ask(&state, &body.into_request(session.actor())).await;
    let added = answer.as_ref().map(|account| account.id).ok();
    let mut response = acted(
        BACK,
        answer.map(|_| {
            format!("Cloud account {label} added; its token is sealed and will not be shown again.")
        }),
    );
    response.extensions_mut().insert(AuditDetail(
        serde_json::json!({"account_id": added, "account": detail}),
    ));
    response
}

/// "Forget this account".
pub async fn delete(
    State(state): State<AppState>,
    session: UiSession,
    PathId(account_id): PathId,
) -> Response {
    let request = DeleteAccount {
        actor: session.actor(),
        account_id,
    };
    let answer = ask(&state, &request).await;
    let mut response = acted(
        BACK,
        answer.map(|account| {
            format!(
                "Cloud account {} forgotten; its servers are left as they are.",
                clip(&account.label, 100)
            )
        }),
    );
    response
        .extensions_mut()
        .insert(AuditDetail(serde_json::json!({"account_id": account_id})));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_add_form_reads_into_the_apis_body_and_names_a_bad_field() {
        let body = read(&FormFields::of(&[
            ("provider", "linode"),
            ("label", " ours "),
            ("flag", "test"),
            ("token", "tok-1"),
        ]))
        .unwrap();
        assert_eq!(body.provider, CloudProvider::Linode);
        assert_eq!(body.flag, AccountFlag::Test);
        assert_eq!(body.label, "ours");
        for (field, pairs) in [
            ("provider", [("provider", "aws"), ("flag", "main")]),
            ("flag", [("provider", "hetzner"), ("flag", "prod")]),
        ] {
            let refusal = read(&FormFields::of(&pairs)).unwrap_err();
            assert!(
                refusal.message.starts_with(&format!("{field}:")),
                "{}",
                refusal.message
            );
        }
    }
}
