//! Every route of the gateway, in one table: its method, path, who may call it and what it
//! does. The router is built from this table and nothing else, so a route without a declared
//! access cannot exist (ARCHITECTURE.md 6.2-3: "every route and rpc declares its level"); the
//! tests and the OpenAPI check read the same table.
//!
//! The operator UI's routes are rows of the same table: `Session(level)` routes are reached
//! only with a browser session (never a token), and every `Session` POST has its CSRF token
//! checked by the session guard before anything else, whatever the route: there is no
//! per-route switch to forget. API routes are reached only with a bearer token.

use crate::api_doc::{refusals, Answer, Doc, Refusal};
use axum::{
    extract::{Request, State},
    middleware::{self, Next},
    response::Redirect,
    routing::on,
    Router,
};
use capstan_events::rpc::Level;

use crate::{
    domains, health, identity, openapi,
    route::{Access, Method, Route},
    state::AppState,
    ui,
};

use Level::{Admin, Read};
use Method::{Get, Post};

/// The table: the gateway's own rows (probes, metrics, the document, the UI's way in, account
/// and audit), then each domain's rows (`domains/<domain>/`), declared in its own folder.
pub static ROUTES: std::sync::LazyLock<Vec<Route>> =
    std::sync::LazyLock::new(|| [CORE_ROUTES, &domains::routes()].concat());

