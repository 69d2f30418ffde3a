//! The backups pages in Chromium against a real plane (issue 14's "Pages"): the real
//! `capstan-agent` with a real site (a PostgreSQL database with rows, a directory of files),
//! s3s-fs checking every signature, a target made where new backups go. An admin saves the
//! fleet policy from its page and reads it back; presses "Run a backup now" on the node's
//! Backups tab and sees the full run land there (its kind, who asked, the last backup, the
//! verify state in BK-20's words); the Targets page shows where new backups go and the fleet's
//! coverage, which follows the policy switched on from its page and the node switched off
//! from its tab. Every control on these pages
//! is reachable and named, and none logs a console error.

use capstan_e2e::agent::{binary, Agent};
use capstan_e2e::plane::Plane;
use capstan_e2e::s3::S3Server;
use capstan_e2e::wait_for;
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

use super::Driver;
use crate::backups::{default_target, schedule::give_site};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_saves_the_policy_runs_a_backup_from_the_tab_and_reads_the_coverage() {
    let s3 = S3Server::start().await;
    let plane = Plane::start_with(&[("CAPSTAN__BACKUPS__SCHEDULE_SECS", "1")]).await;
    let target = default_target(&plane, &s3).await;
    // Fleet backups off: only the button takes a backup.
    let (status, policy) = plane
        .api(
            &plane.admin,
            "PUT",
            "/api/v1/backups/policy",
            Some(
                json!({"enabled": false, "every_minutes": 1440, "window_start_hour": 0,
                "window_hours": 24, "mode": "chain", "keep_days": 7, "full_every_days": 7,
                "verify_every_days": 0}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{policy}");
    let mut agent = Agent::new(binary());
    let node = agent.paired(&plane, "web-tab").await;
    let _db = give_site(&agent);

    let driver = Driver::start().await;
    let ada = plane.operator("ada").clone();
    let browser = driver.browser("ada").await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    browser.sign_in(&base, ada.name, &ada.password).await;

    // The policy page: a changed field is saved, said, and is what the service holds.
    browser.click("a[data-test=nav-backup-policy]").await;
    browser.wait_path("/ui/backups/policy").await;
    browser.fill("input[name=keep_days]", "14").await;
    browser.fill("input[name=keep_weekly]", "4").await;
    browser.click("button[data-test=save-policy]").await;
    let flash = browser.text("[data-test=flash]").await;
    assert!(
        flash.contains("Fleet backup policy saved: backups off."),
        "{flash}"
    );
    let kept = browser
        .find("input[name=keep_days]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("14"));
    assert!(browser
        .text("[data-test=policy-changed]")
        .await
        .contains("ada"));
    let (_, policy) = plane
        .api(&plane.reader, "GET", "/api/v1/backups/policy", None)
        .await;
    assert_eq!(policy["keep_days"], 14, "{policy}");
    assert_eq!(policy["keep_weekly"], 4, "{policy}");
    assert_eq!(policy["changed_by"], "ada", "{policy}");
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "the policy page: {controls:?}");

    // The node's Backups tab: nothing yet; "Run a backup now"; the full lands there.
    browser
        .goto(&format!("{base}/ui/nodes/{node}?tab=backups"))
        .await;
    browser.find("[data-test=no-backups]").await;
    let state = browser.find("[data-test=verify-state]").await;
    assert_eq!(
        state.attr("data-state").await.unwrap().as_deref(),
        Some("no_backups")
    );
    browser.click("button[data-test=backup-run-now]").await;
    browser
        .wait_path(&format!("/ui/nodes/{node}?tab=backups"))
        .await;
    let flash = browser.text("[data-test=flash]").await;
    assert!(flash.contains("Backup asked for as job"), "{flash}");
    wait_for(
        "the run to land on the Backups tab",
        Duration::from_secs(180),
        || async {
            browser
                .goto(&format!("{base}/ui/nodes/{node}?tab=backups"))
                .await;
            (browser.count("#run-1").await > 0).then_some(())
        },
    )
    .await;
    assert_eq!(browser.text("#run-1 [data-test=run-kind]").await, "full");
    assert_eq!(browser.text("#run-1 [data-test=run-by]").await, "ada");
    assert!(browser
        .text("#run-1 [data-test=run-size]")
        .await
        .contains('B'));
    // The last backup and the last full are stated (a time, not "none yet").
    assert_eq!(browser.count("[data-test=last-backup] time").await, 1);
    assert_eq!(browser.count("[data-test=last-full] time").await, 1);
    let state = browser.find("[data-test=verify-state]").await;
    assert_eq!(
        state.attr("data-state").await.unwrap().as_deref(),
        Some("not_yet_verified")
    );
    assert!(browser
        .text("[data-test=verify-state]")
        .await
        .contains("Not yet verified restorable"));
    assert_eq!(browser.count("button[data-test=verify-1]").await, 1);
    assert_eq!(browser.count("button[data-test=restore-1]").await, 1);
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "the Backups tab: {controls:?}");

    // The Targets page: where new backups go, and the node uncovered by the fleet's decision.
    browser.click("a[data-test=nav-backup-targets]").await;
    browser.wait_path("/ui/backups/targets").await;
    browser
        .find(&format!(
            "#target-{target} [data-test=where-new-backups-go]"
        ))
        .await;
    let reason = browser
        .find(&format!("#uncovered-{node} [data-test=uncovered-reason]"))
        .await;
    assert_eq!(
        reason.attr("data-reason").await.unwrap().as_deref(),
        Some("off")
    );
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "the Targets page: {controls:?}");
    // Switched on from the policy page, the node is backed up by the fleet, save for the
    // recovery key its owner never set (BK-22): the coverage says so.
    browser.goto(&format!("{base}/ui/backups/policy")).await;
    browser
        .find("select[name=enabled]")
        .await
        .select_by_value("on")
        .await
        .unwrap();
    browser.click("button[data-test=save-policy]").await;
    let flash = browser.text("[data-test=flash]").await;
    assert!(flash.contains("backups on."), "{flash}");
    browser.goto(&format!("{base}/ui/backups/targets")).await;
    let reason = browser
        .find(&format!("#uncovered-{node} [data-test=uncovered-reason]"))
        .await;
    assert_eq!(
        reason.attr("data-reason").await.unwrap().as_deref(),
        Some("no_recovery_key")
    );
    assert!(browser
        .text("[data-test=coverage]")
        .await
        .contains("1 node: 0 backed up, 1 not backed up."));
    // The node's own decision, from its tab: off, said on the tab and in the coverage.
    browser
        .goto(&format!("{base}/ui/nodes/{node}?tab=backups"))
        .await;
    let position = browser.find("[data-test=node-position]").await;
    assert_eq!(
        position.attr("data-position").await.unwrap().as_deref(),
        Some("fleet")
    );
    browser
        .find("select[name=position]")
        .await
        .select_by_value("off")
        .await
        .unwrap();
    browser.click("button[data-test=save-position]").await;
    let flash = browser.text("[data-test=flash]").await;
    assert!(flash.contains("Switched off for this node"), "{flash}");
    let position = browser.find("[data-test=node-position]").await;
    assert_eq!(
        position.attr("data-position").await.unwrap().as_deref(),
        Some("off")
    );
    browser.goto(&format!("{base}/ui/backups/targets")).await;
    let reason = browser
        .text(&format!("#uncovered-{node} [data-test=uncovered-reason]"))
        .await;
    assert!(reason.contains("switched off for this node"), "{reason}");
    assert!(browser.console_errors().await.is_empty());
}
