//! Every route of the gateway, in one table: its method, path, who may call it and what it
//! does. The router is built from this table and nothing else, so a route without a declared
//! access cannot exist (ARCHITECTURE.md 6.2-3: "every route and rpc declares its level"); the
//! tests and the OpenAPI check read the same table.
//!
//! The operator UI's routes are rows of the same table: `Session(level)` routes are reached
//! only with a browser session (never a token), and every `Session` POST has its CSRF token
//! checked by the session guard before anything else, whatever the route: there is no
//! per-route switch to forget. API routes are reached only with a bearer token.

use axum::{
    extract::{Request, State},
    middleware::{self, Next},
    routing::{on, MethodRouter},
    Router,
};
use capstan_events::{agent_channel::rpc::AgentEndpoint, rpc::Level};

use crate::{
    agent, health, identity, openapi, operator,
    route::{Access, Method, Op, Route, UiOp},
    state::AppState,
    ui,
};

use Level::{Admin, Change, Read};
use Method::{Get, Post};

/// The table: the gateway's own rows (with the agent channel's API and the UI's own pages),
/// then each domain's pages (`ui/<domain>/`) and API (`api/<domain>.rs`), each domain's rows
/// declared in its own module.
pub static ROUTES: std::sync::LazyLock<Vec<Route>> = std::sync::LazyLock::new(|| {
    [
        CORE_ROUTES,
        crate::ui::agent_channel::ROUTES,
        crate::api::incidents::ROUTES,
        crate::api::monitor::ROUTES,
        crate::ui::incidents::ROUTES,
        crate::api::releases::ROUTES,
        crate::api::rollouts::ROUTES,
        crate::ui::rollouts::ROUTES,
        crate::api::backups::ROUTES,
        crate::ui::fleet_security::ROUTES,
        crate::ui::monitor::ROUTES,
        crate::ui::backups::ROUTES,
    ]
    .concat()
});

/// The gateway's own rows, the agent channel's API and the UI's own (the way in, sign-in,
/// account, audit).
const CORE_ROUTES: &[Route] = &[
    Route::public(Get, "/healthz", Op::Healthz),
    Route::public(Get, "/livez", Op::Livez),
    // An operator's (level 7); a scraper without a token reads `telemetry.metrics_listen`.
    Route::read(Get, "/metrics", Read, Op::Metrics),
    Route::agent("/api/v1/agent/join", AgentEndpoint::Join),
    Route::agent("/api/v1/agent/join_status", AgentEndpoint::JoinStatus),
    Route::agent("/api/v1/agent/claim", AgentEndpoint::Claim),
    Route::agent("/api/v1/agent/result", AgentEndpoint::Result),
    Route::agent("/api/v1/agent/job_status", AgentEndpoint::JobStatus),
    Route::agent("/api/v1/agent/leave", AgentEndpoint::Leave),
    Route::agent("/api/v1/agent/artifact", AgentEndpoint::Artifact),
    Route::agent("/api/v1/agent/backup_urls", AgentEndpoint::BackupUrls),
    Route::read(Get, "/api/v1/openapi.json", Read, Op::OpenApi),
    Route::read(Get, "/api/v1/joins", Read, Op::ListJoins),
    Route::act(
        "/api/v1/joins/{id}/approve",
        Admin,
        Op::ApproveJoin,
        "approve_join",
    ),
    Route::act(
        "/api/v1/joins/{id}/reject",
        Admin,
        Op::RejectJoin,
        "reject_join",
    ),
    Route::act(
        "/api/v1/joins/{id}/reopen",
        Admin,
        Op::ReopenJoin,
        "reopen_join",
    ),
    Route::read(Get, "/api/v1/nodes", Read, Op::ListNodes),
    Route::read(Get, "/api/v1/nodes/{id}", Read, Op::GetNode),
    Route::act(
        "/api/v1/nodes/{id}/disconnect",
        Admin,
        Op::DisconnectNode,
        "disconnect_node",
    ),
    // Level 7 at the route: the agent channel refines it by the primitive's class (change 8,
    // destructive 10), which only it knows.
    Route::act("/api/v1/nodes/{id}/jobs", Read, Op::CreateJob, "create_job"),
    Route::read(Get, "/api/v1/nodes/{id}/refusals", Read, Op::RefusalCount),
    Route::read(Get, "/api/v1/jobs", Read, Op::ListJobs),
    Route::read(Get, "/api/v1/jobs/{id}", Read, Op::GetJob),
    Route::read(Get, "/api/v1/jobs/{id}/output", Read, Op::JobOutput),
    Route::act(
        "/api/v1/jobs/{id}/cancel",
        Change,
        Op::CancelJob,
        "cancel_job",
    ),
    Route::act(
        "/api/v1/jobs/{id}/mark-failed",
        Change,
        Op::MarkJobFailed,
        "mark_job_failed",
    ),
    // The operator UI. Public: the way in and the assets; everything else needs a session.
    Route::ui_public(Get, "/", UiOp::ToDashboard),
    Route::ui_public(Get, "/ui", UiOp::ToDashboard),
    Route::ui_public(Get, "/ui/static/{file}", UiOp::Static),
    Route::ui_public(Get, "/ui/sign-in", UiOp::SignInPage),
    Route {
        method: Post,
        path: "/ui/sign-in",
        access: Access::PreSession,
        op: Op::Ui(UiOp::SignIn),
        action: None,
    },
    Route::form("/ui/sign-out", Read, UiOp::SignOut, "sign_out"),
    Route::page("/ui/password", Read, UiOp::PasswordPage),
    Route::form(
        "/ui/password",
        Read,
        UiOp::ChangePassword,
        "change_password",
    ),
    Route::page("/ui/account", Read, UiOp::AccountPage),
    Route::form(
        "/ui/account/tokens",
        Read,
        UiOp::CreateToken,
        "create_token",
    ),
    Route::form(
        "/ui/account/tokens/{id}/revoke",
        Read,
        UiOp::RevokeToken,
        "revoke_token",
    ),
    Route::page("/ui/audit", Admin, UiOp::AuditPage),
];

