//! The operator UI over HTTP against a real database and NATS, with the fake agent channel:
//! signing in and out, the throttle, sessions ending, CSRF, first sign-in's password change,
//! tokens, levels, the audit record of UI acts, and escaping what nodes say.

use capstan_events::NodeId;
use capstan_events::{
    agent_channel::rpc::{self as ops, HealthDot, Placement},
    rpc::Rpc,
    rpc::{ErrorCode, Level, RpcError},
};
use serde_json::Value;

use crate::{
    browser::{sha2_of, Browser, PASSWORD},
    harness::{join_view, node_view, Gateway},
};

const SESSION: &str = "__Host-capstan_session";

async fn sessions(gateway: &Gateway) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(gateway.store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_sets_a_strict_host_cookie_and_a_wrong_password_or_name_is_refused_alike() {
    let gateway = Gateway::start().await;
    let name = gateway.operator(Level::Read, false).await;
    let browser = Browser::new(&gateway);

    let form = browser.get("/ui/sign-in").await;
    assert_eq!(form.status, 200);
    assert!(form.has("name=\"name\"") && form.has("name=\"password\""));
    let pre = form
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|value| value.to_str().unwrap().to_string())
        .find(|cookie| cookie.starts_with("__Host-capstan_presession="))
        .expect("a pre-session cookie");
    assert!(pre.contains("Secure") && pre.contains("HttpOnly") && pre.contains("SameSite=Strict"));

    let wrong = browser.sign_in(&name, "not the password").await;
    let unknown = browser.sign_in("nobody-at-all", "not the password").await;
    for refused in [&wrong, &unknown] {
        assert_eq!(refused.status, 401);
        assert!(refused.has("That operator name and password do not match."));
        assert!(
            !refused.has("not the password"),
            "the password is not echoed"
        );
        assert!(refused.location.is_none());
    }
    assert_eq!(sessions(&gateway).await, 0);
    assert_eq!(browser.cookie(SESSION), None);

    let signed_in = browser.sign_in(&name, PASSWORD).await;
    assert_eq!(signed_in.status, 303);
    assert_eq!(signed_in.location.as_deref(), Some("/ui/"));
    let cookie = signed_in
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|value| value.to_str().unwrap().to_string())
        .find(|cookie| cookie.starts_with("__Host-capstan_session="))
        .expect("a session cookie");
    for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    // Only a digest is stored.
    let secret = browser.cookie(SESSION).unwrap();
    let stored: Vec<u8> = sqlx::query_scalar("SELECT session_sha256 FROM sessions")
        .fetch_one(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(stored, sha2_of(&secret).to_vec());

    let dashboard = browser.get("/ui/").await;
    assert_eq!(dashboard.status, 200);
    assert!(dashboard.has(&format!("{name} · level 7")));
    let csp = dashboard.headers["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(dashboard.headers["x-content-type-options"], "nosniff");
    assert_eq!(dashboard.headers["referrer-policy"], "same-origin");
    assert_eq!(dashboard.headers["cache-control"], "no-store");
    assert!(
        !dashboard.has("<script>") && !dashboard.has(" style=\""),
        "no inline script or style"
    );

    let failures: i64 = sqlx::query_scalar("SELECT count(*) FROM sign_in_failures")
        .fetch_one(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(
        failures, 1,
        "the successful sign-in cleared the name's failures"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_failures_for_one_name_throttle_it_even_with_the_right_password() {
    let gateway = Gateway::start().await;
    let name = gateway.operator(Level::Read, false).await;
    let browser = Browser::new(&gateway);
    for _ in 0..5 {
        assert_eq!(browser.sign_in(&name, "wrong password").await.status, 401);
    }
    let throttled = browser.sign_in(&name, PASSWORD).await;
    assert_eq!(throttled.status, 429);
    assert!(
        throttled
            .has("Too many failed sign-ins for this operator name from your address. Wait 15 minutes and try again."),
        "{}",
        throttled.body
    );
    assert!(throttled.headers.contains_key("retry-after"));
    assert_eq!(sessions(&gateway).await, 0);
    // Another operator from the same address is not held back by this name's failures.
    let other = gateway.operator(Level::Read, false).await;
    assert_eq!(browser.sign_in(&other, PASSWORD).await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_failures_from_one_address_throttle_every_name_from_it() {
    let gateway = Gateway::start().await;
    let name = gateway.operator(Level::Read, false).await;
    // Nineteen earlier failures of different names from this address, then one over HTTP.
    for index in 0..19 {
        sqlx::query("INSERT INTO sign_in_failures (name, address) VALUES ($1, '127.0.0.1')")
            .bind(format!("guess{index}"))
            .execute(gateway.store.pool())
            .await
            .unwrap();
    }
    let browser = Browser::new(&gateway);
    assert_eq!(browser.sign_in("guess-twenty", "x").await.status, 401);
    let throttled = browser.sign_in(&name, PASSWORD).await;
    assert_eq!(throttled.status, 429);
    assert!(throttled.has("Too many failed sign-ins from your address."));
    // Failures outside the window do not count.
    sqlx::query("UPDATE sign_in_failures SET at = now() - interval '16 minutes'")
        .execute(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(browser.sign_in(&name, PASSWORD).await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_or_too_old_session_ends_and_sends_the_page_to_sign_in() {
    let gateway = Gateway::start().await;
    let browser = gateway.signed_in(Level::Read).await;
    assert_eq!(browser.get("/ui/nodes/17?tab=jobs").await.status, 200);

    sqlx::query("UPDATE sessions SET last_seen_at = now() - interval '29 minutes'")
        .execute(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(
        browser.get("/ui/").await.status,
        200,
        "within the idle timeout"
    );
    let touched: bool =
        sqlx::query_scalar("SELECT last_seen_at > now() - interval '1 minute' FROM sessions")
            .fetch_one(gateway.store.pool())
            .await
            .unwrap();
    assert!(touched, "a use moves the idle clock");

    sqlx::query("UPDATE sessions SET last_seen_at = now() - interval '31 minutes'")
        .execute(gateway.store.pool())
        .await
        .unwrap();
    let ended = browser.get("/ui/nodes/17?tab=jobs").await;
    assert_eq!(ended.status, 303);
    assert_eq!(
        ended.location.as_deref(),
        Some("/ui/sign-in?next=%2Fui%2Fnodes%2F17%3Ftab%3Djobs")
    );
    let form = browser.post("/ui/account/tokens", &[("csrf", "x")]).await;
    assert_eq!(form.status, 401);
    // Sign-in goes back where the operator was.
    let back = browser.get(ended.location.as_deref().unwrap()).await;
    assert!(back.has("value=\"/ui/nodes/17?tab=jobs\""), "{}", back.body);

    let again = gateway.signed_in(Level::Read).await;
    sqlx::query("UPDATE sessions SET created_at = now() - interval '13 hours'")
        .execute(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(
        again.get("/ui/").await.status,
        303,
        "past the absolute lifetime"
    );

    // A next that leaves the site is not followed.
    let evil = Browser::new(&gateway);
    let form = evil.get("/ui/sign-in?next=//evil.example/").await;
    assert!(form.has("value=\"/ui/\"") && !form.has("evil.example"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_deletes_the_session_and_its_cookie_no_longer_opens_anything() {
    let gateway = Gateway::start().await;
    let browser = gateway.signed_in(Level::Read).await;
    let secret = browser.cookie(SESSION).unwrap();
    assert_eq!(sessions(&gateway).await, 1);
    let out = browser.submit("/ui/sign-out", &[]).await;
    assert_eq!(out.status, 303);
    assert_eq!(out.location.as_deref(), Some("/ui/sign-in"));
    assert_eq!(browser.cookie(SESSION), None, "the cookie is cleared");
    assert_eq!(sessions(&gateway).await, 0);
    browser.set_cookie(SESSION, &secret);
    assert_eq!(
        browser.get("/ui/").await.status,
        303,
        "the old cookie is dead"
    );
    let page = browser.get("/ui/sign-in").await;
    assert!(page.has("You are signed out."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_form_needs_its_pre_session_token() {
    let gateway = Gateway::start().await;
    let name = gateway.operator(Level::Read, false).await;
    let browser = Browser::new(&gateway);
    // No cookie, no field: refused before the password is looked at.
    let bare = browser
        .post(
            "/ui/sign-in",
            &[("name", name.as_str()), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(bare.status, 403);
    assert_eq!(sessions(&gateway).await, 0);
    let token = browser.get("/ui/sign-in").await.csrf();
    let mismatch = browser
        .post(
            "/ui/sign-in",
            &[
                ("csrf", &"B".repeat(43)),
                ("name", &name),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(mismatch.status, 403);
    let good = browser
        .post(
            "/ui/sign-in",
            &[("csrf", &token), ("name", &name), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(good.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_time_password_leads_to_the_password_page_before_anything_else() {
    let gateway = Gateway::start().await;
    let name = gateway.operator(Level::Admin, true).await;
    let browser = Browser::new(&gateway);
    let signed_in = browser.sign_in(&name, PASSWORD).await;
    assert_eq!(signed_in.location.as_deref(), Some("/ui/password"));
    let elsewhere = browser.get("/ui/").await;
    assert_eq!(elsewhere.status, 303);
    assert_eq!(elsewhere.location.as_deref(), Some("/ui/password"));
    let page = browser.get("/ui/password").await;
    assert!(page.has("data-test=\"password-required\""));
    let csrf = page.csrf();
    let refused = browser
        .post(
            "/ui/joins/0190b5c2-7d1e-7a3c-9f00-000000000001/approve",
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(refused.status, 403);
    assert!(gateway.asked_ops().is_empty());

    let short = browser
        .post(
            "/ui/password",
            &[
                ("csrf", &csrf),
                ("current_password", PASSWORD),
                ("new_password", "short"),
                ("confirm_password", "short"),
            ],
        )
        .await;
    assert_eq!(short.status, 400);
    assert!(short.has("at least 12 characters"));
    let wrong_current = browser
        .post(
            "/ui/password",
            &[
                ("csrf", &csrf),
                ("current_password", "guess guess guess"),
                ("new_password", "my very own password"),
                ("confirm_password", "my very own password"),
            ],
        )
        .await;
    assert_eq!(wrong_current.status, 400);
    let changed = browser
        .post(
            "/ui/password",
            &[
                ("csrf", &csrf),
                ("current_password", PASSWORD),
                ("new_password", "my very own password"),
                ("confirm_password", "my very own password"),
            ],
        )
        .await;
    assert_eq!(changed.status, 303);
    assert_eq!(changed.location.as_deref(), Some("/ui/"));
    assert_eq!(browser.get("/ui/").await.status, 200);
    let hash: String = sqlx::query_scalar("SELECT password_hash FROM operators WHERE name = $1")
        .bind(&name)
        .fetch_one(gateway.store.pool())
        .await
        .unwrap();
    assert!(hash.starts_with("$argon2id$") && !hash.contains("my very own"));
    let again = Browser::new(&gateway);
    assert_eq!(again.sign_in(&name, PASSWORD).await.status, 401);
    assert_eq!(
        again.sign_in(&name, "my very own password").await.status,
        303
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_created_on_the_account_page_opens_the_api_until_it_is_revoked() {
    let gateway = Gateway::start().await;
    let browser = gateway.signed_in(Level::Read).await;
    let created = browser
        .submit("/ui/account/tokens", &[("label", "laptop")])
        .await;
    assert_eq!(created.status, 200);
    let marker = "data-test=\"new-token\" tabindex=\"0\">";
    let start = created.body.find(marker).expect("the token is shown") + marker.len();
    let token = created.body[start..start + 47].to_string();
    assert!(token.starts_with("cap_"), "{token}");
    assert_eq!(created.headers["cache-control"], "no-store");
    assert_eq!(
        gateway
            .get("/api/v1/nodes", &token)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let id: i64 = sqlx::query_scalar("SELECT id FROM api_tokens WHERE label = 'laptop'")
        .fetch_one(gateway.store.pool())
        .await
        .unwrap();
    let account = browser.get("/ui/account").await;
    assert!(account.has(&format!("id=\"token-{id}\"")));
    assert!(!account.has(&token), "shown once only");

    // Another operator cannot revoke it.
    let other = gateway.signed_in(Level::Admin).await;
    let refused = other
        .submit(&format!("/ui/account/tokens/{id}/revoke"), &[])
        .await;
    assert_eq!(refused.status, 303);
    assert_eq!(
        gateway
            .get("/api/v1/nodes", &token)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let revoked = browser
        .submit(&format!("/ui/account/tokens/{id}/revoke"), &[])
        .await;
    assert_eq!(revoked.status, 303);
    assert!(browser.get("/ui/account").await.has("is revoked"));
    assert_eq!(
        gateway
            .get("/api/v1/nodes", &token)
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    let rows: Vec<(String, String, Option<String>, String)> = sqlx::query_as(
        "SELECT operator, action, target, outcome FROM audit_log
         WHERE action IN ('create_token', 'revoke_token') ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap();
    let target = Some(format!("token/{id}"));
    assert_eq!(
        rows,
        vec![
            (
                browser.name.clone(),
                "create_token".into(),
                None,
                "ok".into()
            ),
            (
                other.name.clone(),
                "revoke_token".into(),
                target.clone(),
                "not_found".into()
            ),
            (
                browser.name.clone(),
                "revoke_token".into(),
                target,
                "ok".into()
            ),
        ]
    );
    let detail: Value =
        sqlx::query_scalar("SELECT detail FROM audit_log WHERE action = 'create_token'")
            .fetch_one(gateway.store.pool())
            .await
            .unwrap();
    assert!(
        !detail.to_string().contains("cap_"),
        "the token is not in the audit log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn level_7_sees_no_trust_buttons_and_its_posts_are_403_and_audited() {
    let gateway = Gateway::start().await;
    let reader = gateway.signed_in(Level::Read).await;
    let join = "00000000-0000-0000-0000-000000000000";
    let dashboard = reader.get("/ui/").await;
    assert!(dashboard.has(&format!("id=\"join-{join}\"")));
    assert!(dashboard.has("data-test=\"fingerprint\">SHA256: abc</code>"));
    assert!(!dashboard.has("data-test=\"approve\"") && !dashboard.has("data-test=\"reject\""));
    assert!(!dashboard.has("href=\"/ui/audit\""));
    let agent_tab = reader.get("/ui/nodes/17?tab=agent").await;
    assert!(!agent_tab.has("data-test=\"disconnect\""));
    let jobs_tab = reader.get("/ui/nodes/17?tab=jobs").await;
    assert!(jobs_tab.has("data-test=\"run-check_status\""));
    assert!(
        !jobs_tab.has("run-restart_unit"),
        "change words need level 8"
    );

    for path in [
        format!("/ui/joins/{join}/approve"),
        "/ui/nodes/17/disconnect".to_string(),
        "/ui/jobs/42/cancel".to_string(),
    ] {
        let page = reader.submit(&path, &[]).await;
        assert_eq!(page.status, 403, "{path}");
        assert!(page.has("This needs level"), "{}", page.body);
    }
    assert_eq!(reader.get("/ui/audit").await.status, 403);
    assert!(
        !gateway
            .asked_ops()
            .iter()
            .any(|op| op == ops::ApproveJoin::OP
                || op == ops::DisconnectNode::OP
                || op == ops::CancelJobRequest::OP),
        "{:?}",
        gateway.asked_ops()
    );
    let outcomes: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, outcome FROM audit_log WHERE action <> 'sign_in' ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap();
    assert_eq!(
        outcomes,
        vec![
            ("approve_join".into(), "forbidden".into()),
            ("disconnect_node".into(), "forbidden".into()),
            ("cancel_job".into(), "forbidden".into()),
        ]
    );

    let admin = gateway.signed_in(Level::Admin).await;
    let dashboard = admin.get("/ui/").await;
    assert!(dashboard.has("data-test=\"approve\"") && dashboard.has("href=\"/ui/audit\""));
    assert!(admin
        .get("/ui/nodes/17?tab=agent")
        .await
        .has("data-test=\"disconnect\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_acts_are_asked_as_the_operator_audited_and_refusals_read_as_sentences() {
    let gateway = Gateway::start().await;
    let admin = gateway.signed_in(Level::Admin).await;
    let join = "00000000-0000-0000-0000-000000000000";
    let approved = admin
        .submit(&format!("/ui/joins/{join}/approve"), &[("node_id", "9")])
        .await;
    assert_eq!(approved.status, 303);
    assert_eq!(approved.location.as_deref(), Some("/ui/"));
    let (op, asked) = gateway
        .script
        .lock()
        .unwrap()
        .asked
        .last()
        .cloned()
        .unwrap();
    assert_eq!(op, ops::ApproveJoin::OP);
    assert_eq!(asked["node_id"], 9);
    assert_eq!(asked["actor"]["name"], admin.name.as_str());
    assert_eq!(asked["actor"]["level"], 10);
    assert_eq!(asked["actor"]["address"], "127.0.0.1");
    let after = admin.get("/ui/").await;
    assert!(
        after.has("data-kind=\"ok\"") && after.has("bound to node 9"),
        "{}",
        after.body
    );

    gateway.script.lock().unwrap().failure = Some(RpcError::new(
        ErrorCode::NeedsNewerAgent,
        "node 17 does not report unit_journal",
    ));
    let refused = admin
        .submit(
            "/ui/nodes/17/jobs",
            &[
                ("primitive", "unit_journal"),
                ("p.unit", "nginx"),
                ("p.lines", "20"),
            ],
        )
        .await;
    assert_eq!(refused.status, 303);
    assert_eq!(refused.location.as_deref(), Some("/ui/nodes/17?tab=jobs"));
    gateway.script.lock().unwrap().failure = None;
    let page = admin.get("/ui/nodes/17?tab=jobs").await;
    assert!(
        page.has("Needs a newer agent — update this node. node 17 does not report unit_journal"),
        "{}",
        page.body
    );
    assert!(!page.has("\"code\""), "no raw JSON");

    let created = admin
        .submit("/ui/nodes/17/jobs", &[("primitive", "check_status")])
        .await;
    assert_eq!(created.location.as_deref(), Some("/ui/jobs/42"));

    let rows: Vec<(String, Option<String>, String, Value)> = sqlx::query_as(
        "SELECT action, target, outcome, detail FROM audit_log WHERE action <> 'sign_in' ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_deref(), rows[0].2.as_str()),
        ("approve_join", Some(format!("join/{join}").as_str()), "ok")
    );
    assert_eq!(rows[0].3["via"], "ui");
    assert_eq!(rows[0].3["node_id"], 9);
    assert_eq!(
        (rows[1].0.as_str(), rows[1].1.as_deref(), rows[1].2.as_str()),
        ("create_job", Some("node/17"), "needs_newer_agent")
    );
    assert_eq!(rows[1].3["primitive"], "unit_journal");
    assert_eq!(
        (rows[2].2.as_str(), &rows[2].3["job_id"]),
        ("ok", &Value::from(42))
    );

    let audit = admin.get("/ui/audit").await;
    assert_eq!(audit.status, 200);
    assert!(audit.has("needs_newer_agent") && audit.has(&admin.name));
}

/// `text` as the templates escape it.
fn escaped(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_node_says_is_escaped_and_never_a_link() {
    let gateway = Gateway::start().await;
    let hostile = "<script>alert(1)</script>";
    let mut node = node_view(17);
    node.name = hostile.into();
    node.agent_version = Some("<img src=x onerror=alert(2)>".into());
    node.health.dot = HealthDot::Red;
    node.health.reasons = vec!["disk <b>95 %</b> full".into()];
    node.vocabulary = vec!["check_status".into(), "<i>word</i>".into()];
    node.last_check = Some(capstan_events::agent_channel::rpc::Finding {
        job_id: 3,
        outcome: capstan_events::agent_channel::JobOutcome::Completed,
        finished_at: chrono::Utc::now(),
        result: Some(
            serde_json::json!({"agent_version": "https://evil.example/<x>", "uptime_s": "odd"}),
        ),
    });
    let mut container = node_view(18);
    container.placement = Placement::Container {
        host_node_id: NodeId(99),
    };
    container.name = "orphan-container".into();
    let mut join = join_view();
    join.name = "<script>join()</script>".into();
    join.name_taken_by = Some(NodeId(17));
    {
        let mut script = gateway.script.lock().unwrap();
        script.nodes = Some(vec![node, container]);
        script.joins = Some(vec![join]);
        let mut job = crate::harness::job_view(42);
        job.result = Some(serde_json::json!({"html": "</pre><script>x()</script>"}));
        job.reason = Some("<b>refused</b>".into());
        script.job = Some(job);
    }
    let admin = gateway.signed_in(Level::Admin).await;
    for path in [
        "/ui/",
        "/ui/nodes/17",
        "/ui/nodes/17?tab=agent",
        "/ui/jobs/42",
    ] {
        let page = admin.get(path).await;
        assert_eq!(page.status, 200, "{path}");
        for raw in ["<script>", "<img", "<b>", "<i>", "href=\"https://evil"] {
            assert!(!page.has(raw), "{path} carries {raw}: {}", page.body);
        }
    }
    let dashboard = admin.get("/ui/").await;
    assert!(dashboard.has(&escaped(hostile)), "{}", dashboard.body);
    assert!(dashboard.has("data-dot=\"red\"") && dashboard.has("problem"));
    assert!(
        dashboard.has(&escaped("disk <b>95 %</b> full")),
        "reasons in words"
    );
    assert!(dashboard.has("data-test=\"name-taken\""));
    assert!(
        dashboard.has("id=\"node-18\""),
        "a container without its host is a machine"
    );
    let overview = admin.get("/ui/nodes/17").await;
    assert!(
        overview.has(&escaped("https://evil.example/<x>")),
        "shown as text only"
    );
    assert!(overview.has("data-test=\"fact-uptime\""));
    assert!(overview.has("not reported"));
    let job = admin.get("/ui/jobs/42").await;
    assert!(
        job.has(&escaped("</pre><script>x()</script>")),
        "{}",
        job.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_page_follows_its_output_through_a_session_route() {
    let gateway = Gateway::start().await;
    let reader = gateway.signed_in(Level::Read).await;
    let page = reader.get("/ui/jobs/42").await;
    assert_eq!(page.status, 200);
    assert!(page.has("data-test=\"job-state\""));
    assert!(page.has("data-test=\"job-output\"") && page.has("data-live=\"yes\""));
    assert!(page.has(">hello</pre>"), "the output so far");
    assert!(page.has("data-offset=\"5\""));
    assert!(!page.has("data-test=\"cancel\""), "cancel needs level 8");
    let output = reader.get("/ui/jobs/42/output?offset=5").await;
    assert_eq!(output.status, 200);
    let answer: Value = serde_json::from_str(&output.body).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"state": "running", "new_output": "hello", "offset": 10})
    );
    let bad = reader.get("/ui/jobs/42/output?offset=soon").await;
    assert_eq!(bad.status, 400);

    let changer = gateway.signed_in(Level::Change).await;
    assert!(changer.get("/ui/jobs/42").await.has("data-test=\"cancel\""));
    let cancelled = changer.submit("/ui/jobs/42/cancel", &[]).await;
    assert_eq!(cancelled.location.as_deref(), Some("/ui/jobs/42"));

    let script = reader.get("/ui/static/app.js").await;
    assert_eq!(script.status, 200);
    assert!(script.has("textContent") || script.has("createTextNode"));
    assert!(!script.has("innerHTML"));
}

/// Issue 27: a plane with no nodes tells a new operator how to add a server: the install
/// command with this plane's URL, then the join to approve and the fingerprint to compare. Once
/// a node exists the dashboard lists nodes instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plane_with_no_nodes_shows_how_to_install_the_agent_and_what_happens_next() {
    let gateway = Gateway::start().await;
    gateway.script.lock().unwrap().nodes = Some(Vec::new());
    let reader = gateway.signed_in(Level::Read).await;
    let dashboard = reader.get("/ui/").await;
    assert_eq!(dashboard.status, 200, "{}", dashboard.body);
    assert!(
        dashboard.has(r#"data-test="first-server""#),
        "{}",
        dashboard.body
    );
    let plane = gateway.url.trim_end_matches('/');
    assert!(
        dashboard.has(&format!(
            "sudo ./install.sh --binary=./capstan-agent --enable --management-node={plane} --name=web-1"
        )),
        "the command names this plane: {}",
        dashboard.body
    );
    assert!(dashboard.has("Agents asking to join</a>"));
    assert!(dashboard.has("Compare the fingerprint"));
    assert!(
        dashboard.has(r#"data-test="loopback-url""#),
        "reached on 127.0.0.1, the page says a machine elsewhere needs another address"
    );

    gateway.script.lock().unwrap().nodes = None;
    let dashboard = reader.get("/ui/").await;
    assert!(!dashboard.has(r#"data-test="first-server""#));
    assert!(dashboard.has(r#"id="node-17""#), "{}", dashboard.body);
}