/// The gateway's own rows: probes, metrics, the API's document and the UI's own pages (the way
/// in, sign-in, account, audit).
const CORE_ROUTES: &[Route] = &[
    Route::public(Get, "/healthz", |filter| on(filter, health::healthz)).doc(Doc {
        operation: "healthz",
        tag: "probes",
        summary: "Is every service ready",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer {
            status: 200,
            description: "Ready. Anyone gets `{\"status\"}` alone; an operator's token (level 7) \
                also gets `services`, each with its state, version, and why it is not ready.",
            content: Some(HEALTHZ_ANSWER),
        },
        refusals: &[Refusal::Other {
            status: 503,
            description: "Starting: at least one service does not answer (named only to an \
                    operator's token).",
            content: r##"{"application/json": {"schema": {"type": "object"}}}"##,
        }],
    }),
    Route::public(Get, "/livez", |filter| on(filter, || async { "live\n" })).doc(Doc {
        operation: "livez",
        tag: "probes",
        summary: "Is the gateway running",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer {
            status: 200,
            description: "`live`.",
            content: Some(r##"{"text/plain": {"schema": {"type": "string"}}}"##),
        },
        refusals: &[],
    }),
    // An operator's (level 7); a scraper without a token reads `telemetry.metrics_listen`.
    Route::read(Get, "/metrics", Read, |filter| on(filter, health::metrics)).doc(Doc {
        operation: "metrics",
        tag: "probes",
        summary: "Prometheus metrics",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer {
            status: 200,
            description: "The Prometheus text format. Needs an operator's token (level 7); a \
                scraper without one reads `CAPSTAN__TELEMETRY__METRICS_LISTEN`, a listener of its \
                own.",
            content: Some(r##"{"text/plain": {"schema": {"type": "string"}}}"##),
        },
        refusals: &[
            refusals::UNAUTHORIZED,
            refusals::FORBIDDEN,
            refusals::UNAVAILABLE,
        ],
    }),
    Route::read(Get, "/api/v1/openapi.json", Read, |filter| {
        on(filter, openapi::document)
    })
    .doc(Doc {
        operation: "openapi",
        tag: "meta",
        summary: "This document",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer {
            status: 200,
            description: "The OpenAPI 3.1 document of the gateway.",
            content: Some(r##"{"application/json": {"schema": {"type": "object"}}}"##),
        },
        refusals: refusals::LISTING,
    }),
    // The operator UI. Public: the way in and the assets; everything else needs a session.
    Route::public(Get, "/", |filter| {
        on(filter, || async { Redirect::to("/ui/") })
    }),
    Route::public(Get, "/ui", |filter| {
        on(filter, || async { Redirect::to("/ui/") })
    }),
    Route::public(Get, "/ui/static/{file}", |filter| {
        on(filter, ui::assets::serve)
    }),
    Route::public(Get, "/ui/sign-in", |filter| on(filter, ui::sign_in::page)),
    Route::new(
        Post,
        "/ui/sign-in",
        Access::PreSession,
        |filter| on(filter, ui::sign_in::sign_in),
        None,
    ),
    Route::form(
        "/ui/sign-out",
        Read,
        |filter| on(filter, ui::sign_in::sign_out),
        "sign_out",
    ),
    Route::page("/ui/password", Read, |filter| {
        on(filter, ui::sign_in::password_page)
    }),
    Route::form(
        "/ui/password",
        Read,
        |filter| on(filter, ui::sign_in::change_password),
        "change_password",
    ),
    Route::page("/ui/account", Read, |filter| on(filter, ui::account::page)),
    Route::form(
        "/ui/account/tokens",
        Read,
        |filter| on(filter, ui::account::create_token),
        "create_token",
    ),
    Route::form(
        "/ui/account/tokens/{id}/revoke",
        Read,
        |filter| on(filter, ui::account::revoke_token),
        "revoke_token",
    ),
    Route::page("/ui/audit", Admin, |filter| {
        on(filter, ui::account::audit_page)
    }),
];

/// The answer of `GET /healthz`, for the OpenAPI document.
const HEALTHZ_ANSWER: &str = r##"{
    "application/json": {
        "schema": {
            "properties": {
                "services": {
                    "type": "object"
                },
                "status": {
                    "enum": [
                        "ready",
                        "starting"
                    ],
                    "type": "string"
                }
            },
            "type": "object"
        }
    }
}"##;

/// The public routes of the UI, by path: the only `/ui` routes without a session.
pub const PUBLIC_UI_PATHS: &[&str] = &["/", "/ui", "/ui/static/{file}", "/ui/sign-in"];

/// The router of every route in [`ROUTES`], each behind its access check.
pub fn router(state: &AppState) -> Router<AppState> {
    ROUTES.iter().fold(Router::new(), |router, route| {
        let method_router = (route.handler)(route.method.filter());
        let method_router = match route.access {
            Access::Public | Access::AgentSigned => method_router,
            Access::Operator(needed) => method_router.route_layer(middleware::from_fn_with_state(
                state.clone(),
                move |state: State<AppState>, request: Request, next: Next| {
                    identity::authorize(state, route, needed, request, next)
                },
            )),
            Access::Session(needed) => method_router.route_layer(middleware::from_fn_with_state(
                state.clone(),
                move |state: State<AppState>, request: Request, next: Next| {
                    ui::guard::require_session(
                        state,
                        route,
                        needed,
                        domains::HEADER_PARTS,
                        request,
                        next,
                    )
                },
            )),
            Access::PreSession => method_router.route_layer(middleware::from_fn(
                move |request: Request, next: Next| {
                    ui::guard::require_pre_session(route, request, next)
                },
            )),
        };
        router.route(route.path, method_router)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::agent_channel::rpc::AgentEndpoint;
    use capstan_events::Word as _;

    /// The row of `method path`.
    fn row(method: Method, path: &str) -> &'static Route {
        ROUTES
            .iter()
            .find(|route| route.method == method && route.path == path)
            .unwrap_or_else(|| panic!("{} {path} is a route", method.as_ref()))
    }

    #[test]
    fn each_method_and_path_appears_once() {
        for (index, route) in ROUTES.iter().enumerate() {
            assert!(
                !ROUTES[..index]
                    .iter()
                    .any(|other| other.method == route.method && other.path == route.path),
                "{} {} twice",
                route.method.as_ref(),
                route.path
            );
        }
    }

    /// Issue 27: the route a service's word is refused towards on the generic jobs route is
    /// one of this table's, an operator's POST.
    #[test]
    fn every_services_word_names_a_route_of_this_table() {
        use capstan_events::agent_channel::primitives::CATALOG;
        let mut named = 0;
        for (domain, route) in CATALOG.iter().filter_map(|word| word.owner()) {
            let (method, path) = route.split_once(' ').expect("METHOD /path");
            assert_eq!(method, "POST", "{domain}: {route}");
            assert!(
                ROUTES.iter().any(|row| row.method == Method::Post
                    && row.path == path
                    && matches!(row.access, Access::Operator(_))),
                "{domain}'s {route} is not a route of the table"
            );
            named += 1;
        }
        assert!(named > 0);
    }

    #[test]
    fn the_agent_routes_are_the_protocol_endpoints_signed_and_posted() {
        for endpoint in AgentEndpoint::ALL {
            let route = ROUTES
                .iter()
                .find(|route| route.endpoint == Some(endpoint))
                .expect("every endpoint has a route");
            assert_eq!(route.path, format!("/api/v1/agent/{}", endpoint.as_str()));
            assert_eq!(
                (route.method, route.access),
                (Method::Post, Access::AgentSigned)
            );
        }
    }

    #[test]
    fn every_act_is_an_operator_post_and_names_its_target() {
        for route in ROUTES.iter().filter(|route| route.action.is_some()) {
            assert_ne!(route.method, Method::Get, "{}", route.path);
            assert!(
                matches!(route.access, Access::Operator(_) | Access::Session(_)),
                "{}",
                route.path
            );
            // An act on a thing names it; the UI's acts on the operator themselves (sign
            // out, change password, create a token) have no `{id}`.
            assert_eq!(
                route.target_kind().is_some(),
                route.path.contains("{id}"),
                "{}",
                route.path
            );
        }
        let approve = row(Method::Post, "/api/v1/joins/{id}/approve");
        assert_eq!(approve.target_kind(), Some("join"));
        let listing = row(Method::Get, "/api/v1/jobs");
        assert_eq!(listing.target_kind(), None);
    }

    #[test]
    fn trust_changing_acts_need_level_10_and_job_changes_level_8() {
        let level = |method: Method, path: &str| row(method, path).access;
        for path in [
            "/api/v1/joins/{id}/approve",
            "/api/v1/joins/{id}/reject",
            "/api/v1/joins/{id}/reopen",
            "/api/v1/nodes/{id}/disconnect",
        ] {
            assert_eq!(
                level(Method::Post, path),
                Access::Operator(Level::Admin),
                "{path}"
            );
        }
        for path in ["/api/v1/jobs/{id}/cancel", "/api/v1/jobs/{id}/mark-failed"] {
            assert_eq!(
                level(Method::Post, path),
                Access::Operator(Level::Change),
                "{path}"
            );
        }
        for (method, path) in [
            (Method::Post, "/ui/joins/{id}/approve"),
            (Method::Post, "/ui/joins/{id}/reject"),
            (Method::Post, "/ui/joins/{id}/reopen"),
            (Method::Post, "/ui/nodes/{id}/disconnect"),
            (Method::Get, "/ui/nodes/{id}/disconnect"),
            (Method::Get, "/ui/audit"),
        ] {
            assert_eq!(level(method, path), Access::Session(Level::Admin), "{path}");
        }
        for (method, path) in [
            (Method::Post, "/ui/jobs/{id}/cancel"),
            (Method::Post, "/ui/jobs/{id}/mark-failed"),
            (Method::Get, "/ui/jobs/{id}/mark-failed"),
        ] {
            assert_eq!(
                level(method, path),
                Access::Session(Level::Change),
                "{path}"
            );
        }
    }

    #[test]
    fn every_post_of_the_ui_is_a_session_form_checked_for_csrf_and_audited() {
        // The guard checks the CSRF token of every `Session` POST; the only other UI POST is
        // the sign-in form, whose guard checks the pre-session token.
        for route in ROUTES
            .iter()
            .filter(|route| route.is_ui() && route.method == Method::Post)
        {
            match route.access {
                Access::Session(_) => assert!(route.action.is_some(), "{}", route.path),
                Access::PreSession => assert_eq!(route.path, "/ui/sign-in"),
                other => panic!("POST {} is {other:?}", route.path),
            }
        }
        assert!(ROUTES
            .iter()
            .any(|route| route.access == Access::PreSession && route.method == Method::Post));
    }

    #[test]
    fn no_ui_path_is_reached_without_a_session_but_the_named_public_ones() {
        for route in ROUTES.iter().filter(|route| route.is_ui()) {
            match route.access {
                Access::Session(_) => {}
                Access::Public | Access::PreSession => assert!(
                    PUBLIC_UI_PATHS.contains(&route.path),
                    "{} {} is public but not named public",
                    route.method.as_ref(),
                    route.path
                ),
                other => panic!("{} is {other:?}", route.path),
            }
        }
        for route in ROUTES.iter().filter(|route| !route.is_ui()) {
            assert!(
                !matches!(route.access, Access::Session(_) | Access::PreSession),
                "{}: a session reaches only the UI, a token only the API",
                route.path
            );
            assert!(!route.path.starts_with("/ui"), "{}", route.path);
        }
    }

    #[test]
    fn sessions_never_reach_the_api_and_tokens_never_reach_the_ui() {
        for route in ROUTES.iter() {
            if route.path.starts_with("/api/") {
                assert!(
                    matches!(route.access, Access::Operator(_) | Access::AgentSigned),
                    "{}",
                    route.path
                );
            }
            if matches!(route.access, Access::Operator(_)) {
                assert!(
                    route.path.starts_with("/api/v1/") || route.path == "/metrics",
                    "{}",
                    route.path
                );
            }
        }
    }
}
