//! The provisions list (`/ui/provisioning`, level 7) under Main | Test tabs (PV-13: "`?account=`
//! plus a remembering cookie"; the other tab shows its count), and the "New server" form
//! (`/ui/provisioning/new`, level 10, PV-03): the account, then the kind, a region and size the
//! account's provider sells (its offer, asked just now), the name and the image. The service
//! checks every word again and refuses a size the region does not sell, naming those it does.

use askama::Template;
use axum::{
    extract::State,
    http::{header, HeaderMap, StatusCode, Uri},
    response::Response,
};
use capstan_events::provisioning::{
    provisions::{ListProvisions, ProvisionView, Provisions},
    rpc::{AccountOffer, AccountView, Accounts, ListAccounts, Offer},
    AccountFlag, InstallKind,
};
use capstan_events::rpc::Level;
use capstan_events::Word as _;
use std::str::FromStr;

use super::{api::ProvisionBody, flag_words, in_flight, kind_words, step_words};
use crate::{
    ask::ask,
    error::ApiError,
    identity::AuditDetail,
    input::QueryParams,
    state::AppState,
    ui::{
        acted, cookies,
        format::{ago, clip, Ago},
        guard::FormFields,
        redirect_with, refusal_sentence, render, Chrome, Flash, UiError, UiSession,
    },
};

/// One provision's row.
pub struct Row {
    pub id: i64,
    pub name: String,
    pub kind: &'static str,
    pub account: String,
    pub region: String,
    pub size: String,
    pub step: &'static str,
    pub step_words: &'static str,
    pub since: Ago,
    pub requested_by: String,
    pub failure: Option<String>,
}

pub fn row(provision: &ProvisionView) -> Row {
    Row {
        id: provision.id,
        name: clip(&provision.name, 64),
        kind: kind_words(provision.kind),
        account: clip(&provision.account_label, 100),
        region: clip(&provision.region, 64),
        size: clip(&provision.size, 64),
        step: provision.step.as_str(),
        step_words: step_words(provision.step),
        since: ago(provision.step_since),
        requested_by: clip(&provision.requested_by, 64),
        failure: provision
            .failure
            .as_deref()
            .map(|failure| clip(failure, 300)),
    }
}

/// The Main | Test tab asked for (`?account=`), else the one remembered, else Main; and whether
/// it was asked for (then the cookie remembers it).
fn tab_of(query: &QueryParams, headers: &HeaderMap) -> Result<(AccountFlag, bool), ApiError> {
    if let Some(asked) = query.get::<AccountFlag>("account", "main or test")? {
        return Ok((asked, true));
    }
    let remembered = cookies::read(headers, cookies::ACCOUNT_TAB_COOKIE)
        .and_then(|value| AccountFlag::from_str(&value).ok());
    Ok((remembered.unwrap_or(AccountFlag::Main), false))
}

/// The tab that is not `tab`.
fn other(tab: AccountFlag) -> AccountFlag {
    match tab {
        AccountFlag::Main => AccountFlag::Test,
        AccountFlag::Test => AccountFlag::Main,
    }
}

fn bad_query(refusal: &ApiError, session: &UiSession) -> UiError {
    UiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "This page cannot be shown",
        refusal_sentence(refusal),
    )
    .with_session(session)
}

