//! The provisioning API and pages against the harness's provisioning service (issue 29): each
//! route at its level (accounts and every act 10, reading provisions 7), each act audited
//! without the token, the token never in an answer, a bad body refused naming its field; the
//! pages draw what the service answers (Main | Test tabs, a provision's steps, log and verdict,
//! the dashboard's banner, a join card's provision) and a level-8 operator sees no provisioning
//! action and is refused at the door.

use capstan_events::provisioning::{
    provisions::{self, StepView, VerdictView},
    rpc as accounts, AccountFlag, ProvisionStep,
};
use capstan_events::rpc::{ErrorCode, Level, Rpc, RpcError};
use capstan_events::NodeId;
use serde_json::{json, Value};

use crate::harness::{error_of, provision_view, Gateway};

/// A token no answer, row or page may hold.
const TOKEN: &str = "tok-9f3c1e77-never-shown";

fn asked(gateway: &Gateway, op: &str) -> Vec<Value> {
    gateway
        .script
        .lock()
        .unwrap()
        .asked
        .iter()
        .filter(|(asked, _)| asked == op)
        .map(|(_, request)| request.clone())
        .collect()
}

async fn audit(gateway: &Gateway) -> Vec<(String, String, Option<String>, Value)> {
    sqlx::query_as(
        "SELECT action, outcome, target, detail FROM audit_log WHERE action <> 'sign_in' ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap()
}

async fn everything_in_the_audit_log(gateway: &Gateway) -> String {
    let rows: Vec<(Value,)> = sqlx::query_as("SELECT to_jsonb(a) FROM audit_log a")
        .fetch_all(gateway.store.pool())
        .await
        .unwrap();
    rows.iter().map(|(row,)| row.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_is_added_at_level_10_audited_without_its_token_which_no_answer_holds() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    let changer = gateway.token(Level::Change).await;
    let body = json!({"provider": "hetzner", "label": "cloud", "flag": "test", "token": TOKEN});

    let refused = gateway
        .post("/api/v1/provisioning/accounts", &changer, body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(asked(&gateway, accounts::AddAccount::OP).is_empty());

    let added = gateway
        .post("/api/v1/provisioning/accounts", &admin, body)
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201);
    let text = added.text().await.unwrap();
    assert!(!text.contains(TOKEN), "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["label"], "cloud");
    // The service is asked with the token, the provider and flag in its words.
    let request = &asked(&gateway, accounts::AddAccount::OP)[0];
    assert_eq!(request["token"], TOKEN);
    assert_eq!(request["provider"], "hetzner");
    assert_eq!(request["flag"], "test");
    assert_eq!(request["actor"]["level"], 10);

    // Refused by the service: the refusal is answered and audited, still without the token.
    gateway.script.lock().unwrap().failure = Some(RpcError::new(
        ErrorCode::Refused,
        "linode refused the token (401)",
    ));
    let refused = gateway
        .post(
            "/api/v1/provisioning/accounts",
            &admin,
            json!({"provider": "linode", "label": "x", "flag": "main", "token": TOKEN}),
        )
        .send()
        .await
        .unwrap();
    let (status, code, message) = error_of(refused).await;
    assert_eq!((status, code.as_str()), (422, "refused"), "{message}");
    assert!(!message.contains(TOKEN));
    gateway.script.lock().unwrap().failure = None;

    // A token of the wrong shape is refused naming the field, without repeating it.
    let refused = gateway
        .post(
            "/api/v1/provisioning/accounts",
            &admin,
            json!({"provider": "linode", "label": "x", "flag": "main", "token": 4815162342_i64}),
        )
        .send()
        .await
        .unwrap();
    let (status, _, message) = error_of(refused).await;
    assert_eq!(status, 400);
    assert!(message.starts_with("token:"), "{message}");
    assert!(!message.contains("4815162342"), "{message}");

    // A listing never holds a token either.
    let listed = gateway
        .get("/api/v1/provisioning/accounts", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert!(!listed.text().await.unwrap().contains(TOKEN));

    let rows = audit(&gateway).await;
    let actions: Vec<(&str, &str)> = rows
        .iter()
        .map(|(action, outcome, _, _)| (action.as_str(), outcome.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("add_cloud_account", "forbidden"),
            ("add_cloud_account", "ok"),
            ("add_cloud_account", "refused"),
            ("add_cloud_account", "invalid_request"),
        ]
    );
    assert_eq!(rows[1].3["account_id"], 2);
    assert_eq!(rows[1].3["account"]["provider"], "hetzner");
    let log = everything_in_the_audit_log(&gateway).await;
    assert!(!log.contains(TOKEN), "{log}");
    assert!(!log.contains("4815162342"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_route_is_asked_at_its_level_and_each_act_is_audited_with_its_target() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    let changer = gateway.token(Level::Change).await;
    let reader = gateway.token(Level::Read).await;
    let send = |method: &str, path: &str, token: &str, body: Option<Value>| {
        let url = format!("{}{path}", gateway.url);
        let request = match method {
            "GET" => gateway.client.get(url),
            "DELETE" => gateway.client.delete(url),
            _ => gateway.client.post(url).json(&body.unwrap_or(json!({}))),
        };
        request.bearer_auth(token.to_string()).send()
    };
    let provision = json!({"account_id": 1, "kind": "docker-host", "name": "box-1",
                           "region": "us-east", "size": "g6-nanode-1"});
    // (method, path, the level below which it is refused, the op it asks)
    let table = [
        (
            "GET",
            "/api/v1/provisioning/accounts",
            Level::Admin,
            accounts::ListAccounts::OP,
        ),
        (
            "DELETE",
            "/api/v1/provisioning/accounts/4",
            Level::Admin,
            accounts::DeleteAccount::OP,
        ),
        (
            "GET",
            "/api/v1/provisioning/accounts/4/offer",
            Level::Admin,
            accounts::AccountOffer::OP,
        ),
        (
            "GET",
            "/api/v1/provisioning/provisions",
            Level::Read,
            provisions::ListProvisions::OP,
        ),
        (
            "POST",
            "/api/v1/provisioning/provisions",
            Level::Admin,
            provisions::RequestProvision::OP,
        ),
        (
            "GET",
            "/api/v1/provisioning/provisions/6",
            Level::Read,
            provisions::GetProvision::OP,
        ),
        (
            "POST",
            "/api/v1/provisioning/provisions/6/retry",
            Level::Admin,
            provisions::RetryProvision::OP,
        ),
    ];
    for (method, path, needed, op) in table {
        for (level, token) in [
            (Level::Read, &reader),
            (Level::Change, &changer),
            (Level::Admin, &admin),
        ] {
            gateway.script.lock().unwrap().asked.clear();
            let status = send(method, path, token, Some(provision.clone()))
                .await
                .unwrap()
                .status()
                .as_u16();
            if level < needed {
                assert_eq!(status, 403, "{method} {path} at {level:?}");
                assert!(gateway.asked_ops().is_empty(), "{method} {path}");
            } else {
                assert!((200..300).contains(&status), "{method} {path}: {status}");
                assert_eq!(gateway.asked_ops(), [op], "{method} {path}");
            }
        }
    }
    let made = &asked(&gateway, provisions::RetryProvision::OP)[0];
    assert_eq!(made["provision_id"], 6);

    let rows = audit(&gateway).await;
    let oks: Vec<(&str, Option<&str>)> = rows
        .iter()
        .filter(|(_, outcome, _, _)| outcome == "ok")
        .map(|(action, _, target, _)| (action.as_str(), target.as_deref()))
        .collect();
    assert_eq!(
        oks,
        [
            ("delete_cloud_account", Some("account/4")),
            ("request_provision", None),
            ("retry_provision", Some("provision/6")),
        ]
    );
    let request = rows
        .iter()
        .find(|(action, outcome, _, _)| action == "request_provision" && outcome == "ok")
        .unwrap();
    assert_eq!(request.3["provision_id"], 7);
    assert_eq!(request.3["provision"]["kind"], "docker-host");
    // Reading leaves no row; every refusal at the door does.
    assert_eq!(
        rows.iter()
            .filter(|(_, outcome, _, _)| outcome == "forbidden")
            .count(),
        2 + 2 + 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_body_or_query_is_400_naming_the_field_and_asks_nothing() {
    let gateway = Gateway::start().await;
    let admin = gateway.token(Level::Admin).await;
    let good = json!({"account_id": 1, "kind": "site", "name": "shop-1", "region": "us-east",
                      "size": "g6-nanode-1"});
    let with = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        body
    };
    let mut without_region = good.clone();
    without_region.as_object_mut().unwrap().remove("region");
    for (path, body, named) in [
        (
            "/api/v1/provisioning/provisions",
            with("kind", json!("vm")),
            "kind",
        ),
        (
            "/api/v1/provisioning/provisions",
            with("account_id", json!("one")),
            "account_id",
        ),
        (
            "/api/v1/provisioning/provisions",
            with("image", json!(7)),
            "image",
        ),
        (
            "/api/v1/provisioning/provisions",
            with("extra", json!(1)),
            "extra",
        ),
        ("/api/v1/provisioning/provisions", without_region, "region"),
        (
            "/api/v1/provisioning/accounts",
            json!({"provider": "aws", "label": "x", "flag": "main", "token": "t"}),
            "provider",
        ),
        (
            "/api/v1/provisioning/accounts",
            json!({"provider": "linode", "label": "x", "flag": "prod", "token": "t"}),
            "flag",
        ),
    ] {
        let answer = gateway.post(path, &admin, body).send().await.unwrap();
        let (status, code, message) = error_of(answer).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_request"),
            "{message}"
        );
        assert!(message.contains(named), "{named}: {message}");
    }
    for (query, named) in [("flag=prod", "flag"), ("in_flight=maybe", "in_flight")] {
        let answer = gateway
            .get(&format!("/api/v1/provisioning/provisions?{query}"), &admin)
            .send()
            .await
            .unwrap();
        let (status, _, message) = error_of(answer).await;
        assert_eq!(status, 400);
        assert!(message.starts_with(named), "{message}");
    }
    let bad_id = gateway
        .get("/api/v1/provisioning/provisions/x", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(bad_id.status(), 400);
    assert!(gateway.asked_ops().is_empty(), "{:?}", gateway.asked_ops());

    // A good listing reaches the service typed.
    let listed = gateway
        .get(
            "/api/v1/provisioning/provisions?flag=test&in_flight=true",
            &admin,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let request = &asked(&gateway, provisions::ListProvisions::OP)[0];
    assert_eq!(
        (&request["flag"], &request["in_flight"]),
        (&json!("test"), &json!(true))
    );
}

fn failed_provision() -> provisions::ProvisionView {
    let at = chrono::Utc::now() - chrono::Duration::minutes(5);
    provisions::ProvisionView {
        step: ProvisionStep::InstallFailed,
        failure: Some("install.sh exited 1: apt-get could not reach the mirror".into()),
        node_id: Some(NodeId(41)),
        expected_key: Some("SHA256:expectedkeyexpectedkey".into()),
        steps: vec![
            StepView {
                step: ProvisionStep::Requested,
                at,
                detail: None,
            },
            StepView {
                step: ProvisionStep::Installing,
                at: at + chrono::Duration::minutes(2),
                detail: Some("ssh root@198.51.100.4".into()),
            },
        ],
        install_log: "installing capstan-agent\nroot password: ********\n".into(),
        approval: Some(VerdictView {
            join_id: uuid::Uuid::nil(),
            provision_id: 6,
            provision_name: "shop-1".into(),
            instance_id: Some("9001".into()),
            provision_requested_at: at,
            approved: false,
            reasons: vec!["the key does not match the one the install showed".into()],
            key_differs: true,
            second_join: false,
            judged_at: at,
        }),
        ..provision_view(6)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisions_page_shows_its_steps_log_node_and_verdict_and_retry_only_at_level_10() {
    let gateway = Gateway::start().await;
    gateway.script.lock().unwrap().provision = Some(failed_provision());
    let admin = gateway.signed_in(Level::Admin).await;
    let changer = gateway.signed_in(Level::Change).await;

    let page = admin.get("/ui/provisioning/provisions/6").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for needle in [
        r#"data-step="install_failed""#,
        "apt-get could not reach the mirror",
        r#"id="step-1" data-step="requested""#,
        r#"id="step-2" data-step="installing""#,
        "ssh root@198.51.100.4",
        "root password: ********",
        r#"href="/ui/nodes/41" data-test="node-link""#,
        r#"data-test="verdict" data-approved="false""#,
        "the key does not match the one the install showed",
        r#"data-test="key-differs""#,
        r#"data-test="retry-provision""#,
    ] {
        assert!(page.has(needle), "{needle}: {}", page.body);
    }
    // A failed install does not refresh itself; one under way does.
    assert!(!page.has("http-equiv=\"refresh\""));

    let seen_at_8 = changer.get("/ui/provisioning/provisions/6").await;
    assert_eq!(seen_at_8.status, 200);
    assert!(!seen_at_8.has("retry-provision"));
    assert!(!seen_at_8.has("<form method=\"post\" action=\"/ui/provisioning"));

    let retried = admin
        .submit("/ui/provisioning/provisions/6/retry", &[])
        .await;
    assert_eq!(retried.status, 303);
    assert_eq!(
        retried.location.as_deref(),
        Some("/ui/provisioning/provisions/6")
    );
    assert_eq!(asked(&gateway, provisions::RetryProvision::OP).len(), 1);
    let refused = changer
        .submit("/ui/provisioning/provisions/6/retry", &[])
        .await;
    assert_eq!(refused.status, 403);
    assert_eq!(asked(&gateway, provisions::RetryProvision::OP).len(), 1);

    gateway.script.lock().unwrap().provision = None;
    let under_way = admin.get("/ui/provisioning/provisions/6").await;
    assert!(under_way.has("http-equiv=\"refresh\""));
    assert!(!under_way.has("retry-provision"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pv_13_the_list_has_main_and_test_tabs_remembered_and_actions_only_at_level_10() {
    let gateway = Gateway::start().await;
    let in_test = provisions::ProvisionView {
        flag: AccountFlag::Test,
        name: "tester".into(),
        ..provision_view(8)
    };
    gateway.script.lock().unwrap().provisions = Some(vec![provision_view(3), in_test]);
    let admin = gateway.signed_in(Level::Admin).await;
    let changer = gateway.signed_in(Level::Change).await;

    let main = admin.get("/ui/provisioning").await;
    assert_eq!(main.status, 200);
    assert!(main.has(r#"id="provision-3""#));
    assert!(!main.has(r#"id="provision-8""#));
    assert!(main.has(r#"data-test="tab-main" aria-current="page""#));
    assert!(main.has(r#"<span class="count" data-test="other-count">1</span>"#));
    assert!(main.has(r#"data-test="new-server""#));

    let test = admin.get("/ui/provisioning?account=test").await;
    assert!(test.has(r#"id="provision-8""#));
    assert!(!test.has(r#"id="provision-3""#));
    let cookie = test.headers.get("set-cookie").unwrap().to_str().unwrap();
    assert!(
        cookie.starts_with("__Host-capstan_account_tab=test"),
        "{cookie}"
    );
    // Remembered: the tab without `?account=` is Test now.
    let again = admin.get("/ui/provisioning").await;
    assert!(again.has(r#"data-test="tab-test" aria-current="page""#));
    assert!(again.has(r#"id="provision-8""#));
    let flags: Vec<Value> = asked(&gateway, provisions::ListProvisions::OP)
        .iter()
        .map(|request| request["flag"].clone())
        .collect();
    assert!(flags.contains(&json!("test")) && flags.contains(&json!("main")));
    assert_eq!(admin.get("/ui/provisioning?account=prod").await.status, 400);

    // Level 8 reads the list and sees no action; the forms and accounts refuse it.
    let seen_at_8 = changer.get("/ui/provisioning").await;
    assert_eq!(seen_at_8.status, 200);
    assert!(!seen_at_8.has("new-server"));
    assert!(!seen_at_8.has("nav-cloud-accounts"));
    assert_eq!(changer.get("/ui/provisioning/new").await.status, 403);
    assert_eq!(changer.get("/ui/provisioning/accounts").await.status, 403);
    gateway.script.lock().unwrap().asked.clear();
    for path in [
        "/ui/provisioning/provisions",
        "/ui/provisioning/accounts",
        "/ui/provisioning/accounts/1/delete",
    ] {
        let refused = changer
            .submit(
                path,
                &[
                    ("account_id", "1"),
                    ("kind", "site"),
                    ("plan", "us-east g6-nanode-1"),
                    ("name", "x"),
                    ("provider", "linode"),
                    ("flag", "main"),
                    ("label", "x"),
                    ("token", TOKEN),
                ],
            )
            .await;
        assert_eq!(refused.status, 403, "{path}");
    }
    for op in [
        provisions::RequestProvision::OP,
        accounts::AddAccount::OP,
        accounts::DeleteAccount::OP,
    ] {
        assert!(asked(&gateway, op).is_empty(), "{op}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_server_form_offers_what_the_region_sells_and_asks_for_the_server() {
    let gateway = Gateway::start().await;
    let admin = gateway.signed_in(Level::Admin).await;
    let form = admin.get("/ui/provisioning/new").await;
    assert_eq!(form.status, 200, "{}", form.body);
    // The only account is chosen; its offer is drawn.
    assert!(form.has(r#"id="new-server""#));
    assert!(
        form.has(r#"<option value="us-east g6-nanode-1">"#),
        "{}",
        form.body
    );
    assert!(form.has(r#"name="account_id" value="1""#));
    assert_eq!(
        asked(&gateway, accounts::AccountOffer::OP)[0]["account_id"],
        1
    );

    let made = admin
        .submit(
            "/ui/provisioning/provisions",
            &[
                ("account_id", "1"),
                ("kind", "site"),
                ("plan", "us-east g6-nanode-1"),
                ("name", "shop-2"),
                ("image", ""),
            ],
        )
        .await;
    assert_eq!(made.status, 303);
    assert_eq!(
        made.location.as_deref(),
        Some("/ui/provisioning/provisions/7")
    );
    let request = &asked(&gateway, provisions::RequestProvision::OP)[0];
    assert_eq!(
        (
            &request["region"],
            &request["size"],
            &request["kind"],
            &request["image"]
        ),
        (
            &json!("us-east"),
            &json!("g6-nanode-1"),
            &json!("site"),
            &Value::Null
        )
    );
    let shown = admin.get("/ui/provisioning/provisions/7").await;
    assert!(shown.has("Server shop-2 asked for"), "{}", shown.body);

    // A refusal goes back to the form with the service's words.
    let csrf = admin.csrf().await;
    gateway.script.lock().unwrap().failure = Some(RpcError::new(
        ErrorCode::Refused,
        "size: g6-standard-8 is not sold in us-east (it sells g6-nanode-1)",
    ));
    let refused = admin
        .post(
            "/ui/provisioning/provisions",
            &[
                ("csrf", &csrf),
                ("account_id", "1"),
                ("kind", "site"),
                ("plan", "us-east g6-standard-8"),
                ("name", "x"),
            ],
        )
        .await;
    assert_eq!(
        refused.location.as_deref(),
        Some("/ui/provisioning/new?account=1")
    );
    gateway.script.lock().unwrap().failure = None;
    let back = admin.get("/ui/provisioning/new?account=1").await;
    assert!(back.has("it sells g6-nanode-1"), "{}", back.body);
    let rows = audit(&gateway).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].0, "request_provision");
    assert_eq!(
        (rows[0].1.as_str(), &rows[0].3["provision_id"]),
        ("ok", &json!(7))
    );
    assert_eq!(rows[1].1, "refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accounts_page_adds_an_account_whose_token_is_never_shown_or_audited() {
    let gateway = Gateway::start().await;
    let admin = gateway.signed_in(Level::Admin).await;
    let page = admin.get("/ui/provisioning/accounts").await;
    assert_eq!(page.status, 200);
    assert!(page.has(r#"id="account-1""#));
    assert!(page.has(r#"data-test="delete-account""#));
    assert!(!page.has("no-seal-key"));
    let added = admin
        .submit(
            "/ui/provisioning/accounts",
            &[
                ("provider", "linode"),
                ("label", "ours"),
                ("flag", "main"),
                ("token", TOKEN),
            ],
        )
        .await;
    assert_eq!(added.status, 303);
    let after = admin.get("/ui/provisioning/accounts").await;
    assert!(
        after.has("its token is sealed and will not be shown again"),
        "{}",
        after.body
    );
    assert!(!after.has(TOKEN));
    assert_eq!(asked(&gateway, accounts::AddAccount::OP)[0]["token"], TOKEN);
    let deleted = admin
        .submit("/ui/provisioning/accounts/1/delete", &[])
        .await;
    assert_eq!(deleted.status, 303);
    assert_eq!(
        asked(&gateway, accounts::DeleteAccount::OP)[0]["account_id"],
        1
    );
    let rows = audit(&gateway).await;
    let actions: Vec<&str> = rows.iter().map(|(action, ..)| action.as_str()).collect();
    assert_eq!(actions, ["add_cloud_account", "delete_cloud_account"]);
    assert_eq!(rows[1].2.as_deref(), Some("account/1"));
    assert!(!everything_in_the_audit_log(&gateway).await.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac_09_ac_11_the_dashboard_shows_the_banner_and_a_joins_provision_with_why_it_waits() {
    let gateway = Gateway::start().await;
    let mut verdict = failed_provision().approval.unwrap();
    verdict
        .reasons
        .push("the provider does not report the instance running at 203.0.113.7".into());
    gateway.script.lock().unwrap().verdicts = vec![verdict];
    let reader = gateway.signed_in(Level::Read).await;

    let dashboard = reader.get("/ui/").await;
    assert_eq!(dashboard.status, 200);
    // The banner: provision 3 is installing.
    assert!(
        dashboard.has(r#"data-test="provisions-banner""#),
        "{}",
        dashboard.body
    );
    assert!(dashboard.has(r#"id="banner-provision-3""#));
    // The join card (join nil matches provision 6).
    for needle in [
        r#"data-test="join-provision""#,
        r#"href="/ui/provisioning/provisions/6" data-test="join-provision-link""#,
        r#"<code data-test="join-instance">9001</code>"#,
        r#"data-test="join-age""#,
        "the key does not match the one the install showed",
        "not report the instance running at 203.0.113.7",
        r#"data-test="join-key-differs""#,
    ] {
        assert!(dashboard.has(needle), "{needle}: {}", dashboard.body);
    }
    let joins = reader.get("/ui/joins").await;
    assert!(joins.has(r#"data-test="join-key-differs""#));
    let asked_about = asked(&gateway, provisions::JoinVerdicts::OP);
    assert_eq!(asked_about[0]["join_ids"], json!([uuid::Uuid::nil()]));

    // Nothing in flight, no verdicts: neither shows.
    {
        let mut script = gateway.script.lock().unwrap();
        script.verdicts.clear();
        script.provisions = Some(vec![failed_provision()]);
    }
    let quiet = reader.get("/ui/").await;
    assert!(!quiet.has("provisions-banner"));
    assert!(!quiet.has("join-provision"));
}
