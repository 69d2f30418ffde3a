//! The operator web UI: server-rendered pages (askama templates in `templates/`, autoescaped),
//! a little vanilla JavaScript for the live parts (`static/app.js`) and one stylesheet. Every
//! page asks the agent channel over rpc the way the JSON API does ([`crate::ask`]) with the
//! signed-in operator as the actor. Who may open what is the route table's business
//! ([`crate::routes`]); the session guard ([`guard`]) checks the session, its level and, on
//! every POST, its CSRF token.
//!
//! Nothing a node said (names, versions, results, output, facts) is ever marked safe or made a
//! link: templates escape it, `href`s carry only our own ids, and live output is appended with
//! `textContent`. The Content-Security-Policy allows no inline script or style.
//!
//! The agent channel's pages (dashboard, node list, joins, bind, node, job) are in
//! [`crate::domains::agent_channel`], the incidents service's in [`crate::domains::incidents`]; each folder contributes its rows
//! to the route table. Sign-in, account and audit, and the helpers every page uses (the guard,
//! cookies, forms, formatting, assets), are here.
//!
//! Stable hooks for browser tests (ids and `data-test` attributes):
//! * sign-in: `form#sign-in`, `input[name=name]`, `input[name=password]`, `button[data-test=sign-in]`
//! * change password: `form#change-password`, `input[name=current_password]`,
//!   `input[name=new_password]`, `input[name=confirm_password]`, `button[data-test=change-password]`
//! * every page: `[data-test=operator]` (name and level), `button[data-test=sign-out]`,
//!   `[data-test=flash]` (with `data-kind=ok|error`), `[data-test=error]` on error pages; the
//!   menu's `a[data-test=nav-nodes]` and `a[data-test=nav-joins]`
//! * dashboard: `[data-test=plane-status]`, `form#node-search`, `a[data-test=all-nodes]`,
//!   `a[data-test=problem-nodes]`, `a[data-test=all-joins]`, `#node-<id>` rows (the first page)
//!   with `[data-test=health]` (`data-dot=green|yellow|red|gray`), `[data-test=node-link]`,
//!   `[data-test=placement]`; `#join-<id>` rows (the newest) with `[data-test=fingerprint]`,
//!   `[data-test=name-taken]`, `button[data-test=approve]`, `button[data-test=reject]`,
//!   `input[data-test=bind-search]` and `button[data-test=bind-find]`; `#job-<id>` rows of the
//!   recent jobs
//! * node list (`/ui/nodes`): `form#node-filters` with `input[name=q]`, `select[name=health]`,
//!   `select[name=online]`, `select[name=placement]`, `button[data-test=search]`; `#node-<id>`
//!   rows as on the dashboard; `[data-test=pager]` with `[data-test=page-shown]`,
//!   `a[data-test=previous]`, `a[data-test=next]` (every list page has this pager)
//! * joins (`/ui/joins?state=rejected`): `[data-test=tab-pending|tab-rejected]`,
//!   `form#join-search`, `#join-<id>` rows as on the dashboard, `#rejected-<id>` rows with
//!   `button[data-test=reopen]`
//! * bind (`/ui/joins/<id>/bind?q=`): `input[data-test=bind-search]`, `#candidate-<id>` rows
//!   with `button[data-test=bind-to]`
//! * node page: `a[data-test=crumb-nodes]` (to the node list),
//!   `[data-test=tab-overview|tab-jobs|tab-agent|tab-recipes|tab-backups]`, `[data-test=fact-<name>]`,
//!   `[data-test=run-<primitive>]` submit buttons, `[data-test=needs-newer-agent]`,
//!   `[data-test=fingerprint]`, `a[data-test=disconnect]`, `button[data-test=confirm-disconnect]`
//! * job page: `[data-test=job-state]`, `[data-test=job-output]`, `[data-test=job-result]`,
//!   `button[data-test=cancel]`, `a[data-test=mark-failed]`, `button[data-test=confirm-mark-failed]`
//! * account: `form#create-token`, `input[name=label]`, `[data-test=new-token]`,
//!   `#token-<id>` rows, `button[data-test=revoke]`
//! * audit: `#audit-<id>` rows, `a[data-test=older]`
//! * incidents' pages, the header line and the node page's Incidents card: see
//!   [`crate::domains::incidents`]
//! * the Fleet security page (`/ui/fleet/security`): see [`crate::domains::monitor::fleet_security`]
//! * the dashboard's Sites card, the node page's Uptime card and the edge probe page: see
//!   [`crate::domains::monitor`]
//! * the node page's Backups tab (`[data-test=tab-backups]`), the Targets page and the fleet
//!   backup policy page: see [`crate::domains::backups`]
//! * the provisioning pages, the dashboard's banner of provisions in flight and the join cards'
//!   provision: see [`crate::domains::provisioning`]

