//! The Releases page and the node's Agent tab in Chromium (issue 15's "Pages"): a level-7
//! operator follows the nav to the Releases page and sees the release with its sequence,
//! expiry and offer, the fleet's spread across versions with who is on trial, and the node
//! that refused with what and why; then the refusing node's Agent tab keeps the last refusal
//! after the node moved on, and the trial node's says it is on trial.

use capstan_e2e::plane::Plane;
use serde_json::json;

use super::Driver;
use crate::agent_channel::PairedAgent;
use crate::incidents::claim;
use crate::releases::fixture;

const OFFERED: &str = "90.1.0";
const OLDER: &str = "90.0.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac_43_ag_29_the_releases_page_shows_releases_spread_trial_and_refusals_and_the_agent_tab_the_last_refusal(
) {
    let plane = Plane::start().await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    let driver = Driver::start().await;

    // A release on offer (its "binary" is bytes no agent runs here: the page is the point).
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("agent");
    std::fs::write(&binary, b"not really an agent").unwrap();
    let (status, body) = fixture::publish(&plane, &fixture::release(OFFERED, 3, &binary)).await;
    assert_eq!(status, 201, "{body}");

    // One node runs the release on trial; another refused it, and says why.
    let (trial, trial_id) = plane.paired_agent("trial-node").await;
    claim(
        &trial,
        json!({"agent_version": OFFERED, "update_state": "current",
            "update_offered": OFFERED, "update_reason": null, "update_trial": OFFERED}),
    )
    .await;
    let (refusing, refusing_id) = plane.paired_agent("refusing-node").await;
    claim(
        &refusing,
        json!({"agent_version": OLDER, "update_state": "verify_failed",
            "update_offered": OFFERED, "update_reason": "bad signature: <b>not</b> by a trusted key",
            "update_trial": null}),
    )
    .await;

    let rita = plane.operator("rita").clone();
    let browser = driver.browser("rita").await;
    browser.sign_in(&base, rita.name, &rita.password).await;
    browser.click("[data-test=nav-releases]").await;
    browser.wait_path("/ui/releases").await;

    let row = format!("#release-{}", OFFERED.replace('.', "\\."));
    assert_eq!(
        browser.text(&format!("{row} [data-test=sequence]")).await,
        "3"
    );
    assert_eq!(
        browser.text(&format!("{row} [data-test=on-offer]")).await,
        "on offer"
    );
    assert!(browser
        .text(&format!("{row} [data-test=expiry]"))
        .await
        .starts_with("2100-01-01"));
    assert_eq!(
        browser.text(&format!("{row} [data-test=statement]")).await,
        "no release statement"
    );

    // The spread: one node on each version, the trial node named under the release.
    let versions = browser
        .run(
            "return [...document.querySelectorAll('[data-test=versions] tbody tr')].map(r => \
             [r.querySelector('[data-test=version]').textContent, \
              r.querySelector('[data-test=count]').textContent, \
              r.querySelector('[data-test=on-trial]').textContent.trim()]);",
        )
        .await;
    assert_eq!(
        versions,
        json!([[OLDER, "1", "none"], [OFFERED, "1", "trial-node"]]),
        "{versions}"
    );
    // The refusal: what and why, the reason shown as text, never as markup.
    let refusal = format!("#refusal-{refusing_id}");
    assert_eq!(
        browser
            .text(&format!("{refusal} [data-test=refused-offered]"))
            .await,
        OFFERED
    );
    assert_eq!(
        browser
            .text(&format!("{refusal} [data-test=refused-state]"))
            .await,
        "verify_failed"
    );
    assert_eq!(
        browser
            .text(&format!("{refusal} [data-test=refused-reason]"))
            .await,
        "bad signature: <b>not</b> by a trusted key"
    );

    // The refusing node moves on; its Agent tab still names the last refusal.
    claim(
        &refusing,
        json!({"agent_version": OFFERED, "update_state": "current",
            "update_offered": OFFERED, "update_reason": null, "update_trial": null}),
    )
    .await;
    browser
        .goto(&format!("{base}/ui/nodes/{refusing_id}?tab=agent"))
        .await;
    assert_eq!(browser.text("[data-test=update-state]").await, "current");
    assert_eq!(
        browser.text("[data-test=update-trial]").await,
        "not on trial"
    );
    assert_eq!(
        browser.text("[data-test=last-refusal-state]").await,
        "verify_failed"
    );
    assert_eq!(
        browser.text("[data-test=last-refusal-offered]").await,
        OFFERED
    );
    assert_eq!(
        browser.text("[data-test=last-refusal-reason]").await,
        "bad signature: <b>not</b> by a trusted key"
    );
    browser
        .goto(&format!("{base}/ui/nodes/{trial_id}?tab=agent"))
        .await;
    assert!(browser
        .text("[data-test=update-trial]")
        .await
        .starts_with(&format!("on trial: {OFFERED}")));
    assert_eq!(browser.text("[data-test=last-refusal]").await, "none");
    // And the Releases page now has no refusal to show.
    browser.goto(&format!("{base}/ui/releases")).await;
    assert_eq!(browser.count("[data-test=no-refusals]").await, 1);
    browser.close().await;
}