/// The public routes of the UI, by path: the only `/ui` routes without a session.
pub const PUBLIC_UI_PATHS: &[&str] = &["/", "/ui", "/ui/static/{file}", "/ui/sign-in"];

/// The handler of `op` on `method`.
fn handler(method: Method, op: Op) -> MethodRouter<AppState> {
    let filter = method.filter();
    match op {
        Op::Healthz => on(filter, health::healthz),
        Op::Livez => on(filter, || async { "live\n" }),
        Op::Metrics => on(filter, health::metrics),
        Op::OpenApi => on(filter, openapi::document),
        Op::Agent(endpoint) => on(
            filter,
            move |State(state): State<AppState>, request: Request| {
                agent::forward(state, endpoint, request)
            },
        ),
        Op::ListJoins => on(filter, operator::list_joins),
        Op::ApproveJoin => on(filter, operator::approve_join),
        Op::RejectJoin => on(filter, operator::reject_join),
        Op::ReopenJoin => on(filter, operator::reopen_join),
        Op::ListNodes => on(filter, operator::list_nodes),
        Op::GetNode => on(filter, operator::get_node),
        Op::DisconnectNode => on(filter, operator::disconnect_node),
        Op::CreateJob => on(filter, operator::create_job),
        Op::ListJobs => on(filter, operator::list_jobs),
        Op::GetJob => on(filter, operator::get_job),
        Op::JobOutput => on(filter, operator::job_output),
        Op::CancelJob => on(filter, operator::cancel_job),
        Op::MarkJobFailed => on(filter, operator::mark_job_failed),
        Op::RefusalCount => on(filter, operator::refusal_count),
        Op::Incidents(op) => crate::api::incidents::handler(filter, op),
        Op::Monitor(op) => crate::api::monitor::handler(filter, op),
        Op::Releases(op) => crate::api::releases::handler(filter, op),
        Op::Rollouts(op) => crate::api::rollouts::handler(filter, op),
        Op::Backups(op) => crate::api::backups::handler(filter, op),
        Op::Ui(op) => ui::handler(filter, op),
    }
}

/// The router of every route in [`ROUTES`], each behind its access check.
pub fn router(state: &AppState) -> Router<AppState> {
    ROUTES.iter().fold(Router::new(), |router, route| {
        let method_router = handler(route.method, route.op);
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
                    ui::guard::require_session(state, route, needed, request, next)
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
    use crate::ui::agent_channel::AgentChannelPage;
    use capstan_events::Word as _;

    #[test]
    fn each_method_and_path_appears_once() {
        for (index, route) in ROUTES.iter().enumerate() {
            assert!(
                !ROUTES[..index]
                    .iter()
                    .any(|other| other.method == route.method && other.path == route.path),
                "{} {} twice",
                route.method.as_str(),
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
                .find(|route| route.op == Op::Agent(endpoint))
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
        let approve = ROUTES
            .iter()
            .find(|route| route.op == Op::ApproveJoin)
            .unwrap();
        assert_eq!(approve.target_kind(), Some("join"));
        let listing = ROUTES
            .iter()
            .find(|route| route.op == Op::ListJobs)
            .unwrap();
        assert_eq!(listing.target_kind(), None);
    }

    #[test]
    fn trust_changing_acts_need_level_10_and_job_changes_level_8() {
        let level = |op: Op| ROUTES.iter().find(|route| route.op == op).unwrap().access;
        for op in [
            Op::ApproveJoin,
            Op::RejectJoin,
            Op::ReopenJoin,
            Op::DisconnectNode,
        ] {
            assert_eq!(level(op), Access::Operator(Level::Admin), "{op:?}");
        }
        for op in [Op::CancelJob, Op::MarkJobFailed] {
            assert_eq!(level(op), Access::Operator(Level::Change), "{op:?}");
        }
        for op in [
            UiOp::AgentChannel(AgentChannelPage::ApproveJoin),
            UiOp::AgentChannel(AgentChannelPage::RejectJoin),
            UiOp::AgentChannel(AgentChannelPage::ReopenJoin),
            UiOp::AgentChannel(AgentChannelPage::DisconnectNode),
            UiOp::AgentChannel(AgentChannelPage::DisconnectPage),
            UiOp::AuditPage,
        ] {
            assert_eq!(level(Op::Ui(op)), Access::Session(Level::Admin), "{op:?}");
        }
        for op in [
            AgentChannelPage::CancelJob,
            AgentChannelPage::MarkJobFailed,
            AgentChannelPage::MarkFailedPage,
        ] {
            assert_eq!(
                level(Op::Ui(UiOp::AgentChannel(op))),
                Access::Session(Level::Change),
                "{op:?}"
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
                    route.method.as_str(),
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