pub(crate) mod account;
pub mod assets;
pub(crate) mod cookies;
pub(crate) mod format;
pub(crate) mod forms;
pub mod guard;
pub mod header_parts;
pub(crate) mod sign_in;

use crate::settings::GatewaySettings;
use askama::Template;
use axum::{
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Redirect, Response},
};
use capstan_events::rpc::Level;
use std::{sync::OnceLock, time::Duration};
use tracing::error;

use crate::{
    domain::throttle::Limits,
    error::{AnsweredError, ApiError},
    state::AppState,
};

pub use guard::UiSession;

/// What the UI reads from the gateway's settings.
#[derive(Debug, Clone)]
pub struct UiSettings {
    pub plane_name: String,
    pub session_idle: Duration,
    pub session_lifetime: Duration,
    pub throttle: Limits,
}

impl Default for UiSettings {
    fn default() -> UiSettings {
        UiSettings {
            plane_name: "Capstan".into(),
            session_idle: Duration::from_secs(30 * 60),
            session_lifetime: Duration::from_secs(12 * 3600),
            throttle: Limits::default(),
        }
    }
}

static SETTINGS: OnceLock<UiSettings> = OnceLock::new();

/// Takes the UI's settings for this process (the first call wins; without one, the defaults
/// hold). They live beside [`AppState`] rather than in it because other crates build an
/// `AppState` by its fields.
pub fn configure(gateway: &GatewaySettings) {
    let _ = SETTINGS.set(UiSettings {
        plane_name: gateway.plane_name.text().trim().to_string(),
        session_idle: gateway.session_idle(),
        session_lifetime: gateway.session_lifetime(),
        throttle: Limits {
            account_failures: gateway.sign_in_account_failures,
            address_failures: gateway.sign_in_address_failures,
            window: chrono::Duration::from_std(gateway.sign_in_window())
                .unwrap_or(chrono::Duration::minutes(15)),
        },
    });
}

pub fn settings() -> &'static UiSettings {
    SETTINGS.get_or_init(UiSettings::default)
}

/// A message carried to the next page after a redirect.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

impl Flash {
    pub fn kind(&self) -> &'static str {
        if self.ok {
            "ok"
        } else {
            "error"
        }
    }
}

/// What every page's frame shows: the plane, the operator, the navigation, the flash.
#[derive(Debug, Clone)]
pub struct Chrome {
    pub plane_name: String,
    pub title: String,
    /// Name and level, when signed in.
    pub operator: Option<(String, u8)>,
    pub csrf: String,
    pub flash: Option<Flash>,
    /// The current section, for the navigation: `dashboard`, `nodes`, `joins`, `incidents`,
    /// `silences`, `webhooks`, `bell`, `account`, `audit`, or empty.
    pub section: &'static str,
    pub is_admin: bool,
    /// The header's lines (the incidents' IN-16 line among them), when they have something
    /// to say.
    pub header: Vec<header_parts::HeaderLine>,
    pub css: String,
    pub js: String,
}

impl Chrome {
    /// The count the menu shows beside `source`'s entry (0 shows none).
    pub fn count_of(&self, source: &str) -> u64 {
        header_parts::count_of(&self.header, source)
    }

    /// The frame of a page of a signed-in operator; reads (and so consumes) the flash.
    pub fn signed_in(
        session: &UiSession,
        headers: &HeaderMap,
        title: impl Into<String>,
        section: &'static str,
    ) -> Chrome {
        Chrome {
            operator: Some((session.name.clone(), u8::from(session.level))),
            csrf: session.csrf.clone(),
            is_admin: session.level >= Level::Admin,
            header: session.header.clone(),
            ..Chrome::anonymous(headers, title, section)
        }
    }

    pub fn anonymous(
        headers: &HeaderMap,
        title: impl Into<String>,
        section: &'static str,
    ) -> Chrome {
        Chrome {
            plane_name: settings().plane_name.clone(),
            title: title.into(),
            operator: None,
            csrf: String::new(),
            flash: cookies::read_flash(headers),
            section,
            is_admin: false,
            header: Vec::new(),
            css: assets::url("app.css"),
            js: assets::url("app.js"),
        }
    }
}

/// Renders `template` as an HTML page with `status`; when the frame showed a flash, the
/// flash cookie is cleared.
pub fn render<T: Template>(status: StatusCode, chrome: &Chrome, template: &T) -> Response {
    let html = match template.render() {
        Ok(html) => html,
        Err(failure) => {
            error!(error = %failure, "a page could not be rendered");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                "This page could not be drawn; the gateway's log says why.\n",
            )
                .into_response();
        }
    };
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response();
    if chrome.flash.is_some() {
        response
            .headers_mut()
            .append(header::SET_COOKIE, cookies::clear(cookies::FLASH_COOKIE));
    }
    response
}