#[derive(Template)]
#[template(path = "provisioning_list.html")]
struct ListPage {
    chrome: Chrome,
    tab: &'static str,
    tab_words: &'static str,
    other: &'static str,
    other_words: &'static str,
    /// How many provisions the other tab holds (`None`: it did not answer).
    other_count: Option<usize>,
    other_in_flight: usize,
    rows: Vec<Row>,
    can_request: bool,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, UiError> {
    let (tab, chosen) = QueryParams::parse(&uri, &["account"])
        .and_then(|query| tab_of(&query, &headers))
        .map_err(|refusal| bad_query(&refusal, &session))?;
    let listing = |flag| ListProvisions {
        actor: session.actor(),
        flag: Some(flag),
        in_flight: false,
    };
    let (this_tab, other_tab) = (listing(tab), listing(other(tab)));
    let (shown, others) = tokio::join!(ask(&state, &this_tab), ask(&state, &other_tab));
    let shown: Provisions = shown.map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let others = others.ok();
    let page = ListPage {
        chrome: Chrome::signed_in(&session, &headers, "Provisioning", "provisioning"),
        tab: tab.as_str(),
        tab_words: flag_words(tab),
        other: other(tab).as_str(),
        other_words: flag_words(other(tab)),
        other_count: others.as_ref().map(|others| others.provisions.len()),
        other_in_flight: others.as_ref().map_or(0, |others| {
            others
                .provisions
                .iter()
                .filter(|provision| in_flight(provision.step))
                .count()
        }),
        rows: shown.provisions.iter().map(row).collect(),
        can_request: session.level >= Level::Admin,
    };
    let mut response = render(StatusCode::OK, &page.chrome, &page);
    if chosen {
        response
            .headers_mut()
            .append(header::SET_COOKIE, cookies::account_tab(tab.as_str()));
    }
    Ok(response)
}

/// An account to choose in the form.
struct AccountChoice {
    id: i64,
    words: String,
    chosen: bool,
}

/// A region and size to choose: `value` is `<region> <size>`.
struct Plan {
    value: String,
    size: String,
    words: String,
}

struct RegionPlans {
    region: String,
    plans: Vec<Plan>,
}

fn plans(offer: &Offer) -> Vec<RegionPlans> {
    offer
        .regions
        .iter()
        .filter(|region| !region.sizes.is_empty())
        .map(|region| RegionPlans {
            region: clip(&region.id, 64),
            plans: region
                .sizes
                .iter()
                .map(|size| Plan {
                    value: format!("{} {}", region.id, size.id),
                    size: clip(&size.id, 64),
                    words: format!(
                        "{} vCPU, {} MB memory, {} GB disk",
                        size.vcpus, size.memory_mb, size.disk_gb
                    ),
                })
                .collect(),
        })
        .collect()
}

#[derive(Template)]
#[template(path = "provisioning_new.html")]
struct NewPage {
    chrome: Chrome,
    accounts: Vec<AccountChoice>,
    /// The account the form is for, once chosen.
    account: Option<(i64, String)>,
    regions: Vec<RegionPlans>,
    offer_problem: Option<String>,
    kinds: Vec<(&'static str, &'static str)>,
}

fn account_words(account: &AccountView) -> String {
    format!(
        "{} ({}, {})",
        clip(&account.label, 100),
        account.provider.as_str(),
        flag_words(account.flag)
    )
}

pub async fn new_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, UiError> {
    let asked = QueryParams::parse(&uri, &["account"])
        .and_then(|query| query.get::<i64>("account", "an account's number"))
        .map_err(|refusal| bad_query(&refusal, &session))?;
    let listed: Accounts = ask(
        &state,
        &ListAccounts {
            actor: session.actor(),
        },
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    // The account asked for, or the only one there is.
    let chosen = match (asked, listed.accounts.as_slice()) {
        (Some(id), accounts) => accounts.iter().find(|account| account.id == id),
        (None, [only]) => Some(only),
        _ => None,
    };
    let (regions, offer_problem) = match chosen {
        Some(account) => {
            let request = AccountOffer {
                actor: session.actor(),
                account_id: account.id,
            };
            match ask(&state, &request).await {
                Ok(offer) => (plans(&offer), None),
                Err(refusal) => (Vec::new(), Some(refusal_sentence(&refusal))),
            }
        }
        None => (Vec::new(), None),
    };
    let page = NewPage {
        chrome: Chrome::signed_in(&session, &headers, "New server", "provisioning"),
        accounts: listed
            .accounts
            .iter()
            .map(|account| AccountChoice {
                id: account.id,
                words: account_words(account),
                chosen: chosen.is_some_and(|chosen| chosen.id == account.id),
            })
            .collect(),
        account: chosen.map(|account| (account.id, account_words(account))),
        regions,
        offer_problem,
        kinds: [
            InstallKind::Site,
            InstallKind::Agent,
            InstallKind::DockerHost,
        ]
        .into_iter()
        .map(|kind| (kind.as_str(), kind_words(kind)))
        .collect(),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// The New server form's fields as the API's body, naming the field that is wrong.
fn read(fields: &FormFields) -> Result<ProvisionBody, ApiError> {
    let account_id = fields
        .get("account_id")
        .unwrap_or_default()
        .trim()
        .parse::<i64>()
        .map_err(|_| ApiError::invalid("account_id", "choose an account"))?;
    let kind = InstallKind::from_str(fields.get("kind").unwrap_or_default())
        .map_err(|_| ApiError::invalid("kind", "must be agent, site or docker-host"))?;
    let (region, size) = fields
        .get("plan")
        .unwrap_or_default()
        .trim()
        .split_once(' ')
        .ok_or_else(|| ApiError::invalid("plan", "choose a region and size"))?;
    let image = fields.get("image").unwrap_or_default().trim();
    Ok(ProvisionBody {
        account_id,
        kind,
        name: fields.get("name").unwrap_or_default().trim().to_string(),
        region: region.to_string(),
        size: size.trim().to_string(),
        image: (!image.is_empty()).then(|| image.to_string()),
    })
}

/// "Ask for the server": to its page once asked for, or back to the form saying why not.
pub async fn request(
    State(state): State<AppState>,
    session: UiSession,
    fields: FormFields,
) -> Response {
    let back = match fields.get("account_id").map(str::trim) {
        Some(id) if id.parse::<i64>().is_ok() => format!("/ui/provisioning/new?account={id}"),
        _ => "/ui/provisioning/new".to_string(),
    };
    let body = match read(&fields) {
        Ok(body) => body,
        Err(refusal) => return acted(&back, Err(refusal)),
    };
    let detail = body.audited();
    let answer = ask(&state, &body.into_request(session.actor())).await;
    let (mut response, provision_id) = match answer {
        Ok(provision) => (
            redirect_with(
                &format!("/ui/provisioning/provisions/{}", provision.id),
                Flash {
                    ok: true,
                    text: format!(
                        "Server {} asked for; its steps follow here.",
                        clip(&provision.name, 64)
                    ),
                },
            ),
            Some(provision.id),
        ),
        Err(refusal) => (acted(&back, Err(refusal)), None),
    };
    response.extensions_mut().insert(AuditDetail(
        serde_json::json!({"provision_id": provision_id, "provision": detail}),
    ));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_reads_its_plan_as_region_and_size_and_names_a_bad_field() {
        let body = read(&FormFields::of(&[
            ("account_id", "4"),
            ("kind", "site"),
            ("plan", "us-east g6-nanode-1"),
            ("name", "shop-1"),
            ("image", ""),
        ]))
        .unwrap();
        assert_eq!(
            (body.region.as_str(), body.size.as_str()),
            ("us-east", "g6-nanode-1")
        );
        assert_eq!(body.kind, InstallKind::Site);
        assert_eq!(body.image, None);
        for (field, pairs) in [
            ("account_id", vec![("kind", "site")]),
            ("kind", vec![("account_id", "4"), ("kind", "vm")]),
            (
                "plan",
                vec![("account_id", "4"), ("kind", "agent"), ("plan", "us-east")],
            ),
        ] {
            let refusal = read(&FormFields::of(&pairs)).unwrap_err();
            assert!(
                refusal.message.starts_with(&format!("{field}:")),
                "{}",
                refusal.message
            );
        }
    }

    #[test]
    fn pv_13_the_tab_asked_for_wins_and_is_remembered_else_the_cookie_else_main() {
        let uri: Uri = "/ui/provisioning?account=test".parse().unwrap();
        let query = QueryParams::parse(&uri, &["account"]).unwrap();
        assert_eq!(
            tab_of(&query, &HeaderMap::new()).unwrap(),
            (AccountFlag::Test, true)
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("{}=test", cookies::ACCOUNT_TAB_COOKIE)
                .parse()
                .unwrap(),
        );
        let none = QueryParams::default();
        assert_eq!(tab_of(&none, &headers).unwrap(), (AccountFlag::Test, false));
        assert_eq!(
            tab_of(&none, &HeaderMap::new()).unwrap(),
            (AccountFlag::Main, false)
        );
        let uri: Uri = "/ui/provisioning?account=prod".parse().unwrap();
        let query = QueryParams::parse(&uri, &["account"]).unwrap();
        assert!(tab_of(&query, &headers)
            .unwrap_err()
            .message
            .starts_with("account:"));
    }
}
