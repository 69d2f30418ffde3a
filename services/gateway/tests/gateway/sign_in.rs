//! Sign-in under attack (issue 10, "Sign-in"): argon2 is bounded, the throttle cannot be raced,
//! a stranger cannot lock an operator out, and refused sign-ins and `capstan admin` acts are
//! in the audit log.

use capstan_events::rpc::Level;
use capstan_gateway::{password, ClientAddresses};
use futures::future::join_all;
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::{
    browser::{Browser, PASSWORD},
    harness::Gateway,
};

/// A gateway that believes `X-Forwarded-For` from the test's loopback peer, so each browser
/// can come from its own address.
async fn behind_a_proxy() -> Gateway {
    Gateway::start_behind(ClientAddresses {
        trusted: std::sync::Arc::from(vec!["127.0.0.0/8".parse::<ipnet::IpNet>().unwrap()]),
        header: axum::http::HeaderName::from_static("x-forwarded-for"),
    })
    .await
}

/// Opens a form in each browser first, then sends every sign-in at once.
async fn sign_in_together(
    browsers: &[Browser],
    name: impl Fn(usize) -> String,
    password: &str,
) -> Vec<crate::browser::Page> {
    let forms = join_all(browsers.iter().map(Browser::sign_in_form)).await;
    join_all(
        browsers
            .iter()
            .zip(&forms)
            .enumerate()
            .map(|(index, (browser, csrf))| {
                let name = name(index);
                async move { browser.send_sign_in(csrf, &name, password).await }
            }),
    )
    .await
}

// "Password hashing is bounded": 40 sign-ins posted at once, from 40 addresses so no throttle
// stands in the way, never run more argon2 verifications at once than the bound; those that
// find no turn in time are 503 with Retry-After, never a gateway that runs out of memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_parallel_sign_ins_never_run_more_argon2_at_once_than_the_bound() {
    let gateway = behind_a_proxy().await;
    let browsers: Vec<Browser> = (1..=40)
        .map(|host| Browser::at(&gateway, &format!("198.51.100.{host}")))
        .collect();
    let answers = sign_in_together(
        &browsers,
        |index| format!("nobody-{index}"),
        "not the password",
    )
    .await;
    let peak = password::most_hashes_at_once();
    assert!(peak >= 1, "the verifications ran");
    assert!(
        peak <= password::MAX_CONCURRENT_HASHES,
        "{peak} argon2 computations ran at once; the bound is {}",
        password::MAX_CONCURRENT_HASHES
    );
    for answer in &answers {
        match answer.status {
            401 => {}
            503 => assert!(answer.headers.contains_key("retry-after")),
            other => panic!("a sign-in was answered {other}: {}", answer.body),
        }
    }
}

// "The throttle cannot be raced": 40 wrong passwords for one name from one address, sent at
// once, get at most the configured number of 401s (5) and 429 for the rest: each attempt is
// counted before its password is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_concurrent_wrong_passwords_for_one_name_get_at_most_five_401s_and_the_rest_429() {
    let gateway = Gateway::start().await;
    let name = gateway.operator(Level::Read, false).await;
    let browsers: Vec<Browser> = (0..40).map(|_| Browser::new(&gateway)).collect();
    let answers = sign_in_together(&browsers, |_| name.clone(), "wrong password").await;
    let count = |status| answers.iter().filter(|page| page.status == status).count();
    assert!(count(401) <= 5, "{} got 401", count(401));
    assert_eq!(count(401) + count(429), 40, "every other answer is 429");
    assert!(answers
        .iter()
        .filter(|page| page.status == 429)
        .all(|page| page.headers.contains_key("retry-after")));
    let failures: i64 = sqlx::query_scalar("SELECT count(*) FROM sign_in_failures")
        .fetch_one(gateway.store.pool())
        .await
        .unwrap();
    assert_eq!(
        failures,
        count(401) as i64,
        "a 429 is not a guess, and not counted"
    );
}

