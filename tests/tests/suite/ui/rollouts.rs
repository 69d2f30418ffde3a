//! The rollouts pages in Chromium (issue 16's "Pages"): a rollout started from the form, its
//! page showing each node's step and verdict live, pause and resume from the page, and a
//! level-7 operator who sees no act buttons and whose POST is refused anyway.

use capstan_e2e::{plane::Plane, wait_for};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

use super::Driver;
use crate::rollouts::{applied, projected, publish_release, wait_state, SimAgent};

/// Waits until the rollout page (reloaded each time) shows `state`.
async fn wait_page_state(browser: &super::Browser, url: &str, state: &str) {
    wait_for(
        &format!("the rollout page to say {state}"),
        Duration::from_secs(30),
        || async {
            browser.goto(url).await;
            let shown = browser
                .run("const s = document.querySelector('[data-test=rollout-state]'); return s ? s.getAttribute('data-state') : null;")
                .await;
            (shown == state).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_10_a_rollout_started_from_the_form_is_followed_paused_and_resumed_on_its_page() {
    let plane = Plane::start().await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    let driver = Driver::start().await;
    let first = SimAgent::enrol(&plane, "shop-1").await;
    let second = SimAgent::enrol(&plane, "shop-2").await;
    projected(&plane, &[first.node, second.node]).await;
    publish_release(&plane, "5.0.0").await;

    let chris = plane.operator("chris").clone();
    let browser = driver.browser("chris").await;
    browser.sign_in(&base, chris.name, &chris.password).await;
    browser.goto(&format!("{base}/ui/rollouts")).await;
    browser.fill("#version", "5.0.0").await;
    browser
        .fill("#stages", &format!("{}\n{}", first.node, second.node))
        .await;
    browser.click("[data-test=start-rollout]").await;
    let path = browser.wait_path("/ui/rollouts/").await;
    let id: i64 = path.trim_start_matches("/ui/rollouts/").parse().unwrap();
    let url = format!("{base}/ui/rollouts/{id}");
    assert_eq!(
        browser.text("[data-test=rollout-state]").await,
        "Running",
        "the page after the form"
    );

    // Paused from the page while the first node checks its readiness.
    let preflight = first.next_job().await;
    browser.goto(&url).await;
    browser.click("[data-test=act-pause]").await;
    wait_page_state(&browser, &url, "paused").await;
    first
        .answer(
            &preflight,
            "completed",
            json!({"checks": [{"name": "lock", "pass": true}]}),
        )
        .await;
    browser.click("[data-test=act-resume]").await;
    wait_page_state(&browser, &url, "running").await;

    let apply = first.next_job().await;
    assert_eq!(apply["primitive"], "apply_update");
    first.answer(&apply, "completed", applied("5.0.0")).await;
    let preflight = second.next_job().await;
    second
        .answer(
            &preflight,
            "completed",
            json!({"checks": [{"name": "lock", "pass": true}]}),
        )
        .await;
    let apply = second.next_job().await;
    second
        .answer(
            &apply,
            "completed",
            json!({"completed": true, "deploy_tier_passed": false, "version": "5.0.0", "rolled_back": true}),
        )
        .await;
    wait_state(&plane, id, "halted").await;
    wait_page_state(&browser, &url, "halted").await;
    let reason = browser.text("[data-test=halt-reason]").await;
    assert!(reason.contains("deploy tier did not pass"), "{reason}");
    let verdicts = browser
        .run(
            "return [...document.querySelectorAll('[data-test=verdict]')].map(v => v.textContent);",
        )
        .await;
    assert_eq!(verdicts, json!(["passed", "failed"]));
    assert!(browser.console_errors().await.is_empty());
    browser.close().await;

    // A level-7 operator reads the page but has no buttons, and a POST is refused anyway.
    let rita = plane.operator("rita").clone();
    let reader = driver.browser("rita").await;
    reader.sign_in(&base, rita.name, &rita.password).await;
    reader.goto(&url).await;
    assert_eq!(reader.count("[data-test^=act-]").await, 0);
    assert_eq!(reader.count("form#start-rollout").await, 0);
    let (status, _) = plane
        .api(
            &plane.reader,
            "POST",
            &format!("/api/v1/rollouts/{id}/retry"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    reader.close().await;
}
