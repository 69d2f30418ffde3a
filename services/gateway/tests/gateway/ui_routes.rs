//! Every route of the table, over HTTP, at its door: public routes answer without credentials;
//! a token route is 401 without a token and 403 one level below; a session route sends a page
//! request without a session to sign in (a form is 401), is 403 one level below, and every
//! session POST is 403 without the session's CSRF token even with a good session. A route
//! added without a level or a CSRF check fails here.

use capstan_events::rpc::Level;
use capstan_gateway::{
    route::{Access, Method},
    routes::ROUTES,
};

use crate::{
    browser::Browser,
    harness::{body_for, Gateway},
};

fn concrete(path: &str) -> String {
    if path.starts_with("/ui/joins/") {
        return path.replace("{id}", "0190b5c2-7d1e-7a3c-9f00-000000000001");
    }
    crate::harness::concrete_path(path).replace("{file}", "app.css")
}

fn below(level: Level) -> Option<Level> {
    match level {
        Level::Read => None,
        Level::Change => Some(Level::Read),
        Level::Admin => Some(Level::Change),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_only_through_its_door() {
    let gateway = Gateway::start().await;
    let tokens = [
        (Level::Read, gateway.token(Level::Read).await),
        (Level::Change, gateway.token(Level::Change).await),
        (Level::Admin, gateway.token(Level::Admin).await),
    ];
    let token_at = |level: Level| {
        tokens
            .iter()
            .find(|(at, _)| *at == level)
            .map(|(_, token)| token.clone())
            .unwrap()
    };
    let browsers = [
        (Level::Read, gateway.signed_in(Level::Read).await),
        (Level::Change, gateway.signed_in(Level::Change).await),
        (Level::Admin, gateway.signed_in(Level::Admin).await),
    ];
    let browser_at = |level: Level| &browsers.iter().find(|(at, _)| *at == level).unwrap().1;
    let anonymous = Browser::new(&gateway);
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut checked = 0;
    for route in ROUTES.iter() {
        let path = concrete(route.path);
        let what = format!("{} {}", route.method.as_ref(), route.path);
        match route.access {
            Access::Public | Access::AgentSigned => {
                let status = match route.method {
                    Method::Get => anonymous.get(&path).await.status,
                    Method::Post => gateway
                        .client
                        .post(format!("{}{path}", gateway.url))
                        .json(&body_for(route.path))
                        .send()
                        .await
                        .unwrap()
                        .status()
                        .as_u16(),
                    Method::Put | Method::Delete => {
                        panic!("{what}: no public route changes a thing")
                    }
                };
                assert!(![401, 403, 404, 405].contains(&status), "{what}: {status}");
            }
            Access::Operator(needed) => {
                let send = |token: Option<String>| {
                    let url = format!("{}{path}", gateway.url);
                    let request = match route.method {
                        Method::Get => gateway.client.get(url),
                        Method::Post => gateway.client.post(url).json(&body_for(route.path)),
                        Method::Put => gateway.client.put(url).json(&body_for(route.path)),
                        Method::Delete => gateway.client.delete(url),
                    };
                    match token {
                        Some(token) => request.bearer_auth(token),
                        None => request,
                    }
                };
                assert_eq!(send(None).send().await.unwrap().status(), 401, "{what}");
                if let Some(lower) = below(needed) {
                    let status = send(Some(token_at(lower))).send().await.unwrap().status();
                    assert_eq!(status, 403, "{what} one level below");
                }
                // A session cookie never opens the API.
                let with_cookie = gateway
                    .client
                    .get(format!("{}{path}", gateway.url))
                    .header(
                        "cookie",
                        format!(
                            "__Host-capstan_session={}",
                            browser_at(Level::Admin)
                                .cookie("__Host-capstan_session")
                                .unwrap()
                        ),
                    )
                    .send()
                    .await
                    .unwrap()
                    .status();
                assert!(
                    [401, 405].contains(&with_cookie.as_u16()),
                    "{what}: {with_cookie}"
                );
            }
            Access::Session(needed) => {
                let at_level = browser_at(needed);
                match route.method {
                    Method::Get => {
                        let bare = anonymous.get(&path).await;
                        assert_eq!(bare.status, 303, "{what} without a session");
                        let location = bare.location.unwrap();
                        assert!(
                            location.starts_with("/ui/sign-in?next=%2Fui"),
                            "{what}: {location}"
                        );
                        if let Some(lower) = below(needed) {
                            let page = browser_at(lower).get(&path).await;
                            assert_eq!(page.status, 403, "{what} one level below");
                        }
                        let page = at_level.get(&path).await;
                        assert_eq!(page.status, 200, "{what} at its level: {}", page.body);
                        // A bearer token never opens the UI.
                        let with_token = no_redirects
                            .get(format!("{}{path}", gateway.url))
                            .bearer_auth(token_at(Level::Admin))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(with_token.status(), 303, "{what} with a token");
                    }
                    Method::Post => {
                        let bare = anonymous.post(&path, &[("csrf", "x")]).await;
                        assert_eq!(bare.status, 401, "{what} without a session");
                        let csrf = at_level.csrf().await;
                        let missing = at_level.post(&path, &[]).await;
                        assert_eq!(missing.status, 403, "{what} without a csrf token");
                        let wrong = at_level
                            .post(&path, &[("csrf", &"A".repeat(csrf.len()))])
                            .await;
                        assert_eq!(wrong.status, 403, "{what} with a wrong csrf token");
                        let other = browser_at(if needed == Level::Admin {
                            Level::Change
                        } else {
                            Level::Admin
                        })
                        .csrf()
                        .await;
                        let someone_elses = at_level.post(&path, &[("csrf", &other)]).await;
                        assert_eq!(
                            someone_elses.status, 403,
                            "{what} with another session's token"
                        );
                        if let Some(lower) = below(needed) {
                            let page = browser_at(lower).submit(&path, &[]).await;
                            assert_eq!(page.status, 403, "{what} one level below");
                        }
                        if path != "/ui/sign-out" {
                            let page = at_level.submit(&path, &[("label", "x")]).await;
                            assert!(
                                ![401, 403, 404, 405].contains(&page.status),
                                "{what} at its level: {}",
                                page.status
                            );
                        }
                    }
                    Method::Put | Method::Delete => panic!("{what}: the UI takes only forms"),
                }
            }
            Access::PreSession => {
                let fresh = Browser::new(&gateway);
                let form = [
                    ("csrf", "x"),
                    ("name", "nobody"),
                    ("password", "wrong password"),
                ];
                assert_eq!(
                    fresh.post(&path, &form).await.status,
                    403,
                    "{what} without the cookie"
                );
                let csrf = fresh.get("/ui/sign-in").await.csrf();
                assert_eq!(
                    fresh.post(&path, &form).await.status,
                    403,
                    "{what} with a wrong token"
                );
                let form = [
                    ("csrf", csrf.as_str()),
                    ("name", "nobody"),
                    ("password", "wrong password"),
                ];
                assert_eq!(
                    fresh.post(&path, &form).await.status,
                    401,
                    "{what} with the token"
                );
            }
        }
        checked += 1;
    }
    assert_eq!(checked, ROUTES.len());
    // Sign-out is a session POST like any other: last, since it ends the session.
    let admin = browser_at(Level::Admin);
    assert_eq!(admin.post("/ui/sign-out", &[]).await.status, 403);
    assert_eq!(admin.submit("/ui/sign-out", &[]).await.status, 303);
    assert_eq!(admin.get("/ui/").await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_post_without_its_csrf_token_reaches_nothing_and_changes_nothing() {
    let gateway = Gateway::start().await;
    let admin = gateway.signed_in(Level::Admin).await;
    for route in ROUTES
        .iter()
        .filter(|route| matches!(route.access, Access::Session(_)) && route.method == Method::Post)
    {
        let page = admin.post(&concrete(route.path), &[("label", "x")]).await;
        assert_eq!(page.status, 403, "{}", route.path);
        assert!(page.has("This form has expired or did not come from this site"));
    }
    assert!(gateway.asked_ops().is_empty(), "{:?}", gateway.asked_ops());
    let tokens: i64 = sqlx::query_scalar("SELECT count(*) FROM api_tokens")
        .fetch_one(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(tokens, 1, "only the operator's first token");
    let acts: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action <> 'sign_in'")
        .fetch_one(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(acts, 0);
    assert_eq!(admin.get("/ui/").await.status, 200, "still signed in");
}