async fn audit_rows(
    gateway: &Gateway,
) -> Vec<(String, i16, Option<String>, String, String, Value)> {
    sqlx::query_as(
        "SELECT operator, level, address, action, outcome, detail FROM audit_log ORDER BY id",
    )
    .fetch_all(gateway.store.pool())
    .await
    .unwrap()
}

// "No one can lock an operator out": a stranger failing under an operator's name is stopped at
// their own address, while the operator signs in from theirs (only delayed, as everyone trying
// that name now is); the operator's success does not reset the stranger's count. Each refused
// sign-in is in the audit log with the name tried, the address and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_failing_under_an_operators_name_cannot_stop_the_operator_signing_in() {
    let gateway = behind_a_proxy().await;
    let name = gateway.operator(Level::Admin, false).await;
    let stranger = Browser::at(&gateway, "198.51.100.66");
    for _ in 0..5 {
        assert_eq!(stranger.sign_in(&name, "a guess").await.status, 401);
    }
    let stopped = stranger.sign_in(&name, PASSWORD).await;
    assert_eq!(
        stopped.status, 429,
        "the stranger's address is stopped for this name"
    );
    assert!(stopped.has("Too many failed sign-ins for this operator name from your address."));

    let operator = Browser::at(&gateway, "203.0.113.9");
    let started = Instant::now();
    let signed_in = operator.sign_in(&name, PASSWORD).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "a name under attack is delayed"
    );
    assert_eq!(stranger.sign_in(&name, PASSWORD).await.status, 429);

    let refused: Vec<_> = audit_rows(&gateway)
        .await
        .into_iter()
        .filter(|row| row.3 == "sign_in" && row.4 == "unauthorized")
        .collect();
    assert_eq!(refused.len(), 5);
    for (operator, level, address, _, _, detail) in &refused {
        assert_eq!(operator, &name);
        assert_eq!(*level, 10);
        assert_eq!(address.as_deref(), Some("198.51.100.66"));
        assert_eq!(detail["reason"], "wrong_password");
        assert_eq!(detail["via"], "ui");
        assert!(
            !detail.to_string().contains("a guess"),
            "no password in the log"
        );
    }
    let unknown = Browser::at(&gateway, "192.0.2.44");
    assert_eq!(unknown.sign_in("no-such-operator", "x").await.status, 401);
    let last = audit_rows(&gateway).await.pop().unwrap();
    assert_eq!(
        (
            last.0.as_str(),
            last.1,
            last.2.as_deref(),
            last.5["reason"].as_str()
        ),
        (
            "no-such-operator",
            0,
            Some("192.0.2.44"),
            Some("unknown_name")
        )
    );
}

// `capstan admin create-operator` and `reset-password` are operator acts like any other: the
// audit log has them, done or refused, with `"via": "cli"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_admin_acts_are_audited_via_cli() {
    let gateway = Gateway::start_alone().await;
    let settings = capstan_settings::Settings::load_from(
        None,
        [(
            "CAPSTAN__DATABASE__URL".to_string(),
            gateway.database_url().to_string(),
        )],
    )
    .unwrap();
    capstan_gateway::admin::create_operator(&settings, "cli-made", Level::Change, None)
        .await
        .unwrap();
    capstan_gateway::admin::reset_password_command(&settings, "cli-made")
        .await
        .unwrap();
    assert!(
        capstan_gateway::admin::create_operator(&settings, "cli-made", Level::Admin, None)
            .await
            .is_err()
    );
    let rows: Vec<_> = audit_rows(&gateway)
        .await
        .into_iter()
        .map(|(operator, level, _, action, outcome, detail)| {
            (operator, level, action, outcome, detail["via"].clone())
        })
        .collect();
    let cli = || Value::from("cli");
    assert_eq!(
        rows,
        vec![
            (
                "capstan admin".into(),
                10,
                "create_operator".into(),
                "ok".into(),
                cli()
            ),
            (
                "capstan admin".into(),
                10,
                "reset_password".into(),
                "ok".into(),
                cli()
            ),
            (
                "capstan admin".into(),
                10,
                "create_operator".into(),
                "already_exists".into(),
                cli()
            ),
        ]
    );
}