/// A redirect (303) to `to`, carrying `flash` to the page there.
pub fn redirect_with(to: &str, flash: Flash) -> Response {
    let mut response = Redirect::to(to).into_response();
    if let Some(cookie) = cookies::flash_cookie(&flash) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// Asks the agent channel for an act that answers `Done` (`request`) and sends the browser
/// back to `to` saying `done`, or why it was refused.
pub async fn act_done<R>(state: &AppState, request: &R, to: &str, done: &str) -> Response
where
    R: capstan_events::rpc::JsonRpc<Reply = capstan_events::agent_channel::rpc::Done>,
{
    let answer = crate::ask::ask(state, request).await;
    acted(to, answer.map(|_| done.to_string()))
}

/// The answer to a UI act: back to `to` with a sentence saying it was done, or with the
/// refusal in words; a refusal is also left for the audit record.
pub fn acted(to: &str, outcome: Result<String, ApiError>) -> Response {
    match outcome {
        Ok(done) => redirect_with(
            to,
            Flash {
                ok: true,
                text: done,
            },
        ),
        Err(refusal) => {
            let mut response = redirect_with(
                to,
                Flash {
                    ok: false,
                    text: refusal_sentence(&refusal),
                },
            );
            response.extensions_mut().insert(AnsweredError {
                code: refusal.code,
                message: refusal.message,
            });
            response
        }
    }
}

/// A refusal of the plane as a sentence for a person: the standard sentence of its code, then
/// the service's own words.
pub fn refusal_sentence(refusal: &ApiError) -> String {
    let lead = match refusal.code {
        "needs_newer_agent" => "Needs a newer agent — update this node.",
        "not_paired" => "This node has no paired agent; approve its join (pair it) first.",
        "forbidden" => "Your level does not allow this.",
        "conflict" => "That cannot be done in the state it is in now.",
        "not_found" => "That no longer exists.",
        "invalid_request" => "That was not a valid request.",
        "refused" => "The plane refused this.",
        "already_exists" => "That already exists.",
        "unavailable" => "The plane did not answer in time; try again shortly.",
        _ => "Something went wrong on the plane; the gateway's log says more.",
    };
    let words = refusal.message.trim();
    if words.is_empty() || refusal.code == "internal" {
        lead.to_string()
    } else {
        format!("{lead} {words}")
    }
}

/// An error page.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    chrome: Chrome,
    heading: String,
    sentence: String,
    sign_in: bool,
}

/// A page that could not be shown, as a page: its status and a sentence.
#[derive(Debug)]
pub struct UiError {
    pub status: StatusCode,
    pub heading: &'static str,
    pub sentence: String,
    /// A signed-in operator, for the frame.
    pub session: Option<UiSession>,
    /// Offer a sign-in link.
    pub sign_in: bool,
    /// For the audit record of an act.
    pub code: &'static str,
}

impl UiError {
    pub fn new(
        status: StatusCode,
        code: &'static str,
        heading: &'static str,
        sentence: impl Into<String>,
    ) -> UiError {
        UiError {
            status,
            heading,
            sentence: sentence.into(),
            session: None,
            sign_in: false,
            code,
        }
    }

    pub fn unauthorized(sentence: impl Into<String>) -> UiError {
        UiError {
            sign_in: true,
            ..UiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Please sign in",
                sentence,
            )
        }
    }

    pub fn forbidden(sentence: impl Into<String>) -> UiError {
        UiError::new(StatusCode::FORBIDDEN, "forbidden", "Not allowed", sentence)
    }

    pub fn unavailable() -> UiError {
        UiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Not available just now",
            "The gateway cannot reach its database; try again shortly.",
        )
    }

    pub fn with_session(mut self, session: &UiSession) -> UiError {
        self.session = Some(session.clone());
        self
    }

    /// A refusal of the plane while drawing a page.
    pub fn from_refusal(refusal: &ApiError, session: &UiSession) -> UiError {
        let heading = match refusal.status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::FORBIDDEN => "Not allowed",
            StatusCode::SERVICE_UNAVAILABLE => "Not available just now",
            _ => "This page cannot be shown",
        };
        UiError {
            session: Some(session.clone()),
            ..UiError::new(
                refusal.status,
                refusal.code,
                heading,
                refusal_sentence(refusal),
            )
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let headers = HeaderMap::new();
        let chrome = match &self.session {
            Some(session) => Chrome::signed_in(session, &headers, self.heading, ""),
            None => Chrome::anonymous(&headers, self.heading, ""),
        };
        let page = ErrorPage {
            heading: self.heading.to_string(),
            sentence: self.sentence.clone(),
            sign_in: self.sign_in,
            chrome,
        };
        let mut response = render(self.status, &page.chrome, &page);
        response.extensions_mut().insert(AnsweredError {
            code: self.code,
            message: self.sentence,
        });
        response
    }
}

/// `Retry-After` for a throttled answer.
pub fn retry_after(response: &mut Response, seconds: u64) {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
}
